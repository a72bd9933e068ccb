"""PyTorch binding of the ByteComp worker engine (Horovod/BytePS-style API).

    import bytecomp.torch as bc
    bc.init()
    optimizer = bc.DistributedOptimizer(optimizer, model.named_parameters())
    bc.broadcast_parameters(model.state_dict(), root_rank=0)
    bc.broadcast_optimizer_state(optimizer, root_rank=0)

Tensors cross into the engine as data_ptr(), numel() and dtype (float32, float16, bfloat16);
the shim does not link libtorch, so any PyTorch version with these attributes works.

Limitations, stated plainly:
- CUDA tensors go to the engine's device API (bytecomp_push_pull_device) with their device and
  the current CUDA stream, so the engine reads a gradient after the kernels that produced it;
  where each stage runs follows the strategy. This path is untested: no GPU exists where
  ByteComp is tested (the engine's device path is tested on an emulated device). An engine
  built without CUDA, or a machine without a GPU, refuses CUDA tensors with the reason.
- Compression is chosen by the Strategy that the scheduler holds (a file, or --strategy=auto),
  not here; the engine applies it. DistributedOptimizer.state_dict() carries the codecs'
  error-feedback state (bytecomp_save_state), except for memories fused into a GPU encode,
  which the engine refuses to save; the learning rate reaches the codecs every step
  (bytecomp_set_learning_rate).
"""

import inspect
import json
import os
import warnings
from contextlib import contextmanager

import torch

from . import _core, _cpu, _engine
from ._core import (Handle, barrier, is_initialized, local_rank, local_size,  # noqa: F401
                    num_servers, rank, set_learning_rate, shutdown, size, stats,
                    tensor_strategy)
from ._engine import BytecompError  # noqa: F401
from ._torch_ddp import DDPHookState, ddp_comm_hook, init_process_group  # noqa: F401
from ._torch_ops import (_DTYPE_CODES, _check_device, _device_of,  # noqa: F401
                         declare, poll, push_pull, push_pull_async, push_pull_async_inplace,
                         push_pull_inplace, synchronize)

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "num_servers", "barrier", "declare", "push_pull", "push_pull_async", "push_pull_inplace",
    "push_pull_async_inplace", "poll", "synchronize", "DistributedOptimizer",
    "broadcast_parameters", "broadcast_optimizer_state", "BytecompError", "Handle",
    "set_learning_rate", "stats", "tensor_strategy", "DDPHookState", "ddp_comm_hook",
    "init_process_group", "check_cpu_math", "configure_cpu_threads",
]

def init(config_path=None):
    """Starts the worker engine (bytecomp._core.init) and then, unless OMP_NUM_THREADS is set,
    gives torch this worker's share of the machine's cores (configure_cpu_threads)."""
    _core.init(config_path)
    configure_cpu_threads()


def configure_cpu_threads(local_workers=None):
    """Sets torch's intra-op threads to cores / workers on this machine (local_size() after
    init(), else BYTECOMP_LOCAL_SIZE, else 1), so that W workers on one machine do not each
    start a thread per core. An explicit OMP_NUM_THREADS wins (torch already follows it).
    Returns the thread count torch uses."""
    if not os.environ.get("OMP_NUM_THREADS"):
        if local_workers is None:
            local_workers = (local_size() if is_initialized()
                             else int(os.environ.get("BYTECOMP_LOCAL_SIZE", "1")))
        torch.set_num_threads(_cpu.threads_per_worker(local_workers))
    return torch.get_num_threads()


def check_cpu_math(warn=True):
    """Which BLAS torch runs on: "mkl" or "openblas" (from torch's build) or what is mapped
    into the process (Debian's torch loads libblas.so.3 through update-alternatives). Warns
    when it is the reference BLAS, on which matrix products are an order of magnitude slower:
    install OpenBLAS (apt-get install libopenblas0-openmp; deploy/setup.sh does)."""
    config = torch.__config__.show()
    if "BLAS_INFO=mkl" in config:
        return _cpu.MKL
    kind, path = _cpu.loaded_blas()
    if kind is None and "BLAS_INFO=open" in config:
        kind = _cpu.OPENBLAS
    if kind == _cpu.REFERENCE and warn:
        warnings.warn(f"torch runs on the reference BLAS ({path}): matrix products are about "
                      "10-20x slower than with OpenBLAS, so training is compute-bound. Install "
                      "it: apt-get install libopenblas0-openmp (deploy/setup.sh does)",
                      RuntimeWarning, stacklevel=2)
    return kind or _cpu.UNKNOWN


