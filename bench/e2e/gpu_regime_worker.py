#!/usr/bin/env python3
"""One worker of gpu_regime.py: a model whose forward and backward passes are timed sleeps, as
on a GPU machine whose CPU is free for communication, exchanging real gradients.

The model is a shipped planner profile (scheduler/planner/profiles/*.pbtxt, as gpu_regime.py
scaled it: per-tensor elements, shapes and ready gaps, and the forward time). Each tensor is a
real parameter; forward sleeps forward_us; backward runs layer by layer in the profile's order
(the last layer first), each layer sleeping until its gradient's ready time on a timeline that
starts with the backward pass (so sleeping's own overhead does not add up), then handing autograd
a gradient with realistic values: a fixed heavy-tailed distribution per layer (Student-t with 3
degrees of freedom, each layer its own scale), drawn once per worker, so that compression ratios
and top-k's selection cost are those of real gradients.

--comm:
  bytecomp   bytecomp.torch.DistributedOptimizer: every gradient's push_pull starts the moment
             it is ready (the scheduler's strategy decides codecs), step() waits for them all
  gloo       DDP, its own allreduce over gloo (buckets of --bucket-mb, the first of
             --first-bucket-mb: DDP's 25 and 1 MB scaled with the model)
  fp16       DDP with fp16_compress_hook
  powersgd   DDP with the PowerSGD hook (rank 2, error feedback, warm start; one bucket: with
             several it deadlocks on gloo in torch 1.13)
  local      no communication: the bound every system is measured against

No optimizer updates the parameters: on a GPU machine that is the GPU's work, and this
emulation keeps the CPU for communication. Rank 0 prints `RESULT {json}`: median step time
over the timed steps, each step's time, this process's CPU seconds per step (all its threads,
the engine's included), the bytes its machine's NIC moved per step and the engine's own.
"""

import argparse
import json
import math
import os
import re
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "shim"))
sys.path.insert(0, os.path.join(REPO, "examples"))

COMMS = ("bytecomp", "gloo", "fp16", "powersgd", "local")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="a scaled ModelProfile (gpu_regime.py)")
    p.add_argument("--comm", choices=COMMS, default="bytecomp")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--first-bucket-mb", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


def read_profile(path):
    """(forward_us, [(name, elements, shape, ready_gap_us)]) in the profile's (backward) order.
    The profile is one gpu_regime.py wrote: one tensor per line."""
    text = open(path).read()
    forward = float(re.search(r"^forward_us: ([\d.eE+-]+)", text, re.M).group(1))
    tensors = []
    for line in text.splitlines():
        if not line.startswith("tensors {"):
            continue
        name = re.search(r'name: "([^"]*)"', line).group(1)
        elements = int(re.search(r"elements: (\d+)", line).group(1))
        gap = float(re.search(r"ready_gap_us: ([\d.eE+-]+)", line).group(1))
        shape = [int(d) for d in re.findall(r"shape: (\d+)", line)] or [elements]
        tensors.append((name, elements, shape, gap))
    return forward, tensors


def layer_scale(name, seed):
    """A fixed per-layer gradient scale, 1e-4 .. 1e-2 (log-uniform by the layer's name)."""
    h = 0
    for c in f"{seed}:{name}":
        h = (h * 131 + ord(c)) % 1_000_003
    return 10 ** (-4 + 2 * h / 1_000_003)


