#!/usr/bin/env python3
"""Train an MLP on scikit-learn's digits data set across W processes through ByteComp.

Start it directly; it launches a local cluster (scheduler, servers, W copies of itself) with
deploy/bytecomp-run:

    python3 examples/train_digits.py --workers 4 --servers 1 --epochs 10

or start it under a launcher yourself (it then runs as one worker):

    deploy/bytecomp-run -np 4 --servers 1 -- python3 examples/train_digits.py --epochs 10

Every worker trains on its slice of each global batch (--batch-size samples per worker);
gradients are averaged through the servers by bytecomp.torch.DistributedOptimizer. Rank 0
prints per epoch: mean training loss, test accuracy, samples/s over all workers, and the bytes
moved per worker against uncompressed.

--codec: the scheduler's Strategy decides compression; this script writes one that applies the
codec's preset (bytecomp.strategy) to every gradient (--strategy-out names the file) and hands
it to the scheduler. Broadcasts and metrics stay uncompressed.
"""

import argparse
import json
import os
import shutil
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.isdir(os.path.join(REPO, "shim", "bytecomp")):
    sys.path.insert(0, os.path.join(REPO, "shim"))  # run from a checkout without pip install

from bytecomp.strategy import PRESETS  # noqa: E402

# The codecs --codec takes (bytecomp.strategy presets), and the bytecomp-scheduler flag that
# takes the strategy file a launch by this script writes for --codec.
SUPPORTED_CODECS = tuple(PRESETS)
SCHEDULER_STRATEGY_FLAG = "--strategy"


def strategy_file_for(args):
    """Writes the Strategy for --codec (bytecomp.strategy presets); returns its path."""
    from bytecomp.strategy import write_strategy
    path = args.strategy_out or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"bytecomp-strategy-{args.codec}-{os.getpid()}.pbtxt")
    # The digits MLP's tensors are all under the 64 KiB below which compression is normally
    # skipped: force it, so the example shows what the codec does.
    return write_strategy(path, args.codec, two_way=args.two_way, force=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--codec", default="none",
                   help="compression for every gradient: none, fp16, topk, onebit, qsgd, "
                        "efsignsgd, dgc, powersgd, randomk, artopk (presets in bytecomp.strategy)")
    p.add_argument("--two-way", action="store_true",
                   help="servers re-encode the sum for pulls with the same codec")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.3)
    # Plain SGD by default: error-feedback codecs diverge under heavy optimizer momentum at
    # this learning rate (DGC replaces the optimizer's momentum with its own correction).
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=16, help="samples per worker per step")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workers", "-np", type=int, default=2,
                   help="W when this script launches the cluster itself")
    p.add_argument("--servers", type=int, default=1,
                   help="S when this script launches the cluster itself")
    p.add_argument("--strategy-out", default=None,
                   help="where to write the strategy file for --codec (default: a temp file)")
    p.add_argument("--json-out", default=None,
                   help="directory: every rank writes rank<R>.json with its figures")
    return p.parse_args(argv)


def load_digits_split(seed):
    """Digits (1797 8x8 images), scaled to [0, 1]; a fixed 80/20 split."""
    import numpy as np
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(x))
    n_test = len(x) // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


_init_lock = threading.Lock()  # seeding is process-wide (matters when tests run ranks as threads)


def build_model(hidden, seed):
    import torch
    with _init_lock:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(hidden, 10))


