"""A sparse-gradient model through bytecomp.torch on a real local cluster (W=4, S=2): an
embedding table of 1,000,000 x 16 rows trained on synthetic data of which each step touches
0.18% of the rows (workers/torch_embedding.py, which also says why exact comparison is
meaningful). blocksparse must end with the parameters of uncompressed training, bit for bit,
and move at most 1.2x the bytes of the non-zero blocks, pushed and pulled."""

import json
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import engine_available  # noqa: E402
from cluster import python_cluster as _python_cluster  # noqa: E402
from cluster import sized, write_plan_cluster  # noqa: E402

available, why = engine_available()
if not available and os.environ.get("BYTECOMP_REQUIRE_ENGINE") == "1":
    raise RuntimeError(f"ctest runs these tests with the engine built, but: {why}")
needs_cluster = pytest.mark.skipif(not available, reason=why)

WORKER = os.path.join(HERE, "workers", "torch_embedding.py")
REPO = os.path.join(HERE, "..", "..")
PARTITION_BYTES = 4 << 20  # whole 256-element blocks per partition


def _run(outdir, flags, steps):
    """Trains on W=4, S=2 with the scheduler's flags; (each rank's figures, scheduler log)."""
    outdir.mkdir()
    with _python_cluster(outdir, workers=4, servers=2, extra_scheduler_flags=flags,
                         partition_bytes=PARTITION_BYTES) as cluster:
        cluster.run_workers([WORKER, str(outdir), str(steps)], timeout_s=240)
        cluster.check_workers_ok()
        log = cluster.scheduler.output()
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(4)], log


def _train(tmp_path, codec, steps=8):
    from bytecomp.strategy import write_strategy
    flags = []
    if codec != "none":
        flags = [f"--strategy={write_strategy(str(tmp_path / f'{codec}.pbtxt'), codec)}"]
    return _run(tmp_path / f"{codec}-{steps}", flags, steps)[0]


@needs_cluster
def test_blocksparse_embedding_equals_uncompressed_and_sends_only_the_nonzero_blocks(tmp_path):
    steps = sized(8, 4)  # fewer steps under a sanitizer
    dense = _train(tmp_path, "none", steps)
    sparse = _train(tmp_path, "blocksparse", steps)
    reference = dense[0]
    assert reference["size"] == 4
    # Training moved the table: the rows the data touched, and only those (1,800 per step).
    assert reference["params_sha256"] != reference["initial_sha256"]
    assert steps * 1500 < reference["changed_rows"] <= steps * 1800, reference
    for rank in range(4):
        assert dense[rank]["params_sha256"] == reference["params_sha256"], f"none rank {rank}"
        got = sparse[rank]
        assert got["initial_sha256"] == reference["initial_sha256"]
        assert got["params_sha256"] == reference["params_sha256"], (
            f"blocksparse rank {rank} ended with other parameters than uncompressed training")
        # Uncompressed moves the whole table each step; blocksparse the non-zero blocks, plus
        # per partition a 16-byte header and its positions.
        assert dense[rank]["pushed_bytes"] == got["raw_bytes"]
        for moved, nonzero in (("pushed_bytes", "nonzero_block_bytes_pushed"),
                               ("pulled_bytes", "nonzero_block_bytes_summed")):
            assert got[nonzero] > 0
            assert got[nonzero] <= got[moved] <= 1.2 * got[nonzero], (rank, moved, got)
        # And the blocks are few: about 500 of 65,536 per step pushed, 1,800 pulled.
        assert got["pushed_bytes"] < 0.02 * got["raw_bytes"], got
        assert got["pulled_bytes"] < 0.05 * got["raw_bytes"], got
        print(f"rank {rank}: pushed {got['pushed_bytes']} bytes for "
              f"{got['nonzero_block_bytes_pushed']} in non-zero blocks "
              f"({got['pushed_bytes'] / got['nonzero_block_bytes_pushed']:.4f}x), pulled "
              f"{got['pulled_bytes']} for {got['nonzero_block_bytes_summed']} "
              f"({got['pulled_bytes'] / got['nonzero_block_bytes_summed']:.4f}x); uncompressed "
              f"pushed {dense[rank]['pushed_bytes']}")


@needs_cluster
def test_auto_strategy_picks_blocksparse_for_the_embedding_and_changes_no_result(tmp_path):
    """--strategy=auto on the real cluster: the workers profile the first rounds uncompressed
    (ready times and the gradient's block density), the scheduler plans for 4 machines without
    GPUs on 1 Gbit/s links (as described: loopback's probed links would make compression
    pointless) with the nominal cost table and the default loss policy (topk with
    residual, which is compensated, would be allowed too), and every node switches at one
    round. The planner takes blocksparse for the table: lossless, and about as fast as top-k
    on a gradient 1.5% of whose blocks are non-zero. So training ends with the parameters of
    uncompressed training, bit for bit, and the steps after the switch push only the blocks."""
    steps = 12
    dense = _train(tmp_path, "none", steps)
    plan = tmp_path / "plan.pbtxt"
    machines = write_plan_cluster(tmp_path / "cluster.pbtxt", machines=4, servers=2)
    costs = os.path.join(REPO, "scheduler", "planner", "costs", "nominal.pbtxt")
    auto, log = _run(tmp_path / "auto",
                     ["--strategy=auto", "--profile_rounds=2", f"--plan_out={plan}",
                      f"--plan_cluster={machines}", "--plan_links=file",
                      f"--plan_costs={costs}"], steps)
    planned = re.search(r"--strategy=auto: planned 1 tensors \(flat\) in [\d.]+ ms: "
                        r"1 compressed", log)
    assert planned, log
    text = plan.read_text()
    codecs = re.findall(r'push_codec \{\s*name: "([^"]*)"', text)
    assert codecs == ["blocksparse"], text
    switch = re.search(r"strategy version 2 applies from round (\d+)", log)
    assert switch, log
    first = int(switch.group(1))
    assert 2 <= first < steps - 2, log  # after the profiled rounds, with rounds left to run
    raw_per_step = dense[0]["raw_bytes"] // steps
    reference = dense[0]["params_sha256"]
    for rank in range(4):
        got = auto[rank]
        assert got["params_sha256"] == reference, (
            f"rank {rank}: the planned run ended with other parameters than uncompressed "
            "training")
        # Rounds count from 0, one per step: before the switch whole pushes, after it the
        # non-zero blocks (about 1% of the table).
        pushed = got["pushed_bytes_per_step"]
        assert pushed[:first] == [raw_per_step] * first, (rank, first, pushed)
        assert all(0 < b < 0.02 * raw_per_step for b in pushed[first:]), (rank, first, pushed)
    print(f"planned blocksparse, switched at round {first} of {steps}; pushed per step "
          f"{auto[0]['pushed_bytes_per_step']}")
