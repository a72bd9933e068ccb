"""The tensor operations of the PyTorch binding (bytecomp.torch re-exports them): declare,
push_pull in its four forms, poll and synchronize, and how a torch tensor crosses into the
engine (its device, current CUDA stream and dtype code). A module of their own so that the DDP
comm hook (_torch_ddp) and bytecomp.torch both import them, and not each other."""

import torch

from . import _core, _engine

_DTYPE_CODES = {
    torch.float32: _engine.FLOAT32,
    torch.float16: _engine.FLOAT16,
    torch.bfloat16: _engine.BFLOAT16,
}


def _check_device(tensor, what):
    if tensor.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(
            f"{what}: tensor is on {tensor.device}; the worker engine takes CPU or CUDA "
            "memory only. Move it to the CPU explicitly (t.cpu()) and copy the result back.")


def _device_of(tensor):
    """None for a host tensor; for a CUDA tensor (device index, current cudaStream_t): the
    engine reads the tensor once the work queued on that stream is done."""
    if tensor.device.type != "cuda":
        return None
    return tensor.device.index, torch.cuda.current_stream(tensor.device).cuda_stream


def _dtype_code(tensor, what):
    _check_device(tensor, what)
    if tensor.layout != torch.strided:
        raise TypeError(f"{what}: only dense tensors are supported, not {tensor.layout}")
    code = _DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise TypeError(f"{what}: dtype {tensor.dtype} is not supported by the engine "
                        "(float32, float16, bfloat16)")
    return code


def declare(name, tensor):
    """Declares a tensor by name (same name, size and dtype on every worker) with its shape.
    Optional: the first push_pull declares it, without a shape; declaring up front fixes the
    key order on every worker and lets powersgd read a layer as its rows (shape[0] of them)
    as PyTorch's PowerSGD hook does, instead of a near-square matrix."""
    _core.declare(name, tensor.numel(), _dtype_code(tensor, f"declare '{name}'"),
                  list(tensor.shape))


def push_pull_async_inplace(tensor, name, average=True, priority=0):
    """Starts summing (average=True: averaging) `tensor` over all workers, in place.
    Do not read or write the tensor until synchronize(handle) returned it."""
    code = _dtype_code(tensor, f"push_pull '{name}'")
    with torch.no_grad():
        target = tensor.detach()
        if target.is_contiguous():
            buf, finish = target, None
        else:
            buf = target.contiguous()

            def finish():
                with torch.no_grad():
                    target.copy_(buf)
    return _core.start_push_pull(name, buf.data_ptr(), buf.numel(), code, priority, average,
                                 keepalive=(tensor, buf), result=tensor, finish=finish,
                                 device=_device_of(buf))


def push_pull_async(tensor, name, average=True, priority=0):
    """Like push_pull_async_inplace on a copy: `tensor` is left unchanged and
    synchronize(handle) returns a new tensor with the result."""
    _dtype_code(tensor, f"push_pull '{name}'")
    with torch.no_grad():
        out = tensor.detach().clone(memory_format=torch.contiguous_format)
    return push_pull_async_inplace(out, name, average, priority)


def push_pull(tensor, name, average=True, priority=0):
    """Sum (average=True: mean) of `tensor` over all workers, as a new tensor."""
    return synchronize(push_pull_async(tensor, name, average, priority))


def push_pull_inplace(tensor, name, average=True, priority=0):
    return synchronize(push_pull_async_inplace(tensor, name, average, priority))


def poll(handle):
    """True when the operation finished; raises its failure (BytecompError)."""
    return _core.poll(handle)


def synchronize(handle, timeout_ms=-1):
    """Waits for the operation and returns its result tensor; raises its failure."""
    return _core.synchronize(handle, timeout_ms)
