"""bytecomp.torch on a real local cluster (scheduler, servers and worker processes on
loopback): equivalence with one process, convergence on digits, and the error cases."""

import json
import os
import sys
import time

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

from cluster import (REPO, engine_available, free_port, run_command,  # noqa: E402
                     run_python, sized)
from cluster import python_cluster as _python_cluster  # noqa: E402
from equivalence_common import max_relative_difference, train_reference  # noqa: E402

available, why = engine_available()
if not available and os.environ.get("BYTECOMP_REQUIRE_ENGINE") == "1":
    raise RuntimeError(f"ctest runs these tests with the engine built, but: {why}")
needs_cluster = pytest.mark.skipif(not available, reason=why)


def python_cluster(*args, **kwargs):
    """The harness's cluster for Python workers that import this folder's helpers."""
    return _python_cluster(*args, python_path=[HERE], **kwargs)


WORKERS = os.path.join(HERE, "workers")


def _check_all_ok(results, cluster):
    cluster.check_workers_ok()


@needs_cluster
def test_equivalence_w4_averaging_summation_and_local_accumulation(tmp_path):
    with python_cluster(tmp_path, workers=4, servers=2) as cluster:
        results = cluster.run_workers([os.path.join(WORKERS, "torch_equivalence.py"),
                                       str(tmp_path)], timeout_s=90)
        _check_all_ok(results, cluster)
        assert cluster.wait_scheduler() == 0, cluster.dump()
    torch.set_num_threads(1)
    for mode, average in (("average", True), ("sum", False), ("accumulate", True),
                          ("cross_barrier", True)):
        want = train_reference(4, average=average)
        for rank in range(4):
            got = torch.load(tmp_path / f"rank{rank}.pt")
            assert got["size"] == 4
            diff = max_relative_difference(got[mode], want)
            assert diff < 1e-5, f"rank {rank} {mode}: relative difference {diff}"


@needs_cluster
def test_ddp_comm_hook_equals_ddp_over_gloo_w4_digits(tmp_path):
    """DistributedDataParallel with bytecomp.torch.ddp_comm_hook (per parameter and per bucket,
    several buckets that DDP rebuilds after the first step) ends 20 steps on digits with the
    parameters DDP over gloo reaches."""
    with python_cluster(tmp_path, workers=4, servers=2) as cluster:
        results = cluster.run_workers([os.path.join(WORKERS, "torch_ddp.py"), str(tmp_path)],
                                      timeout_s=150)
        _check_all_ok(results, cluster)
    torch.set_num_threads(1)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(4)]
    gloo = ranks[0]["gloo"]
    assert gloo["buckets"] == 0 and gloo["pushed_bytes"] == 0
    # The reference trained: 20 steps moved it well away from rank 0's initial model.
    assert max_relative_difference(gloo["params"], ranks[0]["init"]) > 0.01
    for rank, got in enumerate(ranks):
        assert got["size"] == 4
        for per in ("parameter", "bucket"):
            run = got[per]
            assert run["buckets"] >= 2, f"{per}: DDP used {run['buckets']} bucket(s)"
            # Every step pushed every gradient (4 bytes per parameter) through ByteComp.
            n_params = sum(t.numel() for t in gloo["params"].values())
            assert run["pushed_bytes"] >= 20 * 4 * n_params, (per, run["pushed_bytes"])
            diff = max_relative_difference(run["params"], gloo["params"])
            assert diff < 1e-5, f"rank {rank} per {per}: relative difference {diff} to gloo"
            diff_ranks = max_relative_difference(run["params"], ranks[0][per]["params"])
            assert diff_ranks == 0.0, f"rank {rank} per {per} differs from rank 0"


# The table's rows. The compressed rows (topk 1% + residual, onebit + residual, qsgd,
# efsignsgd, dgc, powersgd rank 2, randomk 10% + residual, artopk 1% + residual) run once the
# engine applies
# strategies: train_digits.SUPPORTED_CODECS lists what it applies today, and
# train_digits.SCHEDULER_STRATEGY_FLAG names the scheduler's strategy-file flag.
CONVERGENCE_ROWS = ["none", "topk", "onebit", "qsgd", "efsignsgd", "dgc", "powersgd", "randomk",
                    "artopk"]
