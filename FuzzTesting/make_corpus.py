#!/usr/bin/env python3
"""Writes the seed corpora under Corpus/<Target>/: a few small valid and
edge-case inputs per fuzz target. Run from anywhere; it replaces the files
it writes and leaves others alone. The files are committed; run.sh copies
them to a temporary directory before fuzzing."""

import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
TOKEN = bytes(range(32))
TOKEN_HEX = TOKEN.hex()


def write(target, name, data):
    folder = os.path.join(here, "Corpus", target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# Binary provider: |0|len|token|len|payload|, |1|id|expiry|len|token|len|payload|,
# |2|frame length|items| with items |id|len:u16|value|.
def simple(token, payload):
    return b"\x00" + struct.pack(">H", len(token)) + token + struct.pack(">H", len(payload)) + payload


def enhanced(identifier, expiry, token, payload):
    return b"\x01" + struct.pack(">IIH", identifier, expiry, len(token)) + token + struct.pack(">H", len(payload)) + payload


def item(item_id, value):
    return struct.pack(">BH", item_id, len(value)) + value


def frame(command, items):
    body = b"".join(items)
    return struct.pack(">BI", command, len(body)) + body


PAYLOAD = b'{"aps":{"alert":"hi"}}'
SILENT = b'{"aps":{"content-available":1}}'

bp = "FuzzBinaryProvider"
write(bp, "command0", simple(TOKEN, PAYLOAD))
write(bp, "command1", enhanced(7, 1700000000, TOKEN, PAYLOAD))
write(bp, "command2-all-items", frame(2, [item(1, TOKEN), item(2, PAYLOAD), item(3, struct.pack(">I", 9)),
                                          item(4, struct.pack(">I", 0)), item(5, b"\x0a")]))
write(bp, "command2-token-payload", frame(2, [item(2, SILENT), item(1, TOKEN)]))
write(bp, "mixed-stream", frame(2, [item(1, TOKEN), item(2, PAYLOAD), item(5, b"\x05")])
      + enhanced(1, 0, TOKEN, SILENT) + simple(TOKEN, PAYLOAD))
write(bp, "command2-bad-priority-id-after", frame(2, [item(1, TOKEN), item(5, b"\x07"), item(3, struct.pack(">I", 42))]))
write(bp, "command2-item-twice", frame(2, [item(1, TOKEN), item(1, TOKEN), item(2, PAYLOAD)]))
write(bp, "command2-overrun", b"\x02\x00\x00\x00\x08" + b"\x01\x00\x20" + TOKEN[:5])
write(bp, "command2-too-long", b"\x02\x00\x01\x00\x00")
write(bp, "command1-token-length-0", b"\x01" + struct.pack(">IIH", 5, 0, 0) + struct.pack(">H", 2) + b"{}")
write(bp, "command0-payload-too-large", b"\x00\x00\x20" + TOKEN + b"\x01\x01")
write(bp, "unknown-command", b"\x09" + TOKEN)
write(bp, "truncated", enhanced(3, 3, TOKEN, PAYLOAD)[:-4])

# Feedback: |timestamp:u32|token length:u16|token|.
def tuple_(timestamp, token):
    return struct.pack(">IH", timestamp, len(token)) + token


fb = "FuzzFeedback"
write(fb, "two-tuples", tuple_(1700000000, TOKEN) + tuple_(1700000001, bytes(32)))
write(fb, "empty-token", tuple_(0, b""))
write(fb, "longest-token", tuple_(1, bytes(255)))
write(fb, "token-too-long", struct.pack(">IH", 1, 256) + bytes(8))
write(fb, "truncated", tuple_(5, TOKEN)[:20])

# Device protocol: |command|length:u32|items|.
dm = "FuzzDeviceMessage"
UUID = bytes.fromhex("123e4567e89b12d3a456426614174000")
DELIVERY = bytes.fromhex("9b2f0c4e5d6a47b88c1d2e3f40516273")
u8 = lambda v: struct.pack(">B", v)
u16 = lambda v: struct.pack(">H", v)
u32 = lambda v: struct.pack(">I", v)
u64 = lambda v: struct.pack(">Q", v)
write(dm, "connect", frame(0x07, [item(1, u8(1)), item(2, TOKEN), item(2, bytes(32)), item(3, u16(300)), item(4, u32(2))]))
write(dm, "connect-ack", frame(0x08, [item(1, u8(0)), item(2, u64(1700000000000)), item(3, u16(300)), item(4, u32(16384)),
                                     item(5, bytes(8)), item(6, u8(8))]))
write(dm, "filter", frame(0x09, [item(1, bytes(20)), item(1, bytes(range(20)))]))
write(dm, "notification", frame(0x0A, [item(1, TOKEN), item(2, PAYLOAD), item(3, UUID), item(4, u32(1700000000)),
                                      item(5, u8(10)), item(6, b"com.example.demo"), item(7, b"c1"), item(8, b"alert"),
                                      item(9, DELIVERY)]))
write(dm, "notification-unreadable", frame(0x0A, [item(1, TOKEN), item(2, PAYLOAD), item(3, UUID), item(5, u8(7)),
                                                 item(6, b"com.example.demo"), item(9, DELIVERY)]))
write(dm, "ack", frame(0x0B, [item(1, u8(1)), item(3, DELIVERY)]))
write(dm, "keepalives", frame(0x0C, []) + frame(0x0D, []) + frame(0x0E, []))
write(dm, "app-token-request", frame(0x11, [item(1, b"com.example.demo"), item(2, u32(7))]))
write(dm, "app-token-response", frame(0x12, [item(1, b"com.example.demo"), item(2, u32(7)), item(3, TOKEN), item(4, u8(0))]))
write(dm, "unregister", frame(0x13, [item(1, b"com.example.demo"), item(2, u32(8))])
      + frame(0x14, [item(2, u32(8)), item(4, u8(0))]))
write(dm, "error", frame(0x1F, [item(1, u8(5)), item(2, "priorit\u00e9 7".encode())]))
write(dm, "unknown-items", frame(0x0B, [item(3, UUID), item(0x40, b"x"), item(0xFF, b"")]))
write(dm, "item-twice", frame(0x11, [item(1, b"a.b"), item(1, b"a.c"), item(2, u32(1))]))
write(dm, "item-overrun", b"\x0c\x00\x00\x00\x04\x01\x00\x09\x00")
write(dm, "frame-too-large", b"\x0a\x00\x01\x00\x00")
write(dm, "unknown-command", frame(0x55, [item(1, b"?")]))
# The writing direction reads its first byte as the kind of message to build
# (10: Error, then its code and text); this one is longer than the item allows.
# 11: Notification: token length and token, payload length (u16) and payload,
# id, delivery id, expiration flag and value, priority, topic, collapse id
# flag and text, push type flag and text (texts: length, then bytes).
def text(value):
    return bytes([len(value)]) + value


write(dm, "write-notification", bytes([11]) + text(TOKEN) + u16(len(PAYLOAD)) + PAYLOAD + UUID + DELIVERY
      + b"\x01" + u32(1700000000) + b"\x0a" + text(b"com.example.demo") + b"\x01" + text(b"c1") + b"\x01" + text(b"alert"))
write(dm, "write-notification-empty-collapse-id", bytes([11]) + text(TOKEN) + u16(2) + b"{}" + UUID + DELIVERY
      + b"\x00" + u32(0) + b"\x05" + text(b"a.b") + b"\x01" + text(b"") + b"\x00" + text(b""))
write(dm, "write-ack", bytes([12]) + DELIVERY + b"\x01")
write(dm, "write-error-long", bytes([10, 5]) + b"ab" + "\u00e9t\u00e9 ".encode() * 180)

# HTTP/2 requests: header lines `name: value`, an empty line, the body.
def request(headers, body):
    return "".join(f"{name}: {value}\n" for name, value in headers) + "\n" + body


hr = "FuzzHTTP2Request"
base = [(":method", "POST"), (":scheme", "https"), (":path", f"/3/device/{TOKEN_HEX}"), ("host", "localhost")]
write(hr, "full", request(base + [("apns-topic", "com.example.demo"), ("apns-id", "123e4567-e89b-12d3-a456-426614174000"),
                                  ("apns-expiration", "0"), ("apns-priority", "10"), ("apns-collapse-id", "c1"),
                                  ("apns-push-type", "alert"), ("authorization", "bearer e30.e30.AA")], PAYLOAD.decode()))
write(hr, "silent-voip", request(base + [("apns-topic", "com.example.demo.voip"), ("apns-priority", "5"),
                                         ("apns-expiration", "4294967295")], SILENT.decode()))
write(hr, "silent-priority-10", request(base + [("apns-topic", "com.example.demo"), ("apns-priority", "10")], SILENT.decode()))
write(hr, "upper-case", request([(":method", "POST"), (":path", f"/3/device/{TOKEN_HEX.upper()}?x=1"),
                                 ("apns-id", "123E4567-E89B-12D3-A456-426614174000")], PAYLOAD.decode()))
write(hr, "missing-token", request([(":method", "POST"), (":path", "/3/device/")], ""))
write(hr, "get", request([(":method", "GET"), (":path", f"/3/device/{TOKEN_HEX}")], ""))
write(hr, "duplicate-topic", request(base + [("apns-topic", "a.b"), ("apns-topic", "a.c")], "{}"))
write(hr, "push-type-and-empty-collapse-id", request(base + [("apns-push-type", "liveactivity"), ("apns-collapse-id", "")],
                                                     PAYLOAD.decode()))
write(hr, "unknown-push-type", request(base + [("apns-push-type", "Alert")], PAYLOAD.decode()))
write(hr, "bad-values", request(base + [("apns-expiration", "4294967296"), ("apns-priority", "7"),
                                        ("apns-collapse-id", "x" * 65)], "{}\x00"))

# Provider tokens: parts for the harness to sign, or a compact token.
pt = "FuzzProviderToken"
header = '{"alg":"ES256","kid":"ABC123DEFG"}'
write(pt, "signed", header + '\n{"iss":"DEF123GHIJ","iat":1700000000}')
write(pt, "signed-der", header + '\n{"iss":"DEF123GHIJ","iat":1700000000.5}\nder')
write(pt, "iat-string", header + '\n{"iss":"DEF123GHIJ","iat":"1700000000"}')
write(pt, "bad-signature", header + '\n{"iss":"DEF123GHIJ","iat":0}\n' + "\x30\x06\x02\x01\x01\x02\x01\x01")
write(pt, "other-algorithm", '{"alg":"HS256","kid":"ABC123DEFG","typ":"JWT"}\n{"iss":"T","iat":1e3}')
write(pt, "compact", "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ"
                     ".eyJpc3MiOiJERUYxMjNHSElKIiwiaWF0IjoxNzAwMDAwMDAwfQ.MEUCIQ")
write(pt, "compact-padded", "eyJhbGciOiJFUzI1NiIsImtpZCI6IkEifQ==.eyJpc3MiOiJCIiwiaWF0IjoxfQ.")
write(pt, "two-parts", "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJCIn0")

# Payloads: the project's test samples and a few more.
pl = "FuzzPayload"
samples = [
    '{"aps":{"alert":"hi"}}',
    '{"aps":{"content-available":1}}',
    '{"aps":{"content-available":1.0,"sound":"a"}}',
    '{"aps":{"content-available":"1"}}',
    '{"aps":{"alert":{"title":"T","body":"B","loc-args":["a","b"]},"badge":1,"sound":"default"},"acme":[1,2.5e3,-0.1,true,false,null]}',
    ' { "aps" : { "content-available" : 1 } , "x" : { "y" : [ { } , [ ] ] } } ',
    '{"aps":{"alert":"\\u00e9\\ud83d\\ude00 \\"quoted\\" \\\\ \\/ \\b\\f\\n\\r\\t"}}',
    '{"aps":{"alert":"\u00e9 \U0001F600 \u65e5\u672c"}}',
    '{"aps":{"content-available":1},"aps":{"alert":"x"}}',
    '{"a\\u0070s":{"content-\\u0061vailable":1,"content-available":1,"b\\/adge":2}}',
    '{"aps":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"a":11,"\\u006a":13,"content-available":1}}',
    '{"a":-0,"b":0.0e+1,"c":1E-2,"d":10e-1}',
    '{"aps":{"content-available":true}}',
    '{"a":' + "[" * 40 + "]" * 40 + "}",
]
for index, sample in enumerate(samples):
    write(pl, f"sample-{index:02d}", sample)
# Around the nesting limit (512 containers, the top-level object included).
write(pl, "nesting-257", '{"a":' + "[" * 257 + "]" * 257 + "}")
write(pl, "nesting-256-in-aps", '{"aps":{"alert":' + "[" * 256 + "]" * 256 + "}}")
write(pl, "nesting-511", '{"a":' + "[" * 511 + "]" * 511 + "}")
write(pl, "nesting-512", '{"a":' + "[" * 512 + "]" * 512 + "}")
write(pl, "trailing-comma", '{"aps":{"alert":"x",}}')
write(pl, "bad-utf8", b'{"aps":{"alert":"\xed\xa0\x80"}}')
write(pl, "nul-terminated", b'{"aps":{}}\x00')


# Topics extension values (DER): Apple's layout and the plain one.
def der(tag, content):
    n = len(content)
    if n < 0x80:
        length = bytes([n])
    elif n < 0x100:
        length = bytes([0x81, n])
    else:
        length = bytes([0x82, n >> 8, n & 0xFF])
    return bytes([tag]) + length + content


utf8 = lambda text: der(0x0C, text.encode())
seq = lambda *parts: der(0x30, b"".join(parts))
te = "FuzzTopicsExtension"
write(te, "apple-layout", seq(utf8("com.example.demo"), seq(utf8("app")), utf8("com.example.demo.voip"), seq(utf8("voip")),
                              utf8("com.example.demo.complication"), seq(utf8("complication"))))
write(te, "plain-layout", seq(utf8("com.example.demo"), utf8("com.example.demo.voip")))
write(te, "empty", seq())
write(te, "kind-mismatch", seq(utf8("com.example.demo"), seq(utf8("voip"))))
write(te, "kind-first", seq(seq(utf8("app")), utf8("a.b")))
write(te, "not-a-sequence", utf8("com.example.demo"))
write(te, "long-form-length", seq(utf8("x" * 200)))
