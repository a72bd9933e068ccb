"""Worker of test_cluster_embedding: trains an embedding table of 1,000,000 x 16 through
bytecomp.torch's DistributedOptimizer (plain SGD) on synthetic data, each step touching 0.18%
of the rows, for STEPS steps (8, or the second argument); the codec is whatever the
scheduler's strategy says. Writes OUTDIR/rank<R>.json: the SHA-256 of the final parameters
(and of the initial ones), the rows training changed, the engine's byte counts (pushed also
per step), and the bytes of the non-zero 256-element blocks of this worker's gradients and of
their sums, counted here from the tensors themselves.

The data makes exact comparison meaningful: every worker starts from the same table (a seed,
no broadcast), and in each step every row is touched by at most two workers (each worker has
rows of its own, and workers 0-1 and 2-3 share a few rows: a pair). So every element of the
summed gradient adds at most two non-zero values, and fp32 addition of two values does not
depend on their order (the servers' uncompressed sum adds pushes in arrival order; blocksparse
adds them in worker-rank order); zeros add exactly, and an embedding's gradient holds no -0.
Averaging divides by 4, which is exact. Uncompressed and blocksparse training must therefore
end with the same parameters, bit for bit."""

import hashlib
import json
import os
import sys

import numpy as np
import torch

import bytecomp.torch as bc

ROWS, DIM = 1_000_000, 16
STEPS, LR = 8, 0.5
OWN, SHARED, REPEATED = 400, 100, 50  # per worker and step: own rows, the pair's, repeats
BLOCK = 256                            # blocksparse's default block, in elements


def sha256(tensor):
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()


def nonzero_block_bytes(grad):
    """Bytes of the 256-element blocks of the flat tensor that hold a non-zero value (the
    engine's 4 MiB partitions are whole blocks, so its blocks are these)."""
    flat = grad.detach().reshape(-1)
    assert flat.numel() % BLOCK == 0
    return int((flat.view(-1, BLOCK) != 0).any(dim=1).sum()) * BLOCK * 4


def batch(step, rank, size):
    """This worker's indices and targets of a step; every worker draws the same numbers."""
    assert size == 4, "the row-sharing pattern is written for 4 workers"
    rng = np.random.RandomState(1000 + step)
    rows = rng.choice(ROWS, size=4 * OWN + 2 * SHARED, replace=False)
    own = rows[rank * OWN:(rank + 1) * OWN]
    pair = rank // 2
    shared = rows[4 * OWN + pair * SHARED:4 * OWN + (pair + 1) * SHARED]
    indices = np.concatenate([own, shared, own[:REPEATED]])
    targets = rng.uniform(-1, 1, size=(4, len(indices))).astype(np.float32)[rank]
    return torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(targets)


def main(outdir, steps=STEPS):
    torch.set_num_threads(1)
    bc.init()
    try:
        rank, size = bc.rank(), bc.size()
        torch.manual_seed(7)  # the same table on every worker
        table = torch.nn.Embedding(ROWS, DIM)
        weights = torch.linspace(-0.5, 0.5, DIM)
        initial = table.weight.detach().clone()
        own_bytes = []

        def count_pushed(grad):  # the gradient as it comes from backward, before the push
            own_bytes.append(nonzero_block_bytes(grad))
            return grad

        table.weight.register_hook(count_pushed)
        optimizer = bc.DistributedOptimizer(torch.optim.SGD(table.parameters(), lr=LR),
                                            named_parameters=table.named_parameters())
        before = last = bc.stats()
        sum_bytes, step_pushed = [], []
        for step in range(steps):
            indices, targets = batch(step, rank, size)
            optimizer.zero_grad()
            predicted = (table(indices) * weights).sum(dim=1)
            loss = 0.5 * ((predicted - targets) ** 2).sum()
            loss.backward()
            optimizer.step()
            sum_bytes.append(nonzero_block_bytes(table.weight.grad))  # the average now
            stats = bc.stats()
            step_pushed.append(stats["pushed_bytes"] - last["pushed_bytes"])
            last = stats
        after = bc.stats()
        changed_rows = int((table.weight.detach() != initial).any(dim=1).sum())
        result = {
            "size": size,
            "params_sha256": sha256(table.weight),
            "initial_sha256": sha256(initial),
            "changed_rows": changed_rows,
            "pushed_bytes": after["pushed_bytes"] - before["pushed_bytes"],
            "pulled_bytes": after["pulled_bytes"] - before["pulled_bytes"],
            "nonzero_block_bytes_pushed": sum(own_bytes),
            "nonzero_block_bytes_summed": sum(sum_bytes),
            "raw_bytes": steps * ROWS * DIM * 4,
            "steps": len(own_bytes),
            "pushed_bytes_per_step": step_pushed,
        }
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        bc.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
