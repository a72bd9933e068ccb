"""An in-process stand-in for the worker engine, for unit tests of the shims' Python logic.

FakeEngine has the methods of bytecomp._engine.Engine. W "workers" are threads of one test
process; each thread binds its rank with bind(rank). A push_pull copies the thread's memory as
its contribution for (name, round); when all W contributions of that round are in, every
waiter gets the fp32 sum (divided by W when averaging) written into its memory. It follows
the C API's contract (declaration checks, handle life cycle, errors by code) closely enough to
test what the shims do with it, and nothing more: the real engine is tested by the
integration tests.
"""

import ctypes
import itertools
import threading

import numpy as np

from bytecomp import _engine
from bytecomp._engine import make_error

_NP = {_engine.FLOAT32: np.float32, _engine.FLOAT16: np.float16}


def _read(ptr, n, dtype):
    if dtype == _engine.BFLOAT16:
        raw = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(ptr))
        return (raw.astype(np.uint32) << 16).view(np.float32).copy()
    item = np.dtype(_NP[dtype]).itemsize
    raw = (ctypes.c_uint8 * (n * item)).from_address(ptr)
    return np.frombuffer(raw, dtype=_NP[dtype]).astype(np.float32)


def _write(ptr, n, dtype, values):
    if dtype == _engine.BFLOAT16:
        bits = values.astype(np.float32).view(np.uint32)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        ctypes.memmove(ptr, rounded.ctypes.data, n * 2)
        return
    out = values.astype(_NP[dtype])
    ctypes.memmove(ptr, out.ctypes.data, out.nbytes)


