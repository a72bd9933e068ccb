#!/usr/bin/env python3
"""The training job of sparse_bench.py: one worker of a data-parallel job on synthetic data,
through bytecomp.torch.DistributedOptimizer (every parameter its own tensor, "grad/<name>"),
or alone without communication (--local).

Models:
  embedding  an EmbeddingBag of --rows rows x 16 (sum of 8 rows per sample) -> 64 -> 2: each
             step touches at most batch x 8 rows, so its gradient is block-sparse
  dense      an MLP 256 -> 1024 -> 1024 -> 10, every gradient dense

Prints one line `RESULT {json}`: samples/s over the timed steps (all workers), ms per step,
the engine's bytes per step (pushed + pulled, this worker), the final loss. --profile FILE
(with --local) writes the model's ModelProfile (proto/planner.proto) from hooks on the
gradients: their order and ready gaps, the forward time, and each gradient's block density.
"""

import argparse
import json
import os
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "shim"))

BAG = 8


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("embedding", "dense"), default="embedding")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--batch-size", type=int, default=64, help="samples per worker per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--local", action="store_true", help="no communication (one process)")
    p.add_argument("--profile", default=None, help="with --local: write the ModelProfile here")
    return p.parse_args(argv)


def build(args, torch):
    torch.manual_seed(args.seed)
    nn = torch.nn
    if args.model == "embedding":
        class Embedding(nn.Module):
            def __init__(self):
                super().__init__()
                self.table = nn.EmbeddingBag(args.rows, 16, mode="sum")
                self.head = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))

            def forward(self, rows):
                return self.head(self.table(rows))
        return Embedding()
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def batch(args, torch, step, rank):
    """Synthetic samples: the same on every run, different per worker and step."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
    if args.model == "embedding":
        rows = torch.randint(0, args.rows, (args.batch_size, BAG), generator=g)
        label = (rows % 7 < 3).sum(1) % 2  # a function of the rows the table can learn
        return rows, label
    x = torch.randn(args.batch_size, 256, generator=g)
    return x, (x[:, :10].argmax(1))


def block_density(grad):
    flat = grad.reshape(-1)
    blocks = (flat.numel() + 255) // 256
    padded = flat.new_zeros(blocks * 256)
    padded[:flat.numel()] = flat
    return float((padded.reshape(blocks, 256) != 0).any(1).float().mean())


def write_profile(path, model, args, torch):
    """Ready order and gaps from gradient hooks, averaged over the timed steps, as the engine
    profiles a round: the forward time is everything between the last gradient and the next
    step's backward (the optimizer's step, the next batch, the forward),
    measured_training_cpu_us the thread's CPU from the first gradient to the last and
    measured_forward_cpu_us its CPU in the forward time (the planner charges both, every
    worker's, to the host's shared cores)."""
    import torch.nn.functional as F
    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    ready, cpu, density = {}, {}, {}

    def hook(name):
        def record(_):
            ready.setdefault(name, time.perf_counter())
            cpu.setdefault(name, time.thread_time())
        return record

    for name, p in params.items():
        p.register_hook(hook(name))
    gaps, forward, training_cpu, forward_cpu = {}, [], [], []
    order = None
    for step in range(args.warmup + args.steps):
        ready.clear()
        cpu.clear()
        t0, c0 = time.perf_counter(), time.thread_time()
        x, y = batch(args, torch, step, 0)
        loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        c1 = time.thread_time()
        loss.backward()
        t2, c2 = time.perf_counter(), time.thread_time()
        for name, p in params.items():  # (not timed: the training step does not do it)
            density.setdefault(name, []).append(block_density(p.grad))
        t3, c3 = time.perf_counter(), time.thread_time()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t4, c4 = time.perf_counter(), time.thread_time()
        if step < args.warmup:
            continue
        order = sorted(ready, key=ready.get)
        forward.append((t1 - t0) + (t2 - ready[order[-1]]) + (t4 - t3))
        training_cpu.append(cpu[order[-1]] - cpu[order[0]])
        forward_cpu.append((c1 - c0) + (c2 - cpu[order[-1]]) + (c4 - c3))
        previous = t1
        for name in order:
            gaps.setdefault(name, []).append(ready[name] - previous)
            previous = ready[name]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    lines = [f'model: "{args.model}"',
             f'source: "sparse_train.py --local: gradient hooks, {args.steps} steps, batch '
             f'{args.batch_size}"', f"forward_us: {1e6 * mean(forward):.1f}",
             f"measured_training_cpu_us: {1e6 * mean(training_cpu):.1f}",
             f"measured_forward_cpu_us: {1e6 * mean(forward_cpu):.1f}"]
    for name in order:
        lines += ["tensors {", f'  name: "grad/{name}"', f"  elements: {params[name].numel()}",
                  f"  ready_gap_us: {1e6 * mean(gaps[name]):.1f}",
                  f"  block_density: {mean(density[name]):.6f}", "}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    args = parse_args()
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    model = build(args, torch)
    if args.local:
        if args.profile:
            write_profile(args.profile, model, args, torch)
            return
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        rank, size, bc = 0, 1, None
    else:
        import bytecomp.torch as bc
        bc.init()
        rank, size = bc.rank(), bc.size()
        optimizer = bc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr),
                                            model.named_parameters())
        bc.broadcast_parameters(model.state_dict(), root_rank=0)
    start = bytes_before = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if bc is not None:
                bc.barrier()
                stats = bc.stats()
                bytes_before = stats["pushed_bytes"] + stats["pulled_bytes"]
            start = time.perf_counter()
        x, y = batch(args, torch, step, rank)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    elapsed = time.perf_counter() - start
    result = {"model": args.model, "workers": size, "steps": args.steps,
              "ms_per_step": 1e3 * elapsed / args.steps,
              "samples_per_s": args.steps * args.batch_size * size / elapsed,
              "loss": float(loss)}
    if bc is not None:
        stats = bc.stats()
        result["engine_bytes_per_step"] = (stats["pushed_bytes"] + stats["pulled_bytes"] -
                                           bytes_before) / args.steps
        bc.shutdown()
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
