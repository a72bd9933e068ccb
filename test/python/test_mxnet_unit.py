"""Unit tests of bytecomp.mxnet against the in-process FakeEngine (threads as workers), with
real MXNet NDArrays and Gluon. Needs mxnet (the .venv-mxnet interpreter)."""

import os
import sys

import pytest

mx = pytest.importorskip("mxnet")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bytecomp.mxnet as bcm  # noqa: E402
from fake_engine import run_ranks  # noqa: E402
from mxnet_common import (make_net, max_relative_difference, params_of,  # noqa: E402
                          train_distributed, train_reference)


def test_push_pull_on_ndarrays():
    def worker(rank):
        a = mx.nd.full((4, 3), rank + 1.0)
        summed = bcm.push_pull(a, "a", average=False)
        bcm.push_pull_inplace(a, "a", average=True)
        h = bcm.push_pull_async_inplace(mx.nd.full((5,), 0.5 * (rank + 1), dtype="float16"),
                                        "h", average=False)
        half = bcm.synchronize(h)
        return summed.asnumpy(), a.asnumpy(), half.asnumpy(), str(half.dtype.__name__)

    results, _ = run_ranks(3, worker)
    for summed, averaged, half, dtype in results:
        assert (summed == 6.0).all() and (averaged == 2.0).all()
        assert dtype.endswith("float16") and (half == 3.0).all()


def test_refuses_what_the_engine_cannot_take():
    def worker(rank):
        with pytest.raises(TypeError, match="dense"):
            bcm.push_pull(mx.nd.sparse.zeros("row_sparse", (3, 2)), "s")
        with pytest.raises(TypeError, match="float64"):
            bcm.push_pull(mx.nd.zeros((3,), dtype="float64"), "d")
        with pytest.raises(TypeError, match="NDArray"):
            bcm.push_pull([1.0, 2.0], "l")

    run_ranks(1, worker)


def test_broadcast_parameters_from_root():
    def worker(rank):
        net = make_net(100 + rank)
        bcm.broadcast_parameters(net.collect_params(), root_rank=1)
        return params_of(net)

    results, _ = run_ranks(3, worker)
    want = params_of(make_net(101))
    for got in results:
        assert max_relative_difference(got, want) == 0.0


@pytest.mark.parametrize("use_kvstore", [False, True])
def test_gluon_training_equivalent_to_one_process(use_kvstore):
    results, _ = run_ranks(2, lambda r: train_distributed(bcm, r, 2, use_kvstore=use_kvstore))
    want = train_reference(2)
    for got in results:
        assert max_relative_difference(got, want) < 1e-5
    assert max_relative_difference(params_of(make_net(5)), want) > 1e-2  # training moved them


def test_kvstore_push_pull_and_broadcast():
    def worker(rank):
        kv = bcm.KVStore()
        assert kv.type == "bytecomp" and kv.num_workers == 2 and kv.rank == rank
        assert not kv.is_capable("optimizer")
        out = mx.nd.zeros((2, 2))
        kv.broadcast("w", mx.nd.full((2, 2), 7.0 + rank), out=out)
        kv.push(3, [mx.nd.ones((3,)) * (rank + 1), mx.nd.ones((3,))])  # two local copies
        pulled = mx.nd.zeros((3,))
        kv.pull(3, out=pulled)
        with pytest.raises(RuntimeError, match="without a push"):
            kv.pull(3, out=pulled)
        return out.asnumpy(), pulled.asnumpy()

    results, _ = run_ranks(2, worker)
    for out, pulled in results:
        assert (out == 7.0).all()
        assert (pulled == 5.0).all()  # (1 + 1) + (2 + 1)
