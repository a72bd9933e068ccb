#!/usr/bin/env python3
"""Link probes under an emulated 100 Mbit/s link (deploy/netns_cluster.sh, tc tbf both ways):
the bandwidth a worker measures to its server, up and down, is within 30% of the limit.

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
ROW = re.compile(r"^\[scheduler\]\s+0\s+0\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*(.*)$")


class NetnsLinkProbeTest(unittest.TestCase):
    def test_measured_bandwidth_matches_a_100mbit_link(self):
        state = tempfile.mkdtemp(prefix="bc-netns-state-")
        env = dict(os.environ, BYTECOMP_NETNS_STATE_DIR=state, BYTECOMP_NETNS_PREFIX=PREFIX)
        bench = os.path.join(BIN_DIR, "bytecomp-bench")
        try:
            proc = subprocess.run(
                ["bash", netns.SCRIPT, "run", "--workers", "1", "--servers", "1", "--rate",
                 "100mbit", "--bin-dir", BIN_DIR, "--timeout", "25", "--",
                 bench, "--preset=flat:4MB", "--rounds=1", "--warmup=0"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                timeout=40)
        finally:
            subprocess.run(["bash", netns.SCRIPT, "down"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        out = proc.stdout
        self.assertEqual(proc.returncode, 0, out)
        rows = [ROW.match(line) for line in out.splitlines()]
        rows = [m for m in rows if m]
        self.assertEqual(len(rows), 1, out)  # worker 0 to server 0 (the median row is apart)
        latency, up, down, note = (float(rows[0].group(1)), float(rows[0].group(2)),
                                   float(rows[0].group(3)), rows[0].group(4))
        print("100 Mbit/s tbf: latency %.0f us, up %.1f Mbit/s, down %.1f Mbit/s"
              % (latency, up * 1000, down * 1000), file=sys.stderr)
        self.assertEqual(note, "", out)
        self.assertGreater(latency, 0)
        for name, gbps in (("up", up), ("down", down)):
            self.assertGreaterEqual(gbps, 0.07, "%s %.4f Gbit/s\n%s" % (name, gbps, out))
            self.assertLessEqual(gbps, 0.13, "%s %.4f Gbit/s\n%s" % (name, gbps, out))


if __name__ == "__main__":
    reason = netns.skip_reason()
    if reason is None and not os.path.exists(os.path.join(BIN_DIR, "bytecomp-bench")):
        reason = "BYTECOMP_BIN_DIR='%s' has no bytecomp-bench (build first)" % BIN_DIR
    if reason:
        print("SKIP: %s" % reason)
        sys.exit(netns.SKIP)
    unittest.main()