# ---------------------------------------------------------------------------------------------
# DistributedOptimizer


# torch.optim.Optimizer.zero_grad's default (False in torch 1.x, True from 2.0).
_ZERO_SETS_TO_NONE = inspect.signature(torch.optim.Optimizer.zero_grad).parameters[
    "set_to_none"].default


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods mixed into a subclass of the user's optimizer class (see DistributedOptimizer).
    `super(self.__class__, self)` is the user's optimizer class."""

    def __init__(self, params, named_parameters, backward_passes_per_step, average,
                 name_prefix, model=None):
        super(self.__class__, self).__init__(params)
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got "
                             f"{backward_passes_per_step}")
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            named = [(f"param.{i}", p) for i, p in enumerate(all_params)]
        else:
            named = list(named_parameters)
        names = [n for n, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"named_parameters has duplicate names: {duplicates}")
        by_param = {}
        for index, (n, p) in enumerate(named):
            by_param.setdefault(p, (n, index))
        unnamed = [i for i, p in enumerate(all_params) if p not in by_param]
        if unnamed:
            raise ValueError(f"the optimizer has {len(unnamed)} parameter(s) missing from "
                             f"named_parameters (positions {unnamed[:5]}...)")

        self._k = backward_passes_per_step
        self._average = average
        self._names = {}       # param -> engine tensor name
        self._priorities = {}  # param -> priority: earlier layers (first named) go first
        self._requires_update = []
        for p in all_params:
            if not p.requires_grad:
                continue
            n, index = by_param[p]
            self._names[p] = name_prefix + n
            self._priorities[p] = -index
            self._requires_update.append(p)
        # Declare in named_parameters order so that every worker gets the same keys, and a
        # size that differs between workers is reported before the first step; with each
        # layer's shape (powersgd reads a layer as its rows).
        for p in sorted(self._requires_update, key=lambda q: -self._priorities[q]):
            declare(self._names[p], p)
        self._handles = {}      # param -> Handle started in this step
        self._passes = {p: 0 for p in self._requires_update}
        self._needs_sync = False
        self._grad_accs = []
        self._register_hooks()
        # Cross-barrier (model given): step() does not wait; each parameter is updated when
        # the next forward reaches the module that owns it (or synchronize() is called).
        self._cross_barrier = model is not None
        self._deferred = set()     # params whose update waits for their push_pull
        self._zero_after = None    # zero_grad's set_to_none, deferred for those params
        self._forward_hooks = []
        if self._cross_barrier:
            self._register_forward_hooks(model)

    def _register_hooks(self):
        for p in self._requires_update:
            # Runs on the incoming gradient before it is accumulated: refuses a gradient that
            # would be added into p.grad while the engine reads and writes that memory.
            p.register_hook(self._make_guard(p))
            # The AccumulateGrad node of the leaf: its hook runs right after p.grad was
            # updated, which is the moment the gradient is ready (Horovod's technique).
            p_tmp = p.expand_as(p)
            grad_acc = p_tmp.grad_fn.next_functions[0][0]
            grad_acc.register_hook(self._make_hook(p))
            self._grad_accs.append(grad_acc)  # keeps the node (and its hook) alive

    def _register_forward_hooks(self, model):
        owned = set()
        for module in model.modules():
            mine = [p for p in module.parameters(recurse=False) if p in self._names]
            if mine:
                owned.update(mine)
                self._forward_hooks.append(module.register_forward_pre_hook(
                    lambda _module, _inputs, mine=mine: self._finish(mine)))
        missing = [self._names[p] for p in self._requires_update if p not in owned]
        if missing:
            raise ValueError(
                f"DistributedOptimizer(model=...): parameters {missing[:5]} belong to no module "
                "of the model, so no forward would wait for their update; pass the model that "
                "owns every optimized parameter, or leave model out")

    def _finish(self, params):
        """Completes the deferred update of these parameters: waits for their push_pull,
        runs the optimizer on them alone, applies a deferred zero_grad."""
        due = [p for p in params if p in self._deferred]
        if not due:
            return
        first_error = None
        for p in due:
            try:
                synchronize(self._handles.pop(p))
            except BytecompError as e:
                first_error = first_error or e
            self._passes[p] = 0
        self._deferred.difference_update(due)
        if first_error is not None:
            raise first_error
        self._update_only(due)
        if self._zero_after is not None:
            for p in due:
                self._zero_one(p, self._zero_after)
            if not self._deferred:
                self._zero_after = None

    def _update_only(self, params):
        """The wrapped optimizer's step() on these parameters alone (elementwise optimizers
        give the same result as one step over all)."""
        wanted = set(params)
        groups = self.param_groups
        saved = [g["params"] for g in groups]
        try:
            for g in groups:
                g["params"] = [q for q in g["params"] if q in wanted]
            super(self.__class__, self).step()
        finally:
            for g, kept in zip(groups, saved):
                g["params"] = kept

    @staticmethod
    def _zero_one(p, set_to_none):
        if p.grad is None:
            return
        if set_to_none:
            p.grad = None
        else:
            p.grad.detach_()
            p.grad.zero_()

    def _make_guard(self, p):
        def guard(grad):
            if p in self._handles:
                raise RuntimeError(
                    f"gradient of '{self._names[p]}' computed again while its push_pull is in "
                    f"flight: more than backward_passes_per_step={self._k} backward passes "
                    "before step(). Call step() (or synchronize()) after every "
                    f"{self._k} backward passes, or raise backward_passes_per_step.")
            return grad
        return guard

    def _make_hook(self, p):
        def hook(*unused):
            self._needs_sync = True
            self._passes[p] += 1
            if self._passes[p] == self._k:
                self._start(p)
        return hook

    def _start(self, p):
        if p.grad is None:
            # This worker did not use p in the step; the others wait for its contribution.
            p.grad = torch.zeros_like(p)
        self._handles[p] = push_pull_async_inplace(p.grad, self._names[p],
                                                   average=self._average,
                                                   priority=self._priorities[p])

    def synchronize(self):
        """Finishes every gradient's push_pull (starting those whose hook has not fired, e.g.
        with fewer than backward_passes_per_step passes), so that p.grad holds the result.
        With model= (cross-barrier), completes every deferred update first."""
        if self._deferred:
            self._finish(list(self._deferred))
        if not self._needs_sync:
            return
        for p in self._requires_update:
            if p not in self._handles:
                self._start(p)
        first_error = None
        # Wait in priority order: the first layers' results are needed first.
        for p in sorted(self._handles, key=lambda q: -self._priorities[q]):
            try:
                synchronize(self._handles[p])
            except BytecompError as e:
                first_error = first_error or e
        self._handles.clear()
        for p in self._passes:
            self._passes[p] = 0
        self._needs_sync = False
        if first_error is not None:
            raise first_error

    @contextmanager
    def skip_synchronize(self):
        """For `optimizer.synchronize(); clip(...); with optimizer.skip_synchronize():
        optimizer.step()`: step() then does not synchronize again."""
        self._skip_sync = True
        try:
            yield
        finally:
            self._skip_sync = False

    def step(self, closure=None):
        # The learning rate reaches the codecs that need it (efsignsgd) through the API, every
        # step, so a scheduler's changes apply at once.
        lr = self.param_groups[0].get("lr")  # an optimizer may have none
        if lr is not None:
            _core.set_learning_rate(lr)
        if self._cross_barrier and closure is None and not getattr(self, "_skip_sync", False):
            # Start what the hooks did not, and return: the next forward finishes each
            # parameter's update as it reaches the parameter's module.
            if self._deferred:
                self._finish(list(self._deferred))
            if self._needs_sync:
                for p in self._requires_update:
                    if p not in self._handles:
                        self._start(p)
                self._deferred = set(self._handles)
                self._needs_sync = False
            return None
        if not getattr(self, "_skip_sync", False):
            self.synchronize()
        return super(self.__class__, self).step(closure)

    # The error-feedback state of the engine's codecs (residuals, momentum correction) travels
    # with the optimizer's state, so a checkpoint restores training exactly where it was.
    _EF_KEY = "bytecomp_error_feedback"

    def state_dict(self):
        if self._deferred:
            self.synchronize()
        if self._handles:
            raise RuntimeError("state_dict() while gradient push_pulls are in flight; call "
                               "step() or synchronize() first")
        state = super(self.__class__, self).state_dict()
        state[self._EF_KEY] = {name: _core.save_state(name) for name in self._names.values()}
        return state

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        error_feedback = state_dict.pop(self._EF_KEY, None)
        super(self.__class__, self).load_state_dict(state_dict)
        for name, blob in (error_feedback or {}).items():
            _core.load_state(name, blob)

    def zero_grad(self, *args, **kwargs):
        if self._deferred:
            set_to_none = kwargs.get("set_to_none", args[0] if args else _ZERO_SETS_TO_NONE)
            # Cross-barrier: a deferred parameter's gradient is zeroed after its update.
            self._zero_after = set_to_none
            for p in self._requires_update:
                if p not in self._deferred:
                    self._zero_one(p, set_to_none)
            return None
        if self._handles:
            raise RuntimeError("zero_grad() while gradient push_pulls are in flight; call "
                               "step() or synchronize() first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, backward_passes_per_step=1,
                         average=True, name_prefix="grad/", model=None):
    """Wraps a torch.optim optimizer: each gradient's push_pull starts from a backward hook the
    moment the gradient is ready (priority by layer order, first layers first) and step()
    waits for all of them before updating.

    named_parameters: (name, parameter) pairs, e.g. model.named_parameters(); the names must be
      the same on every worker (they name the engine's tensors). Every parameter is declared
      here, so a size mismatch between workers fails before the first step.
    backward_passes_per_step: gradients of k backward passes are summed locally (as PyTorch
      does) and pushed on the k-th; call step() after every k passes.
    average: divide the sum over workers by the number of workers (True) or keep the sum.
    model: the module that owns the parameters: cross-barrier (BytePS's technique). step()
      then returns without waiting; each parameter is updated (the optimizer run on it alone)
      when the next forward reaches its module, so the pulls of the last-ready gradients
      overlap the next forward instead of ending the step. Every optimized parameter must
      belong to a module of the model (checked here); the results are those of the usual
      step() for elementwise optimizers (SGD, Adam, ...), not for ones that look across
      parameters (LBFGS, a gradient-norm clip: call synchronize() before it). step(closure)
      and synchronize() complete every update at once.

    The result is an instance of a subclass of the optimizer's class, built from its
    param_groups (hyperparameters kept); state_dict()/load_state_dict() are the optimizer's,
    plus the engine's error-feedback state of every gradient (key "bytecomp_error_feedback").
    """
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, backward_passes_per_step, average,
               name_prefix, model)


