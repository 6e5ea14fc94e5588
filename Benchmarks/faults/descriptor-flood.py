#!/usr/bin/env python3
"""Out of file descriptors, does courier serve spin a core?

Starts `courier serve` under a small open-file limit, opens plain TCP
connections to one port until the server holds all its descriptors (or
refuses), opens a few more, and reports the server's CPU time over the next
seconds. Loopback only; bounded in connections and time.

usage: Benchmarks/faults/descriptor-flood.py COURIER PORT_NAME [LIMIT]
  COURIER    the courier binary (e.g. .build/release/courier)
  PORT_NAME  http2, device, binary or feedback (production)
"""
import os, socket, subprocess, sys, tempfile, time, json

courier, name = sys.argv[1], sys.argv[2]
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 200
ports = {"binary": 46195, "feedback": 46196, "http2": 46197, "device": 46223, "channels": 46198}
work = tempfile.mkdtemp(prefix="courier-fd-")
config = {"network": {"production": ports, "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}, "adminPort": 0},
          "logLevel": "error"}
with open(f"{work}/courier.json", "w") as f:
    json.dump(config, f)
server = subprocess.Popen(["sh", "-c", f'ulimit -n {limit} && exec "$0" serve --data "$1" --config "$2"', courier, f"{work}/data", f"{work}/courier.json"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in server.stdout:
    if "Courier is running" in line:
        break
pid = server.pid

def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

held = []
for _ in range(3 * limit):
    if len(os.listdir(f"/proc/{pid}/fd")) >= limit:
        break
    try:
        held.append(socket.create_connection(("127.0.0.1", ports[name]), timeout=1))
    except OSError:
        break
for _ in range(3):
    try:
        held.append(socket.create_connection(("127.0.0.1", ports[name]), timeout=1))
    except OSError:
        pass
time.sleep(1)
before = cpu()
time.sleep(3)
spent = cpu() - before
print(f"{name}: {len(held)} connections opened, server holds {len(os.listdir(f'/proc/{pid}/fd'))} of {limit} descriptors, "
      f"server CPU {spent:.2f} s in 3 s")
for s in held:
    s.close()
server.terminate()
server.wait()
subprocess.run(["rm", "-rf", work])
