"""Drives the unchanged aioapns client (aioapns 4.0 on PyPI, HTTP/2 over h2)
against Courier's HTTP/2 provider API.

Only what a user of Apple's service changes is changed: the host and port
(aioapns keeps them in its connection classes' APNS_SERVER and APNS_PORT,
so that is where they are set) and the trusted CA (its ssl_context).

usage: aioapns_http2.py token HOST PORT CA KEY_P8 KEY_ID TEAM_ID TOPIC TOKEN_HEX ALERT
       aioapns_http2.py cert  HOST PORT CA CERT_AND_KEY_PEM TOPIC TOKEN_HEX ALERT

Prints one line per notification: "result <apns-id> <status> <reason>".
The first notification goes to TOKEN_HEX, the second to a token with every
byte flipped (BadDeviceToken expected).
"""
import asyncio
import ssl
import sys
import uuid

from aioapns import APNs, NotificationRequest
from aioapns.connection import APNsTLSClientProtocol, APNsProductionClientProtocol


async def main(argv):
    mode, host, port, ca = argv[1], argv[2], int(argv[3]), argv[4]
    APNsProductionClientProtocol.APNS_SERVER = host
    APNsTLSClientProtocol.APNS_PORT = port
    context = ssl.create_default_context(cafile=ca)
    if mode == "token":
        key_path, key_id, team_id, topic, token, alert = argv[5:11]
        with open(key_path) as f:
            key = f.read()
        client = APNs(key=key, key_id=key_id, team_id=team_id, topic=topic, use_sandbox=False, ssl_context=context, max_connections=1)
    else:
        cert_and_key, topic, token, alert = argv[5:9]
        client = APNs(client_cert=cert_and_key, topic=topic, use_sandbox=False, ssl_context=context, max_connections=1)
    bad = "".join("%02x" % (b ^ 0xFF) for b in bytes.fromhex(token))
    for device_token in (token, bad):
        request = NotificationRequest(
            device_token=device_token,
            message={"aps": {"alert": alert, "sound": "default"}},
            notification_id=str(uuid.uuid4()),
            time_to_live=3600,
        )
        result = await client.send_notification(request)
        print("result %s %s %s" % (result.notification_id, result.status, result.description), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
