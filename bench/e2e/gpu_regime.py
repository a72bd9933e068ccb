#!/usr/bin/env python3
"""The GPU regime, emulated: ByteComp against PyTorch DDP on the planner's shipped models, with
compute as timed sleeps so that the CPU is free for communication, as on GPU machines.

Each worker (gpu_regime_worker.py) holds a shipped profile's tensors (resnet50, vgg16,
bert-base, gpt2: sizes, ready times, forward time) as real parameters whose forward and backward
passes sleep layer by layer and whose gradients have realistic values; DDP's buckets fire as in
training, ByteComp's DistributedOptimizer pushes each gradient when it is ready. W emulated
machines (network namespaces, tc tbf links of --rate each way, deploy/netns_cluster.sh), a
ByteComp server beside each worker (--separate-servers: on machines of their own).

Scaling. This host carries a few Gbit/s in all; the clusters being emulated run at 10 to 100.
So each model is shrunk (--shrink: every tensor's elements divided by it, the smallest kept at
their size up to --keep-elements) and its compute stretched so that compute time over
gradient bytes at --rate equals that of the real model on a --cluster-gbps cluster:
    stretch = (cluster Gbit/s / --rate) x (shrunk bytes / real bytes).
DDP's buckets (25 MB, the first 1 MB) and ByteComp's partitions (4 MiB) shrink with the model,
so that each pipelines a gradient in as many pieces as on the real one.
The table's heading states both. The profiles' compute is that of a GPU at 10 TFLOP/s
(gen_profiles.py).

Systems: local (no communication: the bound), ddp-gloo, ddp-fp16 (fp16_compress_hook),
ddp-powersgd (PowerSGD hook, rank 2, one bucket), and ByteComp through its DistributedOptimizer
with cross-barrier (BytePS's overlap of the pulls with the next forward; --step-barrier: without):
bc-none, bc-fp16, bc-topk, bc-powersgd (the
presets of bytecomp.strategy, both ways where the servers can re-encode, as ddp_bench.py),
bc-auto (--strategy=auto: the scheduler profiles the workers' first rounds, fits the links from
their probes, plans with this host's codec costs, calibrated first, and switches every node
before the timed steps), bc-auto-nofuse (the same with PlannerOptions.disable_fusion: every
tensor planned alone). Each ByteComp system's step is also predicted: bc-auto's by the
scheduler, the fixed strategies' by bytecomp-plan --evaluate with the profile and links the
scheduler planned with; both beside the measurement.

With --contention the contention of the W workers and S servers on this host's cores is
calibrated too (scheduler/planner/tools/calibrate_contention.py) and each ByteComp row is also
predicted with it (host_cpu_inflation, host_effective_cores), bc-auto's by bytecomp-plan --evaluate of the strategy the
scheduler planned, both beside the same measurement.

Output: per model and cluster a table (median step time over the timed steps, median of the
repetitions; the ratio to the bound, to DDP over gloo and to the best DDP variant; predicted
step and its error; bytes per step through each machine's NIC; CPU seconds per step of the
workers and the servers; the host's CPU busy while the steps ran), --out FILE.json with every
run, --plot FILE.png (speed-up over the best DDP, per model and cluster).

    sudo python3 bench/e2e/gpu_regime.py --models resnet50,bert-base --clusters 25 --reps 2
    sudo python3 bench/e2e/gpu_regime.py --out gpu.json --plot gpu.png       # full: 4 x 3 x 9
"""

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "shim"))
sys.path.insert(0, HERE)

from bytecomp.strategy import PRESETS, strategy_text  # noqa: E402
from ddp_bench import (calibrate_contention, calibrate_costs, evaluate_strategies,  # noqa: E402
                       namespaces_usable, rate_gbps, with_contention)
from netns_probe import HostBusy, NetnsProbe  # noqa: E402