# ---------------------------------------------------------------------------------------------
# Broadcasts, built on push_pull: the root contributes its value, every other rank zeros, and
# the sum (average=False) is the root's value on every rank (x + 0 == x exactly).


def _broadcast_async(tensor, name, root_rank, is_root):
    """Starts broadcasting `tensor` in place; returns a Handle."""
    _check_device(tensor, f"broadcast '{name}'")
    with torch.no_grad():
        target = tensor.detach()
        if target.dtype in _DTYPE_CODES:
            if not is_root:
                target.zero_()
            return push_pull_async_inplace(target, name, average=False)
        # Other dtypes travel as two float32 halves, hi + lo: exact for integers below 2**48
        # and bool, float64 to about 48 bits of mantissa.
        if target.is_complex() or target.layout != torch.strided:
            raise TypeError(f"broadcast '{name}': cannot broadcast {target.dtype} tensors")
        flat = target.reshape(-1).to(torch.float64)
        hi = flat.to(torch.float32)
        lo = (flat - hi.to(torch.float64)).to(torch.float32)
        buf = torch.cat([hi, lo])
        if not is_root:
            buf.zero_()
        n = flat.numel()
        is_float = target.is_floating_point()

        def finish():
            with torch.no_grad():
                joined = buf[:n].to(torch.float64) + buf[n:].to(torch.float64)
                if not is_float:
                    joined = joined.round()
                target.copy_(joined.reshape(target.shape).to(target.dtype))

        return _core.start_push_pull(name, buf.data_ptr(), buf.numel(), _engine.FLOAT32, 0,
                                     False, keepalive=(tensor, buf), result=tensor,
                                     finish=finish, device=_device_of(buf))


