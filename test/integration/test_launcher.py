"""bytecomp-run with the real daemons: a clean job exits 0; a killed server makes every worker
fail naming it and the launcher exit non-zero naming who died."""
import os
import signal
import subprocess
import time

import cluster

LAUNCHER = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "bytecomp-run")


def launch(args, cmd, timeout):
    return subprocess.Popen(
        ["/usr/bin/python3", LAUNCHER, "--bin-dir", cluster.BIN_DIR] + args + ["--"] + cmd,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc, timeout):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("bytecomp-run did not finish in time:\n" + out)
    return proc.returncode, out


def test_clean_job_exits_zero():
    proc = launch(["-np", "2", "--servers", "1", "--timeout", "120"],
                  [cluster.binary("exact_sum_worker"), "--rounds", "3", "--max-bytes", "200000"], 150)
    rc, out = finish(proc, 150)
    assert rc == 0, out
    assert "[worker 0] ALL SUMS EXACT: 3 rounds" in out and "[worker 1] ALL SUMS EXACT" in out, out


def test_killed_server_stops_the_job_naming_it():
    port = cluster.free_port()
    proc = launch(["-np", "4", "--servers", "2", "--port", str(port), "--failure-wait", "12",
                   # Without server failover: a dead server ends the job.
                   "--scheduler-args=--heartbeat_timeout_ms=2000 --heartbeat_interval_ms=200 "
                   "--server_replacement_timeout_ms=-1",
                   "--timeout", "120"],
                  [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "500000"], 150)
    try:
        deadline = time.monotonic() + 60
        pid = None
        while time.monotonic() < deadline and pid is None:
            found = subprocess.run(["pgrep", "-f", f"bytecomp-server --scheduler 127.0.0.1:{port} --rank 1"],
                                   capture_output=True, text=True).stdout.split()
            pid = int(found[0]) if found else None
            time.sleep(0.2)
        assert pid is not None, "server 1 did not start"
        time.sleep(3)  # let the workers sum for a while
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    rc, out = finish(proc, 60)
    assert rc != 0, out
    assert "server 1" in out and "SIGKILL" in out, out
    for w in range(4):
        assert any(line.startswith(f"[worker {w}] OPERATION FAILED") and "server 1" in line
                   for line in out.splitlines()), out
    assert time.monotonic() - killed_at < 30