PROFILES = os.path.join(REPO, "scheduler", "planner", "profiles")
NOMINAL = os.path.join(REPO, "scheduler", "planner", "costs", "nominal.pbtxt")
WORKER = os.path.join(HERE, "gpu_regime_worker.py")
MODELS = ("resnet50", "vgg16", "bert-base", "gpt2")
DDP_SYSTEMS = ("ddp-gloo", "ddp-fp16", "ddp-powersgd")
SYSTEMS = ("local",) + DDP_SYSTEMS + ("bc-none", "bc-fp16", "bc-topk", "bc-powersgd",
                                      "bc-auto", "bc-auto-nofuse")
AUTO_SYSTEMS = ("bc-auto", "bc-auto-nofuse")  # planned by the scheduler (--strategy=auto)
RESULT = re.compile(r"RESULT (\{.*\})")
PROFILE_ROUNDS = 5  # bc-auto: the rounds the scheduler profiles before it plans


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--systems", default=",".join(s for s in SYSTEMS if s != "bc-auto-nofuse"))
    p.add_argument("--clusters", default="10,25,100",
                   help="Gbit/s of the clusters whose compute:network ratio is reproduced")
    p.add_argument("--rate", default="1gbit", help="the emulated links, each way (tc tbf)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--separate-servers", action="store_true",
                   help="W servers on machines of their own (default: one beside each worker)")
    p.add_argument("--shrink", type=float, default=16.0)
    p.add_argument("--keep-elements", type=int, default=1024,
                   help="tensors up to this many elements keep their size")
    p.add_argument("--step-barrier", action="store_true",
                   help="ByteComp's step() waits for every gradient (default: cross-barrier, "
                        "each layer's update at the next forward, as BytePS)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--costs", default=None,
                   help="the planner's codec cost table (default: calibrated here first)")
    p.add_argument("--calibrate-seconds", type=float, default=0.02)
    p.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    p.add_argument("--loopback", action="store_true", help="no namespaces even as root")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--out", default=None, help="JSON file for every run's figures")
    p.add_argument("--plot", default=None, help="PNG: speed-up over the best DDP")
    p.add_argument("--contention", action="store_true",
                   help="also measure the CPU contention of W workers and S servers on this "
                   "host (calibrate_contention.py) and predict every ByteComp row with it too "
                   "(host_cpu_inflation, host_effective_cores), beside the prediction without "
                   "it; the jobs "
                   "themselves (bc-auto's plan included) run as without the option")
    args = p.parse_args(argv)
    split = lambda text: [s for s in text.split(",") if s]  # noqa: E731
    args.models, args.systems = split(args.models), split(args.systems)
    args.clusters = [float(c) for c in split(args.clusters)]
    unknown = [s for s in args.systems
               if s not in SYSTEMS and s[len("bc-"):] not in PRESETS]
    if unknown:
        p.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    missing = [m for m in args.models if not os.path.exists(profile_path(m))]
    if missing:
        p.error(f"no shipped profile for {missing} in {PROFILES}")
    if args.shrink < 1:
        p.error("--shrink must be >= 1")
    return args


def profile_path(model):
    return os.path.join(PROFILES, f"{model}.pbtxt")


def read_shipped(model):
    """(forward_us, [(name, elements, ready_gap_us)]) of a shipped profile."""
    text = open(profile_path(model)).read()
    forward = float(re.search(r"^forward_us: ([\d.]+)", text, re.M).group(1))
    tensors = [(m.group(1), int(m.group(2)), float(m.group(3))) for m in re.finditer(
        r'tensors \{ name: "([^"]*)" elements: (\d+) ready_gap_us: ([\d.]+)', text)]
    return forward, tensors


