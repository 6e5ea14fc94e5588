#!/usr/bin/env python3
"""Anonymous peers against authenticated ones (docs/security.md), for SECONDS each:

  http2   1,000 TLS connections without credentials, re-opened as soon as
          one ends, from 127.0.0.2 and 127.0.0.3 (500 each), to the HTTP/2
          port; meanwhile a provider from 127.0.0.1 opens a connection every
          second (within its key's 100 connections a minute,
          connections.reconnectLimit) and sends 5 pushes on it (ES256 token,
          its own HTTP/2 client): the share of its connections and pushes
          that succeed.
  device  the same to the device port: half the attackers stall (TCP, no
          ClientHello), half fail their handshakes (no client certificate);
          meanwhile a device from 127.0.0.1 completes a handshake with its
          certificate every 0.2 s: the share that succeed.
  log     HTTP/2 connections without credentials that never acknowledge
          SETTINGS and open stream after stream of large unfinished headers
          (each reset by the server), re-opened at once, from 127.0.0.2 and
          127.0.0.3: the bytes the server's log grew by.

Prints one line per phase, and the server's log bytes per phase.
Loopback only; bounded in connections and time.

usage: Benchmarks/faults/anonymous-flood.py COURIER [SECONDS] [PHASES]
       (PHASES: comma-separated, default http2,device,log)
Needs h2, hpack and PyJWT (Tests/ThirdParty/requirements.txt installs them).
"""
import json, os, re, socket, ssl, struct, subprocess, sys, tempfile, threading, time, uuid

import h2.config, h2.connection, h2.events, hpack, jwt

courier = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
phases = (sys.argv[3] if len(sys.argv) > 3 else "http2,device,log").split(",")
ports = {"binary": 48195, "feedback": 48196, "http2": 48197, "device": 48223, "channels": 48198}
work = tempfile.mkdtemp(prefix="courier-anonymous-")
data = f"{work}/data"
log_path = f"{work}/server.log"
config = {"network": {"production": ports, "sandbox": {k: 0 for k in ports}, "adminPort": 0}, "logLevel": "info"}
with open(f"{work}/courier.json", "w") as f:
    json.dump(config, f)
log = open(log_path, "w")
server = subprocess.Popen([courier, "serve", "--data", data, "--config", f"{work}/courier.json"], stdout=log, stderr=subprocess.STDOUT)
deadline = time.time() + 120
while "Courier is running" not in open(log_path).read():
    if time.time() > deadline or server.poll() is not None:
        sys.exit("the server did not start: " + open(log_path).read()[-2000:])
    time.sleep(0.2)
ca = f"{data}/pki/ca.pem"
demo = f"{data}/demo"
key_file = next(name for name in os.listdir(demo) if name.startswith("AuthKey_") and name.endswith(".p8"))
key_id = key_file[len("AuthKey_"):-len(".p8")]
auth_key = open(f"{demo}/{key_file}").read()

# The demo device, for a token to push to (and its identity for the device phase).
device = subprocess.Popen([courier, "device", "run", "--identity", f"{demo}/device", "--app", "com.example.demo", "--port", str(ports["device"])],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
token = None
for line in device.stdout:
    found = re.fullmatch(r"token ([0-9a-f]{64})", line.strip())
    if found:
        token = found.group(1)
        break
if token is None:
    server.terminate()
    sys.exit("the demo device printed no token")
threading.Thread(target=lambda: [None for _ in device.stdout], daemon=True).start()

stop = threading.Event()
# What the attackers did in the current phase: connections opened (TCP and, for TLS, the handshake), refused, seen closed.
counts = {"opened": 0, "refused": 0, "closed": 0}
counts_lock = threading.Lock()


def tally(name):
    with counts_lock:
        counts[name] += 1


def anonymous_context():
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    return context


def attacker(source, port, count, mode):
    """Keeps up to `count` connections from `source` open, re-opening each as it ends."""
    context = anonymous_context()
    held = []
    while not stop.is_set():
        alive = []
        for s in held:
            try:
                if s.recv(1) == b"":  # non-blocking: b"" only once the server closed it
                    s.close()
                    tally("closed")
                    continue
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except OSError:
                s.close()
                tally("closed")
                continue
            alive.append(s)
        held = alive
        while len(held) < count and not stop.is_set():
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=2, source_address=(source, 0))
                if mode == "stall":
                    raw.setblocking(False)
                    held.append(raw)
                else:
                    s = context.wrap_socket(raw, server_hostname="localhost")
                    s.setblocking(False)
                    held.append(s)
                tally("opened")
            except OSError:
                tally("refused")
                break  # refused at accept or in the handshake: look at the held ones, then try again
    for s in held:
        s.close()


def provider_token():
    return jwt.encode({"iss": "DEMOTEAM01", "iat": int(time.time())}, auth_key, algorithm="ES256", headers={"kid": key_id})


