"""W=4, S=2: 50 rounds of 40 tensors (1 element to 20 MB, fp32 and fp16); every worker checks
every sum exactly. A second run slows one worker with random sleeps so rounds interleave."""
import cluster


def run(worker_args, rounds):
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds)] + worker_args
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd) as c:
        codes = c.wait_workers(timeout=300)
        assert codes == [0, 0, 0, 0], c.dump()
        for w in c.workers:
            assert f"ALL SUMS EXACT: {rounds} rounds x 40 tensors, W=4" in w.output(), c.dump()
        # Orderly shutdown: once every worker is done the scheduler stops the servers.
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()


def test_exact_sums_w4_s2_50_rounds():
    run([], rounds=50)


def test_exact_sums_with_a_slow_worker():
    # Worker 1 sleeps before a quarter of its pushes (up to 30 ms), so the others run ahead on
    # some keys and rounds of different keys interleave on the servers.
    run(["--slow-rank", "1", "--slow-ms", "30"], rounds=15)
