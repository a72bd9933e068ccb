"""Worker of test_cluster_torch: the equivalence experiment (equivalence_common) averaging, with
plain summation, with local accumulation and with cross-barrier; saves this rank's parameters to OUTDIR/rank<R>.pt."""

import os
import sys

import torch

import bytecomp.torch as bc
from equivalence_common import train_distributed

outdir = sys.argv[1]
bc.init()
try:
    rank, size = bc.rank(), bc.size()
    result = {"size": size,
              "average": train_distributed(bc, rank, size, average=True),
              "sum": train_distributed(bc, rank, size, average=False),
              # Two backward passes of half the local batch per step, summed locally.
              "accumulate": train_distributed(bc, rank, size, average=True,
                                              backward_passes_per_step=2),
              # Cross-barrier: each update deferred to the next forward reaching its layer.
              "cross_barrier": train_distributed(bc, rank, size, average=True,
                                                 cross_barrier=True)}
    torch.save(result, os.path.join(outdir, f"rank{rank}.pt"))
finally:
    bc.shutdown()
