"""What can go wrong for a device: one exception per refusal."""
from __future__ import annotations


class CourierDeviceError(Exception):
    """The base of every error of this library."""


class BadIdentity(CourierDeviceError):
    """The identity folder is missing, incomplete or unreadable."""


class DeviceRefused(CourierDeviceError):
    """The gateway refused this device (its certificate unknown or revoked,
    or the ConnectAck's status): connecting again would be refused too."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the gateway refused this device: {reason}")
        self.reason = reason


class ProtocolError(CourierDeviceError):
    """The server sent an Error frame (and closed the connection)."""

    def __init__(self, code: int, message: str) -> None:
        from .protocol import Code

        super().__init__(f"protocol error {code} ({Code.name_of(code)}): {message}")
        self.code = code
        self.message = message


class UnknownApp(CourierDeviceError):
    """The server has no such app, or the app is not registered on the device."""


class UnknownChannel(CourierDeviceError):
    """The app has no such broadcast channel (or, unsubscribing, the device was not subscribed)."""


class TooManySubscriptions(CourierDeviceError):
    """The connection holds as many broadcast subscriptions as the server allows."""


class Disconnected(CourierDeviceError):
    """No connection now (or it was lost before the answer came): try again."""


class Stopped(CourierDeviceError):
    """The client was stopped."""


class Unreachable(CourierDeviceError):
    """The gateway could not be reached (with a bounded number of attempts)."""
