"""Worker of test_checkpoint_restores_error_feedback: trains the digits MLP with the cluster's
strategy (top-k + residual) and checkpoints, in one of three modes (argv[1]):
  train   : 5 steps, checkpoint (model + optimizer, which holds the error feedback), 5 steps
  resume  : load the checkpoint, the same last 5 steps
  no_ef   : as resume, but the checkpoint's error-feedback state is dropped
It writes OUTDIR/rank<R>.<mode>.pt (argv[2]) with the final parameters."""

import os
import sys

import torch
import torch.nn.functional as F

import bytecomp.torch as bc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
import train_digits  # noqa: E402

mode, outdir = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
bc.init()
rank, size = bc.rank(), bc.size()
x, y, _, _ = train_digits.load_digits_split(42)
x, y = torch.from_numpy(x), torch.from_numpy(y)
model = train_digits.build_model(64, 7)
optimizer = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.3),
                                    model.named_parameters())
bc.broadcast_parameters(model.state_dict(), root_rank=0)
checkpoint = os.path.join(outdir, f"rank{rank}.ckpt")


def step(i):
    idx = torch.arange(16) + 16 * (i * size + rank)
    F.cross_entropy(model(x[idx]), y[idx]).backward()
    optimizer.step()
    optimizer.zero_grad()


if mode == "train":
    for i in range(5):
        step(i)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)
else:
    state = torch.load(checkpoint)
    model.load_state_dict(state["model"])
    if mode == "no_ef":
        state["optimizer"].pop("bytecomp_error_feedback")
    optimizer.load_state_dict(state["optimizer"])
for i in range(5, 10):
    step(i)
torch.save([p.detach().clone() for p in model.parameters()],
           os.path.join(outdir, f"rank{rank}.{mode}.pt"))
bc.shutdown()
