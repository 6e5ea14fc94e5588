#!/usr/bin/env python3
"""One device that sends KeepAlive frames as fast as it can (docs/security.md):
connects with an identity folder (cert.pem, key.pem, ca.pem), sends Connect,
then KeepAlives in batches while it reads what comes back (asyncio, one
thread); when the server closes it (Error tooManyFrames), it connects again
at once. For SECONDS.
Run it beside `courier-load --mode delivery --light` to see what it does to
another device's delivery (Benchmarks/faults/README in docs/benchmarks.md).

Prints the frames sent, the KeepAliveAcks and Error frames read, and the
connections made. Loopback only; bounded in time.

usage: Benchmarks/faults/device-flood.py IDENTITY_DIR DEVICE_PORT [SECONDS]
"""
import asyncio, ssl, struct, sys, time

identity, port = sys.argv[1], int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 20

# Frames: command u8, length u32, items (id u8, length u16, value) — docs/device-protocol.md.
connect = bytes([0x07]) + struct.pack(">I", 4) + bytes([0x01]) + struct.pack(">H", 1) + bytes([1])
keepalive = bytes([0x0C]) + struct.pack(">I", 0)
batch = keepalive * 256

context = ssl.create_default_context(cafile=f"{identity}/ca.pem")
context.load_cert_chain(f"{identity}/cert.pem", f"{identity}/key.pem")
sent = acks = errors = connections = refused = 0


async def read_answers(reader):
    """Counts the KeepAliveAcks and Error frames until the server closes the connection."""
    global acks, errors
    pending = b""
    while True:
        try:
            chunk = await reader.read(65536)
        except (OSError, ssl.SSLError):
            return
        if not chunk:
            return
        pending += chunk
        while len(pending) >= 5:
            length = struct.unpack(">I", pending[1:5])[0]
            if len(pending) < 5 + length:
                break
            acks += pending[0] == 0x0D
            errors += pending[0] == 0x1F
            pending = pending[5 + length:]


async def flood_once(end):
    """One connection: Connect, then KeepAlives as fast as the server takes them
    (drain waits while it reads no more), until it closes or the time is up."""
    global sent, connections, refused
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost"), timeout=5)
    except (OSError, ssl.SSLError, asyncio.TimeoutError):
        refused += 1
        return
    connections += 1
    answers = asyncio.ensure_future(read_answers(reader))
    try:
        writer.write(connect)
        while time.time() < end and not answers.done():
            writer.write(batch)
            sent += 256
            await asyncio.wait_for(writer.drain(), timeout=max(0.1, end - time.time()))
    except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
        pass
    writer.transport.abort()
    await asyncio.wait([answers], timeout=5)


async def main():
    # One connection at a time, the next at once when one ends: a device that reconnects as fast as it can.
    end = time.time() + seconds
    while time.time() < end:
        await flood_once(end)
    print(f"device flood: {sent} KeepAlives sent, {acks} answered, {errors} Error frames, {connections} connections "
          f"({refused} refused before or during the handshake) in {seconds:.0f} s", flush=True)


asyncio.run(main())
