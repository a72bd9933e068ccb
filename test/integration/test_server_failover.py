"""Server failover: a server killed with SIGKILL and started again on its port (as systemd's
Restart= or bytecomp-run --restart does) takes its rank's keys over. The workers send it each
key's last completed result (a replay) and then every push and pull the lost server had not
answered; a worker that had not got the last round's result gets the replayed one, and the job
goes on: every sum exact, every round once, a clean end. The time from each kill to the next ten rounds
completed is printed (pytest -s shows it)."""
import random
import re
import signal
import subprocess
import time

import cluster

ROUNDS = cluster.sized(100, 100, deep=200)
# The rounds at which the five kills of the first test come; each tensor's size at most.
KILL_AT = cluster.sized((10, 25, 40, 55, 70), (10, 25, 40, 55, 70),
                        deep=(20, 50, 80, 110, 140))
MAX_BYTES = str(cluster.sized(200000, 100000, deep=400000))
# fp16 both ways is exact for the workers' small-integer values: the switch keeps sums exact.
V1 = "seed: 7\n"
V2 = ('seed: 7\ntensors {\n  name_pattern: "*"\n  push_codec { name: "fp16" }\n'
      '  pull_codec { name: "fp16" }\n  force: true\n}\n')


def test_servers_killed_five_times_and_restarted_every_sum_stays_exact(tmp_path):
    """The third kill comes right after a strategy switch began (SIGHUP: none -> fp16)."""
    hold = tmp_path / "release"
    strategy = tmp_path / "strategy.pbtxt"
    strategy.write_text(V1)
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(ROUNDS), "--max-bytes", MAX_BYTES,
           "--slow-rank", "1", "--slow-ms", "4", "--hold-file", str(hold), "--print-every", "1"]
    rng = random.Random(20261126)
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=[f"--strategy={strategy}"]) as c:
        recoveries = []
        for i in range(5):
            rank = i % 2
            c.wait_workers_print(f"round {KILL_AT[i]}/", timeout=120)
            if i == 2:
                strategy.write_text(V2)
                c.scheduler.proc.send_signal(signal.SIGHUP)
                time.sleep(rng.uniform(0.0, 0.01))
            else:
                time.sleep(rng.uniform(0.0, 0.05))  # somewhere inside a round
            before = c.rounds_done()
            killed_at = time.monotonic()
            old = c.servers[rank]
            old.proc.send_signal(signal.SIGKILL)
            assert c.wait_node(old, 5) is not None
            replacement = c.restart_server(rank)
            # The next round every worker completes once the replacement took over (a round may
            # also complete before, if it needed nothing more of the killed server).
            ok = cluster.wait_for(
                lambda: c.scheduler.output().count(" is back: ") == i + 1, 30, interval=0.01)
            assert ok, f"server {rank}'s replacement did not take over\n" + c.dump()
            after = c.rounds_done()
            ok = cluster.wait_for(lambda: c.rounds_done() > max(before, after), 30, interval=0.01)
            assert ok, f"no progress after killing server {rank}\n" + c.dump()
            recoveries.append(time.monotonic() - killed_at)
            ok = cluster.wait_for(
                lambda: "this server replaces the lost server" in replacement.output(), 10)
            assert ok, c.dump()
        hold.write_text("go")
        codes = c.wait_workers(timeout=300)
        assert codes == [0, 0, 0, 0], c.dump()
        versions = []
        for w in c.workers:
            out = w.output()
            assert f"ALL SUMS EXACT: {ROUNDS} rounds x 40 tensors, W=4" in out, c.dump()
            assert out.count("replacement at tcp://") == 5, c.dump()
            line = next(l for l in out.splitlines() if l.startswith("STRATEGY VERSIONS BY ROUND:"))
            versions.append([int(v) for v in line.split(":")[1].split()])
        # Every worker used the same version in each round: 1, then 2 from one round on.
        assert all(v == versions[0] for v in versions), versions
        assert versions[0][0] == 1 and versions[0][-1] == 2 and versions[0] == sorted(versions[0])
        assert c.scheduler.output().count(" is back: ") == 5, c.dump()
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()
        from_replays = sum(int(m) for s in c.servers
                           for m in re.findall(r"answered the last round of (\d+)", s.output()))
        print(f"kill -> the first round every worker completed after the takeover: "
              f"{', '.join(f'{t:.2f} s' for t in recoveries)} "
              f"(heartbeat interval 0.2 s, timeout 2 s; restart included); keys whose last round "
              f"the last replacements answered from replays: {from_replays}; strategy version 2 "
              f"from round "
              f"{versions[0].index(2)}")


def test_without_a_replacement_the_survivor_takes_the_keys_over_and_sums_stay_exact(tmp_path):
    """Server 1 killed and not restarted: after the heartbeat timeout (2 s) and the grace
    period (1.5 s) its partitions move to server 0, and the job finishes with exact sums."""
    hold = tmp_path / "release"
    # The workers print every 10 rounds.
    rounds, kill_at = cluster.sized((60, 20), (60, 20), deep=(120, 30))
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds), "--max-bytes", MAX_BYTES,
           "--slow-rank", "1", "--slow-ms", "4", "--hold-file", str(hold)]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=["--server_replacement_timeout_ms=1500"]) as c:
        c.wait_workers_print(f"round {kill_at}/", timeout=120)
        before = c.rounds_done()
        killed_at = time.monotonic()
        c.servers[1].proc.send_signal(signal.SIGKILL)
        ok = cluster.wait_for(lambda: c.rounds_done() >= before + 10, 30, interval=0.01)
        assert ok, "no progress after server 1 was lost\n" + c.dump()
        recovered = time.monotonic() - killed_at
        hold.write_text("go")
        codes = c.wait_workers(timeout=300)
        assert codes == [0, 0, 0, 0], c.dump()
        for w in c.workers:
            out = w.output()
            assert f"ALL SUMS EXACT: {rounds} rounds x 40 tensors, W=4" in out, c.dump()
            assert "server 1 was not replaced in time" in out, c.dump()
        assert "its partitions move to server 0" in c.scheduler.output(), c.dump()
        assert "taking over" in c.servers[0].output(), c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        assert c.wait_node(c.servers[0], 15) == 0, c.dump()
        print(f"server 1 lost, keys moved to server 0: 10 more rounds done {recovered:.2f} s "
              f"after the kill (heartbeat timeout 2 s + grace 1.5 s)")


