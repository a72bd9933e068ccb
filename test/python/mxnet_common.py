"""The MXNet Gluon experiment, shared by the unit test (fake engine, threads) and the cluster
test (real engine, processes): W workers with DistributedTrainer (or Gluon's Trainer over
bytecomp.mxnet.KVStore) against one process on the concatenated batch."""

import threading

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

IN, HIDDEN, OUT = 16, 32, 8


_init_lock = threading.Lock()  # seeding is process-wide: threads as workers must not interleave


def make_net(seed):
    with _init_lock:
        mx.random.seed(seed)
        np.random.seed(seed)
        net = gluon.nn.HybridSequential(prefix="mlp_")
        with net.name_scope():
            net.add(gluon.nn.Dense(HIDDEN, in_units=IN, activation="tanh", prefix="fc1_"))
            net.add(gluon.nn.Dense(OUT, in_units=HIDDEN, prefix="fc2_"))
        net.initialize(mx.init.Xavier(), ctx=mx.cpu())
        net(mx.nd.zeros((1, IN))).wait_to_read()  # finish initialisation inside the lock
        return net


def make_batches(seed, steps, global_batch):
    rs = np.random.RandomState(seed + 1000)
    x = rs.randn(steps, global_batch, IN).astype(np.float32)
    y = rs.randint(0, OUT, size=(steps, global_batch)).astype(np.float32)
    return x, y


def params_of(net):
    return {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}


def train_distributed(bcm, rank, size, steps=10, local_batch=8, lr=0.1, seed=5,
                      use_kvstore=False):
    net = make_net(seed + rank)
    params = net.collect_params()
    optimizer_params = {"learning_rate": lr, "momentum": 0.9}
    # Before the first forward pass: Gluon's Trainer would broadcast through the KVStore only
    # at the first step(), after each rank computed gradients on its own initial weights.
    bcm.broadcast_parameters(params, root_rank=0)
    if use_kvstore:
        # Gluon's Trainer sums gradients through the KVStore: step() takes the global batch.
        trainer = gluon.Trainer(params, "sgd", optimizer_params, kvstore=bcm.KVStore())
        batch_for_step = local_batch * size
    else:
        trainer = bcm.DistributedTrainer(params, "sgd", optimizer_params)
        batch_for_step = local_batch
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = make_batches(seed, steps, local_batch * size)
    lo, hi = rank * local_batch, (rank + 1) * local_batch
    for step in range(steps):
        xb, yb = mx.nd.array(x[step, lo:hi]), mx.nd.array(y[step, lo:hi])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(batch_for_step)
    return params_of(net)


def train_reference(size, steps=10, local_batch=8, lr=0.1, seed=5):
    net = make_net(seed)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr, "momentum": 0.9},
                            kvstore=None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = make_batches(seed, steps, local_batch * size)
    for step in range(steps):
        xb, yb = mx.nd.array(x[step]), mx.nd.array(y[step])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(local_batch * size)
    return params_of(net)


def max_relative_difference(got, want):
    return max(float(np.linalg.norm(got[k].astype(np.float64) - want[k]) /
                     max(np.linalg.norm(want[k].astype(np.float64)), 1e-30)) for k in want)