def matrix_shape(n):
    """A 2-D shape for a weight of n elements (rows: the largest divisor up to sqrt(n))."""
    rows = max(d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0)
    return [rows, n // rows]


def scaled_profile(model, args, cluster_gbps):
    """The profile the emulation runs: shrunk tensors (weights rounded to a multiple of 64 so
    that they have a matrix shape), compute stretched to the cluster's ratio. Returns (text,
    facts) with names as the engine sees them ("grad/" + the shipped name)."""
    forward, tensors = read_shipped(model)
    real_bytes = sum(n for _, n, _ in tensors) * 4
    shrunk = []
    for name, n, gap in tensors:
        if n > args.keep_elements:
            n = max(args.keep_elements, int(round(n / args.shrink / 64)) * 64)
        shrunk.append((name, n, gap))
    bytes_ = sum(n for _, n, _ in shrunk) * 4
    stretch = cluster_gbps / rate_gbps(args.rate) * bytes_ / real_bytes
    lines = [f"# {model} for bench/e2e/gpu_regime.py: elements / {args.shrink:g} (up to "
             f"{args.keep_elements} kept), compute x {stretch:.4f} (the ratio of a "
             f"{cluster_gbps:g} Gbit/s cluster at {args.rate})",
             f'model: "{model}"', f'source: "gpu_regime.py from profiles/{model}.pbtxt"',
             f"forward_us: {forward * stretch:.3f}"]
    for name, n, gap in shrunk:
        shape = ("" if name.endswith("bias") or n <= args.keep_elements else
                 " ".join(f"shape: {d}" for d in matrix_shape(n)) + " ")
        lines.append(f'tensors {{ name: "grad/{name}" elements: {n} {shape}'
                     f"ready_gap_us: {gap * stretch:.3f} }}")
    compute_real = forward + sum(g for _, _, g in tensors)
    facts = dict(model=model, cluster_gbps=cluster_gbps, stretch=stretch, tensors=len(tensors),
                 real_bytes=real_bytes, bytes=bytes_, real_compute_ms=compute_real / 1e3,
                 compute_ms=compute_real * stretch / 1e3)
    return "\n".join(lines) + "\n", facts


def partition_bytes(args):
    """ByteComp's partition size scaled with the model (4 MiB / --shrink, at least 64 KiB), as
    DDP's buckets are, so that both pipeline a tensor in as many pieces as on the real model."""
    return max(64 << 10, int((4 << 20) / args.shrink) // 4096 * 4096)


def cluster_text(args):
    gbps, w = rate_gbps(args.rate), args.workers
    layout = ("colocated_servers: false" if args.separate_servers else "colocated_servers: true")
    return (f"# {w} emulated machines on one host ({os.cpu_count()} cores), {args.rate} links\n"
            f"machines: {w}\ngpus_per_machine: 0\nservers: {w}\n"
            f"worker_link {{ bandwidth_gbps: {gbps} latency_us: 50 }}\n"
            f"server_link {{ bandwidth_gbps: {gbps} latency_us: 50 }}\n{layout}\n"
            f"cpu_pool_threads: 2\nhost_cores: {os.cpu_count()}\n"
            f"partition_bytes: {partition_bytes(args)}\n")


def calibrate(args, work, use_netns):
    """This host's codec costs (bytecomp-plan --calibrate): the nominal table's codecs, with
    PowerSGD at the rank its preset uses, so that bc-powersgd is predicted and auto may pick
    it; then the CPU that moving a message costs the host (calibrate_transport.py: real jobs,
    plain TCP as these run, on 10 Gbit/s emulated links so that the rate does not limit them),
    which the planner charges to the shared cores (host_cores). Returns the table's path."""
    template, costs = os.path.join(work, "template.pbtxt"), os.path.join(work, "costs.pbtxt")
    params, _ = PRESETS["powersgd"]
    rank = "".join(f' params {{ key: "{k}" value: "{v}" }}' for k, v in params.items())
    with open(template, "w") as f:
        f.write(open(NOMINAL).read().replace('name: "powersgd"', f'name: "powersgd"{rank}'))
    return calibrate_costs(args.bin_dir, template, costs, args.workers, use_netns,
                           args.calibrate_seconds)


def reencodable_codecs(costs):
    """Names of the codecs the cost table says the servers can re-encode (CodecSpec's facts,
    as bytecomp-plan --calibrate wrote them)."""
    text = open(costs).read()
    return {m.group(1) for m in re.finditer(
        r'codecs \{\s*name: "([^"]+)"(?:(?!\ncodecs \{).)*?reencodable: true', text, re.S)}


def write_strategies(args, work, tag):
    """The fixed ByteComp systems' strategy files: the presets of bytecomp.strategy, both ways
    where the servers can re-encode the codec (as ddp_bench.py), else one way (powersgd's pull
    is already the summed factors); {system: path}. bc-auto has none: the scheduler plans it
    (--strategy=auto)."""
    strategies = {}
    two_way = reencodable_codecs(args.costs) if args.costs else set()
    for system in [s for s in args.systems if s.startswith("bc-") and s not in AUTO_SYSTEMS]:
        codec = system[len("bc-"):]
        path = os.path.join(work, f"{tag}-{system}.pbtxt")
        params, memory = PRESETS[codec]
        with open(path, "w") as f:
            f.write("version: 1\nfirst_round: 0\n" if codec == "none" else
                    strategy_text(codec, params=params, memory=memory,
                                  two_way=codec in two_way))
        strategies[system] = path
    return strategies


def auto_strategy(runs):
    """The strategy file the scheduler planned bc-auto with (its --plan_out), or None."""
    for r in reversed(runs):
        if r["system"] == "bc-auto" and r.get("plan_out") and os.path.exists(r["plan_out"]):
            return r["plan_out"]
    return None


def auto_inputs(runs):
    """(profile, cluster) the scheduler planned bc-auto with (the workers' measured profile, the
    links fitted from their probes and profiled rounds), from the last bc-auto run; or None."""
    for r in reversed(runs):
        if r.get("plan_inputs") and all(os.path.exists(p) for p in r["plan_inputs"]):
            return r["plan_inputs"]
    return None


def run_one(system, args, work, profile, strategy, use_netns):
    comm = (system[len("ddp-"):] if system in DDP_SYSTEMS else
            "local" if system == "local" else "bytecomp")
    bucket = 25.0 / args.shrink
    sched = ["--heartbeat_timeout_ms=30000", f"--partition_bytes={partition_bytes(args)}"]
    warmup = args.warmup
    if system in AUTO_SYSTEMS:
        # The scheduler profiles PROFILE_ROUNDS rounds, plans with the links the workers
        # probed and this host's codec costs, and switches every node: all before the timed
        # steps.
        sched += ["--strategy=auto", f"--plan_cluster={os.path.join(work, 'cluster.pbtxt')}",
                  f"--plan_costs={args.costs}", f"--profile_rounds={PROFILE_ROUNDS}",
                  f"--plan_out={os.path.join(work, os.path.basename(profile))}.auto.pbtxt"]
        if system == "bc-auto-nofuse":
            options = os.path.join(work, "nofuse-options.pbtxt")
            with open(options, "w") as f:
                f.write("disable_fusion: true\n")
            sched.append(f"--plan_options={options}")
        warmup += PROFILE_ROUNDS + 3
    elif strategy:
        sched.append(f"--strategy={strategy}")
    job = [sys.executable, WORKER, "--profile", profile, "--comm", comm, "--steps",
           str(args.steps), "--warmup", str(warmup), "--bucket-mb", f"{bucket:.4f}",
           "--first-bucket-mb", f"{1.0 / args.shrink:.4f}"]
    if args.step_barrier:
        job.append("--step-barrier")
    launch = ["--bin-dir", args.bin_dir, "--timeout", str(args.timeout), "--no-key",
              "--scheduler-args=" + " ".join(sched)]
    w = args.workers
    if use_netns:
        layout = [] if args.separate_servers else ["--colocate"]
        cmd = (["bash", os.path.join(REPO, "deploy", "netns_cluster.sh"), "run", "--workers",
                str(w), "--servers", str(w)] + layout + ["--rate", args.rate, "--prefix",
                                                         "bcg-"] + launch + ["--"] + job)
    else:
        cmd = ([sys.executable, os.path.join(REPO, "deploy", "bytecomp-run"), "-np", str(w),
                "--servers", str(w)] + launch + ["--"] + job)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("BYTECOMP_LIBRARY", os.path.join(os.path.dirname(args.bin_dir), "lib",
                                                    "libbytecomp_worker.so"))
    probe = NetnsProbe("bcg-", w) if (use_netns and not args.separate_servers) else None
    start = time.monotonic()
    with HostBusy() as busy, probe or contextlib.nullcontext():
        res = subprocess.run(cmd, capture_output=True, text=True, env=env,
                             timeout=args.timeout + 120)
    with open(os.path.join(work, f"{os.path.basename(profile)}-{system}-{int(start)}.log"),
              "w") as f:
        f.write(res.stdout + res.stderr)
    found = RESULT.search(res.stdout)
    if res.returncode != 0 or found is None:
        raise SystemExit(f"{system} failed (rc {res.returncode}):\n"
                         f"{(res.stdout + res.stderr)[-3000:]}")
    result = json.loads(found.group(1))
    result.update(system=system, wall_s=time.monotonic() - start)
    planned = re.search(r"--strategy=auto: planned [^\n]*", res.stdout + res.stderr)
    if planned:
        result["plan"] = planned.group(0)
        found = re.search(r"predicted iteration ([\d.]+) ms", planned.group(0))
        result["predicted_ms"] = float(found.group(1)) if found else None
        plan_out = f"{os.path.join(work, os.path.basename(profile))}.auto.pbtxt"
        result["plan_inputs"] = [f"{plan_out}.profile.pbtxt", f"{plan_out}.cluster.pbtxt"]
        result["plan_out"] = plan_out
    result["host_busy_median"], result["host_busy_peak"] = busy.summary()
    if probe:
        cpu = probe.summary(args.steps + args.warmup)["cpu_s_per_step"]
        result["server_cpu_s_per_step"] = cpu.get("server", 0.0)
    return result


def summarize(runs, systems, predicted, facts):
    rows = []
    step = {s: statistics.median(r["step_ms"] for r in runs if r["system"] == s)
            for s in systems if any(r["system"] == s for r in runs)}
    ddp = [s for s in DDP_SYSTEMS if s in step]
    best_ddp = min(ddp, key=lambda s: step[s]) if ddp else None
    bound = step.get("local", facts["compute_ms"])
    for s in systems:
        rs = [r for r in runs if r["system"] == s]
        if not rs:
            continue
        mean = lambda key: (statistics.mean(r[key] for r in rs)  # noqa: E731
                            if all(r.get(key) is not None for r in rs) else None)
        pred = predicted.get(s)
        if s in AUTO_SYSTEMS:  # the scheduler's own prediction, from its log
            preds = [r["predicted_ms"] for r in rs if r.get("predicted_ms")]
            pred = statistics.median(preds) if preds else None
        rows.append(dict(
            system=s, step_ms=step[s], per_rep=[r["step_ms"] for r in rs],
            of_bound=bound / step[s],
            vs_ddp_gloo=step["ddp-gloo"] / step[s] if "ddp-gloo" in step else None,
            vs_best_ddp=step[best_ddp] / step[s] if best_ddp else None, best_ddp=best_ddp,
            predicted_ms=pred, predicted_error=None if pred is None else pred / step[s] - 1,
            nic_bytes_per_step=mean("nic_bytes_per_step"),
            engine_bytes_per_step=mean("engine_bytes_per_step"),
            tail_ms=statistics.median(r["tail_ms"] for r in rs),
            worker_cpu_s_per_step=mean("worker_cpu_s_per_step"),
            server_cpu_s_per_step=mean("server_cpu_s_per_step"),
            host_busy=mean("host_busy_median")))
    return rows


def print_table(rows, heading):
    print(f"\n{heading}")
    ratio = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
    mb = lambda v: "-" if v is None else f"{v / 1e6:.2f}"  # noqa: E731
    cpu = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"{'system':<13} {'step ms':>8} {'reps':>15} {'tail ms':>7} {'of bound':>8} "
          f"{'vs gloo':>8} "
          f"{'vs best DDP':>11} {'predicted':>9} {'error':>6} {'NIC MB/step':>11} "
          f"{'worker CPU s':>12} {'server CPU s':>12} {'host busy':>9}")
    for r in rows:
        reps = "/".join(f"{v:.0f}" for v in r["per_rep"])
        pred = "-" if r["predicted_ms"] is None else f"{r['predicted_ms']:.0f}"
        err = "-" if r["predicted_error"] is None else f"{100 * r['predicted_error']:+.0f}%"
        busy = "-" if r["host_busy"] is None else f"{100 * r['host_busy']:.0f}%"
        print(f"{r['system']:<13} {r['step_ms']:>8.1f} {reps:>15} {r['tail_ms']:>7.1f} "
              f"{ratio(r['of_bound']):>8} "
              f"{ratio(r['vs_ddp_gloo']):>8} {ratio(r['vs_best_ddp']):>11} {pred:>9} {err:>6} "
              f"{mb(r['nic_bytes_per_step']):>11} {cpu(r['worker_cpu_s_per_step']):>12} "
              f"{cpu(r['server_cpu_s_per_step']):>12} {busy:>9}")


def print_contention(rows, contended, contention, line):
    """Measured beside the prediction without and with the calibrated contention."""
    fields = ", ".join(f"{k} {v:.3f}" for k, v in contention.items())
    print(f"\npredicted without and with the calibrated contention ({fields}; {line}):")
    print(f"{'system':<13} {'step ms':>8} {'host busy':>9} {'predicted':>9} {'error':>6} "
          f"{'with contention':>15} {'error':>6}")
    fmt = lambda v, m: ("-", "-") if v is None else (f"{v:.1f}", f"{100 * (v / m - 1):+.0f}%")  # noqa: E731
    for r in rows:
        if r["system"] not in contended:
            continue
        before, after = contended[r["system"]]
        busy = "-" if r["host_busy"] is None else f"{100 * r['host_busy']:.0f}%"
        b, be = fmt(before, r["step_ms"])
        a, ae = fmt(after, r["step_ms"])
        print(f"{r['system']:<13} {r['step_ms']:>8.1f} {busy:>9} {b:>9} {be:>6} {a:>15} {ae:>6}")


def plot(tables, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot {path}: matplotlib is not installed (deploy/setup.sh installs it)")
        return
    groups = [t for t in tables if any(r["vs_best_ddp"] for r in t["rows"])]
    systems = [s for s in SYSTEMS if any(r["system"] == s for t in groups for r in t["rows"])]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4.6))
    width = 0.8 / max(1, len(systems))
    for i, s in enumerate(systems):
        xs, ys = [], []
        for g, t in enumerate(groups):
            r = next((r for r in t["rows"] if r["system"] == s), None)
            if r and r["vs_best_ddp"]:
                xs.append(g + i * width)
                ys.append(r["vs_best_ddp"])
        ax.bar(xs, ys, width, label=s)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{t['model']}\n{t['cluster_gbps']:g} Gbit/s" for t in groups])
    ax.set_ylabel("speed-up over the best DDP variant")
    ax.set_title("GPU regime, emulated (compute as sleeps)")
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"written {path}")


