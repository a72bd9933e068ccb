#!/usr/bin/env python3
"""One worker of gpu_regime.py: a model whose forward and backward passes are timed sleeps, as
on a GPU machine whose CPU is free for communication, exchanging real gradients.

The model is a shipped planner profile (scheduler/planner/profiles/*.pbtxt, as gpu_regime.py
scaled it: per-tensor elements, shapes and ready gaps, and the forward time). Each tensor is a
real parameter of its own layer module; forward runs layer by layer, each layer sleeping its
share of forward_us (in proportion to its backward time); backward runs layer by layer in the
profile's order (the last layer first), each layer sleeping until its gradient's ready time on a
timeline that starts with the backward pass (so sleeping's own overhead does not add up), then
handing autograd
a gradient with realistic values: a fixed heavy-tailed distribution per layer (Student-t with 3
degrees of freedom, each layer its own scale), drawn once per worker, so that compression ratios
and top-k's selection cost are those of real gradients.

--comm:
  bytecomp   bytecomp.torch.DistributedOptimizer: every gradient's push_pull starts the moment
             it is ready (the scheduler's strategy decides codecs); cross-barrier (the
             optimizer gets the model): each layer's update waits for its own pull when the
             next forward reaches the layer, so pulls overlap the next forward as in BytePS
             (--step-barrier: step() waits for them all, as Horovod does)
  gloo       DDP, its own allreduce over gloo (buckets of --bucket-mb, the first of
             --first-bucket-mb: DDP's 25 and 1 MB scaled with the model)
  fp16       DDP with fp16_compress_hook
  powersgd   DDP with the PowerSGD hook (rank 2, error feedback, warm start; one bucket: with
             several it deadlocks on gloo in torch 1.13)
  local      no communication: the bound every system is measured against

No optimizer updates the parameters: on a GPU machine that is the GPU's work, and this
emulation keeps the CPU for communication. Rank 0 prints `RESULT {json}`: median step time
over the timed steps, each step's time, the median tail (from the last gradient's ready time to
the end of step(): the communication backward did not hide; with cross-barrier what the next
forward does not hide shows in the step time instead), this process's CPU seconds per step (all its threads,
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
    p.add_argument("--step-barrier", action="store_true",
                   help="--comm bytecomp: step() waits for every gradient (by default the "
                        "optimizer gets the model: cross-barrier, each layer's update waits "
                        "only for its own pull, at the next forward)")
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


def sleep_model(torch, forward_us, tensors, rank, seed):
    """The profile's tensors as an nn.Module: one layer module per tensor, in forward order
    (first layers first, as a real module lists them), each owning its parameter. The forward
    pass gives each layer a share of forward_us proportional to its backward time; a layer
    starts when the previous one ended or, if something held it up (a cross-barrier waiting for
    the layer's update), when it was let go. Backward sleeps until each gradient's ready time."""
    nn = torch.nn
    order = list(reversed(tensors))  # forward order
    backward_total = sum(g for _, _, _, g in tensors) or 1.0
    # Ready times from the start of backward, in the profile's (backward) order.
    ready, t = [], 0.0
    for _, _, _, gap in tensors:
        t += gap * 1e-6
        ready.append(t)
    ready_s = list(reversed(ready))  # aligned with the forward order
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    student = torch.distributions.StudentT(torch.tensor(3.0))
    clock = {"forward": 0.0, "backward_start": None, "backward_end": None}
    # Sleeping overshoots by tens of microseconds; only a hold-up longer than this shifts the
    # forward's timeline, so the overshoots do not add up.
    held_up_s = 5e-4

    class Pass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, p, index, grad):
            ctx.index, ctx.grad = index, grad
            return h.clone()

        @staticmethod
        def backward(ctx, grad_h):
            if clock["backward_start"] is None:
                clock["backward_start"] = time.perf_counter()
            wait = clock["backward_start"] + ready_s[ctx.index] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if ctx.index == 0:  # the last gradient of the pass (the first layer's)
                clock["backward_end"] = time.perf_counter()
            # Autograd copies this into p.grad (the tensor is held here, so not stolen).
            return grad_h, ctx.grad, None, None

    class Layer(nn.Module):
        def __init__(self, index, shape, gap_us, name):
            super().__init__()
            self.index, self.forward_s = index, forward_us * 1e-6 * gap_us / backward_total
            self.weight = nn.Parameter(torch.zeros(shape))
            # A fixed heavy-tailed gradient, this layer's scale.
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            self.grad = (student.sample(torch.Size(shape)).clamp_(-50, 50) *
                         layer_scale(name, seed)).contiguous()

        def forward(self, h):
            now = time.perf_counter()
            if now > clock["forward"] + held_up_s:
                clock["forward"] = now
            clock["forward"] += self.forward_s
            wait = clock["forward"] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            return Pass.apply(h, self.weight, self.index, self.grad)

    class SleepModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer(i, shape, gap, name) for i, (name, _, shape, gap)
                                        in enumerate(order))
            self.names = [name for name, _, _, _ in order]
            self.clock = clock

        def forward(self, x):
            clock["forward"] = time.perf_counter()
            clock["backward_start"] = None
            h = x
            for layer in self.layers:
                h = layer(h)
            return h.sum()

        def named_weights(self):
            """(engine name, parameter) in forward order."""
            return [(n, layer.weight) for n, layer in zip(self.names, self.layers)]

    return SleepModel()


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
        return model, optimizer_class(model.parameters())
    if args.comm == "bytecomp":
        opt = bc.DistributedOptimizer(optimizer_class(model.parameters()),
                                      named_parameters=model.named_weights(), name_prefix="",
                                      model=None if args.step_barrier else model)
        return model, opt
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    module = model
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
    return ddp, optimizer_class(model.parameters())


def run(args, bc):
    import torch
    from train_ddp import nic_bytes
    from bytecomp._torch_ddp import interface_towards_scheduler
    torch.set_num_threads(1)
    rank, size = bc.rank(), bc.size()
    interface = interface_towards_scheduler()[1]
    forward_us, tensors = read_profile(args.profile)
    model = sleep_model(torch, forward_us, tensors, rank, args.seed)
    step_fn, opt = wrap(args, torch, model, bc)
    x = torch.zeros(1)
    times, tails, backwards = [], [], []
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if hasattr(opt, "synchronize"):
                opt.synchronize()  # cross-barrier: the warm-up's last pulls are not counted
            engine0, nic0 = bc.stats(), nic_bytes(interface)
            cpu0 = time.process_time()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        step_fn(x).backward()
        opt.step()
        end = time.perf_counter()
        times.append(end - start)
        tails.append(end - model.clock["backward_end"])
        backwards.append(model.clock["backward_end"] - model.clock["backward_start"])
    if hasattr(opt, "synchronize"):
        opt.synchronize()  # cross-barrier: the last step's updates
    cpu = time.process_time() - cpu0
    engine, nic = bc.stats(), nic_bytes(interface)
    timed = sorted(times[args.warmup:])
    n = args.steps
    return dict(rank=rank, size=size, comm=args.comm, tensors=len(tensors),
                bytes=sum(e for _, e, _, _ in tensors) * 4,
                step_ms=timed[len(timed) // 2] * 1e3,
                step_ms_all=[round(t * 1e3, 2) for t in times[args.warmup:]],
                tail_ms=sorted(tails[args.warmup:])[n // 2] * 1e3,
                backward_ms=sorted(backwards[args.warmup:])[n // 2] * 1e3,
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
    code = main()
    # torch 1.13's gloo process group, torn down at interpreter exit after the PowerSGD hook,
    # can abort the process (a thread joining itself, or one left joinable): the work is done
    # and its output flushed, so the process ends here without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
