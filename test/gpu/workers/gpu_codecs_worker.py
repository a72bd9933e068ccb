"""Worker of test_gpu_torch: the same tensors, values and rounds through the cluster as CUDA
tensors (`cuda`) or host tensors (`cpu`); saves OUTDIR/rank<R>.<device>.pt with every result.

Each tensor `<codec>.<elements>` gets rank- and round-dependent values (the same in both runs),
so a GPU codec that writes the CPU codec's bytes gives bit-identical results, error feedback
included, over ROUNDS rounds."""

import os
import sys

import torch

import bytecomp.torch as bc

ROUNDS = 3
SIZES = (4099, 100003)  # odd sizes, several partitions each (the cluster's partition_bytes)


def values(rank, round_, index, elements):
    g = torch.Generator().manual_seed(1000003 * rank + 1009 * round_ + index)
    x = torch.randn(elements, generator=g) * 0.01
    x[:: 97] *= 30.0  # a few large ones: the sparse codecs' picks
    return x


outdir, device, codecs = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
torch.set_num_threads(1)
bc.init()
try:
    rank = bc.rank()
    results = {}
    for round_ in range(ROUNDS):
        handles = []
        index = 0
        for codec in codecs:
            for elements in SIZES:
                name = f"{codec}.{elements}"
                x = values(rank, round_, index, elements).to(device)
                if device == "cuda":
                    # Written by work queued on the stream just before the call: an engine that
                    # read the gradient early would see the wrong values.
                    x = x * 1.0
                handles.append((name, bc.push_pull_async_inplace(x, name, average=False)))
                index += 1
        for name, h in handles:
            results[(name, round_)] = bc.synchronize(h).to("cpu")
    # Exact sums: integer values in fp32 sum exactly whatever the order.
    exact = (torch.arange(4099, dtype=torch.float32) % 1000 + rank).to(device)
    results[("exact", 0)] = bc.push_pull(exact, "exact.4099", average=False).to("cpu")
    torch.save(results, os.path.join(outdir, f"rank{rank}.{device}.pt"))
finally:
    bc.shutdown()
