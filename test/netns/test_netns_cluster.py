#!/usr/bin/env python3
"""Tests of deploy/netns_cluster.sh: namespaces, tbf shaping (measured TCP throughput), the job
runner (bytecomp-run --netns with stand-in daemons) and teardown, also after a failed 'up'.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Where namespaces cannot be made it prints the reason
and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), never as a pass.
Every cluster uses a prefix unique to this run, and its state file lives in a temporary folder,
so nothing outside the namespaces made here is touched.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "deploy", "netns_cluster.sh")
PROBE = os.path.join(HERE, "tcp_probe.py")
STANDINS = os.path.join(REPO, "test", "launcher", "standins")
SKIP = 77
PREFIX = "bct%d-" % os.getpid()
RATE_BITS = 100_000_000
PROBE_BYTES = 6_000_000  # about 0.5 s at 100 Mbit/s


def our_namespaces():
    out = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True).stdout
    return sorted(line.split()[0] for line in out.splitlines()
                  if line.split() and line.split()[0].startswith(PREFIX))


def skip_reason():
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs CAP_NET_ADMIN and CAP_SYS_ADMIN"
    for tool in ("ip", "tc", "bash"):
        if shutil.which(tool) is None:
            return "%s not found (package iproute2)" % tool
    probe = PREFIX + "probe"
    made = subprocess.run(["ip", "netns", "add", probe], stderr=subprocess.PIPE, text=True)
    if made.returncode != 0:
        return "cannot create a network namespace: %s" % made.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe])
    return None


class NetnsClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.state_dir = tempfile.mkdtemp(prefix="bc-netns-state-")
        cls.env = dict(os.environ, BYTECOMP_NETNS_STATE_DIR=cls.state_dir,
                       BYTECOMP_NETNS_PREFIX=PREFIX)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.state_dir, ignore_errors=True)

    def tearDown(self):
        # Whatever happened: the script's own teardown, then any namespace of ours left over.
        self.script("down", check=False)
        leftovers = our_namespaces()
        for ns in leftovers:
            subprocess.run(["ip", "netns", "del", ns])
        self.assertEqual(leftovers, [], "namespaces left behind")

    def script(self, *args, check=True, timeout=60):
        proc = subprocess.run(["bash", SCRIPT] + list(args), env=self.env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check:
            self.assertEqual(proc.returncode, 0,
                             "netns_cluster.sh %s failed:\n%s%s" % (args, proc.stdout,
                                                                    proc.stderr))
        return proc

    def throughput(self, sender, receiver, receiver_ip):
        recv = subprocess.Popen(
            ["bash", SCRIPT, "exec", receiver, "--", sys.executable, PROBE, "recv", "--bind",
             receiver_ip, "--port", "5201", "--bytes", str(PROBE_BYTES), "--timeout", "20"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            send = self.script("exec", sender, "--", sys.executable, PROBE, "send", "--to",
                               receiver_ip, "--port", "5201", "--bytes", str(PROBE_BYTES),
                               "--timeout", "20", timeout=30)
            out, err = recv.communicate(timeout=30)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        self.assertEqual(recv.returncode, 0, err)
        self.assertEqual(send.returncode, 0, send.stderr)
        result = json.loads(out.splitlines()[-1])
        self.assertEqual(result["bytes"], PROBE_BYTES)
        return result["bits_per_s"]

    def test_two_nodes_at_100mbit(self):
        self.script("up", "--workers", "2", "--servers", "0", "--rate", "100mbit")
        listing = self.script("list").stdout.split("\n")
        self.assertIn("%sw0 10.213.2.1" % PREFIX, listing)
        self.assertIn("%sw1 10.213.2.2" % PREFIX, listing)
        self.assertIn("%sbr bridge" % PREFIX, listing)
        again = self.script("up", "--workers", "1", "--servers", "0", "--rate", "1gbit",
                            check=False)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("a cluster with prefix '%s' is up already" % PREFIX, again.stderr)
        self.assertEqual(our_namespaces(),
                         sorted(PREFIX + n for n in ("br", "sched", "w0", "w1")))
        # Both ends of each link carry the tbf: the node's eth0 and its bridge port.
        for ns, dev in ((PREFIX + "w0", "eth0"), (PREFIX + "w1", "eth0"),
                        (PREFIX + "br", "w0"), (PREFIX + "br", "w1")):
            qdisc = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev],
                                   stdout=subprocess.PIPE, text=True).stdout
            self.assertIn("tbf", qdisc, "%s %s" % (ns, dev))
            self.assertIn("rate 100Mbit", qdisc, "%s %s" % (ns, dev))
        # The addresses exist in the namespaces only.
        root_addrs = subprocess.run(["ip", "-o", "addr"], stdout=subprocess.PIPE,
                                    text=True).stdout
        self.assertNotIn("10.213.2.1/", root_addrs)
        for sender, receiver, ip in (("w0", "w1", "10.213.2.2"), ("w1", "w0", "10.213.2.1")):
            bits = self.throughput(sender, receiver, ip)
            ratio = bits / RATE_BITS
            print("%s -> %s: %.1f Mbit/s (%.0f%% of the 100 Mbit/s limit)"
                  % (sender, receiver, bits / 1e6, 100 * ratio), file=sys.stderr)
            self.assertGreaterEqual(ratio, 0.70, "%s -> %s too slow" % (sender, receiver))
            self.assertLessEqual(ratio, 1.10, "%s -> %s not limited" % (sender, receiver))
        self.script("down")
        self.assertEqual(our_namespaces(), [])
        self.assertEqual(os.listdir(self.state_dir), [])

    def test_failed_up_removes_what_it_made(self):
        # tc rejects the latency only after the bridge and the first namespace exist.
        proc = self.script("up", "--workers", "2", "--servers", "1", "--rate", "100mbit",
                           "--latency", "not-a-time", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("tc tbf on", proc.stderr)
        self.assertIn("up failed; removing what it made", proc.stderr)
        self.assertEqual(our_namespaces(), [])
        self.assertEqual(os.listdir(self.state_dir), [])

    def test_bad_arguments_make_nothing(self):
        for args, message in ((["--workers", "2", "--servers", "0", "--rate", "fast"],
                               "bad --rate 'fast'"),
                              (["--workers", "0", "--servers", "0", "--rate", "1gbit"],
                               "--workers must be 1..254"),
                              (["--workers", "1", "--servers", "0"], "--rate is required")):
            proc = self.script("up", *args, check=False)
            self.assertNotEqual(proc.returncode, 0, args)
            self.assertIn(message, proc.stderr, args)
            self.assertEqual(our_namespaces(), [])
        proc = self.script("exec", "w0", "--", "true", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("no namespace %sw0" % PREFIX, proc.stderr)

    def test_run_places_each_process_in_its_namespace(self):
        # bytecomp-run --netns through 'run', with the stand-in daemons of the launcher tests.
        piddir = tempfile.mkdtemp(prefix="bc-netns-pids-")
        self.env["BC_STANDIN_PIDDIR"] = piddir
        try:
            proc = self.script("run", "--workers", "2", "--servers", "1", "--rate", "1gbit",
                               "--bin-dir", STANDINS, "--timeout", "30", "--",
                               sys.executable, os.path.join(STANDINS, "fake_worker.py"),
                               check=False, timeout=60)
        finally:
            del self.env["BC_STANDIN_PIDDIR"]
            shutil.rmtree(piddir, ignore_errors=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("[worker 0] worker 0 done from 10.213.2.1", proc.stdout)
        self.assertIn("[worker 1] worker 1 done from 10.213.2.2", proc.stdout)
        self.assertIn("[server 0] server 0: scheduler gone", proc.stdout)
        for line in proc.stdout.splitlines():
            if line.startswith("[worker 1] {"):
                env = json.loads(line[len("[worker 1] "):])["env"]
                self.assertTrue(env["BYTECOMP_SCHEDULER"].startswith("10.213.0.1:"), env)
                self.assertEqual(env["BYTECOMP_LOCAL_SIZE"], "1")
        self.assertIn("removed cluster '%s'" % PREFIX, proc.stdout)
        self.assertEqual(our_namespaces(), [])

    def test_sigterm_to_run_stops_the_job_and_removes_the_cluster(self):
        piddir = tempfile.mkdtemp(prefix="bc-netns-pids-")
        env = dict(self.env, BC_STANDIN_PIDDIR=piddir)
        proc = subprocess.Popen(
            ["bash", SCRIPT, "run", "--workers", "2", "--servers", "1", "--rate", "1gbit",
             "--bin-dir", STANDINS, "--timeout", "60", "--", sys.executable,
             os.path.join(STANDINS, "fake_worker.py"), "--sleep", "60"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            expected = {"scheduler.pid", "server0.pid", "worker0.pid", "worker1.pid"}
            deadline = time.monotonic() + 20
            while not expected <= set(os.listdir(piddir)) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertLessEqual(expected, set(os.listdir(piddir)), "the job did not start")
            pids = []
            for name in expected:
                with open(os.path.join(piddir, name)) as f:
                    pids.append(int(f.read()))
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            shutil.rmtree(piddir, ignore_errors=True)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, out + err)
        self.assertIn("[worker 1] worker 1 got SIGTERM", out)
        self.assertIn("removed cluster '%s'" % PREFIX, out)
        self.assertEqual(our_namespaces(), [])
        for pid in pids:
            self.assertFalse(os.path.exists("/proc/%d" % pid), "pid %d survived" % pid)

    def test_down_stops_processes_left_in_the_namespaces(self):
        self.script("up", "--workers", "1", "--servers", "0", "--rate", "1gbit")
        sleeper = subprocess.Popen(["bash", SCRIPT, "exec", "w0", "--", "sleep", "60"],
                                   env=self.env)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pids = subprocess.run(["ip", "netns", "pids", PREFIX + "w0"],
                                      stdout=subprocess.PIPE, text=True).stdout.split()
                if pids:
                    break
                time.sleep(0.05)
            self.assertEqual(pids, [str(sleeper.pid)])  # exec replaces the script and ip
            self.script("down")
            self.assertEqual(sleeper.wait(timeout=10), -signal.SIGTERM)
        finally:
            if sleeper.poll() is None:
                sleeper.kill()
                sleeper.wait()
        self.assertEqual(our_namespaces(), [])


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print("SKIP: %s" % reason)
        sys.exit(SKIP)
    unittest.main()
