"""A device of Courier: one persistent TLS connection to the device gateway,
kept up with back-off and jitter, through which it receives its notifications
(docs/device-protocol.md)."""
from __future__ import annotations

import asyncio
import collections
import logging
import random
import ssl
import uuid
from typing import AsyncIterator, Deque, Dict, List, Optional, Set, Tuple, Union

from .errors import (
    CourierDeviceError,
    DeviceRefused,
    Disconnected,
    ProtocolError,
    Stopped,
    TooManySubscriptions,
    UnknownApp,
    UnknownChannel,
    Unreachable,
)
from .identity import Identity
from .protocol import (
    DEFAULT_MAX_FRAME_LENGTH,
    VERSION,
    Code,
    Command,
    Frame,
    FrameReader,
    MalformedFrame,
    Notification,
    TokenKind,
    u32,
)

logger = logging.getLogger("courier_device")

#: Delivery ids remembered to drop a notification delivered twice.
SEEN_LIMIT = 10_000


class DeviceClient:
    """Connects with an identity folder and keeps the connection.

    ``async with DeviceClient(folder) as device:`` starts it and waits for
    the first connection; ``device.register(bundle_id)`` gives the app's
    token; ``async for notification in device.notifications():`` receives,
    and ``device.acknowledge(notification)`` tells the server it was handled.
    A notification not acknowledged is delivered again on the next
    connection; one delivered twice (same delivery id) is acknowledged again
    and not given twice.
    """

    def __init__(
        self,
        identity: Union[str, Identity],
        *,
        environment: str = "production",
        host: Optional[str] = None,
        port: Optional[int] = None,
        keep_alive: Optional[int] = None,
        initial_backoff: float = 0.1,
        maximum_backoff: float = 30.0,
        attempts: Optional[int] = None,
        request_timeout: float = 30.0,
    ) -> None:
        if environment not in ("production", "sandbox"):
            raise ValueError(f"environment must be production or sandbox, not {environment!r}")
        self.identity = identity if isinstance(identity, Identity) else Identity.load(identity)
        self.environment = environment
        self.host = host or self.identity.host
        self.port = port or (self.identity.production_port if environment == "production" else self.identity.sandbox_port)
        self.keep_alive = keep_alive
        self.initial_backoff = initial_backoff
        self.maximum_backoff = maximum_backoff
        #: Failed connection attempts in a row after which the client stops (None: never).
        self.attempts = attempts
        self.request_timeout = request_timeout
        #: The server's token length, from the ConnectAck.
        self.token_length = 32
        #: Connections made so far.
        self.connections = 0
        #: Why the client stopped, when it stopped by itself.
        self.terminal_error: Optional[CourierDeviceError] = None
        self._context = self.identity.tls_context()
        self._queue: "asyncio.Queue[Optional[Notification]]" = asyncio.Queue()
        self._seen: Set[uuid.UUID] = set()
        self._seen_order: Deque[uuid.UUID] = collections.deque()
        self._subscriptions: Dict[Tuple[str, str], Optional[uuid.UUID]] = {}
        self._filter: Optional[List[bytes]] = None
        self._pending: Dict[int, "asyncio.Future[Frame]"] = {}
        self._next_request = 0
        self._writer: Optional[asyncio.StreamWriter] = None
        self._connected = asyncio.Event()
        self._drained = asyncio.Event()
        self._stopped = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None

    # MARK: Life

    async def start(self) -> None:
        """Starts connecting (and reconnecting); returns at once."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def wait_connected(self, timeout: Optional[float] = None) -> None:
        """Waits for a connection; raises the reason if the client stopped instead."""
        waiter = asyncio.ensure_future(self._connected.wait())
        stopper = asyncio.ensure_future(self._stopped.wait())
        try:
            done, _ = await asyncio.wait({waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            stopper.cancel()
        if self._connected.is_set():
            return
        if self._stopped.is_set():
            raise self.terminal_error or Stopped("the client was stopped")
        raise asyncio.TimeoutError(f"not connected to {self.host}:{self.port} within {timeout} s")

    async def wait_drained(self, timeout: Optional[float] = None) -> None:
        """Waits for the server's NoStorage: everything it held was sent."""
        await asyncio.wait_for(self._drained.wait(), timeout)

    @property
    def is_connected(self) -> bool:
        return self._connected.is_set()

    async def stop(self) -> None:
        """Closes the connection and stops reconnecting; the notifications end."""
        self._stopped.set()
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, CourierDeviceError):
                pass
        self._queue.put_nowait(None)

    async def __aenter__(self) -> "DeviceClient":
        await self.start()
        await self.wait_connected()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # MARK: Notifications

    async def notifications(self) -> AsyncIterator[Notification]:
        """Each notification once, as it arrives, until the client stops."""
        while True:
            notification = await self._queue.get()
            if notification is None:
                self._queue.put_nowait(None)
                return
            yield notification

    async def next_notification(self, timeout: Optional[float] = None) -> Notification:
        """The next notification; Stopped when the client stops first."""
        notification = await asyncio.wait_for(self._queue.get(), timeout)
        if notification is None:
            self._queue.put_nowait(None)
            raise self.terminal_error or Stopped("the client was stopped")
        return notification

    async def acknowledge(self, notification: Notification, unreadable: bool = False) -> None:
        """Tells the server the notification was handled (or could not be read)."""
        items = [(0x03, notification.delivery_id.bytes)]
        if unreadable:
            items.insert(0, (0x01, bytes([1])))
        await self._send(Frame(Command.ACK, items))

    # MARK: Requests

    async def register(self, bundle_id: str) -> bytes:
        """The app's device token (the same each time for this device, app and generation)."""
        token, _ = await self._token(bundle_id, TokenKind.DEVICE)
        self.identity.set_token(bundle_id, self.environment, token)
        self.identity.save()
        return token

    async def live_activity_push_to_start_token(self, bundle_id: str) -> bytes:
        """The app's Live Activity push-to-start token."""
        token, _ = await self._token(bundle_id, TokenKind.LIVE_ACTIVITY_PUSH_TO_START)
        return token

    async def start_live_activity(self, bundle_id: str) -> Tuple[int, bytes]:
        """A new Live Activity of the app: its number and its update token."""
        token, activity = await self._token(bundle_id, TokenKind.LIVE_ACTIVITY_UPDATE)
        if activity is None:
            raise ProtocolError(Code.MISSING_ITEM, "an AppTokenResponse for a Live Activity without its activity")
        return activity, token

    async def unregister(self, bundle_id: str, activity: Optional[int] = None) -> None:
        """The app was removed (pushes to its token become Unregistered), or, with
        ``activity``, that Live Activity ended (ExpiredToken)."""
        items = [(0x01, bundle_id.encode("utf-8"))]
        if activity is not None:
            items.append((0x06, u32(activity)))
        answer = await self._request(Command.UNREGISTER, items)
        self._check(answer, bundle_id)
        if activity is None:
            self.identity.set_token(bundle_id, self.environment, None)
            self.identity.save()
            for key in [key for key in self._subscriptions if key[0] == bundle_id]:
                del self._subscriptions[key]

    async def subscribe(self, bundle_id: str, channel_id: str) -> None:
        """Listens to a broadcast channel of the app, on this and every later connection."""
        last = self._subscriptions.get((bundle_id, channel_id))
        await self._subscribe(bundle_id, channel_id, last)
        self._subscriptions[(bundle_id, channel_id)] = last

    async def unsubscribe(self, bundle_id: str, channel_id: str) -> None:
        self._subscriptions.pop((bundle_id, channel_id), None)
        items = [(0x01, bundle_id.encode("utf-8")), (0x07, channel_id.encode("utf-8"))]
        self._check(await self._request(Command.UNSUBSCRIBE, items), bundle_id, channel_id)

    async def set_filter(self, bundle_ids: Optional[List[str]]) -> None:
        """The apps the device wants notifications for now (None: every one)."""
        import hashlib

        self._filter = None if bundle_ids is None else [hashlib.sha1(b.encode("utf-8")).digest() for b in bundle_ids]
        if self._writer is not None and self._filter is not None:
            await self._send(Frame(Command.FILTER, [(0x01, digest) for digest in self._filter]))

    async def _token(self, bundle_id: str, kind: TokenKind) -> Tuple[bytes, Optional[int]]:
        items = [(0x01, bundle_id.encode("utf-8"))]
        if kind != TokenKind.DEVICE:
            items.append((0x05, bytes([kind])))
        answer = await self._request(Command.APP_TOKEN_REQUEST, items)
        self._check(answer, bundle_id)
        token = answer.first(0x03)
        if token is None:
            raise ProtocolError(Code.MISSING_ITEM, "an AppTokenResponse with status 0 and no token")
        return token, answer.integer(0x06)

    async def _subscribe(self, bundle_id: str, channel_id: str, last: Optional[uuid.UUID]) -> None:
        items = [(0x01, bundle_id.encode("utf-8")), (0x07, channel_id.encode("utf-8"))]
        if last is not None:
            items.append((0x08, last.bytes))
        self._check(await self._request(Command.SUBSCRIBE, items), bundle_id, channel_id)

    @staticmethod
    def _check(answer: Frame, bundle_id: str, channel_id: Optional[str] = None) -> None:
        status = answer.integer(0x04)
        if status == Code.OK:
            return
        if status == Code.UNKNOWN_APP:
            raise UnknownApp(f"the server has no app {bundle_id} (or it is not registered on this device)")
        if status == Code.UNKNOWN_CHANNEL:
            raise UnknownChannel(f"the app {bundle_id} has no broadcast channel {channel_id} (or this device is not subscribed)")
        if status == Code.TOO_MANY_SUBSCRIPTIONS:
            raise TooManySubscriptions("the server allows no more broadcast subscriptions on this connection")
        raise ProtocolError(status if status is not None else Code.MISSING_ITEM, f"the server answered {Code.name_of(status or 0)}")

    async def _request(self, command: Command, items: List[Tuple[int, bytes]]) -> Frame:
        if self._stopped.is_set():
            raise Stopped("the client was stopped")
        if self._writer is None:
            raise Disconnected("not connected")
        self._next_request = (self._next_request + 1) % (1 << 32)
        request = self._next_request
        future: "asyncio.Future[Frame]" = asyncio.get_running_loop().create_future()
        self._pending[request] = future
        try:
            await self._send(Frame(command, items + [(0x02, u32(request))]))
            return await asyncio.wait_for(future, self.request_timeout)
        finally:
            self._pending.pop(request, None)

    async def _send(self, frame: Frame) -> None:
        writer = self._writer
        if writer is None:
            raise Disconnected("not connected")
        writer.write(frame.encode())
        await writer.drain()

    # MARK: The connection

    async def _run(self) -> None:
        backoff = self.initial_backoff
        failures = 0
        certificate_refusals = 0
        while not self._stopped.is_set():
            before = self.connections
            try:
                await self._connect_once()
            except DeviceRefused as refusal:
                self._stop_with(refusal)
                return
            except ssl.SSLError as error:
                # The gateway's TLS alert about this certificate: revoked, or not its CA's.
                if "certificate" in str(error).lower() and self.connections == before:
                    certificate_refusals += 1
                    if certificate_refusals >= 3:
                        self._stop_with(DeviceRefused("its certificate was refused (revoked, or not of this server's CA)"))
                        return
                logger.debug("TLS failed: %s", error)
            except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError, MalformedFrame, ProtocolError, Disconnected) as error:
                logger.debug("connection ended: %s", error)
            finally:
                self._disconnected()
            if self.connections > before:
                backoff, failures = self.initial_backoff, 0
            else:
                failures += 1
                if self.attempts is not None and failures >= self.attempts:
                    self._stop_with(Unreachable(f"cannot connect to {self.host}:{self.port} ({failures} attempts)"))
                    return
            # Jitter: devices that lost the same server do not all come back at once.
            wait = backoff * random.uniform(0.5, 1.0)
            try:
                await asyncio.wait_for(self._stopped.wait(), wait)
            except asyncio.TimeoutError:
                pass
            backoff = min(backoff * 2, self.maximum_backoff)

    def _stop_with(self, error: CourierDeviceError) -> None:
        logger.error("%s", error)
        self.terminal_error = error
        self._stopped.set()
        self._queue.put_nowait(None)

    def _disconnected(self) -> None:
        self._connected.clear()
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(Disconnected("the connection was lost before the answer"))
        self._pending.clear()

    async def _connect_once(self) -> None:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self._context, server_hostname=self.host), timeout=10)
        frames = FrameReader()
        try:
            items = [(0x01, bytes([VERSION]))] + [(0x02, token) for token in self.identity.tokens_in(self.environment)]
            if self.keep_alive is not None:
                items.append((0x03, self.keep_alive.to_bytes(2, "big")))
            items.append((0x04, u32(self.identity.generation)))
            writer.write(Frame(Command.CONNECT, items).encode())
            await writer.drain()
            ack = await self._first_frame(reader, frames)
            if ack.command == Command.ERROR:
                raise self._error(ack)
            if ack.command != Command.CONNECT_ACK:
                raise MalformedFrame(f"expected ConnectAck, got command {ack.command:#x}")
            status = ack.integer(0x01)
            if status != Code.OK:
                raise DeviceRefused(Code.name_of(status if status is not None else Code.MISSING_ITEM))
            keep_alive = ack.integer(0x03) or 60
            frames.max_frame_length = max(ack.integer(0x04) or DEFAULT_MAX_FRAME_LENGTH, DEFAULT_MAX_FRAME_LENGTH) + 5 + 1024
            self.token_length = ack.integer(0x06) or self.token_length
            refused = ack.all(0x05)
            if refused:
                self.identity.remove_tokens(self.environment, refused)
                self.identity.save()
            self._writer = writer
            self.connections += 1
            self._connected.set()
            logger.info("connected to %s:%d", self.host, self.port)
            keeping = asyncio.ensure_future(self._keep_alive(writer, keep_alive))
            # What was set up before: the filter, and the subscriptions (with the last broadcast had).
            restore = asyncio.ensure_future(self._restore())
            try:
                while True:
                    data = await reader.read(65_536)
                    if not data:
                        return
                    for frame in frames.feed(data):
                        await self._handle(frame)
            finally:
                keeping.cancel()
                restore.cancel()
        finally:
            writer.close()

    async def _restore(self) -> None:
        try:
            if self._filter is not None:
                await self._send(Frame(Command.FILTER, [(0x01, digest) for digest in self._filter]))
            for (bundle_id, channel_id), last in list(self._subscriptions.items()):
                try:
                    await self._subscribe(bundle_id, channel_id, last)
                except (UnknownApp, UnknownChannel) as error:
                    logger.warning("subscription ended: %s", error)
                    self._subscriptions.pop((bundle_id, channel_id), None)
        except CourierDeviceError as error:
            logger.debug("restoring the connection's state stopped: %s", error)

    @staticmethod
    async def _keep_alive(writer: asyncio.StreamWriter, interval: int) -> None:
        while True:
            await asyncio.sleep(interval)
            writer.write(Frame(Command.KEEP_ALIVE).encode())
            await writer.drain()

    @staticmethod
    async def _first_frame(reader: asyncio.StreamReader, frames: FrameReader) -> Frame:
        while True:
            data = await asyncio.wait_for(reader.read(65_536), timeout=30)
            if not data:
                raise Disconnected("the server closed the connection before its ConnectAck")
            received = frames.feed(data)
            if received:
                if len(received) > 1:
                    raise MalformedFrame("frames after the ConnectAck before it was read")
                return received[0]

    @staticmethod
    def _error(frame: Frame) -> CourierDeviceError:
        code = frame.integer(0x01) or 0
        message = (frame.first(0x02) or b"").decode("utf-8", "replace")
        if code == Code.CERTIFICATE_REFUSED:
            return DeviceRefused(message or "its certificate was refused")
        return ProtocolError(code, message)

    async def _handle(self, frame: Frame) -> None:
        command = frame.command
        if command == Command.NOTIFICATION:
            try:
                notification = Notification.from_frame(frame)
            except MalformedFrame:
                delivery = frame.first(0x09)
                if delivery is not None and len(delivery) == 16:
                    # Framed soundly, items refused: told by its delivery id, and the connection kept.
                    await self._send(Frame(Command.ACK, [(0x01, bytes([1])), (0x03, delivery)]))
                    return
                raise
            if notification.channel_id is not None:
                for key in self._subscriptions:
                    if key[1] == notification.channel_id and notification.topic.startswith(key[0]):
                        self._subscriptions[key] = notification.delivery_id
            elif notification.delivery_id in self._seen:
                # Delivered again (its Ack was lost): acknowledged again, not given twice.
                await self._send(Frame(Command.ACK, [(0x03, notification.delivery_id.bytes)]))
                return
            self._remember(notification.delivery_id)
            self._queue.put_nowait(notification)
        elif command in (Command.APP_TOKEN_RESPONSE, Command.UNREGISTER_ACK, Command.CHANNEL_ACK):
            request = frame.integer(0x02)
            future = self._pending.get(request) if request is not None else None
            if future is not None and not future.done():
                future.set_result(frame)
        elif command == Command.NO_STORAGE:
            self._drained.set()
        elif command == Command.ERROR:
            raise self._error(frame)
        elif command == Command.KEEP_ALIVE_ACK:
            pass
        # Other commands: room for later versions.

    def _remember(self, delivery_id: uuid.UUID) -> None:
        self._seen.add(delivery_id)
        self._seen_order.append(delivery_id)
        if len(self._seen_order) > SEEN_LIMIT:
            self._seen.discard(self._seen_order.popleft())


__all__ = ["DeviceClient"]
