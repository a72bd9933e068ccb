"""Unit tests of bytecomp.torch's DDP hook and CPU-math helpers against the in-process
FakeEngine (threads as workers); the hook inside real DDP processes is tested by
test_cluster_torch.py."""

import os
import sys
import warnings

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bytecomp.torch as bc  # noqa: E402
from bytecomp import _cpu  # noqa: E402
from fake_engine import run_ranks  # noqa: E402

torch.set_num_threads(1)


class FakeBucket:
    """What the hook reads of a dist.GradBucket: the flat buffer, per-parameter views of it,
    the parameters, the bucket's index."""

    def __init__(self, index, params, values):
        self._index, self._params = index, params
        self._buffer = torch.cat([v.reshape(-1) for v in values])
        self._views, offset = [], 0
        for p in params:
            self._views.append(self._buffer[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def gradients(self):
        return self._views

    def parameters(self):
        return self._params


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


@pytest.mark.parametrize("per", ["parameter", "bucket"])
def test_hook_averages_each_bucket_under_stable_names_and_priorities(per):
    def worker(rank):
        model = _model()
        state = bc.DDPHookState(model, per=per)
        params = list(model.parameters())
        # DDP's bucket 0 holds the last layers (their gradients are ready first).
        buckets = [FakeBucket(0, params[2:], [torch.full_like(p, rank + 1.0) for p in params[2:]]),
                   FakeBucket(1, params[:2], [torch.full_like(p, 10.0 * rank) for p in params[:2]])]
        futures = [bc.ddp_comm_hook(state, b) for b in buckets]
        return [f.wait().clone() for f in futures], state

    results, engine = run_ranks(2, worker)
    for averaged, _ in results:
        assert torch.equal(averaged[0], torch.full_like(averaged[0], 1.5))  # (1 + 2) / 2
        assert torch.equal(averaged[1], torch.full_like(averaged[1], 5.0))  # (0 + 10) / 2
    calls = sorted({(name, priority, average) for _, name, priority, average in engine.calls})
    if per == "parameter":
        # The names DistributedOptimizer uses, first layers first (priority -index).
        assert calls == [("grad/0.bias", -1, True), ("grad/0.weight", 0, True),
                         ("grad/2.bias", -3, True), ("grad/2.weight", -2, True)]
    else:
        names = {name for name, _, _ in calls}
        assert len(names) == 2 and all(n.startswith("grad/bucket/") for n in names)
        assert sorted(p for _, p, _ in calls) == [-2, 0]  # each bucket: its first layer's
        # The same contents give the same name on every worker.
        assert results[0][1].bucket_name(("grad/2.weight", "grad/2.bias")) == \
            results[1][1].bucket_name(("grad/2.weight", "grad/2.bias"))


def test_hook_state_refuses_unknown_granularity_and_foreign_parameters():
    def worker(rank):
        with pytest.raises(ValueError, match="per must be"):
            bc.DDPHookState(_model(), per="layer")
        state = bc.DDPHookState(_model(), name_prefix="a/")
        stranger = torch.nn.Parameter(torch.zeros(3))
        with pytest.raises(RuntimeError, match="not in the model"):
            bc.ddp_comm_hook(state, FakeBucket(0, [stranger], [torch.zeros(3)]))

    run_ranks(1, worker)


def test_blas_paths_are_classified():
    lib = "/usr/lib/x86_64-linux-gnu"
    assert _cpu.classify_blas_path(f"{lib}/blas/libblas.so.3") == _cpu.REFERENCE
    assert _cpu.classify_blas_path(f"{lib}/lapack/liblapack.so.3") == _cpu.REFERENCE
    assert _cpu.classify_blas_path(f"{lib}/openblas-openmp/libblas.so.3") == _cpu.OPENBLAS
    assert _cpu.classify_blas_path(f"{lib}/libopenblas.so.0") == _cpu.OPENBLAS
    assert _cpu.classify_blas_path("/opt/intel/lib/libmkl_rt.so.2") == _cpu.MKL
    assert _cpu.classify_blas_path(f"{lib}/libgomp.so.1") is None


def test_loaded_blas_prefers_the_optimised_library(tmp_path):
    def maps(*paths):
        path = tmp_path / "maps"
        path.write_text("".join(f"7f00-7f01 r-xp 00000000 08:01 1 {p}\n" for p in paths) +
                        "7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n")
        return str(path)

    lib = "/nonexistent/x86_64-linux-gnu"
    assert _cpu.loaded_blas(maps(f"{lib}/blas/libblas.so.3"))[0] == _cpu.REFERENCE
    assert _cpu.loaded_blas(maps(f"{lib}/blas/libblas.so.3",
                                 f"{lib}/libopenblas.so.0"))[0] == _cpu.OPENBLAS
    assert _cpu.loaded_blas(maps(f"{lib}/libgomp.so.1")) == (None, None)


def test_check_cpu_math_warns_on_the_reference_blas(monkeypatch):
    monkeypatch.setattr(_cpu, "loaded_blas", lambda: (_cpu.REFERENCE, "/x/blas/libblas.so.3"))
    monkeypatch.setattr(torch.__config__, "show", lambda: "BLAS_INFO=generic")
    with pytest.warns(RuntimeWarning, match="reference BLAS.*libopenblas0"):
        assert bc.check_cpu_math() == _cpu.REFERENCE
    monkeypatch.setattr(_cpu, "loaded_blas", lambda: (_cpu.OPENBLAS, "/x/libopenblas.so.0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bc.check_cpu_math() == _cpu.OPENBLAS


def test_threads_are_shared_between_local_workers(monkeypatch):
    assert _cpu.threads_per_worker(4, cores=16) == 4
    assert _cpu.threads_per_worker(4, cores=2) == 1
    assert _cpu.threads_per_worker(0, cores=8) == 8
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        assert bc.configure_cpu_threads(local_workers=1) == 1  # an explicit setting wins
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr(_cpu, "usable_cores", lambda: 8)
        assert bc.configure_cpu_threads(local_workers=4) == 2
    finally:
        torch.set_num_threads(before)
