"""Hierarchical (intra-machine) reduction with real processes: "machines" are named with
BYTECOMP_MACHINE, the scheduler runs with --hierarchical, the local ranks of a machine reduce
to their local root over loopback, and only local roots push. Every worker checks every sum
exactly (exact_sum_worker.cc) or against a reference that applies the codec to each machine's
sum (codec_cluster_worker.cc); the servers' per-worker push counts show who pushed."""
import os
import re
import time

import cluster

PARTITION = 1 << 20


def machines_env(machines, local_ranks=None, local_sizes=None):
    env = []
    for r, m in enumerate(machines):
        e = {"BYTECOMP_MACHINE": m}
        if local_ranks is not None:
            e["BYTECOMP_LOCAL_RANK"] = str(local_ranks[r])
        if local_sizes is not None:
            e["BYTECOMP_LOCAL_SIZE"] = str(local_sizes[r])
        env.append(e)
    return env


def server_pushes(c):
    """Pushes per worker rank, summed over every server's engine threads."""
    total = {}
    for s in c.servers:
        for line in re.findall(r"pushes by worker: (.*)", s.output()):
            for item in line.split():
                if item == "none":
                    continue
                rank, count = item.split("=")
                total[int(rank)] = total.get(int(rank), 0) + int(count)
    return total


def pushed_bytes(worker):
    m = re.search(r"PUSHED BYTES: (\d+)", worker.output())
    assert m, worker.output()[-2000:]
    return int(m.group(1))


def run_exact(machines, rounds, worker_args=(), local_ranks=None, local_sizes=None,
              extra_env=None, check=None):
    w = len(machines)
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds), "--shuffle", "1",
           "--max-bytes", str(cluster.sized(3000000, 1500000)),
           "--partition-bytes", str(PARTITION)] + list(worker_args)
    with cluster.Cluster(workers=w, servers=2, worker_cmd=cmd, partition_bytes=PARTITION,
                         scheduler_args=["--hierarchical"], extra_env=extra_env,
                         worker_env=machines_env(machines, local_ranks, local_sizes)) as c:
        codes = c.wait_workers(timeout=120)
        assert codes == [0] * w, c.dump()
        for wk in c.workers:
            assert f"ALL SUMS EXACT: {rounds} rounds x 40 tensors, W={w}" in wk.output(), c.dump()
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()
        if check is not None:
            check(c)
        return c, server_pushes(c), [pushed_bytes(wk) for wk in c.workers]


def test_two_machines_of_two_exact_sums_and_one_push_per_machine():
    # Machines interleave over the ranks: A = workers 0, 2 and B = workers 1, 3, so the local
    # roots are 0 and 1. Each rank pushes its tensors in its own order.
    c, pushes, sent = run_exact(["A", "B", "A", "B"], rounds=8)
    assert sorted(pushes) == [0, 1], (pushes, c.dump())
    assert pushes[0] == pushes[1] > 0, pushes
    # 40 tensors x 8 rounds, one push per partition: at least 320 pushes per root.
    assert pushes[0] >= 320, pushes
    assert sent[0] > 0 and sent[1] > 0 and sent[2] == 0 and sent[3] == 0, sent


def test_uneven_machines_with_launcher_local_ranks():
    # Machine A holds workers 0 and 2, with worker 2 as local rank 0 (its root) as the launcher
    # said; machine B holds worker 1 alone.
    c, pushes, sent = run_exact(["A", "B", "A"], rounds=6, local_ranks=[1, 0, 0],
                                local_sizes=[2, 1, 2])
    assert sorted(pushes) == [1, 2], (pushes, c.dump())
    assert pushes[1] == pushes[2] > 0, pushes
    assert sent[0] == 0 and sent[1] > 0 and sent[2] > 0, sent


def test_three_and_one_average_divides_by_every_worker():
    c, pushes, sent = run_exact(["A", "A", "A", "B"], rounds=5, worker_args=["--average", "1"])
    assert sorted(pushes) == [0, 3], (pushes, c.dump())


