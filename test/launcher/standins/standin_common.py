"""Shared bits of the stand-in daemons and worker used by the bytecomp-run tests.

The stand-ins behave like the real processes as far as the launcher can see: they print lines,
exit by themselves when the job is over, exit with codes, die by signals or ignore SIGTERM.
Behaviour is chosen through environment variables (the launcher passes its environment on):
  BC_STANDIN_PIDDIR        every stand-in writes <role><rank>.pid there (tests check they are gone)
  BC_STANDIN_SCHEDULER     "" | "linger" | "ignore-term" | "exit:CODE:DELAY"
  BC_STANDIN_SERVER        "" | "linger[:RANK]" | "ignore-term[:RANK]" | "exit:RANK:CODE:DELAY"
  BC_STANDIN_KEYGEN        "" | "fail" (bytecomp-keygen exits 1)
"""
import json
import os
import signal


def write_pid(name):
    piddir = os.environ.get("BC_STANDIN_PIDDIR")
    if piddir:
        with open(os.path.join(piddir, name + ".pid"), "w") as f:
            f.write(str(os.getpid()))


def say(role, **fields):
    fields["role"] = role
    fields["pid"] = os.getpid()
    print(json.dumps(fields, sort_keys=True), flush=True)


def on_sigterm_report(role):
    def handler(signum, frame):
        print("%s got SIGTERM" % role, flush=True)
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def report_sighup(role):
    def handler(signum, frame):
        print("%s got SIGHUP" % role, flush=True)
    signal.signal(signal.SIGHUP, handler)


def ignore_sigterm(role):
    def handler(signum, frame):
        print("%s ignores SIGTERM" % role, flush=True)
    signal.signal(signal.SIGTERM, handler)


def behaviour(var, rank=None):
    """Returns the behaviour word for this process (rank-filtered for servers)."""
    spec = os.environ.get(var, "")
    for item in filter(None, spec.split(",")):
        parts = item.split(":")
        word = parts[0]
        if word == "exit":
            if rank is None:
                return ("exit", int(parts[1]), float(parts[2]))
            if int(parts[1]) == rank:
                return ("exit", int(parts[2]), float(parts[3]))
        elif rank is None or len(parts) == 1 or int(parts[1]) == rank:
            return (word,)
    return ("",)


