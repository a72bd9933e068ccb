"""ctypes binding to the worker engine's C API (worker/include/bytecomp/c_api.h).

Nothing here knows about a framework: tensors cross as a raw pointer, an element count and a
dtype code. The framework modules (bytecomp.torch, bytecomp.mxnet) turn their tensors into
those three and keep the memory alive while an operation is in flight.

The library is found, in this order, at:
  1. $BYTECOMP_LIBRARY (a path to libbytecomp_worker.so),
  2. $BYTECOMP_BUILD_DIR/lib/libbytecomp_worker.so,
  3. <repository>/build/lib/libbytecomp_worker.so when the package runs from a checkout,
  4. libbytecomp_worker.so next to this file (a wheel that ships the library),
  5. where `cmake --install` or the Debian package put it (_installed.py, written at install).
"""

import ctypes
import os
import threading

LIBRARY_NAME = "libbytecomp_worker.so"

# Return codes (c_api.h).
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_NOT_INITIALIZED = -2
ERR_TIMEOUT = -3
ERR_UNAVAILABLE = -4
ERR_REJECTED = -5
ERR_SHUTDOWN = -6
ERR_INTERNAL = -7

# Element types (c_api.h; values match proto DType).
FLOAT32 = 0
FLOAT16 = 1
BFLOAT16 = 2
DTYPE_NAMES = {FLOAT32: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16"}
DTYPE_ITEMSIZE = {FLOAT32: 4, FLOAT16: 2, BFLOAT16: 2}

FLAG_AVERAGE = 1

_CODE_NAMES = {
    ERR_INVALID_ARGUMENT: "invalid argument",
    ERR_NOT_INITIALIZED: "not initialized",
    ERR_TIMEOUT: "timeout",
    ERR_UNAVAILABLE: "unavailable",
    ERR_REJECTED: "rejected",
    ERR_SHUTDOWN: "shut down",
    ERR_INTERNAL: "internal error",
}


class BytecompError(RuntimeError):
    """A failure reported by the worker engine: `code` is the C API's negative return code,
    `message` the engine's text (bytecomp_last_error or bytecomp_handle_error)."""

    def __init__(self, code, message, operation=None):
        self.code = code
        self.message = message
        self.operation = operation
        where = f"{operation}: " if operation else ""
        kind = _CODE_NAMES.get(code, f"code {code}")
        super().__init__(f"{where}{message or '(no error text)'} [bytecomp {kind}]")


class BytecompInvalidArgumentError(BytecompError, ValueError):
    pass


class BytecompNotInitializedError(BytecompError):
    pass


class BytecompTimeoutError(BytecompError, TimeoutError):
    pass


class BytecompUnavailableError(BytecompError, ConnectionError):
    pass


class BytecompRejectedError(BytecompError):
    pass


class BytecompShutdownError(BytecompError):
    pass


class BytecompInternalError(BytecompError):
    pass


_ERROR_CLASSES = {
    ERR_INVALID_ARGUMENT: BytecompInvalidArgumentError,
    ERR_NOT_INITIALIZED: BytecompNotInitializedError,
    ERR_TIMEOUT: BytecompTimeoutError,
    ERR_UNAVAILABLE: BytecompUnavailableError,
    ERR_REJECTED: BytecompRejectedError,
    ERR_SHUTDOWN: BytecompShutdownError,
    ERR_INTERNAL: BytecompInternalError,
}


def make_error(code, message, operation=None):
    """The exception object for a negative return code."""
    return _ERROR_CLASSES.get(code, BytecompError)(code, message, operation)


def candidate_library_paths():
    """Where the library is looked for, in order (see the module docstring)."""
    paths = []
    explicit = os.environ.get("BYTECOMP_LIBRARY")
    if explicit:
        paths.append(explicit)
    build_dir = os.environ.get("BYTECOMP_BUILD_DIR")
    if build_dir:
        paths.append(os.path.join(build_dir, "lib", LIBRARY_NAME))
    package_dir = os.path.dirname(os.path.abspath(__file__))
    # shim/bytecomp/_engine.py -> repository root is two levels above the package.
    repo_root = os.path.dirname(os.path.dirname(package_dir))
    paths.append(os.path.join(repo_root, "build", "lib", LIBRARY_NAME))
    paths.append(os.path.join(package_dir, LIBRARY_NAME))
    try:
        from bytecomp._installed import LIBRARY_PATH as installed
        paths.append(installed)
    except ImportError:  # running from a checkout or a wheel
        pass
    return paths


def find_library():
    """The path of the worker engine library; raises OSError naming every place tried."""
    explicit = os.environ.get("BYTECOMP_LIBRARY")
    if explicit and not os.path.isfile(explicit):
        # An explicit setting that is wrong must not silently fall back to another build.
        raise OSError(f"BYTECOMP_LIBRARY={explicit} does not exist")
    tried = candidate_library_paths()
    for path in tried:
        if os.path.isfile(path):
            return path
    raise OSError(
        f"cannot find {LIBRARY_NAME}; tried: {', '.join(tried)}. Build the engine "
        "(deploy/build.sh) or set BYTECOMP_LIBRARY to the library's path")


class Stats(ctypes.Structure):
    """bytecomp_stats_t: bytes on the wire and what they stand for uncompressed."""
    _fields_ = [("pushed_bytes", ctypes.c_int64), ("pushed_raw_bytes", ctypes.c_int64),
                ("pulled_bytes", ctypes.c_int64), ("pulled_raw_bytes", ctypes.c_int64),
                ("operations", ctypes.c_int64)]


def _declare_prototypes(lib):
    """argtypes/restype for every C API function, so ctypes never guesses an int width."""
    c_int, c_int64, c_char_p = ctypes.c_int, ctypes.c_int64, ctypes.c_char_p
    handle_t = ctypes.c_int64
    prototypes = {
        "bytecomp_init": (c_int, [c_char_p]),
        "bytecomp_shutdown": (c_int, []),
        "bytecomp_is_initialized": (c_int, []),
        "bytecomp_rank": (c_int, []),
        "bytecomp_size": (c_int, []),
        "bytecomp_local_rank": (c_int, []),
        "bytecomp_local_size": (c_int, []),
        "bytecomp_num_servers": (c_int, []),
        "bytecomp_declare": (c_int, [c_char_p, c_int64, c_int]),
        "bytecomp_declare_shape": (c_int, [c_char_p, c_int64, c_int, c_int,
                                           ctypes.POINTER(c_int64)]),
        "bytecomp_push_pull": (c_int, [c_char_p, ctypes.c_void_p, c_int64, c_int, c_int,
                                       ctypes.c_uint32, ctypes.POINTER(handle_t)]),
        "bytecomp_push_pull_device": (c_int, [c_char_p, ctypes.c_void_p, c_int64, c_int, c_int,
                                              ctypes.c_void_p, c_int, ctypes.c_uint32,
                                              ctypes.POINTER(handle_t)]),
        "bytecomp_poll": (c_int, [handle_t]),
        "bytecomp_wait": (c_int, [handle_t, c_int64]),
        "bytecomp_release": (c_int, [handle_t]),
        "bytecomp_handle_error": (c_int, [handle_t, ctypes.c_char_p, ctypes.c_size_t]),
        "bytecomp_barrier": (c_int, [c_int64]),
        "bytecomp_wait_timeout_ms": (c_int64, []),
        "bytecomp_last_error": (c_char_p, []),
        "bytecomp_set_learning_rate": (c_int, [ctypes.c_double]),
        "bytecomp_get_stats": (c_int, [ctypes.POINTER(Stats)]),
        "bytecomp_save_state": (c_int, [c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]),
        "bytecomp_load_state": (c_int, [c_char_p, ctypes.c_void_p, ctypes.c_size_t]),
        "bytecomp_tensor_strategy": (c_int, [c_char_p, ctypes.POINTER(c_int64),
                                             ctypes.POINTER(c_int64)]),
    }
    for name, (restype, argtypes) in prototypes.items():
        fn = getattr(lib, name)  # AttributeError names the missing symbol
        fn.restype = restype
        fn.argtypes = argtypes


class Engine:
    """The process's worker engine, reached through the C API.

    Every method raises a BytecompError subclass when the engine returns a negative code.
    ctypes releases the GIL during each call, so a blocking wait does not stop other Python
    threads (backward hooks, data loaders).
    """

    def __init__(self, path=None):
        self.path = path or find_library()
        self._lib = ctypes.CDLL(self.path)
        _declare_prototypes(self._lib)
        # bytecomp_last_error is per thread: every method below reads it on the thread whose
        # call failed, within the same method call.

    # -- error helpers -------------------------------------------------------------------
    def last_error(self):
        text = self._lib.bytecomp_last_error()
        return text.decode("utf-8", "replace") if text else ""

    def _check(self, code, operation):
        if code < 0:
            raise make_error(code, self.last_error(), operation)
        return code

    def handle_error(self, handle):
        buf = ctypes.create_string_buffer(4096)
        code = self._lib.bytecomp_handle_error(handle, buf, len(buf))
        if code < 0:
            return self.last_error()
        return buf.value.decode("utf-8", "replace")

    # -- life cycle ----------------------------------------------------------------------
    def init(self, config_path=None):
        arg = os.fsencode(config_path) if config_path else None
        self._check(self._lib.bytecomp_init(arg), "bytecomp_init")

    def shutdown(self):
        self._check(self._lib.bytecomp_shutdown(), "bytecomp_shutdown")

    def is_initialized(self):
        return self._lib.bytecomp_is_initialized() == 1

    def rank(self):
        return self._check(self._lib.bytecomp_rank(), "bytecomp_rank")

    def size(self):
        return self._check(self._lib.bytecomp_size(), "bytecomp_size")

    def local_rank(self):
        return self._check(self._lib.bytecomp_local_rank(), "bytecomp_local_rank")

    def local_size(self):
        return self._check(self._lib.bytecomp_local_size(), "bytecomp_local_size")

    def num_servers(self):
        return self._check(self._lib.bytecomp_num_servers(), "bytecomp_num_servers")

    # -- tensors -------------------------------------------------------------------------
    def declare(self, name, element_count, dtype, shape=None):
        """shape: the tensor's dimensions (optional); matrix codecs (powersgd) then read it as
        shape[0] rows of the other dimensions' product instead of a near-square matrix."""
        if not shape:
            self._check(self._lib.bytecomp_declare(name.encode(), int(element_count),
                                                   int(dtype)), f"declare '{name}'")
            return
        dims = (ctypes.c_int64 * len(shape))(*[int(d) for d in shape])
        self._check(self._lib.bytecomp_declare_shape(name.encode(), int(element_count),
                                                     int(dtype), len(shape), dims),
                    f"declare '{name}'")

    def push_pull(self, name, data_ptr, element_count, dtype, priority=0, average=False):
        """Starts an in-place push-pull; returns the engine's handle (an int)."""
        handle = ctypes.c_int64(-1)
        flags = FLAG_AVERAGE if average else 0
        self._check(self._lib.bytecomp_push_pull(name.encode(), ctypes.c_void_p(data_ptr),
                                                 int(element_count), int(dtype),
                                                 int(priority), flags, ctypes.byref(handle)),
                    f"push_pull '{name}'")
        return handle.value

    def push_pull_device(self, name, data_ptr, element_count, dtype, device, stream,
                         priority=0, average=False):
        """The same for CUDA memory of `device`, ready once the work queued on `stream` (a
        cudaStream_t as an int, 0: the default stream) is done; the result is in device memory
        when the handle completes."""
        handle = ctypes.c_int64(-1)
        flags = FLAG_AVERAGE if average else 0
        self._check(self._lib.bytecomp_push_pull_device(
            name.encode(), ctypes.c_void_p(data_ptr), int(element_count), int(dtype),
            int(device), ctypes.c_void_p(stream or None), int(priority), flags,
            ctypes.byref(handle)), f"push_pull '{name}'")
        return handle.value

    def poll(self, handle):
        """1 done, 0 pending; raises the handle's failure."""
        code = self._lib.bytecomp_poll(handle)
        if code < 0:
            raise make_error(code, self.last_error() or self.handle_error(handle), "poll")
        return code

    def wait(self, handle, timeout_ms=-1):
        """OK when done (the engine then releases the handle); raises on failure or
        BytecompTimeoutError when timeout_ms passed (the operation goes on)."""
        code = self._lib.bytecomp_wait(handle, int(timeout_ms))
        if code < 0:
            if code == ERR_TIMEOUT:
                raise make_error(code, self.last_error() or
                                 f"not complete after {timeout_ms} ms", "wait")
            # The engine released the handle: its text is this thread's last error.
            raise make_error(code, self.last_error() or self.handle_error(handle), "wait")
        return code

    def release(self, handle):
        return self._lib.bytecomp_release(handle)

    def wait_timeout_ms(self):
        """How long a wait without a limit of its own waits (push_pull_timeout_ms)."""
        return self._lib.bytecomp_wait_timeout_ms()

    def barrier(self, timeout_ms=-1):
        self._check(self._lib.bytecomp_barrier(int(timeout_ms)), "barrier")

    def set_learning_rate(self, learning_rate):
        self._check(self._lib.bytecomp_set_learning_rate(float(learning_rate)),
                    "bytecomp_set_learning_rate")

    def save_state(self, name):
        """The tensor's error-feedback state as bytes (between steps)."""
        size = ctypes.c_size_t(0)
        self._check(self._lib.bytecomp_save_state(name.encode(), None, 0, ctypes.byref(size)),
                    f"save_state '{name}'")
        buf = ctypes.create_string_buffer(max(1, size.value))
        self._check(self._lib.bytecomp_save_state(name.encode(), buf, size.value,
                                                  ctypes.byref(size)), f"save_state '{name}'")
        return buf.raw[:size.value]

    def load_state(self, name, state):
        buf = ctypes.create_string_buffer(bytes(state), max(1, len(state)))
        self._check(self._lib.bytecomp_load_state(name.encode(), buf, len(state)),
                    f"load_state '{name}'")

    def tensor_strategy(self, name):
        """(round, version): the tensor's latest started round and the strategy version it ran
        with."""
        round_, version = ctypes.c_int64(0), ctypes.c_int64(0)
        self._check(self._lib.bytecomp_tensor_strategy(name.encode(), ctypes.byref(round_),
                                                       ctypes.byref(version)),
                    f"tensor_strategy '{name}'")
        return round_.value, version.value

    def stats(self):
        stats = Stats()
        self._check(self._lib.bytecomp_get_stats(ctypes.byref(stats)), "bytecomp_get_stats")
        return {name: getattr(stats, name) for name, _ in Stats._fields_}


_engine = None
_engine_lock = threading.Lock()


def get_engine():
    """The process-wide Engine, loading the library on first use."""
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = Engine()
        return _engine


def set_engine(engine):
    """Replaces the process-wide engine (tests use an in-process fake); returns the old one."""
    global _engine
    with _engine_lock:
        old, _engine = _engine, engine
        return old
