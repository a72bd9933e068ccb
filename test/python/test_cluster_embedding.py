"""A sparse-gradient model through bytecomp.torch on a real local cluster (W=4, S=2): an
embedding table of 1,000,000 x 16 rows trained on synthetic data of which each step touches
0.18% of the rows (workers/torch_embedding.py, which also says why exact comparison is
meaningful). blocksparse must end with the parameters of uncompressed training, bit for bit,
and move at most 1.2x the bytes of the non-zero blocks, pushed and pulled."""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import engine_available  # noqa: E402
from cluster import python_cluster as _python_cluster  # noqa: E402

available, why = engine_available()
if not available and os.environ.get("BYTECOMP_REQUIRE_ENGINE") == "1":
    raise RuntimeError(f"ctest runs these tests with the engine built, but: {why}")
needs_cluster = pytest.mark.skipif(not available, reason=why)

WORKER = os.path.join(HERE, "workers", "torch_embedding.py")
PARTITION_BYTES = 4 << 20  # whole 256-element blocks per partition


def _train(tmp_path, codec):
    from bytecomp.strategy import write_strategy
    outdir = tmp_path / codec
    outdir.mkdir()
    flags = []
    if codec != "none":
        flags = [f"--strategy={write_strategy(str(tmp_path / f'{codec}.pbtxt'), codec)}"]
    with _python_cluster(outdir, workers=4, servers=2, extra_scheduler_flags=flags,
                         partition_bytes=PARTITION_BYTES) as cluster:
        cluster.run_workers([WORKER, str(outdir)], timeout_s=240)
        cluster.check_workers_ok()
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(4)]


@needs_cluster
def test_blocksparse_embedding_equals_uncompressed_and_sends_only_the_nonzero_blocks(tmp_path):
    dense = _train(tmp_path, "none")
    sparse = _train(tmp_path, "blocksparse")
    reference = dense[0]
    assert reference["size"] == 4
    # Training moved the table: the rows the data touched, and only those (1,800 per step).
    assert reference["params_sha256"] != reference["initial_sha256"]
    assert 8 * 1500 < reference["changed_rows"] <= 8 * 1800, reference
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
