#!/usr/bin/env python3
"""Link probes under an emulated 100 Mbit/s link (deploy/netns_cluster.sh, tc tbf both ways):
the bandwidth a worker measures to its server, up and down, is within 30% of the limit; also
with three workers on one server, which take the server's bandwidth turn one at a time, and
with a server beside each of three workers (--colocate), where a prober also holds its own
machine's server's turn, so that the replies of its server to other probers do not share its
link.

Needs root and the built binaries (BYTECOMP_BIN_DIR); otherwise it prints the reason and exits
77, which ctest reports as skipped, never as a pass.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
import test_netns_cluster as netns  # noqa: E402  (skip_reason, the script's path)

PREFIX = "bcl%d-" % os.getpid()
BIN_DIR = os.environ.get("BYTECOMP_BIN_DIR", "")
ROW = re.compile(r"^\[scheduler\]\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*(.*)$")


def probe_rows(workers, servers=1, colocate=False):
    """Runs a job of `workers` workers and `servers` servers on 100 Mbit/s links; the
    scheduler's link table as {(worker, server): (latency_us, up_gbps, down_gbps, note)} and
    the job's output. Colocated: 256 KiB transfers, so that the pairs fit the time limit."""
    state = tempfile.mkdtemp(prefix="bc-netns-state-")
    env = dict(os.environ, BYTECOMP_NETNS_STATE_DIR=state, BYTECOMP_NETNS_PREFIX=PREFIX)
    bench = os.path.join(BIN_DIR, "bytecomp-bench")
    extra = []
    if colocate:
        config = os.path.join(state, "cluster.pbtxt")
        with open(config, "w") as f:
            f.write("link_probe_bytes: 262144\n")
        extra = ["--colocate", "--config", config]
    try:
        proc = subprocess.run(
            ["bash", netns.SCRIPT, "run", "--workers", str(workers), "--servers", str(servers),
             "--rate", "100mbit", "--bin-dir", BIN_DIR, "--timeout", "25", *extra, "--",
             bench, "--preset=flat:4MB", "--rounds=1", "--warmup=0"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=40)
    finally:
        subprocess.run(["bash", netns.SCRIPT, "down"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    out = proc.stdout
    rows = {}
    for m in (ROW.match(line) for line in out.splitlines()):
        if m:
            rows[(int(m.group(1)), int(m.group(2)))] = (
                float(m.group(3)), float(m.group(4)), float(m.group(5)), m.group(6))
    return proc.returncode, rows, out


class NetnsLinkProbeTest(unittest.TestCase):
    def check_rows(self, workers, servers=1, colocate=False):
        code, rows, out = probe_rows(workers, servers, colocate)
        self.assertEqual(code, 0, out)
        # Worker w to each server (the median row is apart); colocated, its own server's link
        # is the machine's loopback, not measured against the limit.
        expected = [(w, s) for w in range(workers) for s in range(servers)]
        self.assertEqual(sorted(rows), expected, out)
        for (worker, server), (latency, up, down, note) in sorted(rows.items()):
            if colocate and worker == server:
                continue
            print("%d worker(s), %d server(s)%s, 100 Mbit/s tbf: worker %d to server %d latency "
                  "%.0f us, up %.1f Mbit/s, down %.1f Mbit/s"
                  % (workers, servers, " beside them" if colocate else "", worker, server,
                     latency, up * 1000, down * 1000), file=sys.stderr)
            self.assertEqual(note, "", out)
            self.assertGreater(latency, 0)
            for name, gbps in (("up", up), ("down", down)):
                why = "worker %d server %d %s %.4f Gbit/s\n%s" % (worker, server, name, gbps, out)
                self.assertGreaterEqual(gbps, 0.07, why)
                self.assertLessEqual(gbps, 0.13, why)

    def test_measured_bandwidth_matches_a_100mbit_link(self):
        self.check_rows(1)

    def test_workers_sharing_one_server_each_measure_the_whole_link(self):
        # The server's bandwidth turn lets one worker at a time transfer: without it the three
        # would share the server's 100 Mbit/s and each see about a third to a half of it.
        self.check_rows(3)

    def test_colocated_servers_each_pair_measures_the_whole_link(self):
        # Without the machine's turn, a worker's transfer to another server and its own server's
        # replies to another worker shared the machine's link: 0.04-0.11 of 0.1 Gbit/s (4x4).
        self.check_rows(3, servers=3, colocate=True)


if __name__ == "__main__":
    reason = netns.skip_reason()
    if reason is None and not os.path.exists(os.path.join(BIN_DIR, "bytecomp-bench")):
        reason = "BYTECOMP_BIN_DIR='%s' has no bytecomp-bench (build first)" % BIN_DIR
    if reason:
        print("SKIP: %s" % reason)
        sys.exit(netns.SKIP)
    unittest.main()