def train(args, bc, log=print):
    """One worker's training loop; returns its figures (rank 0 also logs them)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    rank, size = bc.rank(), bc.size()
    x_train, y_train, x_test, y_test = load_digits_split(args.seed)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)

    # Every rank builds the model with its own seed; the broadcast makes rank 0's the start.
    model = build_model(args.hidden, args.seed + rank)
    bc.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    optimizer = bc.DistributedOptimizer(optimizer, model.named_parameters())
    bc.broadcast_optimizer_state(optimizer, root_rank=0)

    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    global_batch = args.batch_size * size
    steps_per_epoch = len(x_train) // global_batch  # equal on every rank: no rank waits alone
    if steps_per_epoch == 0:
        raise SystemExit(f"--batch-size {args.batch_size} x {size} workers exceeds the "
                         f"{len(x_train)} training samples")
    if rank == 0:
        # check_cpu_math warns when torch runs on the reference BLAS (compute-bound steps).
        blas = bc.check_cpu_math()
        log(f"digits MLP: W={size} servers={bc.num_servers()} codec={args.codec} "
            f"batch={args.batch_size}/worker ({global_batch} global) steps/epoch="
            f"{steps_per_epoch} params={grad_bytes // 4} BLAS={blas} "
            f"threads={torch.get_num_threads()}")
    epochs = []
    counters = bc.stats()  # the engine's byte counters (broadcasts included so far)
    sent_before = counters["pushed_bytes"] + counters["pulled_bytes"]
    raw_before = counters["pushed_raw_bytes"] + counters["pulled_raw_bytes"]
    for epoch in range(args.epochs):
        order = torch.from_numpy(np.random.RandomState(args.seed * 1000 + epoch)
                                 .permutation(len(x_train)))
        model.train()
        loss_sum = torch.zeros(2)  # [sum of losses, number of steps], summed over workers
        start = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * global_batch + rank * args.batch_size:
                        step * global_batch + (rank + 1) * args.batch_size]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            loss_sum += torch.tensor([loss.item(), 1.0])
        elapsed = time.perf_counter() - start
        loss_sum = bc.push_pull(loss_sum, "metrics/loss", average=False)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        # Each step pushes and pulls every gradient once; without compression that is
        # grad_bytes each way per worker.
        uncompressed = 2 * grad_bytes * steps_per_epoch
        record = dict(epoch=epoch + 1, loss=float(loss_sum[0] / loss_sum[1]),
                      accuracy=accuracy, samples_per_s=steps_per_epoch * global_batch / elapsed,
                      bytes_uncompressed=uncompressed, bytes_sent=None)
        counters = bc.stats()
        record["bytes_sent"] = (counters["pushed_bytes"] + counters["pulled_bytes"]) - sent_before
        record["bytes_uncompressed"] = (counters["pushed_raw_bytes"] +
                                        counters["pulled_raw_bytes"]) - raw_before
        sent_before += record["bytes_sent"]
        raw_before += record["bytes_uncompressed"]
        epochs.append(record)
        if rank == 0:
            sent = f"{record['bytes_sent'] / 1e6:.2f} MB"
            uncompressed = record["bytes_uncompressed"]
            log(f"epoch {epoch + 1:3d}  loss {record['loss']:.4f}  test acc {accuracy:.4f}  "
                f"{record['samples_per_s']:.0f} samples/s  sent {sent} of "
                f"{uncompressed / 1e6:.2f} MB uncompressed per worker")
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    return dict(rank=rank, size=size, codec=args.codec, epochs=epochs,
                final_accuracy=epochs[-1]["accuracy"] if epochs else None,
                param_checksum=checksum)


def find_launcher():
    candidates = [os.environ.get("BYTECOMP_RUN"), os.path.join(REPO, "deploy", "bytecomp-run"),
                  shutil.which("bytecomp-run")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SystemExit("cannot find bytecomp-run (set BYTECOMP_RUN, or run from the repository "
                     "after deploy/build.sh)")


def check_codec(args):
    """Stops with a clear message for a codec name that has no preset."""
    if args.codec not in PRESETS:
        raise SystemExit(f"--codec={args.codec}: unknown; known: {', '.join(PRESETS)}")


def launch_unless_under_launcher(args, script, argv):
    """Not started by a launcher (no BYTECOMP_SCHEDULER): become one, i.e. exec bytecomp-run
    with a scheduler, S servers and W copies of `script` with the same arguments."""
    if os.environ.get("BYTECOMP_SCHEDULER"):
        return
    launcher = find_launcher()
    cmd = [launcher, "-np", str(args.workers), "--servers", str(args.servers)]
    if args.codec != "none":
        cmd += [f"--scheduler-args={SCHEDULER_STRATEGY_FLAG}={strategy_file_for(args)}"]
    build_dir = os.environ.get("BYTECOMP_BUILD_DIR")
    if build_dir and os.path.isdir(os.path.join(build_dir, "bin")):
        cmd += ["--bin-dir", os.path.join(build_dir, "bin")]
    cmd += ["--", sys.executable, os.path.abspath(script)] + list(
        argv if argv is not None else sys.argv[1:])
    sys.stdout.flush()
    os.execv(launcher, cmd)


def write_json(args, result):
    if args.json_out:
        os.makedirs(args.json_out, exist_ok=True)
        with open(os.path.join(args.json_out, f"rank{result['rank']}.json"), "w") as f:
            json.dump(result, f)


def main(argv=None):
    args = parse_args(argv)
    check_codec(args)
    launch_unless_under_launcher(args, __file__, argv)
    import bytecomp.torch as bc
    bc.init()
    try:
        write_json(args, train(args, bc, log=lambda s: print(s, flush=True)))
    finally:
        bc.shutdown()


if __name__ == "__main__":
    main()
