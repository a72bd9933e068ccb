"""MXNet binding of the ByteComp worker engine: Gluon DistributedTrainer and a KVStore.

    import bytecomp.mxnet as bc
    bc.init()
    bc.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = bc.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})

or, through Gluon's own KVStore hook:

    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {...}, kvstore=bc.KVStore())

NDArrays cross into the engine as the pointer MXNet's C API gives (MXNDArrayGetData, reached
through mxnet's own loaded library), element count and dtype; this package links nothing of
MXNet. MXNet's engine is asynchronous: before handing memory over we wait until MXNet has no
pending reads or writes of it (MXNDArrayWaitToWrite).

Limitations: GPU NDArrays raise NotImplementedError (the C API takes host memory only); sparse
storage types are refused; one device per process (Gluon parameters on several contexts are
refused). The servers only sum: there is no server-side optimizer (update_on_kvstore).
"""

import ctypes

import mxnet as mx
import numpy as np

from . import _core, _engine
from ._core import (Handle, barrier, init, is_initialized, local_rank, local_size,  # noqa: F401
                    num_servers, rank, shutdown, size)
from ._engine import BytecompError  # noqa: F401

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "num_servers", "barrier", "push_pull", "push_pull_inplace", "push_pull_async_inplace",
    "poll", "synchronize", "broadcast_parameters", "DistributedTrainer", "KVStore",
    "BytecompError",
]


def _dtype_code(arr, what):
    if not isinstance(arr, mx.nd.NDArray):
        raise TypeError(f"{what}: expected an mxnet NDArray, got {type(arr).__name__}")
    if arr.context.device_type not in ("cpu", "cpu_pinned", "cpu_shared"):
        raise NotImplementedError(
            f"{what}: NDArray is on {arr.context}; the worker engine's C API takes host memory "
            "only (no CUDA device pointers or streams yet). Copy it to mx.cpu() explicitly "
            "and back.")
    if arr.stype != "default":
        raise TypeError(f"{what}: only dense NDArrays are supported, not stype '{arr.stype}'")
    dt = np.dtype(arr.dtype)
    dtype_name = "bfloat16" if dt.names == ("bfloat16",) else dt.name
    codes = {"float32": _engine.FLOAT32, "float16": _engine.FLOAT16,
             "bfloat16": _engine.BFLOAT16}
    if dtype_name not in codes:
        raise TypeError(f"{what}: dtype {dtype_name} is not supported by the engine "
                        "(float32, float16, bfloat16)")
    return codes[dtype_name]


def _host_pointer(arr):
    """The address of arr's first element, after MXNet finished every pending operation on it
    (the engine will read and overwrite that memory behind MXNet's back)."""
    lib, check_call = mx.base._LIB, mx.base.check_call
    check_call(lib.MXNDArrayWaitToWrite(arr.handle))
    ptr = ctypes.c_void_p()
    check_call(lib.MXNDArrayGetData(arr.handle, ctypes.byref(ptr)))
    return ptr.value


def push_pull_async_inplace(arr, name, average=True, priority=0):
    """Starts summing (average=True: averaging) `arr` over all workers, in place. Do not use
    the NDArray until synchronize(handle) returned it."""
    code = _dtype_code(arr, f"push_pull '{name}'")
    return _core.start_push_pull(name, _host_pointer(arr) if arr.size else 0, arr.size, code,
                                 priority, average, keepalive=arr, result=arr)


def push_pull_inplace(arr, name, average=True, priority=0):
    return synchronize(push_pull_async_inplace(arr, name, average, priority))


def push_pull(arr, name, average=True, priority=0):
    """Sum (average=True: mean) of `arr` over all workers, as a new NDArray."""
    return push_pull_inplace(arr.copy(), name, average, priority)


def poll(handle):
    return _core.poll(handle)


def synchronize(handle, timeout_ms=-1):
    return _core.synchronize(handle, timeout_ms)


def _broadcast_async(arr, name, is_root):
    """Root contributes its value, the others zeros; the sum is the root's value everywhere."""
    if not is_root:
        arr[:] = 0
    return push_pull_async_inplace(arr, name, average=False)


