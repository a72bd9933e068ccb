"""Worker of test_adaptive_ratio_changes_on_every_node_at_the_same_round: trains the digits MLP
with the cluster's strategy (artopk with an adaptive ratio) for STEPS steps (argv[2]) and
writes OUTDIR/rank<R>.json (argv[1]): per step, the training round and the strategy version
that round of the first layer's weight gradient ran with, and the final test accuracy."""

import json
import os
import sys

import torch
import torch.nn.functional as F

import bytecomp.torch as bc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
import train_digits  # noqa: E402

outdir, steps = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
bc.init()
rank, size = bc.rank(), bc.size()
x, y, x_test, y_test = train_digits.load_digits_split(42)
x, y = torch.from_numpy(x), torch.from_numpy(y)
model = train_digits.build_model(128, 7)
optimizer = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.3),
                                    model.named_parameters())
bc.broadcast_parameters(model.state_dict(), root_rank=0)
batch = 16
rounds = []
for i in range(steps):
    start = (i * size + rank) * batch % (len(x) - batch)
    idx = torch.arange(start, start + batch)
    F.cross_entropy(model(x[idx]), y[idx]).backward()
    optimizer.step()
    optimizer.zero_grad()
    rounds.append(bc.tensor_strategy("grad/0.weight"))
with torch.no_grad():
    accuracy = (model(torch.from_numpy(x_test)).argmax(1) == torch.from_numpy(y_test)).float()
with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
    json.dump({"rounds": rounds, "accuracy": accuracy.mean().item()}, f)
bc.shutdown()
