#!/usr/bin/env python3
"""Fits a configuration file to an older `courier` build (Benchmarks/ratchet.sh):
starts `courier serve` with it in a scratch data directory and, while the
build refuses a key it does not know ("unknown key 'a.b'"), removes that key
and tries again; stops the server once it runs. Keys a build does not know
are settings it did not have, so its defaults are what it would have run with.

usage: Benchmarks/fit-config.py COURIER CONFIG      (CONFIG is rewritten in place)
"""
import json, re, subprocess, sys, tempfile, time

courier, path = sys.argv[1], sys.argv[2]
for _ in range(50):
    config = json.load(open(path))
    data = tempfile.mkdtemp(prefix="courier-fit-")
    server = subprocess.Popen([courier, "serve", "--data", data, "--config", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = ""
    deadline = time.time() + 120
    for line in server.stdout:
        output += line
        if "Courier is running" in line or time.time() > deadline:
            break
    server.terminate()
    server.wait(timeout=30)
    unknown = re.search(r"unknown key '([^']+)'", output)
    if not unknown:
        if "Courier is running" not in output:
            sys.exit("fit-config.py: the server did not start:\n" + output[-2000:])
        break
    keys = unknown.group(1).split(".")
    node = config
    for key in keys[:-1]:
        node = node[key]
    del node[keys[-1]]
    with open(path, "w") as f:
        json.dump(config, f)
    print(f"fit-config.py: {courier} does not know '{unknown.group(1)}': left out", file=sys.stderr)