def broadcast_parameters(params, root_rank=0, name_prefix="bcast/"):
    """Overwrites every parameter with root_rank's value. `params`: a Gluon ParameterDict
    (net.collect_params()) or a dict of name -> NDArray. Parameters must be initialised
    (deferred initialisation finished: run one forward pass or give shapes)."""
    is_root = rank() == root_rank
    handles, copies = [], []
    for name in sorted(params.keys()):
        value = params[name]
        if isinstance(value, mx.gluon.Parameter):
            if value._deferred_init:
                raise ValueError(f"broadcast_parameters: parameter '{name}' is not initialised "
                                 "yet (deferred); run a forward pass first")
            arrays = value.list_data()
        else:
            arrays = [value]
        handles.append(_broadcast_async(arrays[0], name_prefix + name, is_root))
        copies.append(arrays)
    _core.synchronize_all(handles)
    for arrays in copies:
        for other in arrays[1:]:
            arrays[0].copyto(other)


class DistributedTrainer(mx.gluon.Trainer):
    """gluon.Trainer whose gradients are summed over all workers through ByteComp before the
    update. Gradients leave in parameter order with priority -index (first parameters first).
    average=True divides by the number of workers, so `step(batch_size)` takes the per-worker
    batch size as with a single process."""

    def __init__(self, params, optimizer, optimizer_params=None, average=True,
                 name_prefix="grad/"):
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._bytecomp_prefix = name_prefix
        if average:
            # Gluon scales gradients by _scale / batch_size in the update; folding 1/W in there
            # turns the engine's sum into a mean without another pass over the data.
            self._scale /= size()

    def _allreduce_grads(self):
        handles = []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            grads = param.list_grad()
            if len(grads) != 1:
                raise NotImplementedError(
                    f"DistributedTrainer: parameter '{param.name}' lives on {len(grads)} "
                    "contexts; use one device per process")
            handles.append(push_pull_async_inplace(grads[0], self._bytecomp_prefix + param.name,
                                                   average=False, priority=-i))
        _core.synchronize_all(handles)


class KVStore(mx.kvstore.KVStoreBase):
    """A KVStore over the ByteComp engine: pushpull sums over all workers (the servers only
    sum; there is no server-side optimizer), broadcast copies rank 0's value. Gluon's Trainer
    accepts an instance (kvstore=bytecomp.mxnet.KVStore()); it then sums gradients, so pass
    the global batch size (per-worker batch x W) to trainer.step to average.

    Keys are ints or strings; the tensor name is name_prefix + str(key), the same on every
    worker. push() followed by pull() is pushpull() split in two."""

    def __init__(self, name_prefix="kv/"):
        self._prefix = name_prefix
        self._pending = {}  # key -> (Handle, staging NDArray) from push()

    def _name(self, key):
        return self._prefix + str(key)

    @staticmethod
    def _as_list(value):
        return list(value) if isinstance(value, (list, tuple)) else [value]

    @staticmethod
    def _local_sum(values):
        """Several device copies of one key (Gluon multi-device) are summed locally first."""
        if len(values) == 1:
            return values[0].copy()
        total = values[0].copy()
        for v in values[1:]:
            total += v.as_in_context(total.context)
        return total

    def broadcast(self, key, value, out, priority=0):
        staging = value.copy()
        synchronize(_broadcast_async(staging, self._prefix + "bcast/" + str(key),
                                     rank() == 0))
        for o in self._as_list(out):
            staging.copyto(o)

    def pushpull(self, key, value, out=None, priority=0):
        values = self._as_list(value)
        total = self._local_sum(values)
        push_pull_inplace(total, self._name(key), average=False, priority=priority)
        for o in (values if out is None else self._as_list(out)):
            total.copyto(o)

    def push(self, key, value, priority=0):
        if key in self._pending:
            raise RuntimeError(f"KVStore.push({key!r}): the previous push of this key was not "
                               "pulled yet")
        staging = self._local_sum(self._as_list(value))
        self._pending[key] = (push_pull_async_inplace(staging, self._name(key), average=False,
                                                      priority=priority), staging)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        if key not in self._pending:
            raise RuntimeError(f"KVStore.pull({key!r}) without a push of that key")
        handle, staging = self._pending.pop(key)
        synchronize(handle)
        for o in self._as_list(out):
            staging.copyto(o)

    def set_optimizer(self, optimizer):
        raise NotImplementedError("the ByteComp servers only sum; update on the workers "
                                  "(update_on_kvstore=False)")

    def is_capable(self, capability):
        return False  # no server-side optimizer

    def save_optimizer_states(self, fname, dump_optimizer=False):
        raise NotImplementedError("no optimizer state lives in the ByteComp KVStore")

    def load_optimizer_states(self, fname):
        raise NotImplementedError("no optimizer state lives in the ByteComp KVStore")

    @property
    def type(self):
        return "bytecomp"

    @property
    def rank(self):
        return rank()

    @property
    def num_workers(self):
        return size()