class SleepModel:
    """The profile's tensors as parameters (nn.ParameterList, in forward order: first layers
    first, as a real module lists them) and the timed passes."""

    def __init__(self, torch, forward_us, tensors, rank, seed):
        self.torch = torch
        self.forward_s = forward_us * 1e-6
        order = list(reversed(tensors))  # forward order
        self.names = [name for name, _, _, _ in order]
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(shape)) for _, _, shape, _ in order])
        # Ready times from the start of backward, in the profile's (backward) order.
        ready, t = [], 0.0
        for _, _, _, gap in tensors:
            t += gap * 1e-6
            ready.append(t)
        self.ready_s = list(reversed(ready))  # aligned with self.params (forward order)
        gen = torch.Generator().manual_seed(seed * 1000 + rank)
        student = torch.distributions.StudentT(torch.tensor(3.0))
        self.grads = []
        for name, p in zip(self.names, self.params):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            g = student.sample(p.shape).clamp_(-50, 50) * layer_scale(name, seed)
            self.grads.append(g.contiguous())
        self.backward_start = None

        model = self

        class Layer(torch.autograd.Function):
            @staticmethod
            def forward(ctx, h, p, index):
                ctx.index = index
                return h.clone()

            @staticmethod
            def backward(ctx, grad_h):
                if model.backward_start is None:
                    model.backward_start = time.perf_counter()
                wait = model.backward_start + model.ready_s[ctx.index] - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                # Autograd copies this into p.grad (the tensor is held here, so not stolen).
                return grad_h, model.grads[ctx.index], None

        self.layer = Layer

    def module(self):
        """An nn.Module owning the parameters whose forward runs the timed passes (for DDP)."""
        torch, model = self.torch, self

        class Module(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.params = model.params

            def forward(self, x):
                return model.forward(x)
        return Module()

    def forward(self, x):
        time.sleep(self.forward_s)
        self.backward_start = None
        h = x
        for i, p in enumerate(self.params):
            h = self.layer.apply(h, p, i)
        return h.sum()


class NoUpdate:
    """An optimizer class that updates nothing (the GPU's work on a GPU machine)."""

    @staticmethod
    def make(torch):
        class _NoUpdate(torch.optim.Optimizer):
            def __init__(self, params):
                super().__init__(params, {"lr": 0.0})

            def step(self, closure=None):
                return None
        return _NoUpdate


def wrap(args, torch, model, bc):
    """(the callable a step runs, the optimizer) for --comm."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    optimizer_class = NoUpdate.make(torch)
    if args.comm == "local":
        return model.forward, optimizer_class(model.params)
    if args.comm == "bytecomp":
        named = list(zip(model.names, model.params))
        opt = bc.DistributedOptimizer(optimizer_class(model.params), named_parameters=named)
        return model.forward, opt
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    module = model.module()
    if args.comm == "powersgd":
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 34
        ddp = DDP(module, bucket_cap_mb=1 << 14)
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.first_bucket_mb * (1 << 20))
        ddp = DDP(module, bucket_cap_mb=args.bucket_mb)
        if args.comm == "fp16":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    return ddp, optimizer_class(model.params)


def run(args, bc):
    import torch
    from train_ddp import nic_bytes
    from bytecomp._torch_ddp import interface_towards_scheduler
    torch.set_num_threads(1)
    rank, size = bc.rank(), bc.size()
    interface = interface_towards_scheduler()[1]
    forward_us, tensors = read_profile(args.profile)
    model = SleepModel(torch, forward_us, tensors, rank, args.seed)
    step_fn, opt = wrap(args, torch, model, bc)
    x = torch.zeros(1)
    times = []
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            engine0, nic0 = bc.stats(), nic_bytes(interface)
            cpu0 = time.process_time()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        step_fn(x).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu0
    engine, nic = bc.stats(), nic_bytes(interface)
    timed = sorted(times[args.warmup:])
    n = args.steps
    return dict(rank=rank, size=size, comm=args.comm, tensors=len(tensors),
                bytes=sum(e for _, e, _, _ in tensors) * 4,
                step_ms=timed[len(timed) // 2] * 1e3,
                step_ms_all=[round(t * 1e3, 2) for t in times[args.warmup:]],
                compute_ms=(forward_us + sum(g for _, _, _, g in tensors)) * 1e-3,
                worker_cpu_s_per_step=cpu / n,
                engine_bytes_per_step=(engine["pushed_bytes"] + engine["pulled_bytes"] -
                                       engine0["pushed_bytes"] - engine0["pulled_bytes"]) / n,
                nic_bytes_per_step=None if nic is None else (nic - nic0) / n)


def main(argv=None):
    args = parse_args(argv)
    import bytecomp.torch as bc
    bc.init()
    try:
        if args.comm in ("gloo", "fp16", "powersgd"):
            bc.init_process_group()
        try:
            result = run(args, bc)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            raise
        if result["rank"] == 0:
            print("RESULT " + json.dumps(result), flush=True)
        # The process group is not destroyed here: with the PowerSGD hook, torch 1.13 may drop
        # its last reference on one of gloo's own threads, which then joins itself and aborts
        # ("Resource deadlock avoided"). It goes at exit, on this thread.
    finally:
        bc.shutdown()
    return 0 if math.isfinite(result["step_ms"]) else 1


if __name__ == "__main__":
    sys.exit(main())
