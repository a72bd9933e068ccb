"""Framework-independent part of the shims: engine life cycle and asynchronous handles.

A Handle keeps the memory of its operation alive (the engine writes the result into it in
place) until the operation is finished, and runs a `finish` step (copy back, division) once
it completed. Handles that are not yet synchronized live in a registry, so dropping the
Python object never frees memory the engine still writes into, and shutdown() can settle
every one of them.
"""

import atexit
import threading
import time

from . import _engine
from ._engine import BytecompError, BytecompShutdownError, ERR_SHUTDOWN

_registry_lock = threading.Lock()
_inflight = {}  # engine handle id -> Handle
_atexit_registered = False
_WAIT_SLICE_MS = 200


class Handle:
    """An asynchronous push-pull. `result` is what synchronize() returns."""

    PENDING, DONE, FAILED = "pending", "done", "failed"

    def __init__(self, name, engine_handle, keepalive, result, finish=None):
        self.name = name
        self.engine_handle = engine_handle  # None for an operation that needed no engine call
        self._keepalive = keepalive
        self.result = result
        self._finish = finish
        self.state = Handle.PENDING if engine_handle is not None else Handle.DONE
        self.error = None
        self._finished = engine_handle is None and finish is None

    def _run_finish(self):
        if not self._finished:
            self._finished = True
            if self._finish is not None:
                self._finish()
            self._keepalive = None

    def __repr__(self):
        return f"<bytecomp.Handle {self.name!r} {self.state}>"


def init(config_path=None):
    """Starts the worker engine (registers with the scheduler, connects to the servers).

    The scheduler's address comes from config_path (a ClusterConfig .pbtxt) or the
    BYTECOMP_SCHEDULER environment variable, which bytecomp-run sets."""
    global _atexit_registered
    eng = _engine.get_engine()
    if eng.is_initialized():
        return
    eng.init(config_path)
    if not _atexit_registered:
        # A process that forgets shutdown() must not leave engine threads writing into freed
        # interpreter memory at exit.
        atexit.register(_shutdown_at_exit)
        _atexit_registered = True


def _shutdown_at_exit():
    try:
        if is_initialized():
            shutdown()
    except BytecompError:
        pass


def is_initialized():
    return _engine.get_engine().is_initialized()


def shutdown():
    """Completes or fails every operation in flight (the engine never hangs here), then stops.
    Handles that were not synchronized are settled: done if the engine finished them, failed
    with BytecompShutdownError otherwise."""
    eng = _engine.get_engine()
    # Record what already finished: after bytecomp_shutdown the engine forgets its handles.
    with _registry_lock:
        pending = list(_inflight.values())
    for handle in pending:
        try:
            if eng.poll(handle.engine_handle) == 1:
                eng.release(handle.engine_handle)
                handle.state = Handle.DONE
                with _registry_lock:
                    _inflight.pop(handle.engine_handle, None)
        except BytecompError as e:
            _fail(handle, e)
    try:
        eng.shutdown()
    finally:
        with _registry_lock:
            pending = list(_inflight.values())
            _inflight.clear()
        for handle in pending:
            _settle_after_shutdown(eng, handle)


def _settle_after_shutdown(eng, handle):
    if handle.state != Handle.PENDING:
        return
    try:
        done = eng.poll(handle.engine_handle)
    except BytecompError as e:
        if e.code == _engine.ERR_NOT_INITIALIZED:
            # The engine forgot its handles when it stopped: we cannot know whether the data
            # arrived, so the operation counts as failed.
            e = BytecompShutdownError(ERR_SHUTDOWN, "the engine shut down before this "
                                      "operation was synchronized; its result is unknown",
                                      f"push_pull '{handle.name}'")
        handle.state, handle.error = Handle.FAILED, e
        handle._keepalive = None
        return
    if done == 1:
        eng.release(handle.engine_handle)
        handle.state = Handle.DONE
        handle._run_finish()
    else:
        handle.state = Handle.FAILED
        handle.error = BytecompShutdownError(
            ERR_SHUTDOWN, "still pending after bytecomp_shutdown returned",
            f"push_pull '{handle.name}'")
        handle._keepalive = None


def rank():
    return _engine.get_engine().rank()


def size():
    return _engine.get_engine().size()


