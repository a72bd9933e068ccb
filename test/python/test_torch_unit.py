"""Unit tests of bytecomp.torch's Python logic against the in-process FakeEngine (threads as
workers). The engine itself is exercised by the test_cluster_*.py tests."""

import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bytecomp  # noqa: E402
import bytecomp.torch as bc  # noqa: E402
from bytecomp import _core, _engine  # noqa: E402
from equivalence_common import (make_model, max_relative_difference,  # noqa: E402
                                train_distributed, train_reference)
from fake_engine import FakeEngine, run_ranks  # noqa: E402

torch.set_num_threads(1)


def test_push_pull_sum_and_average():
    def worker(rank):
        t = torch.full((5,), float(rank + 1))
        summed = bc.push_pull(t, "t", average=False)
        averaged = bc.push_pull(t, "t", average=True)
        return t.clone(), summed, averaged

    results, _ = run_ranks(3, worker)
    for rank, (original, summed, averaged) in enumerate(results):
        assert torch.equal(original, torch.full((5,), float(rank + 1)))  # input untouched
        assert torch.equal(summed, torch.full((5,), 6.0))
        assert torch.equal(averaged, torch.full((5,), 2.0))


def test_inplace_on_non_contiguous_tensor_and_half_types():
    def worker(rank):
        base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
        view = base.t()  # not contiguous: goes through a contiguous copy and back
        assert not view.is_contiguous()
        h = bc.push_pull_async_inplace(view, "view", average=False)
        assert bc.synchronize(h) is view
        half = bc.push_pull(torch.full((7,), 0.5 * (rank + 1), dtype=torch.float16), "half",
                            average=False)
        bf = bc.push_pull(torch.full((3,), 1.0 * (rank + 1), dtype=torch.bfloat16), "bf",
                          average=True)
        return base, half, bf

    results, _ = run_ranks(2, worker)
    for base, half, bf in results:
        assert torch.equal(base, torch.arange(12, dtype=torch.float32).reshape(3, 4) * 3)
        assert half.dtype == torch.float16 and torch.equal(half, torch.full((7,), 1.5).half())
        assert bf.dtype == torch.bfloat16 and torch.equal(bf, torch.full((3,), 1.5).bfloat16())


def test_unsupported_tensors_are_refused_clearly():
    engine = FakeEngine(1)
    old = _engine.set_engine(engine)
    try:
        engine.bind(0)
        with pytest.raises(TypeError, match="float64"):
            bc.push_pull(torch.zeros(3, dtype=torch.float64), "d")
        with pytest.raises(NotImplementedError, match="CPU or CUDA memory only"):
            bc.push_pull(torch.zeros(3, device="meta"), "m")
        with pytest.raises(TypeError, match="dense"):
            bc.push_pull(torch.zeros(3).to_sparse(), "s")
        # A zero-element tensor needs no engine call and completes at once.
        h = bc.push_pull_async(torch.zeros(0), "empty")
        assert bc.poll(h) and bc.synchronize(h).numel() == 0
        assert engine.calls == []
    finally:
        _engine.set_engine(old)


def test_cuda_tensors_go_to_the_device_api_with_their_device_and_current_stream(monkeypatch):
    # No CUDA here: what is checked is the shim's routing, with torch.cuda.current_stream
    # stubbed; the engine's device path itself is tested on the emulated device
    # (test/integration/test_device_placement.py).
    class Stream:
        cuda_stream = 0x5157

    seen = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: seen.append(device) or Stream())

    class CudaView:
        device = torch.device("cuda", 1)

    assert bc._device_of(CudaView()) == (1, 0x5157)
    assert seen == [torch.device("cuda", 1)]
    assert bc._device_of(torch.zeros(2)) is None

    def worker(rank):
        t = torch.full((4,), float(rank + 1))
        h = _core.start_push_pull("d", t.data_ptr(), 4, _engine.FLOAT32, 0, False,
                                  keepalive=t, result=t, device=(rank, 100 + rank))
        return bc.synchronize(h)

    results, engine = run_ranks(2, worker)
    for got in results:
        assert torch.equal(got, torch.full((4,), 3.0))
    assert sorted(engine.device_calls) == [(0, "d", 0, 100), (1, "d", 1, 101)]
    assert engine.calls and all(c[1] == "d" for c in engine.calls)


@pytest.mark.parametrize("average", [True, False])
def test_distributed_optimizer_equivalent_to_one_process_on_concatenated_batch(average):
    results, _ = run_ranks(4, lambda r: train_distributed(bc, r, 4, average=average))
    want = train_reference(4, average=average)
    for got in results:
        assert max_relative_difference(got, want) < 1e-5
    # ...and the initial parameters were really different before the broadcast.
    assert not torch.equal(make_model(8)[0].weight, make_model(7)[0].weight)


def test_cross_barrier_equivalent_to_one_process_on_concatenated_batch():
    results, _ = run_ranks(4, lambda r: train_distributed(bc, r, 4, cross_barrier=True))
    want = train_reference(4)
    for got in results:
        assert max_relative_difference(got, want) < 1e-5


