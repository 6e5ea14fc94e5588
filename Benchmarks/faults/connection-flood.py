#!/usr/bin/env python3
"""Memory through rounds of connection floods.

Starts `courier serve`, then in each round opens TLS connections to the
HTTP/2 port without a certificate or a request (from several loopback
addresses, 127.0.0.2 and up), holds them, closes them, waits for the
server's sweep (8 s), and prints the server's resident memory: before the first
round, with each round's connections open, and after each round.
Loopback only; bounded in connections, rounds and time.

usage: Benchmarks/faults/connection-flood.py COURIER [CONNECTIONS] [ROUNDS]
"""
import json, os, socket, ssl, subprocess, sys, tempfile, threading, time

courier = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
port = 47197
work = tempfile.mkdtemp(prefix="courier-flood-")
config = {"network": {"production": {"binary": 47195, "feedback": 47196, "http2": port, "device": 47223, "channels": 47198},
                      "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}, "adminPort": 0},
          "logLevel": "info"}
with open(f"{work}/courier.json", "w") as f:
    json.dump(config, f)
server = subprocess.Popen([courier, "serve", "--data", f"{work}/data", "--config", f"{work}/courier.json"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in server.stdout:
    if "Courier is running" in line:
        break
# The server's log from then on, read so that it never blocks on a full pipe.
returned = []
def read_log():
    for line in server.stdout:
        if "gave freed memory back" in line:
            returned.append(line.strip())
threading.Thread(target=read_log, daemon=True).start()

def resident_mb():
    for line in open(f"/proc/{server.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0

context = ssl.create_default_context(cafile=f"{work}/data/pki/ca.pem")
context.set_alpn_protocols(["h2"])
print(f"before: {resident_mb():.1f} MB")
for round in range(1, rounds + 1):
    held, refused = [], 0
    for index in range(count):
        source = f"127.0.0.{2 + index // 400}"
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
            held.append(context.wrap_socket(raw, server_hostname="localhost"))
        except OSError:
            refused += 1
    during = resident_mb()
    for s in held:
        s.close()
    time.sleep(8)  # the sweep runs every second; memory is given back again 5 ticks after a flood
    print(f"round {round}: {len(held)} TLS connections held ({refused} refused): {during:.1f} MB; after closing: {resident_mb():.1f} MB"
          f" (memory given back {len(returned)} times so far)")
server.terminate()
server.wait()
subprocess.run(["rm", "-rf", work])