def test_a_lost_server_with_no_other_server_left_ends_the_job_naming_it():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "100000"]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd,
                         scheduler_args=["--server_replacement_timeout_ms=1500"]) as c:
        c.wait_workers_print("round 10/", timeout=60)
        killed_at = time.monotonic()
        c.servers[0].proc.send_signal(signal.SIGKILL)
        codes = c.wait_workers(timeout=20)
        elapsed = time.monotonic() - killed_at
        assert None not in codes and all(code != 0 for code in codes), c.dump()
        assert elapsed < 2.0 + 1.5 + 5, c.dump()  # heartbeat timeout + the wait + slack
        for w in c.workers:
            out = w.output()
            assert "server 0" in out and "was lost" in out, c.dump()
            assert "no other server is left to take its keys" in out, c.dump()
        assert c.wait_node(c.scheduler, 10) not in (None, 0), c.dump()


def test_a_second_server_for_a_live_rank_is_refused_and_the_job_goes_on(tmp_path):
    hold = tmp_path / "release"
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "60", "--max-bytes", "100000",
           "--hold-file", str(hold)]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd) as c:
        c.wait_workers_print("round 10/", timeout=60)
        other = subprocess.run(
            [cluster.binary("bytecomp-server"), f"--scheduler={c.address}", "--rank=0",
             "--bind_host=127.0.0.1", "--advertise_host=127.0.0.1"],
            capture_output=True, text=True, timeout=30)
        assert other.returncode != 0
        assert "two servers claim one rank" in other.stdout + other.stderr, other.stderr
        hold.write_text("go")
        assert c.wait_workers(timeout=60) == [0, 0], c.dump()
        assert "replacement at" not in c.workers[0].output(), c.dump()


def test_bytecomp_run_restarts_a_killed_server_and_the_job_finishes(tmp_path):
    """bytecomp-run --restart 1: server 0 killed with SIGKILL is started again, takes its keys
    over, and the job ends with exit status 0 and exact sums."""
    port = cluster.free_port()
    out = cluster.launch_kill_and_finish(
        tmp_path,
        ["-np", "2", "--servers", "2", "--port", str(port), "--restart", "1", "--timeout", "150",
         "--scheduler-args=--heartbeat_interval_ms=200 --heartbeat_timeout_ms=2000"],
        f"bytecomp-server --scheduler 127.0.0.1:{port} --rank 0", "server 0 is back")
    assert ("killed by SIGKILL; starting it again for its rank: it takes its keys over "
            "(restart 1 of 1)") in out, out


def test_bytecomp_run_restarts_a_frozen_server_and_the_job_finishes(tmp_path):
    """bytecomp-run --restart 1: server 0 stopped with SIGSTOP answers nothing; after
    --frozen-after the launcher kills it and starts it again, and the job ends with exit status
    0 and exact sums (not when the heartbeat timeout ends the job)."""
    port = cluster.free_port()
    out = cluster.launch_kill_and_finish(
        tmp_path,
        ["-np", "2", "--servers", "2", "--port", str(port), "--restart", "1", "--timeout", "150",
         "--frozen-after", "1",
         "--scheduler-args=--heartbeat_interval_ms=200 --heartbeat_timeout_ms=4000"],
        f"bytecomp-server --scheduler 127.0.0.1:{port} --rank 0", "server 0 is back",
        sig=signal.SIGSTOP)
    assert "server 0 (pid" in out and "has been stopped (SIGSTOP) for" in out, out
    assert "(restart 1 of 1)" in out, out


def test_a_server_stopped_past_the_timeout_says_it_was_stopped_not_that_the_scheduler_died():
    """SIGSTOP on a server for longer than the heartbeat timeout, then SIGCONT: the job went on
    without it (its keys moved to the other server), and the server exits on the scheduler's
    word that it was declared lost or, if it looks first, saying that it did not run; never
    that the scheduler has been silent and died."""
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--max-bytes", "100000"]
    with cluster.Cluster(workers=1, servers=2, worker_cmd=cmd,
                         scheduler_args=["--server_replacement_timeout_ms=500"]) as c:
        c.wait_workers_print("round 10/", timeout=60)
        frozen = c.servers[1]
        frozen.proc.send_signal(signal.SIGSTOP)
        ok = cluster.wait_for(lambda: "its partitions move to server 0" in c.scheduler.output(),
                              30)
        frozen.proc.send_signal(signal.SIGCONT)
        assert ok, c.dump()
        assert c.wait_node(frozen, 15) is not None, c.dump()
        out = frozen.output()
        assert ("the scheduler declared server 1 lost" in out or
                ("this process did not run for" in out and
                 "the job has gone on without it" in out)), c.dump()
        assert "it died, hangs or cannot be reached" not in out, c.dump()
