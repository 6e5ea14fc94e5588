"""A small partition run for CI (Benchmarks/cluster/ci.sh): devices of the
Python device library spread over the nodes, pushes that may be stored sent
round-robin over the nodes' binary provider API while ci.sh cuts one node
from PostgreSQL and the other nodes and heals it; then every accepted push
is counted at its device: one missing there must have been replaced by a
later push to the same device while it was held (Apple's quality of
service: one stored notification per app for a device offline, and the
device of the cut node was offline for the others), as its delivery log
says. Exits 1 when one is missing otherwise, or came twice.

Runs in a load host's namespace (hosts.sh), with the first node's data
directory for its CA, admin token and the demo provider's certificate.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import ssl
import struct
import sys
import tempfile
import time
import urllib.request
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
from courier_device import DeviceClient  # noqa: E402

BUNDLE = "com.example.demo"


def admin_get(admin: str, data: str, path: str) -> dict:
    """A GET of the admin API, as JSON."""
    context = ssl.create_default_context(cafile=os.path.join(data, "pki", "ca.pem"))
    with open(os.path.join(data, "admin-token")) as file:
        token = file.read().strip()
    request = urllib.request.Request(admin + path, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        return json.load(answer)


def activate(admin: str, data: str, folder: str) -> None:
    """A device identity from the admin API (POST /v1/devices), written as the library reads it."""
    context = ssl.create_default_context(cafile=os.path.join(data, "pki", "ca.pem"))
    with open(os.path.join(data, "admin-token")) as file:
        token = file.read().strip()
    request = urllib.request.Request(admin + "/v1/devices", data=b"{}", method="POST",
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        body = json.load(answer)
    os.makedirs(folder)
    for name, key in (("cert.pem", "certificatePEM"), ("key.pem", "keyPEM"), ("ca.pem", "caPEM")):
        with open(os.path.join(folder, name), "w") as file:
            file.write(body[key])
    with open(os.path.join(folder, "identity.json"), "w") as file:
        json.dump(body["identity"], file)


def frame(token: bytes, payload: bytes, identifier: int, expiry: int) -> bytes:
    """A command-2 notification."""
    items = (struct.pack(">BH", 1, len(token)) + token + struct.pack(">BH", 2, len(payload)) + payload
             + struct.pack(">BHI", 3, 4, identifier) + struct.pack(">BHI", 4, 4, expiry) + struct.pack(">BHB", 5, 1, 10))
    return struct.pack(">BI", 2, len(items)) + items


async def provider(host: str, data: str) -> "tuple[asyncio.StreamReader, asyncio.StreamWriter]":
    context = ssl.create_default_context(cafile=os.path.join(data, "pki", "ca.pem"))
    context.load_cert_chain(os.path.join(data, "demo", BUNDLE + ".pem"), os.path.join(data, "demo", BUNDLE + "-key.pem"))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    return await asyncio.open_connection(host, 40000, ssl=context, server_hostname=host)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help="the first node's data directory")
    parser.add_argument("--nodes", required=True, help="the nodes' addresses, comma-separated")
    parser.add_argument("--devices", type=int, default=300)
    parser.add_argument("--rate", type=int, default=300, help="pushes a second, over all nodes")
    parser.add_argument("--seconds", type=float, default=25)
    arguments = parser.parse_args()
    nodes = arguments.nodes.split(",")

    folders = tempfile.mkdtemp()
    started = time.monotonic()
    devices: List[DeviceClient] = []
    tokens: List[bytes] = []
    for index in range(arguments.devices):
        folder = os.path.join(folders, str(index))
        activate(f"https://{nodes[0]}:8080", arguments.data, folder)
        device = DeviceClient(folder, host=nodes[index % len(nodes)], port=40003)
        await device.start()
        devices.append(device)
    for device in devices:
        await device.wait_connected()
        tokens.append(await device.register(BUNDLE))
    print(f"{len(devices)} devices over {len(nodes)} nodes connected and registered in {time.monotonic() - started:.1f} s", flush=True)

    received: Dict[bytes, collections.Counter] = {token: collections.Counter() for token in tokens}

    async def receive(device: DeviceClient, token: bytes) -> None:
        async for notification in device.notifications():
            received[token][notification.payload] += 1
            await device.acknowledge(notification)

    receivers = [asyncio.create_task(receive(device, token)) for device, token in zip(devices, tokens)]

    # Push m of node n goes to token m mod T, whose device is on node m mod N: N-1 in N are handed over.
    connections = [await provider(node, arguments.data) for node in nodes]
    # Each connection's pushes in the order sent: (identifier, token, payload).
    sent: List[List["tuple[int, bytes, bytes]"]] = [[] for _ in nodes]
    # A connection the node closed (a node cut from the database ends what it cannot hold): nothing more is sent on it.
    ended: List[bool] = [False for _ in nodes]
    expiry = int(time.time()) + 3600
    total = int(arguments.rate * arguments.seconds)
    print(f"durable phase: {total} pushes at {arguments.rate}/s from {int(time.time())}", flush=True)
    start = time.monotonic()
    for number in range(total):
        node, m = number % len(nodes), number // len(nodes)
        token = tokens[m % len(tokens)]
        payload = json.dumps({"aps": {"alert": "partition"}, "n": number}).encode()
        if not ended[node]:
            try:
                connections[node][1].write(frame(token, payload, number, expiry))
                sent[node].append((number, token, payload))
                if number % 10 == 0:
                    await connections[node][1].drain()
            except (ConnectionError, ssl.SSLError) as error:
                print(f"node {nodes[node]}: closed its provider connection during the pushes ({error!r})", flush=True)
                ended[node] = True
        if number % 10 == 0:
            delay = start + number / arguments.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
    # A bad frame (a 4-byte token) on each connection still open: its error response names it once every push
    # before it was taken. A connection the node closed must have named the push it failed (the binary API's
    # error response): the ones before it were taken, the others not.
    expected: Dict[bytes, collections.Counter] = {token: collections.Counter() for token in tokens}
    accepted = 0
    unanswered = 0
    for index, (reader, writer) in enumerate(connections):
        if not ended[index]:
            try:
                writer.write(frame(b"\x00" * 4, b'{"aps":{}}', 0xBAD, 0))
                await writer.drain()
            except (ConnectionError, ssl.SSLError):
                ended[index] = True
        try:
            response = await asyncio.wait_for(reader.readexactly(6), timeout=120)
            command, status, identifier = struct.unpack(">BBI", response)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, ssl.SSLError) as error:
            print(f"node {nodes[index]}: no answer naming a push ({error!r}); its pushes are not counted", flush=True)
            unanswered += 1
            continue
        taken = [push for push in sent[index] if push[0] < identifier] if identifier != 0xBAD else sent[index]
        if identifier != 0xBAD:
            print(f"node {nodes[index]}: status {status} for push {identifier}: {len(taken)} of its {len(sent[index])} pushes taken", flush=True)
        for _, token, payload in taken:
            expected[token][payload] += 1
            accepted += 1
        writer.close()

    # Waits until every push accepted arrived or was replaced while held (its delivery log says which), 90 s at most.
    def replaced_ones() -> "tuple[int, int, List[str]]":
        replaced = unexplained = 0
        examples: List[str] = []
        for token in tokens:
            lost = expected[token] - received[token]
            if not lost:
                continue
            log = admin_get(f"https://{nodes[0]}:8080", arguments.data, f"/v1/tokens/{token.hex()}/notifications?limit=100")["notifications"]
            events = {n["received"][0]["payload"].encode(): {e["event"] for e in n["events"]} for n in log if n.get("received")}
            for payload, count in lost.items():
                if "replaced" in events.get(payload, set()):
                    replaced += count
                else:
                    unexplained += count
                    device = next((n["received"][0].get("device") for n in log if n.get("received")), None)
                    examples.append(f"{payload.decode()} to {token.hex()} (device {device}): {sorted(events.get(payload, set()))}")
                    if os.environ.get("PARTITION_DEBUG"):
                        number = json.loads(payload)["n"]
                        for n in sorted(log, key=lambda n: json.loads(n["received"][0]["payload"])["n"] if n.get("received") else 0):
                            if n.get("received") and abs(json.loads(n["received"][0]["payload"])["n"] - number) < 40:
                                print("   ", n["received"][0]["payload"], n["received"][0].get("node"),
                                      [(e["event"], e["at"][14:23], e.get("detail", "")[:12]) for e in n["events"]], flush=True)
        return replaced, unexplained, examples

    deadline = time.monotonic() + 90
    while True:
        await asyncio.sleep(2)
        replaced, unexplained, examples = replaced_ones()
        if unexplained == 0 or time.monotonic() > deadline:
            break
    missing = sum(sum((expected[token] - received[token]).values()) for token in tokens)
    twice = sum(sum(count - 1 for count in received[token].values() if count > 1) for token in tokens)
    devices_missing = sum(1 for token in tokens if expected[token] - received[token])
    print(f"durable phase: sent {total}, accepted {accepted}, missing {missing} (on {devices_missing} devices), "
          f"received twice {twice}, in {time.monotonic() - start:.1f} s", flush=True)
    for example in examples[:10]:
        print(f"  missing and not replaced: {example}", flush=True)
    print(f"durable phase: of the {missing} missing, {replaced} were replaced by a later push while held, {unexplained} were not", flush=True)
    for task in receivers:
        task.cancel()
    for device in devices:
        await device.stop()
    return 0 if unexplained == 0 and twice == 0 and unanswered == 0 and accepted > 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
