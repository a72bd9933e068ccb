"""ByteComp: parameter-server communication with gradient compression.

Framework bindings: bytecomp.torch (PyTorch) and bytecomp.mxnet (MXNet Gluon). Both load the
worker engine library (libbytecomp_worker.so) through its C API with ctypes; neither links
the framework's C++ library. See shim/README.md.
"""

from ._engine import (BytecompError, BytecompInvalidArgumentError,  # noqa: F401
                      BytecompNotInitializedError, BytecompRejectedError,
                      BytecompShutdownError, BytecompTimeoutError, BytecompUnavailableError,
                      BytecompInternalError, find_library)

__version__ = "0.1.0"