def local_rank():
    return _engine.get_engine().local_rank()


def local_size():
    return _engine.get_engine().local_size()


def num_servers():
    return _engine.get_engine().num_servers()


def set_learning_rate(learning_rate):
    """The optimiser's current learning rate, for codecs that use it (efsignsgd)."""
    _engine.get_engine().set_learning_rate(learning_rate)


def save_state(name):
    """A tensor's error-feedback state (residuals, momenta) as bytes, for a checkpoint."""
    return _engine.get_engine().save_state(name)


def load_state(name, state):
    _engine.get_engine().load_state(name, state)


def stats():
    """Bytes this worker pushed and pulled, on the wire and uncompressed, and operations."""
    return _engine.get_engine().stats()


def tensor_strategy(name):
    """(round, version) of the tensor's latest started round: its push_pull count - 1 and the
    strategy version that round ran with (strategy switches, the adaptive ratio)."""
    return _engine.get_engine().tensor_strategy(name)


def barrier(timeout_ms=-1):
    """Blocks until every worker reached the barrier."""
    _engine.get_engine().barrier(timeout_ms)


def declare(name, element_count, dtype_code, shape=None):
    _engine.get_engine().declare(name, element_count, dtype_code, shape)


def start_push_pull(name, data_ptr, element_count, dtype_code, priority, average, keepalive,
                    result, finish=None, device=None):
    """Starts the engine's in-place push-pull on raw memory and returns a registered Handle.
    `keepalive` holds whatever owns data_ptr until the operation is over. `device`: None for
    host memory, or (device index, cudaStream_t as an int) for CUDA memory."""
    if element_count == 0:
        handle = Handle(name, None, None, result, finish)
        handle._run_finish()
        return handle
    eng = _engine.get_engine()
    if device is None:
        engine_handle = eng.push_pull(name, data_ptr, element_count, dtype_code, priority, average)
    else:
        engine_handle = eng.push_pull_device(name, data_ptr, element_count, dtype_code, device[0],
                                             device[1], priority, average)
    handle = Handle(name, engine_handle, keepalive, result, finish)
    with _registry_lock:
        _inflight[engine_handle] = handle
    return handle


def poll(handle):
    """True when the operation is done; raises its failure."""
    if handle.state == Handle.DONE:
        return True
    if handle.state == Handle.FAILED:
        raise handle.error
    try:
        done = _engine.get_engine().poll(handle.engine_handle) == 1
    except BytecompError as e:
        _fail(handle, e)
        raise
    return done


def synchronize(handle, timeout_ms=-1):
    """Waits for the operation (timeout_ms < 0: the job's push_pull_timeout_ms, 30 min unless
    set) and returns handle.result. A BytecompTimeoutError leaves the operation running; call
    synchronize again."""
    if handle.state == Handle.FAILED:
        raise handle.error
    if handle.state == Handle.PENDING:
        eng = _engine.get_engine()
        if timeout_ms < 0:
            timeout_ms = eng.wait_timeout_ms()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            # Wait in slices: the wait blocks in C, where Python cannot deliver Ctrl-C.
            slice_ms = max(0, min(_WAIT_SLICE_MS, int((deadline - time.monotonic()) * 1000)))
            try:
                eng.wait(handle.engine_handle, slice_ms)
                break
            except _engine.BytecompTimeoutError:
                if time.monotonic() >= deadline:
                    raise
            except BytecompError as e:
                _fail(handle, e)
                raise
        with _registry_lock:
            _inflight.pop(handle.engine_handle, None)
        handle.state = Handle.DONE
    handle._run_finish()
    return handle.result


def synchronize_all(handles):
    """Waits for every handle, also after one failed (so that no memory stays in flight), and
    raises the first failure."""
    first_error = None
    for h in handles:
        try:
            synchronize(h)
        except BytecompError as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error


def _fail(handle, error):
    eng = _engine.get_engine()
    with _registry_lock:
        _inflight.pop(handle.engine_handle, None)
    if error.code != _engine.ERR_NOT_INITIALIZED:
        eng.release(handle.engine_handle)
    handle.state, handle.error = Handle.FAILED, error
    handle._keepalive = None


def inflight_count():
    with _registry_lock:
        return len(_inflight)