# Plain SGD: error-feedback codecs (topk, onebit, randomk, efsignsgd, dgc with its own momentum
# correction) diverge at this learning rate under heavy optimizer momentum (measured: momentum
# 0.9, lr 0.1 drops onebit to 0.30, randomk and dgc to chance), as DGC prescribes dropping the
# optimizer's momentum. With momentum 0 every row converges.
# Under a sanitizer, the rows whose paths through the engine differ: uncompressed, a one-round
# sparse codec with residual memory (topk), a quantizer (qsgd) and the two-round codecs
# (powersgd, artopk). integration.codecs runs every codec one- and two-way through a cluster
# there.
TABLE_ROWS = sized(CONVERGENCE_ROWS, ["none", "topk", "qsgd", "powersgd", "artopk"])
EPOCHS, SEED, LR, MOMENTUM = 20, 42, 0.3, 0.0
NONE_MIN_ACCURACY = 0.94      # measured 0.958 for these seeds with the in-process fake engine
MAX_DROP_POINTS = 1.5         # compressed rows: within 1.5 points of the uncompressed run


def _train_digits(tmp_path, codec):
    import train_digits
    from bytecomp.strategy import write_strategy
    outdir = tmp_path / codec
    outdir.mkdir()
    scheduler_flags = []
    if codec != "none":
        path = write_strategy(str(tmp_path / f"{codec}.pbtxt"), codec, force=True)
        scheduler_flags = [f"{train_digits.SCHEDULER_STRATEGY_FLAG}={path}"]
    with python_cluster(tmp_path / codec, workers=4, servers=1,
                      extra_scheduler_flags=scheduler_flags) as cluster:
        start = time.monotonic()
        results = cluster.run_workers(
            [os.path.join(REPO, "examples", "train_digits.py"), "--codec", codec,
             "--epochs", str(EPOCHS), "--seed", str(SEED), "--lr", str(LR),
             "--momentum", str(MOMENTUM), "--json-out", str(outdir)],
            timeout_s=180)
        _check_all_ok(results, cluster)
        wall = time.monotonic() - start
    ranks = [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(4)]
    assert len({r["param_checksum"] for r in ranks}) == 1, "workers ended with different models"
    return ranks[0], wall, results[0].output()


@needs_cluster
def test_convergence_table_digits_w4(tmp_path):
    import train_digits
    rows = {}
    for codec in TABLE_ROWS:
        assert codec in train_digits.SUPPORTED_CODECS, codec
        rows[codec] = _train_digits(tmp_path, codec)
    base = rows["none"][0]["final_accuracy"]
    print(f"\ndigits MLP, W=4, S=1, {EPOCHS} epochs, SGD lr {LR} momentum {MOMENTUM}, seed {SEED}")
    print(f"{'codec':<10} {'test acc':>9} {'vs none':>8} {'samples/s':>10} {'sent/uncompressed':>18}")
    for codec, row in rows.items():
        if row is None:
            continue
        result, wall, _ = row
        last = result["epochs"][-1]
        ratio = ("n/a" if last["bytes_sent"] is None
                 else f"{last['bytes_sent'] / last['bytes_uncompressed']:.3f}")
        median_rate = sorted(e["samples_per_s"] for e in result["epochs"])[EPOCHS // 2]
        print(f"{codec:<10} {result['final_accuracy']:>9.4f} "
              f"{100 * (result['final_accuracy'] - base):>+7.2f}p {median_rate:>10.0f} "
              f"{ratio:>18}")
    assert base >= NONE_MIN_ACCURACY, rows["none"][2]
    for codec, row in rows.items():
        if row is not None:
            assert row[0]["final_accuracy"] >= base - MAX_DROP_POINTS / 100, codec


@needs_cluster
def test_adaptive_ratio_changes_on_every_node_at_the_same_round(tmp_path):
    """artopk with an adaptive ratio: thresholds that raise the ratio after every window (kept
    energy below 1 is always "too little"), windows of 5 rounds. The ratio changes at least
    once, the scheduler logs each change with its reason, and every worker runs each strategy
    version from the same round on."""
    from bytecomp.strategy import write_strategy
    steps = 40
    strategy = write_strategy(
        str(tmp_path / "adaptive.pbtxt"), "artopk", force=True,
        adaptive_ratio={"min_ratio": 0.01, "max_ratio": 0.08, "window_rounds": 5,
                        "raise_below_kept": 1.0, "lower_above_kept": 1.0})
    with python_cluster(tmp_path, workers=4, servers=2,
                        extra_scheduler_flags=[f"--strategy={strategy}"]) as cluster:
        results = cluster.run_workers(
            [os.path.join(WORKERS, "torch_adaptive_ratio.py"), str(tmp_path), str(steps)],
            timeout_s=180)
        _check_all_ok(results, cluster)
        log = cluster.scheduler.output()
    changes = [line for line in log.splitlines() if "adaptive ratio: entry 'grad/*'" in line]
    print("\n" + "\n".join(changes))
    assert changes, log
    assert "ratio 0.01 -> 0.02" in changes[0] and "kept energy" in changes[0], changes[0]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    sequences = [[version for _, version in r["rounds"]] for r in records]
    assert all(s == sequences[0] for s in sequences), sequences
    versions = sequences[0]
    assert versions[0] == 1 and versions[-1] >= 2 and versions == sorted(versions), versions
    # Every change is a version every worker started at the same round.
    switches = {v: versions.index(v) for v in set(versions)}
    for r in records:
        assert [round_ for round_, _ in r["rounds"]] == list(range(steps)), r["rounds"]
    print(f"versions by first round: {switches}; accuracy {records[0]['accuracy']:.3f}")


def _records(tmp_path, n):
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]


