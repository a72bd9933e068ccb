"""A scheduler killed (SIGKILL) and started again on its address takes the running job up:
W=4, S=2, rounds of 40 tensors with exact sums, the scheduler killed and restarted twice;
the rounds go on while it is away, every node rejoins the new one, every sum is exact, the job
ends cleanly (every worker done, the servers told by the last scheduler, every exit code 0).
The time from each kill to the takeover is printed (pytest -s shows it)."""
import signal
import time

import cluster

ROUNDS = cluster.sized(80, 100, deep=200)


def test_scheduler_killed_and_restarted_twice_the_job_finishes_with_exact_sums(tmp_path):
    hold = tmp_path / "release"
    # The workers hold after the last round until the test lets them go, so that their
    # WorkerDone reaches the last scheduler whatever the speed of this machine.
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(ROUNDS),
           "--max-bytes", str(cluster.sized(200000, 100000, deep=400000)),
           "--slow-rank", "1", "--slow-ms", "4", "--hold-file", str(hold)]
    # The nodes wait up to 10 s for a silent scheduler to come back.
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=["--scheduler_timeout_ms=10000"]) as c:
        takeovers = []
        for kill_at in cluster.sized(("round 20/", "round 50/"), ("round 10/", "round 30/"),
                                     deep=("round 20/", "round 60/")):
            c.wait_workers_print(kill_at, timeout=120)
            killed_at = time.monotonic()
            c.scheduler.proc.send_signal(signal.SIGKILL)
            assert c.wait_node(c.scheduler, 5) is not None
            started = c.restart_scheduler()
            ok = cluster.wait_for(lambda: "took the running job up" in started.output(), 15)
            assert ok, "the restarted scheduler did not take the job up\n" + c.dump()
            takeovers.append(time.monotonic() - killed_at)
            assert "rejoined worker 3" in started.output(), c.dump()
        hold.write_text("go")
        codes = c.wait_workers(timeout=300)
        assert codes == [0, 0, 0, 0], c.dump()
        for w in c.workers:
            out = w.output()
            assert f"ALL SUMS EXACT: {ROUNDS} rounds x 40 tensors, W=4" in out, c.dump()
            assert out.count("rejoining the job as worker") == 2, c.dump()
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()
        print(f"kill -> takeover: {', '.join(f'{t:.2f} s' for t in takeovers)} "
              f"(heartbeat interval 0.2 s, restart included)")


def test_a_scheduler_restarted_with_another_config_stops_the_job_naming_why(tmp_path):
    """A scheduler that would place the job's tensors elsewhere (another partition_bytes)
    cannot take it up: every node stops, naming the tensor and the config."""
    hold = tmp_path / "release"
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "1000", "--max-bytes", "100000",
           "--hold-file", str(hold)]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd,
                         scheduler_args=["--scheduler_timeout_ms=10000"]) as c:
        c.wait_workers_print("round 10/", timeout=120)
        c.scheduler.proc.send_signal(signal.SIGKILL)
        c.wait_node(c.scheduler, 5)
        c.restart_scheduler(["--partition_bytes=1000"])
        codes = c.wait_workers(timeout=30)
        assert None not in codes and all(code != 0 for code in codes), c.dump()
        for n in c.workers + c.servers:
            assert c.wait_node(n, 10) not in (None, 0), c.dump()
            assert "cannot take the job up" in n.output(), c.dump()
            assert "is its config (num_servers, partition_bytes) the job's?" in n.output(), c.dump()
        assert c.wait_node(c.scheduler, 10) not in (None, 0), c.dump()


def test_bytecomp_run_restarts_a_killed_scheduler_and_the_job_finishes(tmp_path):
    """bytecomp-run --restart 1: the scheduler killed with SIGKILL is started again on its port,
    the nodes rejoin it, and the job ends with exit status 0 and exact sums."""
    port = cluster.free_port()
    out = cluster.launch_kill_and_finish(
        tmp_path,
        ["-np", "2", "--servers", "1", "--port", str(port), "--restart", "1", "--timeout", "150",
         "--scheduler-args=--heartbeat_interval_ms=200 --scheduler_timeout_ms=10000"],
        f"bytecomp-scheduler --port {port}", "took the running job up")
    assert ("killed by SIGKILL; starting it again on its port: the nodes rejoin it "
            "(restart 1 of 1)") in out, out
