"""Worker of test_cluster_torch's DDP test: the same model trained three times for 20 steps on
this rank's slice of digits batches, with DistributedDataParallel over gloo (no hook, the
reference), and with bytecomp.torch.ddp_comm_hook per parameter and per bucket. Small buckets,
so that DDP has several and rebuilds them after the first step. Saves OUTDIR/rank<R>.pt.
Usage: torch_ddp.py OUTDIR [DEVICE]: cpu by default; cuda on a GPU (test/gpu), every rank on
the current CUDA device."""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP

import bytecomp.torch as bc

STEPS, LOCAL_BATCH, SEED, BUCKET_MB = 20, 16, 42, 0.02


def make_model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(),
                               torch.nn.Linear(96, 96), torch.nn.ReLU(),
                               torch.nn.Linear(96, 10))


def train(rank, size, hook_per):
    # Rank-dependent start: DDP's start-up broadcast (over gloo) makes rank 0's the start.
    torch.manual_seed(SEED + rank)
    model = make_model() if rank == 0 else torch.nn.Sequential(*[
        torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 96), torch.nn.ReLU(),
        torch.nn.Linear(96, 10)])
    # DDP's first bucket is 1 MiB (a private constant) whatever bucket_cap_mb says; make it
    # small too, so that this small model spreads over several buckets from the start.
    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = int(BUCKET_MB * 2**20)
    model.to(DEVICE)
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    buckets = set()  # bucket indices the hook saw

    def counting_hook(state, bucket):
        buckets.add(bucket.index())
        return bc.ddp_comm_hook(state, bucket)

    if hook_per is not None:
        ddp.register_comm_hook(bc.DDPHookState(ddp, per=hook_per,
                                               name_prefix=f"ddp_{hook_per}/"), counting_hook)
    pushed_before = bc.stats()["pushed_bytes"]
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype(np.float32)).to(DEVICE)
    y = torch.from_numpy(digits.target.astype(np.int64)).to(DEVICE)
    order = torch.from_numpy(np.random.RandomState(SEED).permutation(len(x)))
    global_batch = LOCAL_BATCH * size
    for step in range(STEPS):
        idx = order[step * global_batch + rank * LOCAL_BATCH:
                    step * global_batch + (rank + 1) * LOCAL_BATCH]
        opt.zero_grad()
        F.cross_entropy(ddp(x[idx]), y[idx]).backward()
        opt.step()
    return {"params": {n: t.detach().to("cpu", copy=True) for n, t in model.state_dict().items()},
            "buckets": len(buckets), "pushed_bytes": bc.stats()["pushed_bytes"] - pushed_before}


outdir = sys.argv[1]
DEVICE = sys.argv[2] if len(sys.argv) > 2 else "cpu"
torch.set_num_threads(1)
bc.init()
try:
    bc.init_process_group()
    rank, size = bc.rank(), bc.size()
    result = {"size": size, "device": DEVICE, "init": {n: t.clone() for n, t in make_model().state_dict().items()},
              "gloo": train(rank, size, None),
              "parameter": train(rank, size, "parameter"),
              "bucket": train(rank, size, "bucket")}
    torch.save(result, os.path.join(outdir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()
finally:
    bc.shutdown()