CODECS = [
    ("topk", {"ratio": "0.01"}, "residual", False),
    ("randomk", {"ratio": "0.1"}, "residual", False),
    ("fp16", {}, "", True),
    ("onebit", {}, "residual", True),
    ("dgc", {"ratio": "0.01"}, "dgc_momentum", False),
    ("powersgd", {"rank": "2"}, "powersgd", False),
]


def codec_strategy():
    lines = ["seed: 99"]
    for name, params, memory, two_way in CODECS:
        block = []
        for field in ["push_codec"] + (["pull_codec"] if two_way else []):
            block.append(f"  {field} {{")
            block.append(f'    name: "{name}"')
            for k, v in params.items():
                block.append(f'    params {{ key: "{k}" value: "{v}" }}')
            if memory:
                block.append(f'    memory: "{memory}"')
            block.append("  }")
        lines += ["tensors {", f'  name_pattern: "{name}"'] + block + ["  force: true", "}"]
    return "\n".join(lines) + "\n"


def test_codecs_compress_each_machines_sum(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(codec_strategy())
    machines = ["A", "A", "B", "B"]
    cmd = [cluster.binary("codec_cluster_worker"), f"--strategy={path}", "--rounds=3",
           "--elements=4099", "--machines=0,0,1,1"]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=[f"--strategy={path}", "--hierarchical"],
                         worker_env=machines_env(machines)) as c:
        codes = c.wait_workers(timeout=120)
        assert codes == [0, 0, 0, 0], c.dump()
        for w in c.workers:
            assert f"ALL {len(CODECS)} TENSORS MATCH THE REFERENCE for 3 rounds" in w.output(), c.dump()
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()
        assert sorted(server_pushes(c)) == [0, 2], c.dump()


def run_death(die_rank):
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "200", "--max-bytes", "200000",
           "--die-rank", str(die_rank), "--die-round", "3"]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd, scheduler_args=["--hierarchical"],
                         heartbeat_timeout_ms=2000,
                         worker_env=machines_env(["A", "B", "A", "B"])) as c:
        start = time.monotonic()
        codes = c.wait_workers(timeout=30)
        took = time.monotonic() - start
        assert codes[die_rank] == 3, c.dump()
        others = [r for r in range(4) if r != die_rank]
        for r in others:
            assert codes[r] == 2, c.dump()
            out = c.workers[r].output()
            assert "OPERATION FAILED" in out, c.dump()
            assert f"worker {die_rank}" in out and "missed heartbeats" in out, c.dump()
        # Detection takes the heartbeat timeout (2 s) plus start-up; far from the 60 s waits.
        assert took < 20, (took, c.dump())
        assert c.wait_node(c.scheduler, 10) not in (None, 0), c.dump()


def test_a_dying_local_rank_is_a_clear_error_for_the_others():
    run_death(2)  # not a root: machine A's roots is worker 0


def test_a_dying_local_root_is_a_clear_error_for_the_others():
    run_death(1)  # machine B's root


def test_machine_with_fewer_workers_than_its_local_size_fails_at_start():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "1"]
    with cluster.Cluster(workers=3, servers=1, worker_cmd=cmd, scheduler_args=["--hierarchical"],
                         worker_env=machines_env(["A", "A", "B"], local_ranks=[0, 1, 0],
                                                 local_sizes=[3, 3, 1])) as c:
        codes = c.wait_workers(timeout=30)
        assert codes == [2, 2, 2], c.dump()
        for w in c.workers:
            out = w.output()
            assert "INIT FAILED" in out, c.dump()
            assert "machine 'A' declared local size 3 but 2 workers registered" in out, c.dump()
            assert "missing local rank 2" in out, c.dump()


