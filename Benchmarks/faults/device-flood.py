#!/usr/bin/env python3
"""One device that sends KeepAlive frames as fast as it can (docs/security.md):
connects with an identity folder (cert.pem, key.pem, ca.pem), sends Connect,
then KeepAlives in batches while it reads what comes back; when the server
closes it (Error tooManyFrames), it connects again at once. For SECONDS.
Run it beside `courier-load --mode delivery --light` to see what it does to
another device's delivery (Benchmarks/faults/README in docs/benchmarks.md).

Prints the frames sent, the KeepAliveAcks and Error frames read, and the
connections made. Loopback only; bounded in time.

usage: Benchmarks/faults/device-flood.py IDENTITY_DIR DEVICE_PORT [SECONDS]
"""
import os, socket, ssl, struct, sys, threading, time

identity, port = sys.argv[1], int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 20

# Frames: command u8, length u32, items (id u8, length u16, value) — docs/device-protocol.md.
connect = bytes([0x07]) + struct.pack(">I", 4) + bytes([0x01]) + struct.pack(">H", 1) + bytes([1])
keepalive = bytes([0x0C]) + struct.pack(">I", 0)
batch = keepalive * 256

context = ssl.create_default_context(cafile=f"{identity}/ca.pem")
context.load_cert_chain(f"{identity}/cert.pem", f"{identity}/key.pem")
sent = acks = errors = connections = 0


def read_answers(s):
    """Counts the KeepAliveAcks and Error frames until the server closes the connection."""
    global acks, errors
    pending = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
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


# Blocking writes: the device sends as fast as the server reads, and waits when it does not.
end = time.time() + seconds
while time.time() < end:
    reader, s = None, None
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        s = context.wrap_socket(raw, server_hostname="localhost")
        s.settimeout(max(0.1, end - time.time()))
        connections += 1
        reader = threading.Thread(target=read_answers, args=(s,), daemon=True)
        reader.start()
        s.sendall(connect)
        while time.time() < end:
            s.sendall(batch)
            sent += 256
    except OSError:
        pass
    # The reader ends with the connection; the socket is closed only after it (closing it under the reader aborts).
    if s is None:
        time.sleep(0.01)
        continue
    try:
        s.shutdown(socket.SHUT_RDWR)
    except Exception:
        pass
    if reader is not None:
        reader.join(timeout=5)
    try:
        s.close()
    except Exception:
        pass
print(f"device flood: {sent} KeepAlives sent, {acks} answered, {errors} Error frames, {connections} connections in {seconds:.0f} s", flush=True)
os._exit(0)  # a reader thread may still sit in a closed socket's recv
