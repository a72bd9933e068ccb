"""Nothing waits forever, also for faults outside a launcher: a killed scheduler stops every
worker and server within the heartbeat timeout plus 2 s, each naming the scheduler; a server
frozen (SIGSTOP) long enough to be declared failed exits on its own once it runs again; and a
push_pull that nobody completes fails after the job's wait bound."""
import signal
import time

import cluster

HEARTBEAT_TIMEOUT_MS = 2000


def test_killed_scheduler_stops_every_node_naming_it():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "200000"]
    with cluster.Cluster(workers=2, servers=2, worker_cmd=cmd,
                         heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS) as c:
        c.wait_workers_print("round 10/")
        killed_at = time.monotonic()
        c.scheduler.proc.send_signal(signal.SIGKILL)
        limit = HEARTBEAT_TIMEOUT_MS / 1000 + 2
        nodes = c.workers + c.servers
        codes = [c.wait_node(n, max(0.1, limit - (time.monotonic() - killed_at))) for n in nodes]
        elapsed = time.monotonic() - killed_at
        assert None not in codes, f"still running {elapsed:.1f} s after the kill: {codes}\n" + c.dump()
        assert all(code != 0 for code in codes), codes
        for n in nodes:
            out = n.output()
            assert f"the scheduler at {c.address} has been silent for" in out, c.dump()


def test_frozen_server_declared_failed_exits_when_it_runs_again():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "200000"]
    # Without server failover (test_server_failover.py has it): the job ends at once.
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd,
                         heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                         scheduler_args=["--server_replacement_timeout_ms=-1"]) as c:
        c.wait_workers_print("round 10/")
        server = c.servers[0]
        server.proc.send_signal(signal.SIGSTOP)
        try:
            # The job ends without it: every worker names it, the scheduler exits.
            codes = c.wait_workers(timeout=HEARTBEAT_TIMEOUT_MS / 1000 + 8)
            assert codes == [2, 2], c.dump()
            assert c.wait_scheduler(10) not in (None, 0), c.dump()
            for w in c.workers:
                assert "server 0" in w.output() and "failed" in w.output(), c.dump()
        finally:
            server.proc.send_signal(signal.SIGCONT)
        resumed_at = time.monotonic()
        assert c.wait_node(server, 5) not in (None, 0), \
            "the resumed server runs on: " + c.dump()
        out = server.output()
        # It learns it was declared failed, or sees that it did not run for the timeout and
        # says so (the scheduler, gone, is not blamed).
        assert ("the scheduler declared server 0 failed" in out or
                "this process did not run for" in out), c.dump()
        assert "it died, hangs or cannot be reached" not in out, c.dump()
        assert time.monotonic() - resumed_at < 5


def test_a_wait_without_a_limit_ends_after_the_jobs_bound():
    # Only rank 0 pushes its tensor; rank 1 leaves. Rank 0 waits with timeout -1, bounded by
    # its BYTECOMP_PUSH_PULL_TIMEOUT_MS.
    cmd = [cluster.binary("exact_sum_worker"), "--lonely-rank", "0", "--lonely-wait-ms", "-1"]
    with cluster.Cluster(workers=2, servers=1,
                         extra_env={"BYTECOMP_PUSH_PULL_TIMEOUT_MS": "1500"}) as c:
        c.start_workers(cmd)
        assert c.wait_node(c.workers[0], 30) == 4, c.dump()
        out = c.workers[0].output()
        assert "LONELY FAILED after" in out, c.dump()
        assert "not done after 1500 ms" in out and "push_pull_timeout_ms" in out, c.dump()