def test_a_tensor_only_a_non_root_pushes_fails_with_the_declaration_error():
    # Worker 2 (machine A's non-root) push_pulls a tensor nobody else declares: its operation
    # waits on the local root, and must end with the scheduler's declaration timeout, not hang.
    cmd = [cluster.binary("exact_sum_worker"), "--lonely-rank", "2"]
    with cluster.Cluster(workers=4, servers=1, worker_cmd=cmd,
                         scheduler_args=["--hierarchical", "--declare_timeout_ms=1500"],
                         worker_env=machines_env(["A", "B", "A", "B"])) as c:
        codes = c.wait_workers(timeout=20)
        assert codes == [0, 0, 4, 0], c.dump()
        out = c.workers[2].output()
        assert "LONELY FAILED" in out, c.dump()
        assert "tensor 'lonely' was not declared by workers 0, 1, 3 within 1.5 s" in out, c.dump()


def test_strategy_switch_applies_at_one_round_on_every_local_rank(tmp_path):
    # SIGHUP with a new strategy (fp16 both ways: exact for these values) mid-training: the
    # local roots switch at the agreed round, and every local rank, root or not, reports the
    # same version for each of its rounds.
    from cluster import wait_for
    from test_strategy_switch import V1, V2, check_one_switch
    import signal
    rounds = 30
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(V1)
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds),
           "--max-bytes", str(cluster.sized(1000000, 250000)), "--slow-rank", "3", "--slow-ms", "20"]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=[f"--strategy={path}", "--hierarchical"],
                         worker_env=machines_env(["A", "B", "A", "B"])) as c:
        assert wait_for(lambda: "round 10/" in c.workers[0].output(), 60), c.dump()
        with open(path, "w") as f:
            f.write(V2)
        c.scheduler.proc.send_signal(signal.SIGHUP)
        check_one_switch(c, rounds, timeout=120)
        assert sorted(server_pushes(c)) == [0, 1], c.dump()


def test_device_tensor_without_a_device_is_refused_and_host_tensors_still_sum():
    # Every worker first passes a device tensor (no device backend chosen: CUDA if the build
    # and the machine have it). Without a GPU each is refused at once with the reason, before
    # any local collective, and the host tensors that follow still sum exactly; the local
    # ranks agreed at set-up that their machine has no NCCL communicator.
    def check(c):
        for wk in c.workers:
            out = wk.output()
            if "DEVICE PRESENT" in out:
                continue  # a machine with GPUs: the device tensor went through NCCL
            assert "DEVICE REFUSED rc=-1: tensor 'on_device'" in out, c.dump()
            assert ("device tensors in a hierarchical job are not supported by this engine "
                    "(built without CUDA and NCCL" in out
                    or "no usable CUDA device for a device tensor (cudaGetDeviceCount:" in out), out
            assert "formed no NCCL communicator at set-up" in out, out
            assert "cannot join an NCCL communicator" in out, out

    run_exact(["A", "B", "A", "B"], rounds=3, worker_args=["--device-first", "1"],
              extra_env={"BYTECOMP_DEVICE_BACKEND": ""}, check=check)


