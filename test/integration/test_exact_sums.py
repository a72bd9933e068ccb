"""W=4, S=2: rounds of 40 tensors (1 element to 20 MB, fp32 and fp16); every worker checks
every sum exactly. A second run slows one worker with random sleeps so rounds interleave.
The deep run (deploy/test.sh --deep) runs more rounds; under a sanitizer
(deploy/check_sanitizers.sh) each job runs fewer rounds of smaller tensors."""
import cluster


def run(worker_args, rounds, scheduler_args=()):
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds)] + worker_args
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd, scheduler_args=scheduler_args) as c:
        codes = c.wait_workers(timeout=300)
        assert codes == [0, 0, 0, 0], c.dump()
        for w in c.workers:
            assert f"ALL SUMS EXACT: {rounds} rounds x 40 tensors, W=4" in w.output(), c.dump()
        # Orderly shutdown: once every worker is done the scheduler stops the servers.
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()


# Under a sanitizer the largest tensor is 5 MB, not 20: still several partitions (4 MB each).
LARGEST = ["--max-bytes", str(cluster.sized(20 << 20, 5 << 20))]


def test_exact_sums_w4_s2():
    run(LARGEST, rounds=cluster.sized(12, 4, deep=50))


def test_exact_sums_with_a_slow_worker():
    # Worker 1 sleeps before a quarter of its pushes (up to 30 ms), so the others run ahead on
    # some keys and rounds of different keys interleave on the servers.
    run(LARGEST + ["--slow-rank", "1", "--slow-ms", "30"], rounds=cluster.sized(8, 4, deep=15))


def test_exact_sums_with_per_rank_order_and_a_small_inflight_budget():
    # Every worker pushes its tensors in a different order through a 1 MB in-flight budget per
    # server: the budget must free on the server's ack, not on the round's completion, or the
    # workers would wait on each other's keys forever.
    run(["--shuffle", "1", "--max-bytes", "4000000"], rounds=cluster.sized(10, 4),
        scheduler_args=["--max_inflight_bytes_per_server=1000000"])


def test_save_state_right_after_each_wait_finds_the_tensor_idle():
    # A checkpoint taken as soon as the step's waits return: the engine must have marked each
    # tensor idle before its wait returned (a race once failed a PyTorch checkpoint test).
    run(["--save-after-wait", "1", "--max-bytes", "1000000"], rounds=cluster.sized(40, 6))


def test_fusion_groups_of_1000_tiny_tensors_sum_exactly_in_fewer_rounds(tmp_path):
    # 1,000 one-element tensors in 4 fusion groups of 250 (Strategy.fusion_groups), the groups'
    # tensors fp16-coded: every worker pushes its tensors in its own order, so each group's
    # round starts when its last member comes; W=2, S=2, every sum exact, and the servers see
    # 4 rounds a step where there were 1,000 tensors.
    groups = "".join(
        'fusion_groups { name: "fused.%d" %s }\n'
        % (g, " ".join('tensors: "tiny.%d"' % i for i in range(250 * g, 250 * (g + 1))))
        for g in range(4))
    path = tmp_path / "strategy.pbtxt"
    path.write_text('seed: 7\ntensors { name_pattern: "fused.*" push_codec { name: "fp16" } '
                    'force: true }\n' + groups)
    rounds = cluster.sized(20, 5)
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds), "--tiny-tensors", "1000",
           "--shuffle", "1"]
    with cluster.Cluster(workers=2, servers=2, worker_cmd=cmd,
                         scheduler_args=[f"--strategy={path}"]) as c:
        codes = c.wait_workers(timeout=300)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            out = w.output()
            assert f"ALL SUMS EXACT: {rounds} rounds x 1000 tensors, W=2" in out, c.dump()
            assert (f"tensor fusion: {1000 * rounds} push_pulls of fusion groups' members in "
                    f"{4 * rounds} rounds of their groups") in out, c.dump()
