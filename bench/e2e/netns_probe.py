"""What an emulated-cluster run cost besides wall time, read from outside the processes while
it runs (ddp_bench.py --profile): CPU seconds of every process in each namespace, the tbf
queues' drops and overlimits, and TCP retransmissions per namespace. These are meaningful on a
loaded host, where wall-clock figures are not: CPU seconds count only the process's own time,
and drops and retransmissions say whether the links were driven into loss.

Sampled every `interval` seconds by a thread; each counter keeps its last reading (processes
and namespaces vanish when the run ends, so the last sample before that is what is reported).
HostBusy (gpu_regime.py) samples the host's busy CPU share the same way, namespaces or not.
"""

import json
import os
import statistics
import subprocess
import threading

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _run(argv):
    res = subprocess.run(argv, capture_output=True, text=True)
    return res.stdout if res.returncode == 0 else ""


def _cpu_seconds(pid):
    """(command name, user + system CPU seconds of all its threads) or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return comm, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _tbf(ns, dev):
    """Counters of the root tbf on dev inside ns: bytes, drops, overlimits, requeues."""
    out = _run(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev])
    try:
        for q in json.loads(out or "[]"):
            if q.get("kind") == "tbf":
                return {k: q.get(k, 0) for k in ("bytes", "drops", "overlimits", "requeues")}
    except ValueError:
        pass
    return None


def _retransmissions(ns):
    out = _run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"])
    rows = [line.split() for line in out.splitlines() if line.startswith("Tcp:")]
    if len(rows) >= 2 and "RetransSegs" in rows[0]:
        i = rows[0].index("RetransSegs")
        return {"retrans_segs": int(rows[1][i]),
                "out_segs": int(rows[1][rows[0].index("OutSegs")])}
    return None


class Sampler:
    """A thread calling self._sample() every `interval` seconds while the with-block runs."""

    def __init__(self, interval):
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        raise NotImplementedError

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


class NetnsProbe(Sampler):
    """with NetnsProbe("bce-", workers=4) as probe: ...; probe.summary()"""

    def __init__(self, prefix, workers, interval=1.0):
        super().__init__(interval)
        self.prefix, self.workers = prefix, workers
        self.cpu = {}        # (namespace, pid) -> (comm, seconds)
        self.queues = {}     # "w0 up" / "w0 down" -> tbf counters
        self.tcp = {}        # namespace -> retransmission counters

    def _sample(self):
        bridge = self.prefix + "br"
        for i in range(self.workers):
            ns = f"{self.prefix}w{i}"
            for pid in _run(["ip", "netns", "pids", ns]).split():
                got = _cpu_seconds(pid)
                if got is not None:
                    self.cpu[(ns, pid)] = got
            up, down = _tbf(ns, "eth0"), _tbf(bridge, f"w{i}")
            if up is not None:
                self.queues[f"w{i} up"] = up
            if down is not None:
                self.queues[f"w{i} down"] = down
            tcp = _retransmissions(ns)
            if tcp is not None:
                self.tcp[ns] = tcp

    def summary(self, steps):
        """Per training step, summed over machines: CPU seconds by process kind, tbf drops
        and overlimits, TCP segments retransmitted and sent."""
        steps = max(1, steps)
        by_kind = {}
        for (_, _), (comm, seconds) in self.cpu.items():
            kind = "server" if comm.startswith("bytecomp-serv") else (
                "worker" if comm.startswith(("python", "pt_", "torch")) else comm)
            by_kind[kind] = by_kind.get(kind, 0.0) + seconds
        total = lambda key: sum(q[key] for q in self.queues.values())  # noqa: E731
        return {
            "cpu_s_per_step": {k: v / steps for k, v in sorted(by_kind.items())},
            "tbf_drops_per_step": total("drops") / steps if self.queues else None,
            "tbf_overlimits_per_step": total("overlimits") / steps if self.queues else None,
            "tcp_retrans_per_step": (sum(t["retrans_segs"] for t in self.tcp.values()) / steps
                                     if self.tcp else None),
            "tcp_out_segs_per_step": (sum(t["out_segs"] for t in self.tcp.values()) / steps
                                      if self.tcp else None),
        }


class HostBusy(Sampler):
    """The host's CPU busy fraction (all cores), sampled every second while a run goes: the
    median of the samples (steady state; start-up's imports are brief) and the peak."""

    def __init__(self, interval=1.0):
        super().__init__(interval)
        self.samples = []
        self._last = None

    @staticmethod
    def _read():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    def _sample(self):
        now = self._read()
        if self._last is not None and now[1] > self._last[1]:
            self.samples.append((now[0] - self._last[0]) / (now[1] - self._last[1]))
        self._last = now

    def __enter__(self):
        self._last = self._read()
        return super().__enter__()

    def summary(self):
        """(median, peak) busy fraction, or (None, None) without a sample."""
        if not self.samples:
            return None, None
        return statistics.median(self.samples), max(self.samples)