def main(argv=None):
    args = parse_args(argv)
    use_netns, why = (False, "--loopback") if args.loopback else namespaces_usable()
    servers = ("servers on machines of their own" if args.separate_servers else
               "a ByteComp server beside each worker")
    where = (f"{args.workers} emulated machines (network namespaces), {args.rate} tbf links, "
             f"{servers}" if use_netns else
             f"LOOPBACK ({why}): {args.workers} workers and servers on this host, no link limits")
    print(f"gpu_regime: {where}; models shrunk {args.shrink:g}x, compute stretched to each "
          f"cluster's ratio; {args.warmup} + {args.steps} steps, {args.reps} repetition(s) in "
          "alternating order", flush=True)
    work = tempfile.mkdtemp(prefix="bytecomp-gpu-regime-")
    with open(os.path.join(work, "cluster.pbtxt"), "w") as f:
        f.write(cluster_text(args))
    if args.costs is None and any(s.startswith("bc-") for s in args.systems):
        args.costs = calibrate(args, work, use_netns)
    contention = None
    if args.contention:
        contention, contention_line = calibrate_contention(
            args.workers, args.workers, not args.separate_servers, args.bin_dir, use_netns,
            os.path.join(work, "contention.json"))
    tables = []
    for model in args.models:
        for cluster in args.clusters:
            tag = f"{model}-{cluster:g}g"
            text, facts = scaled_profile(model, args, cluster)
            profile = os.path.join(work, f"{tag}.profile.pbtxt")
            with open(profile, "w") as f:
                f.write(text)
            strategies = write_strategies(args, work, tag)
            runs = []
            for rep in range(args.reps):
                order = args.systems if rep % 2 == 0 else list(reversed(args.systems))
                for system in order:
                    r = run_one(system, args, work, profile, strategies.get(system), use_netns)
                    r["rep"] = rep
                    runs.append(r)
                    print(f"  {tag} rep {rep + 1} {system:<13} {r['step_ms']:8.1f} ms/step "
                          f"({r['wall_s']:.0f} s)", flush=True)
            # The fixed strategies predicted with what the scheduler planned bc-auto with
            # (measured profile, fitted links); without a bc-auto run, the nominal inputs.
            fitted = auto_inputs(runs)
            inputs = fitted or (profile, os.path.join(work, "cluster.pbtxt"))
            predicted = evaluate_strategies(args.bin_dir, *inputs, args.costs, strategies,
                                            work, tag)
            rows = summarize(runs, args.systems, predicted, facts)
            contended = {}
            if contention is not None:
                # Every ByteComp row predicted by one simulation with and without the
                # calibrated contention: the fixed strategies and bc-auto's planned one.
                planned = dict(strategies)
                if auto_strategy(runs):
                    planned["bc-auto"] = auto_strategy(runs)
                plain = evaluate_strategies(args.bin_dir, *inputs, args.costs, planned, work,
                                            tag)
                contended = evaluate_strategies(
                    args.bin_dir, inputs[0],
                    with_contention(inputs[1], contention,
                                    os.path.join(work, f"{tag}-contention-cluster.pbtxt")),
                    args.costs, planned, work, tag)
                contended = {s: (plain[s], contended[s]) for s in planned}
            heading = (f"{model}: {facts['tensors']} tensors, {facts['real_bytes'] / 1e6:.0f} MB "
                       f"shrunk to {facts['bytes'] / 1e6:.1f} MB; compute "
                       f"{facts['real_compute_ms']:.0f} ms (a GPU at 10 TFLOP/s) stretched "
                       f"x{facts['stretch']:.3f} to {facts['compute_ms']:.0f} ms: the "
                       f"compute:network ratio of a {cluster:g} Gbit/s cluster on {args.rate} "
                       f"links. W={args.workers}, {where}. 'host busy': all "
                       f"{os.cpu_count()} cores while the steps ran (median of 1 s samples)")
            print_table(rows, heading)
            print("predicted: bytecomp-plan's simulation of each strategy with " +
                  ("the profile and links the scheduler measured and fitted for bc-auto"
                   if fitted else "the nominal links and the scaled profile (no bc-auto run)"))
            for r in runs:
                if r.get("plan") and r["rep"] == 0:
                    print(r["plan"])
            if contended:
                print_contention(rows, contended, contention, contention_line)
            tables.append(dict(model=model, cluster_gbps=cluster, facts=facts, rows=rows,
                               runs=runs, predicted=predicted, prediction_inputs=inputs,
                               contention=contention,
                               contention_predictions=contended))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "namespaces": use_netns, "tables": tables}, f,
                      indent=1)
        print(f"written {args.out}")
    if args.plot:
        plot(tables, args.plot)
    print(f"files in {work}")


if __name__ == "__main__":
    main()
