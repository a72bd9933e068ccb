"""CPU math checks that do not depend on a framework: which BLAS library the process runs on,
and how many threads each of several workers on one machine should use.

Debian's python3-torch links libblas.so.3 and liblapack.so.3, which update-alternatives points
at the reference implementation unless an optimised one (OpenBLAS) is installed. On the
reference BLAS a step of a 4.3M-parameter MLP took about 20x longer than on OpenBLAS here, so
every training job is compute-bound and compression can show nothing.
"""

import os

REFERENCE, OPENBLAS, MKL, BLIS, UNKNOWN = "reference", "openblas", "mkl", "blis", "unknown"


def classify_blas_path(path):
    """The kind of BLAS a library file is, from its (resolved) path; None if not a BLAS."""
    name = os.path.basename(path).lower()
    lowered = path.lower()
    if "openblas" in lowered:
        return OPENBLAS
    if "mkl" in name:
        return MKL
    if "blis" in lowered:
        return BLIS
    if name.startswith(("libblas.so", "liblapack.so", "libcblas.so")):
        # Debian's alternatives: /usr/lib/<triplet>/blas/ and lapack/ hold the reference
        # implementation; optimised ones live in their own folders (openblas-pthread/, ...).
        folder = os.path.basename(os.path.dirname(path))
        return REFERENCE if folder in ("blas", "lapack") else UNKNOWN
    return None


def loaded_blas(maps_path="/proc/self/maps"):
    """(kind, path) of the BLAS mapped into this process: an optimised one if any is mapped,
    else the reference one, else (None, None) when no separate BLAS library is loaded (a
    framework that links its BLAS statically: ask the framework)."""
    try:
        with open(maps_path) as f:
            paths = {line.split(None, 5)[5].strip() for line in f
                     if len(line.split(None, 5)) == 6}
    except OSError:
        return None, None
    found = {}
    for path in sorted(paths):
        kind = classify_blas_path(os.path.realpath(path))
        if kind is not None:
            found.setdefault(kind, os.path.realpath(path))
    for kind in (OPENBLAS, MKL, BLIS, UNKNOWN, REFERENCE):
        if kind in found:
            return kind, found[kind]
    return None, None


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_worker(local_workers, cores=None):
    """Intra-op threads for each of `local_workers` processes sharing `cores` cores."""
    cores = usable_cores() if cores is None else cores
    return max(1, cores // max(1, local_workers))
