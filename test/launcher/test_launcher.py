#!/usr/bin/env python3
"""Tests of deploy/bytecomp-run with real processes: stand-in daemons (standins/) via --bin-dir
and a stand-in training script. Every test is bounded in time and checks that no process it
started (daemons, workers, grandchildren) survives; its tearDown kills stragglers by pid.

Run: python3 test/launcher/test_launcher.py [-v]   (stdlib unittest; pytest also works)
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAUNCHER = os.path.join(REPO, "deploy", "bytecomp-run")
STANDINS = os.path.join(HERE, "standins")
WORKER = os.path.join(STANDINS, "fake_worker.py")
# Upper bound on any single launcher run in these tests.
RUN_TIMEOUT = 30


def pid_alive(pid):
    """True while pid exists and is not a zombie (an exited, not yet reaped process)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


class LauncherTest(unittest.TestCase):
    def setUp(self):
        self.piddir = tempfile.mkdtemp(prefix="bc-launcher-test-")
        self.env = dict(os.environ)
        self.env["BC_STANDIN_PIDDIR"] = self.piddir
        # The caller's own BYTECOMP_* settings must not leak into the expectations.
        for var in [v for v in self.env if v.startswith("BYTECOMP_")]:
            del self.env[var]
        for var in ("BC_STANDIN_SCHEDULER", "BC_STANDIN_SERVER", "BC_STANDIN_KEYGEN"):
            self.env.pop(var, None)
        self.launcher_proc = None

    def tearDown(self):
        # Whatever happened, nothing may be left: kill stragglers (by the pids they wrote).
        if self.launcher_proc is not None and self.launcher_proc.poll() is None:
            self.launcher_proc.kill()
            self.launcher_proc.wait()
        leftovers = []
        for name, pid in self.started_pids().items():
            if pid_alive(pid):
                leftovers.append(name)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.piddir, ignore_errors=True)
        self.assertEqual(leftovers, [], "processes left behind after the test")

    # --- helpers -------------------------------------------------------------------------
    def started_pids(self):
        pids = {}
        for entry in os.listdir(self.piddir):
            if entry.endswith(".pid"):
                with open(os.path.join(self.piddir, entry)) as f:
                    text = f.read().strip()
                if text:
                    pids[entry[:-4]] = int(text)
        return pids

    def launcher_cmd(self, launcher_args, worker_args=(), interpreter=None):
        prefix = [interpreter or sys.executable, LAUNCHER]
        return prefix + list(launcher_args) + ["--", WORKER] + list(worker_args)

    def run_launcher(self, launcher_args, worker_args=(), interpreter=None):
        start = time.monotonic()
        proc = subprocess.run(
            self.launcher_cmd(launcher_args, worker_args, interpreter), env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
        self.elapsed = time.monotonic() - start
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

    def start_launcher(self, launcher_args, worker_args=()):
        self.launcher_proc = subprocess.Popen(
            self.launcher_cmd(launcher_args, worker_args), env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return self.launcher_proc

    def wait_for_pids(self, names, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.started_pids()
            if all(n in pids for n in names):
                return pids
            time.sleep(0.05)
        self.fail("processes %s did not start within %g s (have %s)"
                  % (names, timeout, sorted(self.started_pids())))

    def assert_all_gone(self, timeout=3.0):
        deadline = time.monotonic() + timeout
        while True:
            alive = {n: p for n, p in self.started_pids().items() if pid_alive(p)}
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(alive, {}, "still running after the launcher exited")

    def json_lines(self, out, label):
        prefix = "[%s] {" % label
        return [json.loads(line[len(prefix) - 1:]) for line in out.splitlines()
                if line.startswith(prefix)]

    def all_names(self, workers, servers):
        return (["scheduler"] + ["server%d" % i for i in range(servers)]
                + ["worker%d" % i for i in range(workers)])

    # --- success -------------------------------------------------------------------------
    def test_all_workers_succeed_exits_zero(self):
        rc, out, err = self.run_launcher(
            ["-np", "3", "--servers", "2", "--bin-dir", STANDINS], ["--sleep", "0.2"])
        self.assertEqual(rc, 0, err)
        for rank in range(3):
            self.assertIn("[worker %d] worker %d done" % (rank, rank), out)
        self.assertIn("[scheduler] scheduler: all 3 workers done", out)
        for rank in range(2):
            self.assertIn("[server %d] server %d: scheduler gone" % (rank, rank), out)
        self.assertIn("[scheduler] scheduler diagnostics on stderr", err)  # stderr prefixed too
        self.assertNotIn("SIGKILL", err)
        self.assertNotIn("still ran", err)  # the daemons shut down by themselves
        self.assertEqual(sorted(self.started_pids()), sorted(self.all_names(3, 2)))
        self.assert_all_gone()

    def test_environment_and_daemon_arguments_per_rank(self):
        config = os.path.join(self.piddir, "cluster.pbtxt")
        with open(config, "w") as f:
            f.write("partition_bytes: 1048576\n")
        rc, out, err = self.run_launcher(
            ["-np", "4", "--servers", "2", "--port", "0", "--bin-dir", STANDINS,
             "--config", config, "--server-args", "--engine_threads 3"], [])
        # --port 0 is not a valid port: usage error before anything starts.
        self.assertEqual(rc, 2)
        self.assertIn("--port must be in 1..65535", err)
        self.assertEqual(self.started_pids(), {})

        rc, out, err = self.run_launcher(
            ["-np", "4", "--servers", "2", "--bin-dir", STANDINS, "--config", config,
             "--server-args", "--engine_threads 3"], [])
        self.assertEqual(rc, 0, err)
        (sched,) = self.json_lines(out, "scheduler")
        argv = sched["argv"]
        port = int(argv[argv.index("--port") + 1])
        key = argv[argv.index("--key_file") + 1]  # the job's fresh cluster key
        self.assertEqual(argv, ["--port", str(port), "--num_workers", "4", "--num_servers", "2",
                                "--config", os.path.abspath(config), "--key_file", key])
        address = "127.0.0.1:%d" % port
        for rank in range(2):
            (server,) = self.json_lines(out, "server %d" % rank)
            self.assertEqual(server["argv"], ["--scheduler", address, "--rank", str(rank),
                                              "--config", os.path.abspath(config),
                                              "--key_file", key, "--engine_threads", "3"])
        for rank in range(4):
            (worker,) = self.json_lines(out, "worker %d" % rank)
            self.assertEqual(worker["env"], {
                "BYTECOMP_SCHEDULER": address, "BYTECOMP_RANK": str(rank),
                "BYTECOMP_NUM_WORKERS": "4", "BYTECOMP_NUM_SERVERS": "2",
                "BYTECOMP_LOCAL_RANK": str(rank), "BYTECOMP_LOCAL_SIZE": "4",
                "BYTECOMP_MACHINE": socket.gethostname(), "BYTECOMP_ROLE": "worker",
                "BYTECOMP_KEY_FILE": key})
            self.assertEqual(worker["key_mode"], "0o600")
        self.assertFalse(os.path.exists(os.path.dirname(key)), "the job's key outlived it")
        self.assert_all_gone()

    # --- the cluster key -----------------------------------------------------------------
    def test_every_job_gets_a_fresh_key_that_goes_with_it(self):
        keys = []
        for _ in range(2):
            rc, out, err = self.run_launcher(["-np", "2", "--bin-dir", STANDINS], [])
            self.assertEqual(rc, 0, err)
            workers = [self.json_lines(out, "worker %d" % r)[0] for r in range(2)]
            key = workers[0]["env"]["BYTECOMP_KEY_FILE"]
            self.assertEqual(workers[1]["env"]["BYTECOMP_KEY_FILE"], key)
            self.assertEqual(workers[0]["key_mode"], "0o600")
            self.assertFalse(os.path.exists(os.path.dirname(key)))
            keys.append(key)
        self.assertNotEqual(keys[0], keys[1])

    def test_key_is_removed_after_an_interrupted_job(self):
        proc = self.start_launcher(["-np", "2", "--bin-dir", STANDINS], ["--sleep", "60"])
        self.wait_for_pids(self.all_names(2, 1))
        with open(os.path.join(self.piddir, "scheduler.pid")) as f:
            scheduler_pid = int(f.read())
        with open("/proc/%d/cmdline" % scheduler_pid, "rb") as f:
            argv = f.read().decode().split("\0")
        key = argv[argv.index("--key_file") + 1]
        self.assertTrue(os.path.isfile(key))
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM)
        self.assertFalse(os.path.exists(os.path.dirname(key)))
        self.assert_all_gone()

    def test_given_key_or_none(self):
        key = os.path.join(self.piddir, "given.key")
        with open(key, "w") as f:
            f.write("stand-in\n")
        os.chmod(key, 0o600)
        rc, out, err = self.run_launcher(["-np", "1", "--bin-dir", STANDINS, "--key-file", key], [])
        self.assertEqual(rc, 0, err)
        (sched,) = self.json_lines(out, "scheduler")
        self.assertEqual(sched["argv"][-2:], ["--key_file", key])
        self.assertEqual(self.json_lines(out, "worker 0")[0]["env"]["BYTECOMP_KEY_FILE"], key)
        self.assertTrue(os.path.isfile(key), "a given key is the user's: it stays")

        rc, out, err = self.run_launcher(["-np", "1", "--bin-dir", STANDINS, "--no-key"], [])
        self.assertEqual(rc, 0, err)
        (sched,) = self.json_lines(out, "scheduler")
        self.assertNotIn("--key_file", sched["argv"])
        self.assertNotIn("BYTECOMP_KEY_FILE", self.json_lines(out, "worker 0")[0]["env"])

        rc, out, err = self.run_launcher(["-np", "1", "--bin-dir", STANDINS, "--key-file",
                                          "/nonexistent.key"], [])
        self.assertEqual(rc, 2)
        self.assertIn("--key-file /nonexistent.key: no such file", err)

    def test_keygen_failure_starts_nothing(self):
        self.env["BC_STANDIN_KEYGEN"] = "fail"
        rc, out, err = self.run_launcher(["-np", "2", "--bin-dir", STANDINS], [])
        self.assertEqual(rc, 2)
        self.assertIn("cannot make the job's cluster key", err)
        self.assertIn("stand-in told to fail", err)
        self.assertEqual(self.started_pids(), {})

    def test_explicit_port_is_used(self):
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        rc, out, err = self.run_launcher(
            ["-np", "1", "--bin-dir", STANDINS, "--port", str(port)], [])
        self.assertEqual(rc, 0, err)
        (worker,) = self.json_lines(out, "worker 0")
        self.assertEqual(worker["env"]["BYTECOMP_SCHEDULER"], "127.0.0.1:%d" % port)
        self.assertEqual(worker["env"]["BYTECOMP_NUM_SERVERS"], "1")

    def test_lines_are_prefixed_and_whole(self):
        lines, width = 1500, 3000
        rc, out, err = self.run_launcher(
            ["-np", "4", "--servers", "1", "--bin-dir", STANDINS],
            ["--lines", str(lines), "--width", str(width)])
        self.assertEqual(rc, 0, err)
        pattern = re.compile(r"^\[worker (\d)\] (\d):(\d+):(x*)$")
        counts = {}
        for stream, text in (("out", out), ("err", err)):
            for line in text.splitlines():
                if not line.startswith("[worker") or ":x" not in line:
                    continue
                m = pattern.match(line)
                self.assertIsNotNone(m, "mixed or broken line: %r" % line[:200])
                self.assertEqual(m.group(1), m.group(2), "line under the wrong prefix")
                self.assertEqual(len(m.group(4)), width, "line cut short")
                index = int(m.group(3))
                self.assertEqual(index % 2, 0 if stream == "out" else 1,
                                 "stdout/stderr line on the wrong stream")
                counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
        self.assertEqual(counts, {r: lines for r in range(4)})
        for line in out.splitlines() + err.splitlines():
            self.assertRegex(line, r"^\[(scheduler|server \d|worker \d|bytecomp-run)\] ")

    def test_runs_under_the_python3_on_path(self):
        # The launcher's own shebang (/usr/bin/env python3) with whatever python3 PATH gives.
        proc = subprocess.run([LAUNCHER, "-np", "2", "--bin-dir", STANDINS, "--", WORKER],
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        self.assertIn(b"[worker 1] worker 1 done", proc.stdout)
        self.assert_all_gone()

    def test_daemon_that_does_not_exit_is_stopped_after_grace(self):
        self.env["BC_STANDIN_SERVER"] = "linger:1"
        rc, out, err = self.run_launcher(
            ["-np", "2", "--servers", "2", "--grace", "1", "--bin-dir", STANDINS], [])
        self.assertEqual(rc, 0, err)
        self.assertIn("all workers finished, but server 1 still ran 1 s later", err)
        self.assertIn("[server 1] server got SIGTERM", out)
        self.assert_all_gone()

    # --- failures ------------------------------------------------------------------------
    def test_worker_exit_code_stops_the_others(self):
        rc, out, err = self.run_launcher(
            ["-np", "3", "--servers", "2", "--bin-dir", STANDINS],
            ["--sleep", "60", "--fail-rank", "2", "--fail-code", "3"])
        self.assertEqual(rc, 3)
        pid = self.started_pids()["worker2"]
        self.assertIn("[bytecomp-run] job failed: worker 2 (pid %d) exited with code 3" % pid,
                      err)
        for label in ("worker 0", "worker 1", "server 0", "server 1"):
            self.assertIn("[%s] %s got SIGTERM" % (label, label.split()[0] if "server" in label
                                                   else label), out)
        self.assertLess(self.elapsed, 20, "the others were not stopped (they sleep 60 s)")
        self.assert_all_gone()

    def test_failure_wait_lets_the_others_finish_by_themselves(self):
        rc, out, err = self.run_launcher(
            ["-np", "3", "--failure-wait", "3", "--bin-dir", STANDINS],
            ["--sleep", "0.5", "--fail-rank", "1", "--fail-after", "0"])
        self.assertEqual(rc, 3)
        pid = self.started_pids()["worker1"]
        self.assertIn("worker 1 (pid %d) exited with code 3; waiting up to 3 s for the others"
                      % pid, err)
        for rank in (0, 2):
            # They finished on their own and were reported, not stopped.
            self.assertIn("[worker %d] worker %d done" % (rank, rank), out)
            self.assertNotIn("worker %d got SIGTERM" % rank, out)
            self.assertIn("worker %d (pid %d) exited with code 0"
                          % (rank, self.started_pids()["worker%d" % rank]), err)
        # The scheduler still waits for worker 1, so it is stopped after the wait.
        self.assertIn("[scheduler] scheduler got SIGTERM", out)
        self.assertTrue(err.rstrip().endswith(
            "job failed: worker 1 (pid %d) exited with code 3" % pid), err)
        self.assert_all_gone()

    def test_worker_killed_by_signal_is_named(self):
        rc, out, err = self.run_launcher(
            ["-np", "3", "--servers", "1", "--bin-dir", STANDINS],
            ["--sleep", "60", "--kill-rank", "1"])
        self.assertEqual(rc, 128 + signal.SIGKILL)
        pid = self.started_pids()["worker1"]
        self.assertIn("worker 1 (pid %d) was killed by SIGKILL" % pid, err)
        self.assertLess(self.elapsed, 20)
        self.assert_all_gone()

    def test_server_failure_is_named(self):
        self.env["BC_STANDIN_SERVER"] = "exit:1:5:0.3"
        rc, out, err = self.run_launcher(
            ["-np", "2", "--servers", "2", "--bin-dir", STANDINS], ["--sleep", "60"])
        self.assertEqual(rc, 5)
        pid = self.started_pids()["server1"]
        self.assertIn("job failed: server 1 (pid %d) exited with code 5" % pid, err)
        self.assert_all_gone()

    def test_scheduler_failure_is_named(self):
        self.env["BC_STANDIN_SCHEDULER"] = "exit:7:0.3"
        rc, out, err = self.run_launcher(
            ["-np", "2", "--servers", "1", "--bin-dir", STANDINS], ["--sleep", "60"])
        self.assertEqual(rc, 7)
        pid = self.started_pids()["scheduler"]
        self.assertIn("job failed: scheduler (pid %d) exited with code 7" % pid, err)
        self.assert_all_gone()

    def test_grandchildren_are_stopped_with_their_worker(self):
        rc, out, err = self.run_launcher(
            ["-np", "2", "--bin-dir", STANDINS],
            ["--sleep", "60", "--grandchild", "--fail-rank", "0"])
        self.assertNotEqual(rc, 0)
        self.assertIn("grandchild1", self.started_pids())
        self.assert_all_gone()

    def test_timeout_stops_the_job(self):
        rc, out, err = self.run_launcher(
            ["-np", "2", "--timeout", "1", "--bin-dir", STANDINS], ["--sleep", "60"])
        self.assertEqual(rc, 124)
        self.assertIn("job failed: timed out after 1 s", err)
        self.assertLess(self.elapsed, 20)
        self.assert_all_gone()

    # --- signals to the launcher ---------------------------------------------------------
    def check_forwarded(self, sig):
        proc = self.start_launcher(["-np", "2", "--servers", "2", "--bin-dir", STANDINS],
                                   ["--sleep", "60"])
        self.wait_for_pids(self.all_names(2, 2))
        time.sleep(0.3)  # let the stand-ins install their handlers
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
        out, err = out.decode(), err.decode()
        self.assertEqual(proc.returncode, 128 + sig)
        self.assertIn("received %s; forwarding it to every process" % signal.Signals(sig).name,
                      err)
        return out, err

    def test_sigterm_is_forwarded(self):
        out, err = self.check_forwarded(signal.SIGTERM)
        for label in ("worker 0", "worker 1"):
            self.assertIn("[%s] %s got SIGTERM" % (label, label), out)
        self.assertIn("[scheduler] scheduler got SIGTERM", out)
        self.assertIn("[server 1] server got SIGTERM", out)
        self.assert_all_gone()

    def test_sigint_is_forwarded(self):
        out, err = self.check_forwarded(signal.SIGINT)
        # Python stand-ins die of SIGINT (KeyboardInterrupt) by default; they must all be gone.
        self.assert_all_gone()

    def test_sighup_goes_to_the_scheduler_only(self):
        proc = self.start_launcher(["-np", "2", "--bin-dir", STANDINS], ["--sleep", "60"])
        self.wait_for_pids(self.all_names(2, 1))
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        self.assertIsNone(proc.poll(), "SIGHUP must not end the job")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, err)
        self.assertIn(b"[scheduler] scheduler got SIGHUP", out)
        self.assertIn(b"passing it to the scheduler (strategy reload)", err)
        # The workers (default SIGHUP action: die) never saw it.
        self.assertIn(b"[worker 0] worker 0 got SIGTERM", out)
        self.assertIn(b"[worker 1] worker 1 got SIGTERM", out)
        self.assert_all_gone()

    def test_child_ignoring_sigterm_is_killed_after_grace(self):
        proc = self.start_launcher(["-np", "2", "--grace", "1", "--bin-dir", STANDINS],
                                   ["--sleep", "60", "--ignore-term"])
        self.wait_for_pids(self.all_names(2, 1))
        time.sleep(0.3)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
        elapsed = time.monotonic() - start
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM)
        self.assertIn(b"[worker 1] worker 1 ignores SIGTERM", out)
        pid = self.started_pids()["worker1"]
        self.assertIn(b"worker 1 (pid %d) did not exit within 1 s of SIGTERM; sending SIGKILL"
                      % pid, err)
        self.assertGreaterEqual(elapsed, 0.9)
        self.assertLess(elapsed, 15)
        self.assert_all_gone()

    def test_second_signal_kills_at_once(self):
        proc = self.start_launcher(["-np", "1", "--grace", "30", "--bin-dir", STANDINS],
                                   ["--sleep", "60", "--ignore-term"])
        self.wait_for_pids(self.all_names(1, 1))
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
        self.assertLess(time.monotonic() - start, 15, "waited for the 30 s grace")
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM)
        pid = self.started_pids()["worker0"]
        self.assertIn(b"worker 0 (pid %d): second signal to the launcher; sending SIGKILL" % pid,
                      err)
        self.assert_all_gone()

    def test_children_die_when_launcher_is_sigkilled(self):
        proc = self.start_launcher(["-np", "2", "--servers", "1", "--bin-dir", STANDINS],
                                   ["--sleep", "60"])
        self.wait_for_pids(self.all_names(2, 1))
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        self.assert_all_gone(timeout=5)

    # --- set-up errors -------------------------------------------------------------------
    def test_missing_server_binary_is_a_clear_error(self):
        bindir = os.path.join(self.piddir, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.join(STANDINS, "bytecomp-scheduler"),
                   os.path.join(bindir, "bytecomp-scheduler"))
        rc, out, err = self.run_launcher(["-np", "2", "--bin-dir", bindir], [])
        self.assertEqual(rc, 2)
        self.assertIn("cannot find bytecomp-server: no executable %s/bytecomp-server "
                      "(from --bin-dir)" % bindir, err)
        self.assertEqual(self.started_pids(), {}, "nothing may start")

    def test_missing_binary_without_bin_dir_names_where_it_looked(self):
        self.env["PATH"] = "/nonexistent-bc-dir"
        launcher_copy_dir = os.path.join(self.piddir, "repo", "deploy")
        os.makedirs(launcher_copy_dir)
        shutil.copy(LAUNCHER, launcher_copy_dir)
        proc = subprocess.run(
            [sys.executable, os.path.join(launcher_copy_dir, "bytecomp-run"), "-np", "1", "--",
             WORKER], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("cannot find bytecomp-scheduler: looked in %s/repo/deploy, "
                      "%s/repo/build/bin and in PATH (/nonexistent-bc-dir)"
                      % (self.piddir, self.piddir), proc.stderr.decode())

    def test_installed_launcher_finds_the_daemons_beside_it(self):
        # The layout of `cmake --install` and the Debian package: P/bin holds bytecomp-run and
        # the daemons; no --bin-dir and no build tree. PATH keeps only python3's directory (the
        # stand-ins' interpreter).
        self.env["PATH"] = os.path.dirname(sys.executable)
        bindir = os.path.join(self.piddir, "prefix", "bin")
        os.makedirs(bindir)
        shutil.copy(LAUNCHER, bindir)
        for daemon in ("bytecomp-scheduler", "bytecomp-server", "bytecomp-keygen"):
            os.symlink(os.path.join(STANDINS, daemon), os.path.join(bindir, daemon))
        command = [sys.executable, os.path.join(bindir, "bytecomp-run"), "-np", "2", "--",
                   sys.executable, WORKER]
        dry = subprocess.run(command[:2] + ["--dry-run"] + command[2:], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=RUN_TIMEOUT)
        self.assertEqual(dry.returncode, 0, dry.stderr.decode())
        self.assertIn(" %s/bytecomp-scheduler --port " % bindir, dry.stdout.decode())
        self.assertIn(" %s/bytecomp-server --scheduler " % bindir, dry.stdout.decode())
        proc = subprocess.run(command, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        self.assertEqual(sorted(self.started_pids()), sorted(self.all_names(2, 1)))
        self.assert_all_gone()

    def test_missing_worker_command_is_a_clear_error(self):
        proc = subprocess.run(
            [sys.executable, LAUNCHER, "-np", "1", "--bin-dir", STANDINS, "--",
             "no-such-training-program-bc"], env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(b"no-such-training-program-bc not found in PATH", proc.stderr)
        self.assertEqual(self.started_pids(), {})

    def test_usage_errors(self):
        for args, message in ((["-np", "2", "--bin-dir", STANDINS], "no worker command"),
                              (["-np", "0", "--bin-dir", STANDINS, "--", "true"],
                               "-np must be at least 1"),
                              (["--servers", "1", "--", "true"], "-np"),
                              (["-np", "1", "--config", "/nonexistent.pbtxt", "--", "true"],
                               "--config /nonexistent.pbtxt: no such file")):
            proc = subprocess.run([sys.executable, LAUNCHER] + args, env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  timeout=RUN_TIMEOUT)
            self.assertEqual(proc.returncode, 2, args)
            self.assertIn(message, proc.stderr.decode(), args)

    def test_dry_run_prints_commands_and_starts_nothing(self):
        proc = subprocess.run(
            [sys.executable, LAUNCHER, "-np", "2", "--servers", "1", "--port", "9123",
             "--bin-dir", STANDINS, "--dry-run", "--", "python3", "train.py", "--lr", "0.1"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        lines = proc.stdout.decode().splitlines()
        self.assertEqual(len(lines), 4)
        self.assertTrue(lines[0].startswith("[scheduler] "))
        self.assertIn("bytecomp-scheduler --port 9123 --num_workers 2 --num_servers 1",
                      lines[0])
        self.assertIn("bytecomp-server --scheduler 127.0.0.1:9123 --rank 0", lines[1])
        self.assertIn("BYTECOMP_RANK=1", lines[3])
        self.assertIn("BYTECOMP_SCHEDULER=127.0.0.1:9123", lines[3])
        self.assertTrue(lines[3].endswith("python3 train.py --lr 0.1"))
        self.assertEqual(self.started_pids(), {})

    def test_dry_run_in_an_emulated_cluster_wraps_each_process_in_its_namespace(self):
        proc = subprocess.run(
            [sys.executable, LAUNCHER, "-np", "2", "--servers", "1", "--port", "9123",
             "--bin-dir", STANDINS, "--netns", "bc-", "--scheduler-host", "10.213.0.1",
             "--dry-run", "--", "python3", "train.py"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        lines = proc.stdout.decode().splitlines()
        self.assertRegex(lines[0], r"^\[scheduler\] .* \S*ip netns exec bc-sched \S*"
                                   r"bytecomp-scheduler --port 9123 ")
        self.assertRegex(lines[1], r"ip netns exec bc-s0 \S*bytecomp-server --scheduler "
                                   r"10\.213\.0\.1:9123 --rank 0 --key_file .*cluster\.key'?$")
        self.assertIn("BYTECOMP_LOCAL_RANK=0 BYTECOMP_LOCAL_SIZE=1", lines[3])
        # Namespaces share the hostname: each is named as its own machine.
        self.assertIn("BYTECOMP_MACHINE=bc-w1", lines[3])
        self.assertIn("BYTECOMP_SCHEDULER=10.213.0.1:9123", lines[3])
        self.assertIn("BYTECOMP_KEY_FILE=", lines[3])
        self.assertIn("--key_file ", lines[0])
        self.assertTrue(lines[3].endswith("ip netns exec bc-w1 python3 train.py"), lines[3])
        # Without a key the namespaces' addresses are not loopback: allow_insecure.
        proc = subprocess.run(
            [sys.executable, LAUNCHER, "-np", "1", "--servers", "1", "--port", "9123",
             "--bin-dir", STANDINS, "--netns", "bc-", "--scheduler-host", "10.213.0.1",
             "--no-key", "--dry-run", "--", "python3", "train.py"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
        lines = proc.stdout.decode().splitlines()
        self.assertIn(" --allow_insecure", lines[0])
        self.assertIn(" --allow_insecure", lines[1])
        self.assertIn("BYTECOMP_ALLOW_INSECURE=1", lines[2])
        self.assertNotIn("KEY_FILE", proc.stdout.decode())


if __name__ == "__main__":
    unittest.main()
