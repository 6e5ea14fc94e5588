"""courier-device: a device of Courier, the self-hosted APNs.

The courier device protocol (docs/device-protocol.md) over TLS, in asyncio
and the standard library::

    import asyncio
    from courier_device import DeviceClient

    async def main() -> None:
        async with DeviceClient("courier-data/demo/device") as device:
            token = await device.register("com.example.demo")
            print("token", token.hex())
            async for notification in device.notifications():
                print(notification.topic, notification.payload.decode())
                await device.acknowledge(notification)

    asyncio.run(main())
"""
from .client import DeviceClient
from .errors import (
    BadIdentity,
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
from .protocol import Code, Notification

__all__ = [
    "BadIdentity",
    "Code",
    "CourierDeviceError",
    "DeviceClient",
    "DeviceRefused",
    "Disconnected",
    "Identity",
    "Notification",
    "ProtocolError",
    "Stopped",
    "TooManySubscriptions",
    "UnknownApp",
    "UnknownChannel",
    "Unreachable",
]
