"""bytecomp.mxnet on a real local cluster: Gluon training with W=2 workers equals one process
on the concatenated batch (DistributedTrainer and Gluon's Trainer over bytecomp's KVStore)."""

import os
import sys

import numpy as np
import pytest

pytest.importorskip("mxnet")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import engine_available, python_cluster as _python_cluster  # noqa: E402
from mxnet_common import max_relative_difference, train_reference  # noqa: E402

available, why = engine_available()
if not available and os.environ.get("BYTECOMP_REQUIRE_ENGINE") == "1":
    raise RuntimeError(f"ctest runs these tests with the engine built, but: {why}")


def python_cluster(*args, **kwargs):
    """The harness's cluster for Python workers that import this folder's helpers."""
    return _python_cluster(*args, python_path=[HERE], **kwargs)


@pytest.mark.skipif(not available, reason=why)
def test_gluon_training_w2_equals_one_process(tmp_path):
    with python_cluster(tmp_path, workers=2, servers=1) as cluster:
        cluster.run_workers([os.path.join(HERE, "workers", "mxnet_gluon.py"),
                                       str(tmp_path)], timeout_s=90, python=sys.executable)
        cluster.check_workers_ok()
    want = train_reference(2)
    for rank in range(2):
        saved = np.load(tmp_path / f"rank{rank}.npz")
        assert int(saved["size"]) == 2
        for mode in ("trainer", "kvstore"):
            got = {k.split("/", 1)[1]: saved[k] for k in saved.files if k.startswith(mode + "/")}
            assert sorted(got) == sorted(want)
            diff = max_relative_difference(got, want)
            assert diff < 1e-5, f"rank {rank} {mode}: relative difference {diff}"


MXNET_MIN_ACCURACY = 0.94  # measured 0.9749 (W=2, 10 epochs, seed 42; W=2 sums are exact)


@pytest.mark.skipif(not available, reason=why)
def test_gluon_digits_w2_reaches_accuracy(tmp_path):
    repo = os.path.dirname(os.path.dirname(HERE))
    with python_cluster(tmp_path, workers=2, servers=1) as cluster:
        cluster.run_workers(
            [os.path.join(repo, "examples", "train_digits_mxnet.py"), "--epochs", "10",
             "--seed", "42", "--json-out", str(tmp_path)], timeout_s=120,
            python=sys.executable)
        cluster.check_workers_ok()
    import json
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    accuracy = ranks[0]["final_accuracy"]
    print(f"\nGluon digits MLP, W=2, S=1, 10 epochs: test accuracy {accuracy:.4f}")
    assert accuracy >= MXNET_MIN_ACCURACY