def provider_connection(pushes):
    """One connection from 127.0.0.1 with `pushes` pushes: (connected, answers that were 200)."""
    context = anonymous_context()
    try:
        raw = socket.create_connection(("127.0.0.1", ports["http2"]), timeout=5, source_address=("127.0.0.1", 0))
        s = context.wrap_socket(raw, server_hostname="localhost")
    except OSError:
        return False, 0
    s.settimeout(5)
    connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    connection.initiate_connection()
    s.sendall(connection.data_to_send())
    authorization = "bearer " + provider_token()
    body = json.dumps({"aps": {"alert": "flood"}}).encode()
    ok = 0
    try:
        for _ in range(pushes):
            stream = connection.get_next_available_stream_id()
            connection.send_headers(stream, [(":method", "POST"), (":scheme", "https"), (":path", f"/3/device/{token}"),
                                             (":authority", "localhost"), ("authorization", authorization), ("apns-topic", "com.example.demo"),
                                             ("apns-id", str(uuid.uuid4()))])
            connection.send_data(stream, body, end_stream=True)
            s.sendall(connection.data_to_send())
            status = None
            while status is None:
                chunk = s.recv(65536)
                if not chunk:
                    raise OSError("closed")
                for event in connection.receive_data(chunk):
                    if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                        status = dict(event.headers).get(":status")
                    elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream and status is None:
                        status = "none"
                s.sendall(connection.data_to_send())
            ok += status == "200"
    except (OSError, h2.exceptions.ProtocolError):
        pass
    s.close()
    return True, ok


def device_handshake():
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(f"{demo}/device/cert.pem", f"{demo}/device/key.pem")
    try:
        raw = socket.create_connection(("127.0.0.1", ports["device"]), timeout=5, source_address=("127.0.0.1", 0))
        s = context.wrap_socket(raw, server_hostname="localhost")
        # The server checks the certificate during the handshake; a refused one closes at once.
        s.settimeout(0.3)
        try:
            refused = s.recv(1) == b""
        except (socket.timeout, ssl.SSLError) as error:
            refused = not isinstance(error, socket.timeout)
        s.close()
        return not refused
    except OSError:
        return False


def log_attacker(source):
    """HTTP/2 without credentials: never acknowledges SETTINGS, opens stream after stream of unfinished 8 KB headers."""
    encoder = hpack.Encoder()
    while not stop.is_set():
        try:
            raw = socket.create_connection(("127.0.0.1", ports["http2"]), timeout=2, source_address=(source, 0))
            s = anonymous_context().wrap_socket(raw, server_hostname="localhost")
            tally("opened")
            s.settimeout(2)
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + struct.pack(">I", 0)[1:] + b"\x04\x00" + struct.pack(">I", 0))
            stream = 1
            while not stop.is_set() and stream < 2**31 - 2:
                block = encoder.encode([(":method", "POST"), (":scheme", "https"), (":path", "/3/device/00"), (":authority", "localhost"),
                                        ("x-filler", "x" * 8000)])
                frame = struct.pack(">I", len(block))[1:] + b"\x01\x04" + struct.pack(">I", stream) + block  # HEADERS, END_HEADERS only
                s.sendall(frame)
                stream += 2
                encoder = hpack.Encoder()  # a fresh table: every block carries the full headers
        except OSError:
            tally("closed")


def run(name, threads, victim, interval):
    start = os.path.getsize(log_path)
    stop.clear()
    with counts_lock:
        for key in counts:
            counts[key] = 0
    workers = [threading.Thread(target=target, args=args, daemon=True) for target, args in threads]
    for w in workers:
        w.start()
    time.sleep(2)  # the flood builds up
    tries = successes = pushes = answered = 0
    end = time.time() + seconds
    while time.time() < end:
        began = time.time()
        if victim == "provider":
            connected, ok = provider_connection(5)
            tries += 1
            successes += connected
            pushes += 5
            answered += ok
        elif victim == "device":
            tries += 1
            successes += device_handshake()
        time.sleep(max(0, interval - (time.time() - began)))
    stop.set()
    for w in workers:
        w.join(timeout=10)
    grown = os.path.getsize(log_path) - start
    print(f"{name}: attackers opened {counts['opened']} connections, were refused {counts['refused']} times, saw {counts['closed']} closed", flush=True)
    if victim == "provider":
        print(f"{name}: provider connections {successes}/{tries} ({100 * successes / max(1, tries):.1f}%), "
              f"pushes answered 200 {answered}/{pushes} ({100 * answered / max(1, pushes):.1f}%); log +{grown} bytes", flush=True)
    elif victim == "device":
        print(f"{name}: device handshakes {successes}/{tries} ({100 * successes / max(1, tries):.1f}%); log +{grown} bytes", flush=True)
    else:
        print(f"{name}: log +{grown} bytes in {seconds:.0f} s", flush=True)
    time.sleep(12)  # connections closed, the sweep and the log intervals pass before the next phase


try:
    if "http2" in phases:
        run("http2", [(attacker, (a, ports["http2"], 500, "tls")) for a in ("127.0.0.2", "127.0.0.3")], "provider", 1.0)
    if "device" in phases:
        run("device", [(attacker, (a, ports["device"], 250, mode)) for a in ("127.0.0.2", "127.0.0.3") for mode in ("stall", "tls")], "device", 0.2)
    if "log" in phases:
        run("log", [(log_attacker, (a,)) for a in ("127.0.0.2", "127.0.0.3")], None, 1)
finally:
    device.terminate()
    server.terminate()
    server.wait(timeout=30)
    print(f"server log: {log_path}")
