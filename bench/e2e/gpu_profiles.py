"""Measured model profiles on a GPU (deploy/gpu_check.sh runs this on the GPU machine): the
forward time and each gradient's ready gap of resnet50, vgg16 and bert-base, timed on the
device, written as ModelProfile text files (proto/planner.proto) that the planner reads like the
estimated ones in scheduler/planner/profiles/ (same models, batches and tensor names).

A gradient is ready when the GPU has finished writing it: each parameter's post-accumulate hook
records a CUDA event on the current stream, and the gaps between consecutive events (the first
from an event recorded when backward starts) are its ready_gap_us, in the order the hooks fire
(backprop order, as the engine's ready profiler sees the push_pull calls). Medians over the
timed iterations, after warm-up.

    python3 bench/e2e/gpu_profiles.py --out DIR [--models resnet50,vgg16,bert-base] [--iters 10]

`--device cpu` times the same steps on the host with a wall clock (a check of the script and of
the files it writes, on a machine without a GPU; not a profile to ship).
"""
import argparse
import os
import statistics
import time

import torch


def resnet50():
    import torchvision
    return torchvision.models.resnet50(), (lambda b: (torch.randn(b, 3, 224, 224),)), 32, \
        "torchvision resnet50, batch 32 at 224x224"


def vgg16():
    import torchvision
    return torchvision.models.vgg16(), (lambda b: (torch.randn(b, 3, 224, 224),)), 32, \
        "torchvision vgg16 (no batch norm), batch 32 at 224x224"


def bert_base():
    from transformers import BertConfig, BertModel
    model = BertModel(BertConfig())  # bert-base-uncased's shape, random weights (no download)
    return model, (lambda b: (torch.randint(0, 30522, (b, 128)),)), 32, \
        "HuggingFace BertModel bert-base-uncased (encoder and pooler, no pretraining heads), " \
        "batch 32 x 128 tokens"


def mlp():
    """A small model of torch alone: for `--device cpu` checks where torchvision is missing."""
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    return model, (lambda b: (torch.randn(b, 256),)), 64, "a 2-layer MLP, batch 64 (a check model)"


MODELS = {"resnet50": resnet50, "vgg16": vgg16, "bert-base": bert_base, "mlp": mlp}


def loss_of(output):
    if isinstance(output, torch.Tensor):
        return output.float().square().mean()
    return output[0].float().square().mean() + output[1].float().square().mean()  # bert


class Clock:
    """Time stamps on the device's timeline (CUDA events) or, on the host, a wall clock."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def stamp(self):
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def us(self, a, b):
        return a.elapsed_time(b) * 1e3 if self.cuda else (b - a) * 1e6

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def measure(name, iters, warmup, device, batch_override=None):
    model, make_input, batch, what = MODELS[name]()
    batch = batch_override or batch
    clock = Clock(device)
    model.to(device).train()
    inputs = tuple(t.to(device) for t in make_input(batch))
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    events = []

    def hook_for(pname):
        def hook(_):
            events.append((pname, clock.stamp()))
        return hook

    for pname, p in params:
        if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
            p.register_post_accumulate_grad_hook(hook_for(pname))
        else:  # the gradient computed, just before it is accumulated
            p.register_hook(hook_for(pname))
    forward_us, gaps, orders = [], {}, []
    for it in range(warmup + iters):
        model.zero_grad(set_to_none=True)
        events.clear()
        f0 = clock.stamp()
        loss = loss_of(model(*inputs))
        f1 = clock.stamp()
        loss.backward()
        clock.sync()
        if it < warmup:
            continue
        forward_us.append(clock.us(f0, f1))
        previous = f1
        order = []
        for pname, e in events:
            gaps.setdefault(pname, []).append(max(0.0, clock.us(previous, e)))
            previous = e
            order.append(pname)
        orders.append(order)
    order = orders[-1]
    shapes = {n: list(p.shape) for n, p in params}
    gpu = torch.cuda.get_device_name(0) if clock.cuda else "the host CPU (a check run)"
    lines = [f"# {name}: measured on {gpu} by bench/e2e/gpu_profiles.py; do not edit by hand.",
             f"# {what}",
             f'model: "{name}"',
             f'source: "measured on {gpu} (torch {torch.__version__}): '
             f'{"CUDA events" if clock.cuda else "wall clock"} at each gradient\'s '
             f'post-accumulate hook, median of {iters} iterations after {warmup}; {what}"',
             f"forward_us: {statistics.median(forward_us):.3f}"]
    for n in order:
        shape = " ".join(f"shape: {d}" for d in shapes[n])
        elements = 1
        for d in shapes[n]:
            elements *= d
        lines.append(f'tensors {{ name: "{n}" elements: {elements} '
                     f'ready_gap_us: {statistics.median(gaps[n]):.3f} {shape} '
                     f'on_device: {"true" if clock.cuda else "false"} }}')
    backward_us = sum(statistics.median(gaps[n]) for n in order)
    del model, inputs
    if clock.cuda:
        torch.cuda.empty_cache()
    return "\n".join(lines) + "\n", statistics.median(forward_us), backward_us, len(order)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,vgg16,bert-base")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--batch", type=int, default=None, help="instead of the models' own batch")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_profiles: no CUDA device (--device cpu checks the script)")
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu-check"
    gpu = gpu.lower().replace("nvidia ", "").replace(" ", "-")
    print(f"{'model':<10} {'tensors':>7} {'forward ms':>10} {'backward ms':>11}  file")
    for name in args.models.split(","):
        start = time.monotonic()
        text, fwd, bwd, count = measure(name, args.iters, args.warmup, device, args.batch)
        path = os.path.join(args.out, f"{name}-{gpu}.pbtxt")
        with open(path, "w") as f:
            f.write(text)
        print(f"{name:<10} {count:>7} {fwd / 1e3:>10.2f} {bwd / 1e3:>11.2f}  {path} "
              f"({time.monotonic() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