@needs_cluster
def test_size_differing_between_workers_fails_every_worker_clearly(tmp_path):
    with python_cluster(tmp_path, workers=3, servers=1) as cluster:
        results = cluster.run_workers([os.path.join(WORKERS, "torch_errors.py"),
                                       "size_mismatch", str(tmp_path)], timeout_s=60)
        _check_all_ok(results, cluster)
    for rec in _records(tmp_path, 3):
        kind, *rest = rec["push_pull"]
        assert kind == "error", f"rank {rec['rank']} got a result: {rest}"
        message = rest[1]
        assert "'mismatch'" in message, message  # the tensor's name...
        assert "10 elements" in message and "12 elements" in message, message  # both sizes
        assert rec["seconds"] < 30


@needs_cluster
def test_same_name_declared_with_another_size_is_an_error(tmp_path):
    with python_cluster(tmp_path, workers=1, servers=1) as cluster:
        results = cluster.run_workers([os.path.join(WORKERS, "torch_errors.py"),
                                       "double_declare", str(tmp_path)], timeout_s=60)
        _check_all_ok(results, cluster)
    rec = _records(tmp_path, 1)[0]
    for key in ("declare_other_size", "declare_other_dtype", "push_pull_other_size"):
        kind, cls, message = rec[key]
        assert kind == "error" and cls == "BytecompInvalidArgumentError", rec[key]
        assert "twice" in message and "10" in message, message
    assert "12" in rec["declare_other_size"][2]
    assert rec["still_works"] == ["ok", [2.0] * 10]


@needs_cluster
def test_shutdown_with_operations_in_flight_never_hangs(tmp_path):
    # The engine lets operations in flight finish for the time a failed peer takes to be
    # detected (heartbeat timeout + 5 s), then fails them.
    heartbeat_timeout_ms = 2000
    with python_cluster(tmp_path, workers=2, servers=1,
                      heartbeat_timeout_ms=heartbeat_timeout_ms) as cluster:
        results = cluster.run_workers([os.path.join(WORKERS, "torch_errors.py"),
                                       "shutdown_inflight", str(tmp_path)], timeout_s=60)
        _check_all_ok(results, cluster)
        assert cluster.wait_scheduler() == 0, cluster.dump()
    records = {r["rank"]: r for r in _records(tmp_path, 2)}
    assert records[0]["shutdown_seconds"] < heartbeat_timeout_ms / 1000 + 5 + 3
    assert len(records[0]["handles"]) == 4
    for outcome in records[0]["handles"]:
        # Completed (the sum of ones over both workers) or failed with an error: never hung.
        assert outcome[0] == "error" or outcome == ["ok", 2.0 * (1 << 20)], outcome
        if outcome[0] == "error":
            assert outcome[1] in ("BytecompShutdownError", "BytecompUnavailableError"), outcome


def test_worker_without_reachable_scheduler_fails_within_timeout_naming_address():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = dict(os.environ)
    env.update(BYTECOMP_SCHEDULER=address, BYTECOMP_CONNECT_TIMEOUT_MS="1500",
               PYTHONPATH=os.path.join(REPO, "shim"))
    # init alone is timed, in the child: importing torch on a loaded machine takes seconds.
    code = ("import time, bytecomp, bytecomp.torch as bc\n"
            "start = time.monotonic()\n"
            "try:\n    bc.init()\nexcept bytecomp.BytecompError as e:\n"
            "    print('ERROR', type(e).__name__, e)\nelse:\n    print('NO ERROR')\n"
            "print('INIT_SECONDS', time.monotonic() - start)\n")
    rc, out, _ = run_python(code, env, timeout_s=60)
    assert rc == 0, out
    assert "ERROR" in out and "NO ERROR" not in out, out
    assert address in out, out
    seconds = float(out.split("INIT_SECONDS")[1].split()[0])
    assert seconds < 1.5 + 5, f"init took {seconds:.1f} s with a 1.5 s connect timeout"


