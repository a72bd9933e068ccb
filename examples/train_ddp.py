#!/usr/bin/env python3
"""A PyTorch DistributedDataParallel script on scikit-learn's digits, switched to ByteComp with
one line (the comm hook), or run with DDP's own gradient exchange for comparison.

    python3 examples/train_ddp.py --workers 4 --comm bytecomp --codec topk   # launches itself
    deploy/bytecomp-run -np 4 --servers 4 -- python3 examples/train_ddp.py --comm gloo

The switch, in a DDP script (bytecomp.torch, see shim/README.md):

    bc.init(); bc.init_process_group()            # instead of dist.init_process_group(...)
    model = DistributedDataParallel(model)
    model.register_comm_hook(bc.DDPHookState(model, optimizer=opt), bc.ddp_comm_hook)

--comm: bytecomp (the hook; the scheduler's Strategy decides compression), gloo (DDP's
allreduce, no hook), fp16 (DDP's fp16_compress_hook), powersgd (DDP's PowerSGD hook, rank 2,
one bucket: several deadlock on gloo in torch 1.13), local (no DDP, no gradient exchange: what
the same processes do without communication; the workers' models drift apart). --model: mlp
(64-2048-2048-10, 4.3M parameters, one large layer; --hidden changes the width) or cnn (two 3x3
conv layers and a 4096x1024 dense layer, 4.2M).

Rank 0 prints per epoch the loss, test accuracy, samples/s and bytes per step, and at the end
one line "RESULT {json}"; --json-out DIR writes every rank's figures.

worker_cpu_s_per_step: CPU seconds of this process (training, torch's and ByteComp's
threads) per step: meaningful where wall time is not (a loaded host).

Bytes per step: "nic" is what this worker's machine sent plus received on its network
interface (eth0 of its namespace in an emulated cluster, deploy/netns_cluster.sh; absent on
loopback), which counts DDP's ring and ByteComp's pushes, pulls and colocated server alike;
"engine" is ByteComp's own push + pull bytes of this worker.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.isdir(os.path.join(REPO, "shim", "bytecomp")):
    sys.path.insert(0, os.path.join(REPO, "shim"))  # run from a checkout without pip install
sys.path.insert(0, HERE)

import train_digits  # noqa: E402  (data, launcher and strategy helpers)

COMMS = ("bytecomp", "gloo", "fp16", "powersgd", "local")
MODELS = ("mlp", "cnn")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--comm", choices=COMMS, default="bytecomp")
    p.add_argument("--model", choices=MODELS, default="mlp")
    p.add_argument("--hidden", type=int, default=2048, help="--model mlp: hidden width")
    p.add_argument("--codec", default="none",
                   help="--comm bytecomp launched by this script: the preset for every gradient "
                        "(bytecomp.strategy); under a launcher the scheduler's strategy decides")
    p.add_argument("--two-way", action="store_true")
    p.add_argument("--per", choices=("parameter", "bucket"), default="parameter",
                   help="the hook pushes each parameter (default) or each DDP bucket")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workers", "-np", type=int, default=4)
    p.add_argument("--servers", type=int, default=None, help="default: one per worker")
    p.add_argument("--strategy-out", default=None)
    p.add_argument("--json-out", default=None)
    args = p.parse_args(argv)
    if args.servers is None:
        args.servers = args.workers
    return args


def build_model(kind, seed, hidden=2048):
    import torch
    from torch import nn
    with train_digits._init_lock:
        torch.manual_seed(seed)
        if kind == "mlp":
            return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, 10))
        return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 32, 3, padding=1),
                             nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                             nn.Flatten(), nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))


def nic_bytes(interface):
    """Bytes received + sent on this interface so far; None for loopback (no NIC between the
    workers) or an interface that /proc/net/dev does not list."""
    if interface in (None, "lo"):
        return None
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == interface:
                    fields = rest.split()
                    return int(fields[0]) + int(fields[8])
    except OSError:
        pass
    return None


def wrap(args, model, optimizer, bc):
    """DDP with the chosen gradient exchange (--comm local: the bare model)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    if args.comm == "local":
        return model
    if args.comm == "powersgd":
        # One bucket (torch 1.13's PowerSGD hook deadlocks on gloo with several).
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
        ddp = DDP(model, bucket_cap_mb=1024)
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return ddp
    ddp = DDP(model)
    if args.comm == "bytecomp":
        ddp.register_comm_hook(bc.DDPHookState(ddp, per=args.per, optimizer=optimizer),
                               bc.ddp_comm_hook)
    elif args.comm == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    return ddp


