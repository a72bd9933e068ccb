"""Failures never hang: a killed server or worker is reported to every other worker, naming it,
within 10 s, and the job stops."""
import signal
import time

import cluster

HEARTBEAT_TIMEOUT_MS = 2000


def wait_until_summing(c):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all("round 10/" in w.output() for w in c.workers):
            return
        time.sleep(0.1)
    raise AssertionError("workers did not start summing\n" + c.dump())


def test_killed_server_fails_every_worker_naming_it():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "1000000"]
    # Without server failover (test_server_failover.py has it): the job ends.
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                         scheduler_args=["--server_replacement_timeout_ms=-1"]) as c:
        wait_until_summing(c)
        killed_at = time.monotonic()
        c.servers[1].proc.send_signal(signal.SIGKILL)
        codes = c.wait_workers(timeout=10)
        elapsed = time.monotonic() - killed_at
        assert codes == [2, 2, 2, 2], f"after {elapsed:.1f} s: {codes}\n" + c.dump()
        assert elapsed <= 10.0
        for w in c.workers:
            out = w.output()
            assert "OPERATION FAILED" in out and "server 1" in out and "failed" in out, c.dump()
        # The job stops: the scheduler and the surviving server exit by themselves.
        assert c.wait_node(c.scheduler, 10) not in (None, 0), c.dump()
        assert c.wait_node(c.servers[0], 10) is not None, c.dump()


def test_killed_worker_is_reported_to_the_others():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "1000000"]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS) as c:
        wait_until_summing(c)
        killed_at = time.monotonic()
        c.workers[2].proc.send_signal(signal.SIGKILL)
        survivors = [w for w in c.workers if w.rank != 2]
        for w in survivors:
            assert c.wait_node(w, max(0.1, 10 - (time.monotonic() - killed_at))) == 2, c.dump()
        for w in survivors:
            assert "worker 2" in w.output() and "failed" in w.output(), c.dump()
        assert c.wait_node(c.scheduler, 10) not in (None, 0), c.dump()
        for s in c.servers:
            assert c.wait_node(s, 10) is not None, c.dump()