LAUNCHER = os.environ.get("BYTECOMP_RUN") or os.path.join(REPO, "deploy", "bytecomp-run")


@needs_cluster
@pytest.mark.skipif(not os.path.isfile(LAUNCHER), reason=f"{LAUNCHER} not present")
def test_example_launches_its_own_cluster_with_bytecomp_run(tmp_path):
    """README command (a)'s path: the example, started without a launcher, runs itself under
    bytecomp-run (scheduler, servers, W workers) and prints its per-epoch line."""
    env = dict(os.environ, BYTECOMP_RUN=LAUNCHER, OMP_NUM_THREADS="1")
    env.pop("BYTECOMP_SCHEDULER", None)
    rc, out, _ = run_command(
        [sys.executable, os.path.join(REPO, "examples", "train_digits.py"), "--workers", "2",
         "--servers", "1", "--epochs", "2", "--json-out", str(tmp_path)], env, timeout_s=120)
    assert rc == 0, out
    assert "epoch   2  loss" in out and "samples/s" in out and "uncompressed" in out, out
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["size"] for r in results] == [2, 2]
    assert results[0]["param_checksum"] == results[1]["param_checksum"]


def test_engine_calls_before_init_fail_clearly():
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "shim"))
    env.pop("BYTECOMP_SCHEDULER", None)
    code = ("import torch, bytecomp, bytecomp.torch as bc\n"
            "assert not bc.is_initialized()\n"
            "for f in (bc.rank, lambda: bc.push_pull(torch.ones(2), 'x')):\n"
            "    try:\n        f()\n    except bytecomp.BytecompNotInitializedError as e:\n"
            "        print('NOT_INITIALIZED', e)\n")
    rc, out, _ = run_python(code, env, timeout_s=60)
    assert rc == 0, out
    assert out.count("NOT_INITIALIZED") == 2 and "bytecomp_init" in out, out


@needs_cluster
def test_checkpoint_restores_error_feedback(tmp_path):
    """A checkpoint holds the codecs' error-feedback state: resuming from it repeats the
    original run's last steps bit for bit; dropping that state changes the result."""
    from bytecomp.strategy import write_strategy
    strategy = write_strategy(str(tmp_path / "topk.pbtxt"), "topk", force=True)
    script = os.path.join(WORKERS, "torch_checkpoint.py")
    for mode in ("train", "resume", "no_ef"):
        (tmp_path / mode).mkdir()
        with python_cluster(tmp_path / mode, workers=2, servers=1,
                          extra_scheduler_flags=[f"--strategy={strategy}"]) as cluster:
            results = cluster.run_workers([script, mode, str(tmp_path)], timeout_s=60)
            _check_all_ok(results, cluster)
    for rank in range(2):
        trained = torch.load(tmp_path / f"rank{rank}.train.pt")
        resumed = torch.load(tmp_path / f"rank{rank}.resume.pt")
        no_ef = torch.load(tmp_path / f"rank{rank}.no_ef.pt")
        assert all(torch.equal(a, b) for a, b in zip(trained, resumed)), f"rank {rank}"
        assert not all(torch.equal(a, b) for a, b in zip(trained, no_ef)), f"rank {rank}"


def _train_ddp(tmp_path, codec):
    """examples/train_ddp.py (DDP + ddp_comm_hook) on a W=4 cluster with the codec's preset
    for every gradient; returns rank 0's figures."""
    from bytecomp.strategy import write_strategy
    outdir = tmp_path / f"ddp-{codec}"
    outdir.mkdir()
    flags = []
    if codec != "none":
        path = write_strategy(str(tmp_path / f"ddp-{codec}.pbtxt"), codec, force=True)
        flags = [f"--strategy={path}"]
    with python_cluster(outdir, workers=4, servers=2, extra_scheduler_flags=flags) as cluster:
        results = cluster.run_workers(
            [os.path.join(REPO, "examples", "train_ddp.py"), "--comm", "bytecomp", "--hidden",
             "128", "--batch-size", "16", "--lr", str(LR), "--epochs", str(EPOCHS),
             "--seed", str(SEED), "--json-out", str(outdir)], timeout_s=240)
        _check_all_ok(results, cluster)
    ranks = [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(4)]
    assert len({r["param_checksum"] for r in ranks}) == 1, "workers ended with different models"
    return ranks[0]