def _named_tensors(params, what):
    if isinstance(params, dict):
        return sorted(params.items())
    items = list(params)
    if items and not (isinstance(items[0], tuple) and len(items[0]) == 2):
        raise ValueError(f"{what}: expected a dict (state_dict) or (name, tensor) pairs "
                         "(named_parameters)")
    return items


def broadcast_parameters(params, root_rank=0, name_prefix="bcast/"):
    """Overwrites every tensor in `params` (a state_dict or named_parameters) with root_rank's
    value. Names must be the same on every worker."""
    is_root = rank() == root_rank
    handles = []
    for name, tensor in _named_tensors(params, "broadcast_parameters"):
        if tensor is None:
            continue
        handles.append(_broadcast_async(tensor, name_prefix + name, root_rank, is_root))
    _core.synchronize_all(handles)


def _json_value(v):
    """v if it survives JSON unchanged in meaning (tuples as lists), else None."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float)) for x in v):
        return list(v)
    return None


def broadcast_optimizer_state(optimizer, root_rank=0, name_prefix="bcast_opt/"):
    """Makes every worker's optimizer state (per-parameter state and the param groups'
    hyperparameters) equal to root_rank's, even where a worker has no state yet.

    The root's layout (which state entries exist, their shapes and dtypes, and scalar values)
    travels first, as bytes in a float32 tensor; then every state tensor is broadcast."""
    is_root = rank() == root_rank
    params = [p for group in optimizer.param_groups for p in group["params"]]
    layout = None
    if is_root:
        groups = []
        for group in optimizer.param_groups:
            groups.append({k: _json_value(v) for k, v in group.items()
                           if k != "params" and (v is None or _json_value(v) is not None)})
        state = []
        for p in params:
            entries = {}
            for key, value in optimizer.state.get(p, {}).items():
                if torch.is_tensor(value):
                    entries[key] = ["tensor", list(value.shape), str(value.dtype)]
                elif _json_value(value) is not None or value is None:
                    entries[key] = ["value", _json_value(value)]
                else:
                    raise TypeError(f"broadcast_optimizer_state: state entry '{key}' of type "
                                    f"{type(value).__name__} cannot be broadcast")
            state.append(entries)
        layout = json.dumps({"groups": groups, "state": state}).encode()
        if len(layout) >= 2 ** 24:
            raise ValueError("broadcast_optimizer_state: optimizer layout too large")
    # 1. the layout's length, 2. the layout bytes (one float32 per byte: exact).
    length = torch.tensor([float(len(layout)) if is_root else 0.0])
    synchronize(_broadcast_async(length, name_prefix + "layout_length", root_rank, is_root))
    n = int(length.item())
    buf = torch.zeros(n, dtype=torch.float32)
    if is_root:
        buf.copy_(torch.tensor(list(layout), dtype=torch.float32))
    # The name carries the length: a tensor name keeps one size for the whole job.
    synchronize(_broadcast_async(buf, f"{name_prefix}layout/{n}", root_rank, is_root))
    decoded = json.loads(bytes(int(x) for x in buf.round().to(torch.int64).tolist()))

    if len(decoded["groups"]) != len(optimizer.param_groups) or \
            len(decoded["state"]) != len(params):
        raise ValueError(
            f"broadcast_optimizer_state: root has {len(decoded['groups'])} param groups and "
            f"{len(decoded['state'])} parameters, this worker {len(optimizer.param_groups)} "
            f"and {len(params)}")
    for group, values in zip(optimizer.param_groups, decoded["groups"]):
        for k, v in values.items():
            group[k] = tuple(v) if isinstance(group.get(k), tuple) else v

    handles = []
    for index, (p, entries) in enumerate(zip(params, decoded["state"])):
        state = optimizer.state[p]
        for key in [k for k in state if k not in entries]:
            del state[key]
        for key, (kind, *rest) in sorted(entries.items()):
            if kind == "value":
                state[key] = rest[0]
                continue
            shape, dtype_name = rest
            dtype = getattr(torch, dtype_name.replace("torch.", ""))
            current = state.get(key)
            if not (torch.is_tensor(current) and list(current.shape) == shape and
                    current.dtype == dtype):
                state[key] = torch.zeros(shape, dtype=dtype, device=p.device)
            handles.append(_broadcast_async(state[key], f"{name_prefix}{index}/{key}",
                                            root_rank, is_root))
    _core.synchronize_all(handles)


