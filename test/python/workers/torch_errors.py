"""Worker of test_cluster_errors: provokes one error case (argv[1]) and records what this
worker saw in OUTDIR/rank<R>.json (argv[2])."""

import json
import os
import sys
import time

import torch

import bytecomp
import bytecomp.torch as bc

mode, outdir = sys.argv[1], sys.argv[2]
bc.init()
rank = bc.rank()
record = {"rank": rank, "mode": mode}


def outcome(fn):
    """('ok', value) or ('error', class name, message)."""
    try:
        return ["ok", fn()]
    except bytecomp.BytecompError as e:
        return ["error", type(e).__name__, str(e)]


try:
    if mode == "size_mismatch":
        # Rank 0 has 10 elements, every other rank 12: every worker must hear about it.
        n = 10 if rank == 0 else 12
        start = time.monotonic()
        record["push_pull"] = outcome(lambda: bc.push_pull(torch.ones(n), "mismatch").tolist())
        record["seconds"] = time.monotonic() - start
    elif mode == "double_declare":
        bc.declare("twice", torch.zeros(10))
        bc.declare("twice", torch.zeros(10))  # identical: a no-op
        record["declare_other_size"] = outcome(lambda: bc.declare("twice", torch.zeros(12)))
        record["declare_other_dtype"] = outcome(
            lambda: bc.declare("twice", torch.zeros(10, dtype=torch.float16)))
        record["push_pull_other_size"] = outcome(
            lambda: bc.push_pull(torch.zeros(12), "twice").tolist())
        record["still_works"] = outcome(
            lambda: bc.push_pull(torch.full((10,), 2.0), "twice", average=False).tolist())
    elif mode == "shutdown_inflight":
        handles = []
        if rank == 0:
            # Rank 1 never pushes these: they cannot complete, so shutdown must fail them.
            handles = [bc.push_pull_async(torch.ones(1 << 20), f"inflight{i}")
                       for i in range(4)]
        else:
            time.sleep(2.0)
        start = time.monotonic()
        bc.shutdown()
        record["shutdown_seconds"] = time.monotonic() - start
        record["handles"] = [outcome(lambda h=h: float(bc.synchronize(h).sum()))
                             for h in handles]
    else:
        raise SystemExit(f"unknown mode {mode}")
finally:
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    if bc.is_initialized():
        bc.shutdown()
