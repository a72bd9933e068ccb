#!/usr/bin/env python3
"""Bounded TCP throughput probe for the emulated-cluster test (stdlib only).

  tcp_probe.py recv --bind IP --port P --bytes N --timeout T   prints one JSON line
  tcp_probe.py send --to IP --port P --bytes N --timeout T

The receiver times from the first byte to the last, so connection set-up does not count; the
whole run is bounded by --timeout on both sides.
"""
import argparse
import json
import socket
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["send", "recv"])
parser.add_argument("--bind", default="0.0.0.0")
parser.add_argument("--to")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--bytes", type=int, required=True)
parser.add_argument("--timeout", type=float, default=20.0)
args = parser.parse_args()
deadline = time.monotonic() + args.timeout
chunk = 64 * 1024

if args.mode == "recv":
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.bind, args.port))
    listener.listen(1)
    listener.settimeout(args.timeout)
    print("listening", flush=True)
    conn, _ = listener.accept()
    received = 0
    first = last = None
    while received < args.bytes:
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        data = conn.recv(1 << 20)
        if not data:
            break
        now = time.monotonic()
        if first is None:
            first = now
            first_bytes = len(data)
        last = now
        received += len(data)
    conn.close()
    if received < args.bytes:
        sys.exit("received only %d of %d bytes" % (received, args.bytes))
    # The first read's bytes arrived before the clock started.
    seconds = last - first
    bits_per_s = (received - first_bytes) * 8 / seconds if seconds > 0 else float("inf")
    print(json.dumps({"bytes": received, "seconds": seconds, "bits_per_s": bits_per_s}),
          flush=True)
else:
    sock = None
    while sock is None:  # the receiver may not listen yet
        try:
            sock = socket.create_connection((args.to, args.port), timeout=1)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    payload = b"\0" * chunk
    sent = 0
    while sent < args.bytes:
        sock.sendall(payload[:min(chunk, args.bytes - sent)])
        sent += min(chunk, args.bytes - sent)
    sock.shutdown(socket.SHUT_WR)
    sock.close()
