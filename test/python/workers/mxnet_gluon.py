"""Worker of test_cluster_mxnet: the Gluon experiment (mxnet_common) with DistributedTrainer
and with Gluon's Trainer over bytecomp.mxnet.KVStore; saves OUTDIR/rank<R>.npz."""

import os
import sys

import numpy as np

import bytecomp.mxnet as bcm
from mxnet_common import train_distributed

outdir = sys.argv[1]
bcm.init()
try:
    rank, size = bcm.rank(), bcm.size()
    trainer = train_distributed(bcm, rank, size, use_kvstore=False)
    kvstore = train_distributed(bcm, rank, size, use_kvstore=True)
    np.savez(os.path.join(outdir, f"rank{rank}.npz"), size=size,
             **{"trainer/" + k: v for k, v in trainer.items()},
             **{"kvstore/" + k: v for k, v in kvstore.items()})
finally:
    bcm.shutdown()
