"""courier-device against a real `courier serve` (every port 0, its ports read
from the data directory's ports.json), pushed to with `courier push`: the
behaviours CourierDevice's tests check, where they apply.

COURIER names the courier binary (default: the package's debug build)."""
from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from typing import Dict, Iterator, List, Tuple

import pytest

from courier_device import (
    BadIdentity,
    DeviceClient,
    DeviceRefused,
    Notification,
    UnknownApp,
    UnknownChannel,
)

REPOSITORY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COURIER = os.environ.get("COURIER") or os.path.join(REPOSITORY, ".build", "debug", "courier")
APP = "com.example.demo"


class Server:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.data = os.path.join(directory, "data")
        config = os.path.join(directory, "courier.json")
        zero = {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}
        with open(config, "w") as file:
            json.dump({"network": {"production": zero, "sandbox": zero, "adminPort": 0}, "logLevel": "warning"}, file)
        self.process = subprocess.Popen(
            [COURIER, "serve", "--data", self.data, "--config", config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        output: List[str] = []
        for line in self.process.stdout:
            output.append(line)
            if "Courier is running" in line:
                break
        else:
            raise RuntimeError("courier serve did not start:\n" + "".join(output))
        with open(os.path.join(self.data, "ports.json")) as file:
            self.ports: Dict[str, int] = json.load(file)["ports"]
        self.key = glob.glob(os.path.join(self.data, "demo", "AuthKey_*.p8"))[0]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)

    def new_device(self) -> str:
        """A new device identity folder (`courier pki device-cert`)."""
        folder = os.path.join(self.directory, f"device-{uuid.uuid4().hex[:8]}")
        run([COURIER, "pki", "device-cert", "--data", self.data, "--out", folder])
        return folder

    def client(self, folder: str, **options: object) -> DeviceClient:
        return DeviceClient(folder, port=self.ports["device.production"], **options)  # type: ignore[arg-type]

    def push(self, token: bytes, payload: str, topic: str = APP, extra: Tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                COURIER, "push", "--p8", self.key, "--team-id", "DEMOTEAM01", "--topic", topic, "--token", token.hex(), "--payload", payload,
                "--port", str(self.ports["http2.production"]), "--ca", os.path.join(self.data, "pki", "ca.pem"), *extra,
            ],
            capture_output=True, text=True, timeout=60)

    def courier(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([COURIER, *arguments], capture_output=True, text=True, timeout=60)


def run(arguments: List[str]) -> str:
    result = subprocess.run(arguments, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    directory = tempfile.mkdtemp(prefix="courier-python-")
    running = Server(directory)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_notification_arrives_once_and_an_acknowledged_one_never_again(server: Server) -> None:
    async def main() -> None:
        folder = server.new_device()
        async with server.client(folder) as device:
            token = await device.register(APP)
            assert len(token) == device.token_length == 32
            assert await device.register(APP) == token, "the same token each time"
            pushed = server.push(token, '{"aps":{"alert":"hello from python"}}')
            assert pushed.returncode == 0, pushed.stderr
            notification = await device.next_notification(timeout=10)
            assert notification.token == token
            assert notification.topic == APP
            assert json.loads(notification.payload) == {"aps": {"alert": "hello from python"}}
            assert notification.priority == 10
            await device.acknowledge(notification)
        # The token was kept in identity.json; acknowledged, the notification does not come again.
        async with server.client(folder) as again:
            assert again.identity.token(APP, "production") == token
            await again.wait_drained(timeout=10)
            with pytest.raises(asyncio.TimeoutError):
                await again.next_notification(timeout=0.5)

    asyncio.run(main())


def test_an_unacknowledged_notification_comes_again_on_the_next_connection_and_is_given_once(server: Server) -> None:
    async def main() -> None:
        folder = server.new_device()
        async with server.client(folder) as device:
            token = await device.register(APP)
            assert server.push(token, '{"aps":{"alert":"once"}}', extra=("--expiration", str(int(time.time()) + 3600))).returncode == 0
            first = await device.next_notification(timeout=10)
            # The connection is lost before the Ack: the server delivers it again on the next one;
            # the client acknowledges it again and does not give it twice.
            connections = device.connections
            assert device._writer is not None
            device._writer.close()
            while device.connections == connections:
                await asyncio.sleep(0.05)
            await device.wait_connected(timeout=10)
            with pytest.raises(asyncio.TimeoutError):
                await device.next_notification(timeout=1)
        async with server.client(folder) as again:
            await again.wait_drained(timeout=10)
            with pytest.raises(asyncio.TimeoutError):
                await again.next_notification(timeout=0.5)
        assert first.delivery_id is not None

    asyncio.run(main())


def test_an_uninstalled_app_makes_pushes_unregistered(server: Server) -> None:
    async def main() -> None:
        async with server.client(server.new_device()) as device:
            token = await device.register(APP)
            await device.unregister(APP)
            assert device.identity.token(APP, "production") is None
            refused = server.push(token, '{"aps":{"alert":"gone"}}')
            assert refused.returncode != 0
            assert "Unregistered" in refused.stdout + refused.stderr
            with pytest.raises(UnknownApp):
                await device.register("com.example.nosuchapp")

    asyncio.run(main())


def test_live_activity_tokens_are_their_own(server: Server) -> None:
    async def main() -> None:
        async with server.client(server.new_device()) as device:
            token = await device.register(APP)
            push_to_start = await device.live_activity_push_to_start_token(APP)
            activity, update = await device.start_live_activity(APP)
            assert len(push_to_start) == len(update) == 32
            assert len({token, push_to_start, update}) == 3
            assert 0 < activity < 2**32 - 1
            await device.unregister(APP, activity=activity)
            assert device.identity.token(APP, "production") == token, "ending an activity keeps the app"

    asyncio.run(main())


def test_a_channel_broadcast_reaches_a_subscribed_device(server: Server) -> None:
    async def main() -> None:
        common = ("--p8", server.key, "--team-id", "DEMOTEAM01", "--ca", os.path.join(server.data, "pki", "ca.pem"), "--app", APP)
        created = server.courier("channel", "create", *common, "--port", str(server.ports["channels.production"]))
        assert created.returncode == 0, created.stderr
        channel = created.stdout.split(":")[0]  # "<channel id>: 201 created (...)"
        async with server.client(server.new_device()) as device:
            await device.register(APP)
            with pytest.raises(UnknownChannel):
                await device.subscribe(APP, "bm8tc3VjaC1jaGFubmVs")
            await device.subscribe(APP, channel)
            payload = '{"aps":{"timestamp":1,"event":"update","content-state":{}}}'
            sent = server.courier("broadcast", *common, "--channel", channel, "--payload", payload, "--port", str(server.ports["http2.production"]))
            assert sent.returncode == 0, sent.stderr
            notification: Notification = await device.next_notification(timeout=10)
            assert notification.channel_id == channel
            assert json.loads(notification.payload)["aps"]["event"] == "update"

    asyncio.run(main())


def test_a_revoked_device_is_refused_and_the_client_stops(server: Server) -> None:
    async def main() -> None:
        folder = server.new_device()
        serial = run(["openssl", "x509", "-noout", "-serial", "-in", os.path.join(folder, "cert.pem")]).strip().split("=")[1]
        revoked = server.courier("pki", "revoke", "--data", server.data, "--serial", serial)
        assert revoked.returncode == 0, revoked.stderr
        device = server.client(folder, initial_backoff=0.05)
        await device.start()
        with pytest.raises(DeviceRefused):
            await device.wait_connected(timeout=20)
        assert isinstance(device.terminal_error, DeviceRefused)
        await device.stop()

    asyncio.run(main())


def test_an_identity_folder_that_is_not_one_is_named(tmp_path: str) -> None:
    with pytest.raises(BadIdentity, match="no identity.json"):
        DeviceClient(os.path.join(str(tmp_path), "nothing"))
    os.makedirs(os.path.join(str(tmp_path), "half"))
    with open(os.path.join(str(tmp_path), "half", "identity.json"), "w") as file:
        file.write('{"deviceID": "zz"}')
    with pytest.raises(BadIdentity, match="not a device identity file"):
        DeviceClient(os.path.join(str(tmp_path), "half"))


def test_the_environment_is_checked() -> None:
    with pytest.raises(ValueError, match="production or sandbox"):
        DeviceClient("x", environment="moon")