def test_backward_passes_per_step_accumulates_locally():
    results, _ = run_ranks(2, lambda r: train_distributed(bc, r, 2, average=True, steps=5,
                                                          backward_passes_per_step=2))
    want = train_reference(2, average=True, steps=5)
    for got in results:
        assert max_relative_difference(got, want) < 1e-5


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cross_barrier_updates_each_layer_at_its_next_forward_with_the_same_result(optimizer):
    """model= defers each parameter's update to the next forward reaching its module: step()
    returns with the parameters untouched, the first layer is updated before it runs, the
    last one only when the forward reaches it; training ends where the usual step() ends."""
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            "adam": lambda ps: torch.optim.Adam(ps, lr=0.01)}[optimizer]

    def worker(rank, cross):
        model = make_model(3)
        opt = bc.DistributedOptimizer(make(model.parameters()), model.named_parameters(),
                                      model=model if cross else None)
        g = torch.Generator().manual_seed(10 + rank)
        seen = []
        if cross:
            # Each Linear's weight as its forward begins (hooks registered after the
            # optimizer's run after them).
            for m in model:
                if isinstance(m, torch.nn.Linear):
                    m.register_forward_pre_hook(
                        lambda mod, _i: seen.append(mod.weight.detach().clone()))
        for step in range(4):
            x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
            F.cross_entropy(model(x), y).backward()
            before = [p.detach().clone() for p in model.parameters()]
            opt.step()
            if cross:
                # step() did not update: the parameters are those the forward used.
                assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
            opt.zero_grad()
        opt.synchronize()
        return [p.detach().clone() for p in model.parameters()], seen

    usual, _ = run_ranks(2, lambda r: worker(r, False))
    crossed, engine = run_ranks(2, lambda r: worker(r, True))
    for (want, _), (got, seen) in zip(usual, crossed):
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        # The forward of step 1 saw step 0's update of the first layer already applied.
        assert not torch.equal(seen[0], seen[3])


def test_cross_barrier_refuses_a_parameter_no_module_owns():
    def worker(rank):
        model = make_model(1)
        stray = torch.nn.Parameter(torch.zeros(3))
        named = list(model.named_parameters()) + [("stray", stray)]
        with pytest.raises(ValueError, match="stray.*belong to no module"):
            bc.DistributedOptimizer(torch.optim.SGD(list(model.parameters()) + [stray], lr=0.1),
                                    named, model=model)

    run_ranks(1, worker)


def test_cross_barrier_zero_grad_waits_for_the_update():
    def worker(rank):
        model = make_model(1)
        opt = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      model.named_parameters(), model=model)
        x, y = torch.randn(4, 16), torch.tensor([0, 1, 2, 3])
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()  # deferred: the gradients are the engine's until each update
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
        opt.synchronize()
        assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.parameters())

    run_ranks(1, worker)


def test_hooks_start_push_pull_during_backward_with_layer_priority():
    def worker(rank):
        model = make_model(1)
        opt = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      model.named_parameters())
        loss = F.cross_entropy(model(torch.randn(4, 16)), torch.tensor([0, 1, 2, 3]))
        loss.backward()
        started_in_backward = list(engine_calls())
        opt.step()
        return started_in_backward, [n for n, _ in model.named_parameters()]

    holder = {}

    def engine_calls():
        return [c for c in _engine.get_engine().calls]

    results, engine = run_ranks(1, worker)
    started, names = results[0]
    holder["names"] = names
    # Every gradient left during backward, last layer first (backprop order)...
    assert [c[1] for c in started] == ["grad/" + n for n in reversed(names)]
    # ...with priorities from layer order: the first layer highest.
    assert [c[2] for c in started] == [-i for i in reversed(range(len(names)))]
    assert all(c[3] is True for c in started)


def test_too_many_backward_passes_before_step_is_an_error():
    def worker(rank):
        model = make_model(1)
        opt = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      model.named_parameters(), backward_passes_per_step=2)
        x, y = torch.randn(4, 16), torch.tensor([0, 1, 2, 3])
        F.cross_entropy(model(x), y).backward()
        assert _engine.get_engine().calls == []  # first pass: accumulated locally only
        F.cross_entropy(model(x), y).backward()
        assert len(_engine.get_engine().calls) == 6  # second pass: every gradient pushed
        in_flight = [p.grad.clone() for p in model.parameters()]
        with pytest.raises(RuntimeError, match="backward_passes_per_step=2"):
            F.cross_entropy(model(x), y).backward()
        # Refused before accumulation: memory the engine owns was not written.
        assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), in_flight))
        with pytest.raises(RuntimeError, match="in flight"):
            opt.zero_grad()
        opt.step()
        opt.zero_grad()

    run_ranks(1, worker)


def test_parameters_are_declared_at_construction():
    def worker(rank):
        model = make_model(1)
        bc.declare("grad/0.weight", torch.zeros(3))  # same name, another size
        with pytest.raises(bytecomp.BytecompInvalidArgumentError, match="already declared"):
            bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    model.named_parameters())
        with pytest.raises(ValueError, match="duplicate"):
            bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    [("a", p) for p in model.parameters()])

    run_ranks(1, worker)


