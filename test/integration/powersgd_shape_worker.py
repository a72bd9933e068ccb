"""A worker for test_powersgd_shapes.py: through the Python shim's engine (ctypes, the C API),
two 48 x 30 layer gradients of rank 2 per worker, whose left factors all workers share (so the
sum over workers is rank 2 too), go through rank-2 PowerSGD: one declared with its shape, one
without. Prints, per tensor, the largest error against the local reference (the exact sum of
every worker's gradient, which this worker computes itself) relative to the sum's largest
value, as JSON."""
import ctypes
import json
import random

from bytecomp import _engine

ROWS, COLS = 48, 30


def gaussian(seed, n):
    rng = random.Random(seed)
    return [rng.gauss(0.0, 1.0) for _ in range(n)]


def gradient(worker):
    """Worker `worker`'s rank-2 layer gradient, row-major: u1 v1^T + u2 v2^T."""
    u1, u2 = gaussian(1, ROWS), gaussian(2, ROWS)
    v1, v2 = gaussian(100 + worker, COLS), gaussian(200 + worker, COLS)
    return [u1[i] * v1[j] + u2[i] * v2[j] for i in range(ROWS) for j in range(COLS)]


def main():
    engine = _engine.get_engine()
    engine.init(None)
    workers = engine.size()
    reference = [sum(g) for g in zip(*[gradient(w) for w in range(workers)])]
    scale = max(abs(x) for x in reference)
    mine = gradient(engine.rank())
    engine.declare("layer.shaped", ROWS * COLS, _engine.FLOAT32, [ROWS, COLS])
    engine.declare("layer.flat", ROWS * COLS, _engine.FLOAT32)
    errors = {}
    for name in ("layer.shaped", "layer.flat"):
        data = (ctypes.c_float * (ROWS * COLS))(*mine)
        handle = engine.push_pull(name, ctypes.addressof(data), ROWS * COLS, _engine.FLOAT32)
        engine.wait(handle)
        errors[name] = max(abs(data[i] - reference[i]) for i in range(ROWS * COLS)) / scale
    print(json.dumps({"rank": engine.rank(), "errors": errors}), flush=True)
    engine.shutdown()


if __name__ == "__main__":
    main()
