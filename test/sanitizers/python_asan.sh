#!/bin/sh
# python_asan.sh INTERPRETER ARGS...: runs a Python test of the ASan build
# (deploy/configure_sanitized.sh sets BYTECOMP_PYTHON_WRAPPER to this, which test/python puts
# before every interpreter: Debian's python3, the mxnet and torch 2.x environments'). The ASan
# runtime must be in the process before libbytecomp_worker.so is loaded through ctypes, so it
# is preloaded; LD_PRELOAD stays in the environment, so the worker processes a test starts get
# it too. Leak checking is off in this process tree: the interpreter and torch keep their
# memory to the end by design, which LeakSanitizer would report; the C++ tests keep it on.
if [ "$#" -lt 1 ]; then
  echo "usage: python_asan.sh INTERPRETER [ARGS...]" >&2
  exit 2
fi
runtime=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
LD_PRELOAD="$runtime${LD_PRELOAD:+:$LD_PRELOAD}" \
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  exec "$@"
