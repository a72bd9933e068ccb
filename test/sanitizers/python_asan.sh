#!/bin/sh
# The Python interpreter of the ASan build's Python tests (deploy/configure_sanitized.sh sets
# BYTECOMP_PYTHON to this): the ASan runtime must be in the process before
# libbytecomp_worker.so is loaded through ctypes, so it is preloaded. Leak checking is off in
# this process tree: the interpreter and torch keep their memory to the end by design, which
# LeakSanitizer would report; the C++ tests keep it on.
runtime=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
LD_PRELOAD="$runtime${LD_PRELOAD:+:$LD_PRELOAD}" \
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  exec /usr/bin/python3 "$@"