class FakeEngine:
    def __init__(self, size):
        self._size = size
        self._cond = threading.Condition()
        self._local = threading.local()
        self._cluster_decl = {}      # name -> (count, dtype, rank) of the first declaration
        self._contribs = {}          # (name, round) -> {rank: fp32 array}
        self._handles = {}           # id -> op dict
        self._ids = itertools.count(1)
        self.calls = []              # (rank, name, priority, average) of every push_pull
        self.device_calls = []       # (rank, name, device, stream) of every push_pull_device
        self.shutdown_count = 0

    # -- per-thread worker state ----------------------------------------------------------
    def bind(self, rank):
        self._local.rank = rank
        self._local.initialized = True
        self._local.declared = {}
        self._local.rounds = {}

    def _rank(self):
        return getattr(self._local, "rank", 0)

    def _require_init(self, op):
        if not getattr(self._local, "initialized", False):
            raise make_error(_engine.ERR_NOT_INITIALIZED, "engine not initialized", op)

    # -- Engine interface -----------------------------------------------------------------
    def init(self, config_path=None):
        if not hasattr(self._local, "rank"):
            self.bind(0)
        self._local.initialized = True

    def shutdown(self):
        self._require_init("bytecomp_shutdown")
        self._local.initialized = False
        self.shutdown_count += 1
        with self._cond:
            for op in self._handles.values():
                if op["rank"] == self._rank() and op["state"] == 0:
                    op["state"] = _engine.ERR_SHUTDOWN
                    op["error"] = "engine shut down before completion"
            self._cond.notify_all()

    def is_initialized(self):
        return getattr(self._local, "initialized", False)

    def rank(self):
        self._require_init("bytecomp_rank")
        return self._rank()

    def size(self):
        self._require_init("bytecomp_size")
        return self._size

    def local_rank(self):
        return self.rank()

    def local_size(self):
        return self.size()

    def num_servers(self):
        return 1

    def barrier(self, timeout_ms=-1):
        pass

    def wait_timeout_ms(self):
        return 1800000  # the default push_pull_timeout_ms

    def save_state(self, name):
        return b""  # no codecs, so no error-feedback state

    def load_state(self, name, state):
        pass

    def set_learning_rate(self, learning_rate):
        self.learning_rate = learning_rate

    def stats(self):
        """Uncompressed, like the real engine without a strategy: bytes on the wire equal
        the raw bytes, one push and one pull per operation (per rank)."""
        moved = getattr(self._local, "bytes_moved", 0)
        ops = getattr(self._local, "operations", 0)
        return {"pushed_bytes": moved, "pushed_raw_bytes": moved, "pulled_bytes": moved,
                "pulled_raw_bytes": moved, "operations": ops}

    def last_error(self):
        return ""

    def declare(self, name, element_count, dtype, shape=None):
        self._require_init(f"declare '{name}'")
        mine = self._local.declared.get(name)
        if mine is not None and mine != (element_count, dtype):
            raise make_error(_engine.ERR_INVALID_ARGUMENT,
                             f"tensor '{name}' already declared with {mine[0]} elements of "
                             f"dtype {mine[1]}, now {element_count} of dtype {dtype}",
                             f"declare '{name}'")
        self._local.declared[name] = (element_count, dtype)
        with self._cond:
            self._cluster_decl.setdefault(name, (element_count, dtype, self._rank()))

    def push_pull(self, name, data_ptr, element_count, dtype, priority=0, average=False):
        if dtype not in (_engine.FLOAT32, _engine.FLOAT16, _engine.BFLOAT16):
            raise make_error(_engine.ERR_INVALID_ARGUMENT, f"bad dtype {dtype}", "push_pull")
        self.declare(name, element_count, dtype)
        self._local.bytes_moved = getattr(self._local, "bytes_moved", 0) + element_count * (
            4 if dtype == _engine.FLOAT32 else 2)
        self._local.operations = getattr(self._local, "operations", 0) + 1
        rnd = self._local.rounds.get(name, 0)
        self._local.rounds[name] = rnd + 1
        rank = self._rank()
        op = dict(rank=rank, name=name, round=rnd, ptr=data_ptr, n=element_count, dtype=dtype,
                  average=average, state=0, error="")
        with self._cond:
            first = self._cluster_decl[name]
            if first[0] != element_count:
                op["state"] = _engine.ERR_REJECTED
                op["error"] = (f"tensor '{name}': rank {first[2]} declared {first[0]} "
                               f"elements, rank {rank} {element_count}")
            self._contribs.setdefault((name, rnd), {})[rank] = _read(data_ptr, element_count,
                                                                     dtype)
            self.calls.append((rank, name, priority, average))
            handle = next(self._ids)
            self._handles[handle] = op
            self._cond.notify_all()
        return handle

    def push_pull_device(self, name, data_ptr, element_count, dtype, device, stream,
                         priority=0, average=False):
        """Like the emulated device: the "device" pointer is host memory. Records the device
        and stream it was given in device_calls."""
        with self._cond:
            self.device_calls.append((self._rank(), name, device, stream))
        return self.push_pull(name, data_ptr, element_count, dtype, priority, average)

    def _complete_locked(self, op):
        if op["state"] != 0:
            return
        contribs = self._contribs.get((op["name"], op["round"]), {})
        if len(contribs) < self._size:
            return
        sizes = {len(v) for v in contribs.values()}
        if len(sizes) > 1:
            op["state"] = _engine.ERR_REJECTED
            op["error"] = f"tensor '{op['name']}': workers sent sizes {sorted(sizes)}"
            return
        total = np.zeros(op["n"], dtype=np.float32)
        for r in sorted(contribs):
            total += contribs[r]
        if op["average"]:
            total /= np.float32(self._size)
        _write(op["ptr"], op["n"], op["dtype"], total)
        op["state"] = 1

    def poll(self, handle):
        with self._cond:
            op = self._handles[handle]
            self._complete_locked(op)
            if op["state"] < 0:
                raise make_error(op["state"], op["error"], "poll")
            return op["state"]

    def wait(self, handle, timeout_ms=-1):
        with self._cond:
            op = self._handles[handle]
            ok = self._cond.wait_for(lambda: (self._complete_locked(op), op["state"] != 0)[1],
                                     None if timeout_ms < 0 else timeout_ms / 1000)
            if not ok:
                raise make_error(_engine.ERR_TIMEOUT, f"not complete after {timeout_ms} ms",
                                 "wait")
            if op["state"] < 0:
                raise make_error(op["state"], op["error"], "wait")
            del self._handles[handle]
            return 0

    def release(self, handle):
        with self._cond:
            self._handles.pop(handle, None)
        return 0

    def handle_error(self, handle):
        return self._handles.get(handle, {}).get("error", "")


def run_ranks(size, fn, timeout_s=60):
    """Runs fn(rank) on `size` threads, each bound to its rank of one FakeEngine (installed as
    the process engine for the duration); returns the results by rank, re-raising failures."""
    engine = FakeEngine(size)
    old = _engine.set_engine(engine)
    results, errors = [None] * size, [None] * size

    def body(rank):
        engine.bind(rank)
        try:
            results[rank] = fn(rank)
        except BaseException as e:  # noqa: B902 - reported to the test below
            errors[rank] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(size)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s)
            if t.is_alive():
                raise TimeoutError(f"a fake worker did not finish within {timeout_s} s")
    finally:
        _engine.set_engine(old)
    for e in errors:
        if e is not None:
            raise e
    return results, engine