def train(args, bc, log=print):
    import numpy as np
    import torch
    import torch.nn.functional as F

    from bytecomp._torch_ddp import interface_towards_scheduler
    rank, size = bc.rank(), bc.size()
    interface = interface_towards_scheduler()[1]
    x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in
                                        train_digits.load_digits_split(args.seed))
    model = build_model(args.model, args.seed, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    ddp = wrap(args, model, optimizer, bc)
    global_batch = args.batch_size * size
    steps = len(x_train) // global_batch
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        log(f"digits {args.model} ({n_params} parameters): W={size} comm={args.comm} "
            f"batch {args.batch_size}/worker, {steps} steps/epoch; torch {torch.__version__} "
            f"on BLAS {bc.check_cpu_math()}, {torch.get_num_threads()} threads per worker")
    epochs = []
    for epoch in range(args.epochs):
        order = torch.from_numpy(np.random.RandomState(args.seed * 1000 + epoch)
                                 .permutation(len(x_train)))
        engine_before, nic_before = bc.stats(), nic_bytes(interface)
        loss_sum = torch.zeros(2)
        cpu_start, start = time.process_time(), time.perf_counter()
        for step in range(steps):
            lo = step * global_batch + rank * args.batch_size
            idx = order[lo:lo + args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            loss_sum += torch.tensor([loss.item(), 1.0])
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start  # every thread of this process, engine's too
        engine, nic = bc.stats(), nic_bytes(interface)
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        record = dict(epoch=epoch + 1, loss=float(loss_sum[0] / loss_sum[1]), accuracy=accuracy,
                      samples_per_s=steps * global_batch / elapsed,
                      worker_cpu_s_per_step=cpu / steps,
                      engine_bytes_per_step=(engine["pushed_bytes"] + engine["pulled_bytes"] -
                                             engine_before["pushed_bytes"] -
                                             engine_before["pulled_bytes"]) / steps,
                      nic_bytes_per_step=None if nic is None else (nic - nic_before) / steps)
        epochs.append(record)
        if rank == 0:
            nic_text = ("" if nic is None else
                        f", NIC {record['nic_bytes_per_step'] / 1e6:.2f} MB/step")
            log(f"epoch {epoch + 1:3d}  loss {record['loss']:.4f}  test acc {accuracy:.4f}  "
                f"{record['samples_per_s']:.0f} samples/s  engine "
                f"{record['engine_bytes_per_step'] / 1e6:.2f} MB/step{nic_text}")
    # The first epoch holds start-up (and --strategy=auto's profiling and switch).
    timed = epochs[1:] or epochs
    median = lambda key: sorted(e[key] for e in timed)[len(timed) // 2]  # noqa: E731
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    return dict(rank=rank, size=size, comm=args.comm, model=args.model, params=n_params,
                steps_per_epoch=steps,
                epochs=epochs, final_accuracy=epochs[-1]["accuracy"], param_checksum=checksum,
                samples_per_s=median("samples_per_s"),
                worker_cpu_s_per_step=median("worker_cpu_s_per_step"),
                engine_bytes_per_step=median("engine_bytes_per_step"),
                nic_bytes_per_step=(None if timed[0]["nic_bytes_per_step"] is None
                                    else median("nic_bytes_per_step")))


def main(argv=None):
    args = parse_args(argv)
    train_digits.check_codec(args)
    train_digits.launch_unless_under_launcher(args, __file__, argv)
    import bytecomp.torch as bc
    bc.init()
    try:
        bc.init_process_group()
        result = train(args, bc, log=lambda s: print(s, flush=True))
        if result["rank"] == 0:
            print("RESULT " + json.dumps({k: v for k, v in result.items() if k != "epochs"}),
                  flush=True)
        train_digits.write_json(args, result)
        # The process group is left to exit, not destroyed here: with the PowerSGD hook, torch
        # 1.13 may drop its last reference on one of gloo's own threads, which then joins
        # itself and aborts the process ("Resource deadlock avoided").
    finally:
        bc.shutdown()


if __name__ == "__main__":
    main()
    # torch 1.13's gloo process group, torn down at interpreter exit after the PowerSGD hook,
    # can abort the process (a thread joining itself, or one left joinable): the work is done
    # and its output flushed, so the process ends here without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
