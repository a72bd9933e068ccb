#!/usr/bin/env python3
"""The digits MLP of train_digits.py, in MXNet Gluon, across W processes through ByteComp
(bytecomp.mxnet.DistributedTrainer). Needs mxnet 1.9.1 (see shim/README.md):

    .venv-mxnet/bin/python examples/train_digits_mxnet.py --workers 2 --servers 1 --epochs 10

Same flags and output as train_digits.py; only --codec=none runs today.
"""

import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_digits  # noqa: E402  (also puts the checkout's shim/ on sys.path)

_init_lock = threading.Lock()  # seeding is process-wide (matters when tests run ranks as threads)


def build_net(hidden, seed):
    import mxnet as mx
    from mxnet import gluon
    with _init_lock:
        mx.random.seed(seed)
        net = gluon.nn.HybridSequential(prefix="digits_")
        with net.name_scope():
            net.add(gluon.nn.Dense(hidden, in_units=64, activation="relu", prefix="fc1_"))
            net.add(gluon.nn.Dense(hidden, in_units=hidden, activation="relu", prefix="fc2_"))
            net.add(gluon.nn.Dense(10, in_units=hidden, prefix="fc3_"))
        net.initialize(mx.init.Xavier(), ctx=mx.cpu())
        return net


def train(args, bcm, log=print):
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    rank, size = bcm.rank(), bcm.size()
    x_train, y_train, x_test, y_test = train_digits.load_digits_split(args.seed)
    net = build_net(args.hidden, args.seed + rank)
    bcm.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = bcm.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": args.lr, "momentum": args.momentum})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    grad_bytes = sum(int(np.prod(p.shape)) * 4 for p in net.collect_params().values())
    global_batch = args.batch_size * size
    steps_per_epoch = len(x_train) // global_batch
    if steps_per_epoch == 0:
        raise SystemExit(f"--batch-size {args.batch_size} x {size} workers exceeds the "
                         f"{len(x_train)} training samples")
    if rank == 0:
        log(f"digits MLP (Gluon): W={size} servers={bcm.num_servers()} codec={args.codec} "
            f"batch={args.batch_size}/worker steps/epoch={steps_per_epoch}")
    x_test_nd = mx.nd.array(x_test)
    epochs = []
    for epoch in range(args.epochs):
        order = np.random.RandomState(args.seed * 1000 + epoch).permutation(len(x_train))
        loss_sum = mx.nd.zeros((2,))
        start = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * global_batch + rank * args.batch_size:
                        step * global_batch + (rank + 1) * args.batch_size]
            xb, yb = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            trainer.step(args.batch_size)
            loss_sum += mx.nd.array([loss.mean().asscalar(), 1.0])
        elapsed = time.perf_counter() - start
        loss_sum = bcm.push_pull(loss_sum, "metrics/loss", average=False).asnumpy()
        accuracy = float((net(x_test_nd).argmax(axis=1).asnumpy() == y_test).mean())
        uncompressed = 2 * grad_bytes * steps_per_epoch
        record = dict(epoch=epoch + 1, loss=float(loss_sum[0] / loss_sum[1]), accuracy=accuracy,
                      samples_per_s=steps_per_epoch * global_batch / elapsed,
                      bytes_uncompressed=uncompressed,
                      bytes_sent=uncompressed if args.codec == "none" else None)
        epochs.append(record)
        if rank == 0:
            log(f"epoch {epoch + 1:3d}  loss {record['loss']:.4f}  test acc {accuracy:.4f}  "
                f"{record['samples_per_s']:.0f} samples/s  sent "
                f"{uncompressed / 1e6:.2f} MB of {uncompressed / 1e6:.2f} MB uncompressed "
                "per worker")
    checksum = float(sum(p.data().asnumpy().astype(np.float64).sum()
                         for p in net.collect_params().values()))
    return dict(rank=rank, size=size, codec=args.codec, epochs=epochs,
                final_accuracy=epochs[-1]["accuracy"] if epochs else None,
                param_checksum=checksum)


def main(argv=None):
    args = train_digits.parse_args(argv)
    train_digits.check_codec(args)
    train_digits.launch_unless_under_launcher(args, __file__, argv)
    import bytecomp.mxnet as bcm
    bcm.init()
    try:
        train_digits.write_json(args, train(args, bcm, log=lambda s: print(s, flush=True)))
    finally:
        bcm.shutdown()


if __name__ == "__main__":
    main()