def test_device_tensors_on_the_emulated_device_reduce_through_the_local_root(tmp_path):
    # The emulated device's memory is host memory, so the host reducer stands in for NCCL: this
    # checks the engine's flow for device tensors (wait for the caller's stream, reduce, the
    # root's device pipeline on the machine's sum, broadcast), not NCCL. Bit-exact against the
    # reference that applies the codec to each machine's sum; only the local roots encode.
    from test_codecs import codec_block
    rounds, elements, part = 3, 4099, 2048
    parts = -(-elements // part)
    tensors = [  # name, (codec, params, memory) or None, compress_on/decompress_on, two_way
        ("topk.twoway.gpu.dev", ("topk", {"ratio": "0.01"}, "residual"), "PLACEMENT_GPU", True),
        ("randomk.oneway.cpu.dev", ("randomk", {"ratio": "0.1"}, "residual"), "PLACEMENT_CPU_POOL", False),
        ("fp16.twoway.gpu.dev", ("fp16", {}, ""), "PLACEMENT_GPU", True),
        ("plain.dev", None, None, False),
        ("plain.dev.avg", None, None, False),
        ("plain.dev.f16", None, None, False),
        ("topk.twoway.host", ("topk", {"ratio": "0.01"}, "residual"), "PLACEMENT_CPU_POOL", True),
        ("plain.host", None, None, False),
    ]
    lines = ["seed: 77"]
    for name, codec, placement, two_way in tensors:
        lines += ["tensors {", f'  name_pattern: "{name}"']
        if codec is not None:
            lines += codec_block("push_codec", *codec)
            if two_way:
                lines += codec_block("pull_codec", *codec)
            lines += [f"  compress_on: {placement}", f"  decompress_on: {placement}", "  force: true"]
        lines.append("}")
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    encodes = rounds * parts * 2  # topk and fp16 encode on the (emulated) device
    decodes = rounds * parts * 2  # and decode there (two-way)
    cmd = [cluster.binary("codec_cluster_worker"), f"--strategy={path}", f"--rounds={rounds}",
           f"--elements={elements}", f"--partition_elements={part}", "--device",
           "--machines=0,0,1,1"]
    with cluster.Cluster(workers=4, servers=1, worker_cmd=cmd, partition_bytes=part * 4,
                         scheduler_args=[f"--strategy={path}", "--hierarchical"],
                         extra_env={"BYTECOMP_DEVICE_BACKEND": "emulated"},
                         worker_env=machines_env(["A", "A", "B", "B"])) as c:
        codes = c.wait_workers(timeout=120)
        assert codes == [0, 0, 0, 0], c.dump()
        for r, w in enumerate(c.workers):
            out = w.output()
            assert f"ALL {len(tensors)} TENSORS MATCH THE REFERENCE for {rounds} rounds" in out, c.dump()
            root = r in (0, 2)
            expected = f"EMULATED DEVICE: encodes={encodes if root else 0} decodes={decodes if root else 0}"
            assert expected in out, (r, c.dump())
        for n in [c.scheduler] + c.servers:
            assert c.wait_node(n, 15) == 0, c.dump()
        assert sorted(server_pushes(c)) == [0, 2], c.dump()


def test_auto_strategy_plans_a_hierarchical_job_per_machine(tmp_path):
    # --strategy=auto on 2 machines of 2 workers: the plan has one push per machine and every
    # option reduces inside the machine first; every node switches and the job finishes. The
    # links are slow (100 Mbit/s) so that compression pays however long the measured backward
    # pass is (under a sanitizer it is long enough to hide 1 Gbit/s links).
    plan_cluster = os.path.join(tmp_path, "cluster.pbtxt")
    with open(plan_cluster, "w") as f:
        f.write("machines: 4\ngpus_per_machine: 0\nservers: 1\ncpu_pool_threads: 2\n"
                "worker_link { bandwidth_gbps: 0.1 latency_us: 50 }\n"
                "server_link { bandwidth_gbps: 0.1 latency_us: 50 }\n"
                "intra_machine_link { bandwidth_gbps: 20 latency_us: 20 }\n")
    costs = os.path.join(os.path.dirname(__file__), "..", "..", "scheduler", "planner", "costs",
                         "nominal.pbtxt")
    cmd = [cluster.binary("bytecomp-bench"), "--preset=resnet50", "--rounds=6", "--warmup=0",
           "--check=false"]
    args = ["--hierarchical", "--strategy=auto", "--profile_rounds=2",
            f"--plan_cluster={plan_cluster}", f"--plan_costs={costs}", "--plan_links=file"]
    with cluster.Cluster(workers=4, servers=1, worker_cmd=cmd, scheduler_args=args,
                         worker_env=machines_env(["A", "A", "B", "B"])) as c:
        assert c.wait_workers(timeout=240) == [0, 0, 0, 0], c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        log = c.scheduler.output()
        planned = re.search(r"--strategy=auto: planned 162 tensors \(hierarchical, 2 machines\) "
                            r"in [\d.]+ ms: (\d+) compressed", log)
        assert planned and int(planned.group(1)) > 0, log
        assert re.search(r"strategy version 2 applies from round \d+", log), log
        assert sorted(server_pushes(c)) == [0, 2], c.dump()
