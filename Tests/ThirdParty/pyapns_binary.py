"""Drives the unchanged PyAPNs client (apns3, the Python 3 release of
PyAPNs) against Courier's binary provider API and feedback service.

Only what a user of Apple's service changes is changed: the host and port
(the library has no CA setting and does not verify the server).

usage: pyapns_binary.py send HOST PORT CERT KEY TOKEN_HEX ALERT [enhanced]
       pyapns_binary.py oversized HOST PORT CERT KEY TOKEN_HEX SIZE
       pyapns_binary.py feedback HOST PORT CERT KEY
"""
import sys
import time

from apns3 import APNs, Frame, Payload


def send(host, port, cert, key, token, alert, enhanced):
    apns = APNs(use_sandbox=False, cert_file=cert, key_file=key, enhanced=enhanced)
    gateway = apns.gateway_server
    gateway.server, gateway.port = host, int(port)
    errors = []
    if enhanced:
        gateway.register_response_listener(errors.append)
        gateway.send_notification(token, Payload(alert=alert, sound="default", badge=1), identifier=1, expiry=int(time.time()) + 3600)
        # A token of the wrong app (every byte flipped): the error response must reach the library.
        bad = "".join("%02x" % (b ^ 0xFF) for b in bytes.fromhex(token))
        gateway.send_notification(bad, Payload(alert="bad"), identifier=2, expiry=0)
        deadline = time.time() + 20
        while not errors and time.time() < deadline:
            time.sleep(0.05)
        gateway.force_close()
        for error in errors:
            print("error-response", error["status"], error["identifier"])
    else:
        gateway.send_notification(token, Payload(alert=alert, sound="default", badge=1))
        gateway._disconnect()
    print("sent")


def oversized(host, port, cert, key, token, size):
    """A valid notification (identifier 41, which also starts the
    library's error-response reader), then one command-2 frame (the
    library's Frame) whose payload is SIZE bytes (identifier 42): the
    library's own check stops at 2048 bytes when a Payload is made, so the
    large content is set on it afterwards, as a caller may."""
    apns = APNs(use_sandbox=False, cert_file=cert, key_file=key, enhanced=True)
    gateway = apns.gateway_server
    gateway.server, gateway.port = host, int(port)
    errors = []
    gateway.register_response_listener(errors.append)
    large = Payload(alert="large")
    large.custom = {"filler": "x" * (int(size) - len(large.json()) - len(',"filler":""'))}
    assert len(large.json()) == int(size), len(large.json())
    expiry = int(time.time()) + 3600
    gateway.send_notification(token, Payload(alert="before the large one"), identifier=41, expiry=expiry)
    frame = Frame()
    frame.add_item(token, large, 42, expiry, 10)
    gateway.send_notification_multiple(frame)
    deadline = time.time() + 20
    while not errors and time.time() < deadline:
        time.sleep(0.05)
    gateway.force_close()
    for error in errors:
        print("error-response", error["status"], error["identifier"])
    print("sent")


def feedback(host, port, cert, key):
    apns = APNs(use_sandbox=False, cert_file=cert, key_file=key)
    connection = apns.feedback_server
    connection.server, connection.port = host, int(port)
    for token, fail_time in connection.items():
        print("feedback", token.decode() if isinstance(token, bytes) else token, int(fail_time.timestamp()))


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "send":
        send(*sys.argv[2:8], enhanced=len(sys.argv) > 8 and sys.argv[8] == "enhanced")
    elif command == "oversized":
        oversized(*sys.argv[2:9])
    elif command == "feedback":
        feedback(*sys.argv[2:6])
    else:
        sys.exit("unknown command " + command)
