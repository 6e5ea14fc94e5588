"""The courier device protocol's frames (docs/device-protocol.md).

Every message is one frame: ``command:u8 | length:u32 | items``, each item
``id:u8 | length:u16 | value``, integers big-endian.
"""
from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

VERSION = 1
DEFAULT_MAX_FRAME_LENGTH = 16_384


class Command(enum.IntEnum):
    CONNECT = 0x07
    CONNECT_ACK = 0x08
    FILTER = 0x09
    NOTIFICATION = 0x0A
    ACK = 0x0B
    KEEP_ALIVE = 0x0C
    KEEP_ALIVE_ACK = 0x0D
    NO_STORAGE = 0x0E
    APP_TOKEN_REQUEST = 0x11
    APP_TOKEN_RESPONSE = 0x12
    UNREGISTER = 0x13
    UNREGISTER_ACK = 0x14
    SUBSCRIBE = 0x15
    UNSUBSCRIBE = 0x16
    CHANNEL_ACK = 0x17
    ERROR = 0x1F


class Code(enum.IntEnum):
    """The error and status codes of the protocol."""

    OK = 0
    MALFORMED_FRAME = 1
    FRAME_TOO_LARGE = 2
    UNKNOWN_COMMAND = 3
    MISSING_ITEM = 4
    BAD_ITEM_VALUE = 5
    UNSUPPORTED_VERSION = 6
    NOT_CONNECTED = 7
    UNKNOWN_APP = 8
    CERTIFICATE_REFUSED = 9
    INTERNAL = 10
    UNKNOWN_CHANNEL = 11
    TOO_MANY_SUBSCRIPTIONS = 12
    TOO_MANY_FRAMES = 13

    @classmethod
    def name_of(cls, value: int) -> str:
        try:
            return cls(value).name.lower()
        except ValueError:
            return f"code {value}"


class TokenKind(enum.IntEnum):
    """What an AppTokenRequest asks for (item 0x05)."""

    DEVICE = 0
    LIVE_ACTIVITY_PUSH_TO_START = 1
    LIVE_ACTIVITY_UPDATE = 2


class MalformedFrame(Exception):
    """A frame from the server that cannot be read: the connection is closed."""


@dataclass
class Frame:
    command: int
    items: List[Tuple[int, bytes]] = field(default_factory=list)

    def first(self, item_id: int) -> Optional[bytes]:
        for key, value in self.items:
            if key == item_id:
                return value
        return None

    def all(self, item_id: int) -> List[bytes]:
        return [value for key, value in self.items if key == item_id]

    def integer(self, item_id: int) -> Optional[int]:
        value = self.first(item_id)
        return int.from_bytes(value, "big") if value is not None else None

    def encode(self) -> bytes:
        body = b"".join(struct.pack(">BH", key, len(value)) + value for key, value in self.items)
        return struct.pack(">BI", self.command, len(body)) + body


class FrameReader:
    """Frames out of a byte stream, as they complete."""

    def __init__(self, max_frame_length: int = 1 << 20) -> None:
        self._buffer = bytearray()
        self.max_frame_length = max_frame_length

    def feed(self, data: bytes) -> List[Frame]:
        self._buffer += data
        frames: List[Frame] = []
        while len(self._buffer) >= 5:
            command, length = struct.unpack_from(">BI", self._buffer)
            if length > self.max_frame_length:
                raise MalformedFrame(f"a frame of {length} bytes, over {self.max_frame_length}")
            if len(self._buffer) < 5 + length:
                break
            body = bytes(self._buffer[5 : 5 + length])
            del self._buffer[: 5 + length]
            frames.append(Frame(command, _items(body)))
        return frames


def _items(body: bytes) -> List[Tuple[int, bytes]]:
    items: List[Tuple[int, bytes]] = []
    offset = 0
    while offset < len(body):
        if offset + 3 > len(body):
            raise MalformedFrame("an item header runs past its frame")
        key, length = struct.unpack_from(">BH", body, offset)
        offset += 3
        if offset + length > len(body):
            raise MalformedFrame("an item value runs past its frame")
        items.append((key, body[offset : offset + length]))
        offset += length
    return items


@dataclass(frozen=True)
class Notification:
    """A notification as the device received it (Notification frame 0x0A)."""

    token: bytes
    payload: bytes
    apns_id: uuid.UUID
    priority: int
    topic: str
    delivery_id: uuid.UUID
    expiration: int = 0
    collapse_id: Optional[str] = None
    push_type: Optional[str] = None
    channel_id: Optional[str] = None

    @classmethod
    def from_frame(cls, frame: Frame) -> "Notification":
        """Raises MalformedFrame when a required item is missing or of the wrong size."""
        token, payload, apns_id = frame.first(0x01), frame.first(0x02), frame.first(0x03)
        priority, topic, delivery_id = frame.first(0x05), frame.first(0x06), frame.first(0x09)
        if token is None or payload is None or apns_id is None or priority is None or topic is None or delivery_id is None:
            raise MalformedFrame("a Notification without one of its required items")
        if len(apns_id) != 16 or len(delivery_id) != 16 or len(priority) != 1:
            raise MalformedFrame("a Notification item of the wrong size")
        try:
            return cls(
                token=token,
                payload=payload,
                apns_id=uuid.UUID(bytes=apns_id),
                priority=priority[0],
                topic=topic.decode("utf-8"),
                delivery_id=uuid.UUID(bytes=delivery_id),
                expiration=frame.integer(0x04) or 0,
                collapse_id=_text(frame.first(0x07)),
                push_type=_text(frame.first(0x08)),
                channel_id=_text(frame.first(0x0A)),
            )
        except UnicodeDecodeError as error:
            raise MalformedFrame(f"a Notification item that is not UTF-8: {error}") from error


def _text(value: Optional[bytes]) -> Optional[str]:
    return value.decode("utf-8") if value is not None else None


def u32(value: int) -> bytes:
    return value.to_bytes(4, "big")