def test_broadcast_parameters_of_every_dtype_from_a_non_zero_root():
    def worker(rank):
        state = {
            "w": torch.full((3, 2), float(rank + 10)),
            "count": torch.tensor([2 ** 40 + 3 + rank, -7 * rank]),
            "f64": torch.tensor([1.0 / 3.0 + rank], dtype=torch.float64),
            "flag": torch.tensor([rank == 1, rank != 1]),
            "half": torch.full((2,), 0.25 * rank, dtype=torch.float16),
        }
        bc.broadcast_parameters(state, root_rank=1)
        return state

    results, _ = run_ranks(3, worker)
    for state in results:
        assert torch.equal(state["w"], torch.full((3, 2), 11.0))
        assert state["count"].tolist() == [2 ** 40 + 4, -7]
        assert abs(state["f64"].item() - (1.0 / 3.0 + 1)) < 1e-13
        assert state["flag"].tolist() == [True, False]
        assert torch.equal(state["half"], torch.full((2,), 0.25, dtype=torch.float16))


def test_broadcast_optimizer_state_creates_missing_state_and_hyperparameters():
    def worker(rank):
        model = make_model(3)
        opt = torch.optim.Adam(model.parameters(), lr=0.01 if rank == 0 else 0.5,
                               betas=(0.8, 0.99) if rank == 0 else (0.9, 0.999))
        if rank == 0:  # only the root has stepped: it has state, the others none
            F.cross_entropy(model(torch.randn(4, 16)), torch.tensor([0, 1, 2, 3])).backward()
            opt.step()
        bc.broadcast_optimizer_state(opt, root_rank=0)
        return opt

    results, _ = run_ranks(2, worker)
    root, other = results
    assert other.param_groups[0]["lr"] == 0.01 and other.param_groups[0]["betas"] == (0.8, 0.99)
    root_params = [p for g in root.param_groups for p in g["params"]]
    other_params = [p for g in other.param_groups for p in g["params"]]
    for p_root, p_other in zip(root_params, other_params):
        s_root, s_other = root.state[p_root], other.state[p_other]
        assert sorted(s_root) == sorted(s_other) == ["exp_avg", "exp_avg_sq", "step"]
        for key in s_root:
            assert torch.equal(s_root[key], s_other[key]), key


def test_shutdown_with_operation_in_flight_fails_it_cleanly():
    def worker(rank):
        if rank == 1:
            return None  # never contributes: rank 0's operation cannot complete
        h = bc.push_pull_async(torch.ones(4), "stuck")
        assert not bc.poll(h)
        bc.shutdown()
        assert _core.inflight_count() == 0
        with pytest.raises(bytecomp.BytecompShutdownError):
            bc.synchronize(h)
        return h.state

    results, engine = run_ranks(2, worker, timeout_s=20)
    assert results[0] == "failed" and engine.shutdown_count == 1


def test_error_classes_and_library_lookup(monkeypatch, tmp_path):
    err = _engine.make_error(_engine.ERR_UNAVAILABLE, "scheduler 10.0.0.1:9 unreachable", "init")
    assert isinstance(err, bytecomp.BytecompUnavailableError)
    assert isinstance(err, ConnectionError) and err.code == -4
    assert "10.0.0.1:9" in str(err) and "unavailable" in str(err)
    assert isinstance(_engine.make_error(_engine.ERR_TIMEOUT, "", "wait"), TimeoutError)
    assert type(_engine.make_error(-99, "x")) is bytecomp.BytecompError

    monkeypatch.setenv("BYTECOMP_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(OSError, match="nope.so does not exist"):
        _engine.find_library()
    monkeypatch.delenv("BYTECOMP_LIBRARY")
    monkeypatch.setenv("BYTECOMP_BUILD_DIR", str(tmp_path))
    paths = _engine.candidate_library_paths()
    assert paths[0] == str(tmp_path / "lib" / "libbytecomp_worker.so")
    assert paths[1].endswith("build/lib/libbytecomp_worker.so")
    assert paths[2].endswith("bytecomp/libbytecomp_worker.so")
    fake_lib = tmp_path / "lib" / "libbytecomp_worker.so"
    fake_lib.parent.mkdir()
    fake_lib.write_bytes(b"")
    assert _engine.find_library() == str(fake_lib)


def test_synchronize_timeout_leaves_the_operation_running():
    import time

    def worker(rank):
        if rank == 1:
            time.sleep(0.7)  # rank 0's operation cannot complete before this push
            return bc.push_pull(torch.ones(3), "late", average=False)
        h = bc.push_pull_async(torch.ones(3), "late", average=False)
        start = time.monotonic()
        with pytest.raises(bytecomp.BytecompTimeoutError):
            bc.synchronize(h, timeout_ms=250)
        waited = time.monotonic() - start
        assert 0.2 < waited < 0.6, waited
        return bc.synchronize(h)  # the operation went on and completes

    results, _ = run_ranks(2, worker)
    assert all(torch.equal(r, torch.full((3,), 2.0)) for r in results)