@needs_cluster
def test_ddp_comm_hook_converges_with_compression_digits_w4(tmp_path):
    """DDP through the hook reaches the uncompressed accuracy, and with top-k 1% (error
    feedback) stays within MAX_DROP_POINTS of it while pushing a small fraction of the bytes."""
    none, topk = _train_ddp(tmp_path, "none"), _train_ddp(tmp_path, "topk")
    print(f"\nDDP + ddp_comm_hook, digits MLP 64-128-128-10, W=4, {EPOCHS} epochs: "
          f"none {none['final_accuracy']:.4f} ({none['engine_bytes_per_step']:.0f} B/step), "
          f"topk {topk['final_accuracy']:.4f} ({topk['engine_bytes_per_step']:.0f} B/step)")
    assert none["final_accuracy"] >= NONE_MIN_ACCURACY
    assert topk["final_accuracy"] >= none["final_accuracy"] - MAX_DROP_POINTS / 100
    # Uncompressed: every parameter pushed and pulled once per step (fp32).
    assert none["engine_bytes_per_step"] >= 2 * 4 * none["params"]
    # topk 1% pushes (index, value) pairs for 1% of each gradient; pulls stay dense (one-way).
    assert topk["engine_bytes_per_step"] < 0.6 * none["engine_bytes_per_step"]
    assert topk["param_checksum"] != none["param_checksum"]  # compression changed the training


def _digits_run(tmp_path, name, kill_server_at_epoch=None):
    """W=2, S=2, uncompressed, 40 epochs of digits; with kill_server_at_epoch, server 1 is killed
    (SIGKILL) once rank 0 printed that epoch and started again for its rank. Returns (rank 0's
    result, seconds from the kill to the replacement taking over or None)."""
    import signal
    outdir = tmp_path / name
    outdir.mkdir()
    with python_cluster(tmp_path / f"{name}-cluster", workers=2, servers=2) as cluster:
        cluster.start_workers([sys.executable, os.path.join(REPO, "examples", "train_digits.py"),
                               "--epochs", "40", "--seed", str(SEED), "--lr", str(LR),
                               "--json-out", str(outdir)])
        takeover = None
        if kill_server_at_epoch is not None:
            mark = f"epoch {kill_server_at_epoch:3d}"
            # Rank 0 prints (ranks go in arrival order: any of the processes).
            ok = cluster_wait(lambda: any(mark in w.output() for w in cluster.workers), 120)
            assert ok, cluster.dump()
            killed_at = time.monotonic()
            cluster.servers[1].proc.send_signal(signal.SIGKILL)
            cluster.wait_node(cluster.servers[1], 5)
            cluster.restart_server(1)
            ok = cluster_wait(lambda: "is back" in cluster.scheduler.output(), 30)
            assert ok, cluster.dump()
            takeover = time.monotonic() - killed_at
        codes = cluster.wait_workers(180)
        assert codes == [0, 0], cluster.dump()
        if kill_server_at_epoch is not None:
            assert all("replacement at tcp://" in w.output() for w in cluster.workers), \
                cluster.dump()
    ranks = [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    return ranks[0], takeover


def cluster_wait(predicate, timeout):
    from cluster import wait_for
    return wait_for(predicate, timeout)


@needs_cluster
def test_a_server_killed_and_restarted_mid_training_ends_with_the_same_parameters(tmp_path):
    """Server failover in a real training run: with server 1 killed in epoch 10 and started
    again, training ends with exactly the parameters of an uninterrupted run (tolerance 0: with
    W=2 each sum a + b is the same float whatever the order, the replacement sums the round it
    sums again from the same pushes, and the run is otherwise deterministic: same seed, one
    thread per worker)."""
    plain, _ = _digits_run(tmp_path, "plain")
    killed, takeover = _digits_run(tmp_path, "killed", kill_server_at_epoch=10)
    print(f"\nserver killed in epoch 10: replacement took over {takeover:.2f} s after the kill; "
          f"final accuracy {killed['final_accuracy']:.4f} (uninterrupted "
          f"{plain['final_accuracy']:.4f}), parameter checksum {killed['param_checksum']!r}")
    assert killed["param_checksum"] == plain["param_checksum"]
    assert [e["loss"] for e in killed["epochs"]] == [e["loss"] for e in plain["epochs"]]
    assert killed["final_accuracy"] == plain["final_accuracy"]
