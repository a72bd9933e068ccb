#!/usr/bin/env python3
"""Stand-in training process for the bytecomp-run tests.

Prints its BYTECOMP_* environment as one JSON line, optionally prints many long lines, fails,
kills itself, ignores SIGTERM or starts a grandchild, then tells the stand-in scheduler it is
done (as the real worker engine's shutdown does) and exits 0.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from standin_common import ignore_sigterm, on_sigterm_report, say, write_pid

parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=0.0, help="seconds before finishing")
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--fail-code", type=int, default=3)
parser.add_argument("--kill-rank", type=int, default=-1, help="this rank SIGKILLs itself")
parser.add_argument("--fail-after", type=float, default=0.3)
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--lines", type=int, default=0, help="lines to print on stdout and stderr")
parser.add_argument("--width", type=int, default=100)
parser.add_argument("--grandchild", action="store_true", help="start a long sleep child")
args = parser.parse_args()

rank = int(os.environ["BYTECOMP_RANK"])
if args.ignore_term:
    ignore_sigterm("worker %d" % rank)
else:
    on_sigterm_report("worker %d" % rank)
# Written once the handlers are in place: tests wait for it before sending signals.
write_pid("worker%d" % rank)
key_file = os.environ.get("BYTECOMP_KEY_FILE")
say("worker", env={k: v for k, v in os.environ.items() if k.startswith("BYTECOMP_")},
    key_mode=oct(os.stat(key_file).st_mode & 0o7777) if key_file else None)
if args.grandchild:
    child = subprocess.Popen(["sleep", "60"])
    piddir = os.environ.get("BC_STANDIN_PIDDIR")
    with open(os.path.join(piddir, "grandchild%d.pid" % rank), "w") as f:
        f.write(str(child.pid))

if args.lines:
    # Unbuffered, and written in pieces, so that lines from different workers could mix if the
    # launcher did not keep them whole.
    body = "x" * args.width
    for i in range(args.lines):
        line = "%d:%d:%s\n" % (rank, i, body)
        stream = sys.stdout if i % 2 == 0 else sys.stderr
        half = len(line) // 2
        stream.write(line[:half])
        stream.flush()
        stream.write(line[half:])
        stream.flush()

print("worker %d ready" % rank, flush=True)


def wait_for_whole_job(timeout=10):
    """Fails only once every process of the job is up, so each sees the launcher's SIGTERM."""
    piddir = os.environ.get("BC_STANDIN_PIDDIR")
    expected = 1 + int(os.environ["BYTECOMP_NUM_SERVERS"]) + int(os.environ["BYTECOMP_NUM_WORKERS"])
    deadline = time.monotonic() + timeout
    while piddir and time.monotonic() < deadline:
        names = [n for n in os.listdir(piddir) if n.endswith(".pid") and "grandchild" not in n]
        if len(names) >= expected:
            return
        time.sleep(0.02)


if rank in (args.fail_rank, args.kill_rank):
    wait_for_whole_job()
    time.sleep(args.fail_after)
    if rank == args.kill_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    print("worker %d fails with code %d" % (rank, args.fail_code), file=sys.stderr, flush=True)
    sys.exit(args.fail_code)
time.sleep(args.sleep)
host, port = os.environ["BYTECOMP_SCHEDULER"].rsplit(":", 1)
deadline = time.monotonic() + 10
while True:  # the scheduler may still be starting
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"done %d\n" % rank)
            local_address = conn.getsockname()[0]
        break
    except ConnectionRefusedError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
print("worker %d done from %s" % (rank, local_address), flush=True)
