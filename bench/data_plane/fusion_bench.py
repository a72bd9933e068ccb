#!/usr/bin/env python3
"""Tensor fusion on the parameter servers (Strategy.fusion_groups): a shipped profile's model
pushed by bytecomp-bench on a local cluster with and without fusion groups, alternating which
goes first; prints rounds on the servers per iteration (from the profile: every partition of
every tensor, a group counting as one tensor) and the median round time of each, with their
ratio. The groups pack consecutive tensors (in the profile's order, the order they become
ready) under --below bytes into groups of at most --cap bytes, as `bytecomp-plan --fusion_below`
does.

  python3 bench/data_plane/fusion_bench.py [--model resnet50] [--workers 2] [--servers 1]
      [--below 1048576] [--cap 4194304] [--rounds 20] [--pairs 3] [--codec none]
  python3 bench/data_plane/fusion_bench.py --tiny 1000 [--group 250] [--rounds 200] [--auto]

--tiny N: exact_sum_worker's N one-element tensors instead (every sum checked), plain and in
groups of --group; the time is each job's wall time over its rounds (start-up included).
--auto: both jobs --strategy=auto (profiled, planned for 1 Gbit/s links, switched), one with
PlannerOptions.disable_fusion, the other fused as the plan chooses; the rounds before the
switch run unfused in both.

On this machine every process of a job shares its 2 cores: the CPU is the limit on loopback.
"""
import argparse
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import run_data_plane_bench as data_plane  # noqa: E402

PLANNER = os.path.join(os.path.dirname(__file__), "..", "..", "scheduler", "planner")
PROFILES = os.path.join(PLANNER, "profiles")
PARTITION_BYTES = 4 << 20  # the cluster's default partition size
PLANNED_GROUPS = []  # --auto: the fusion groups of each fused job's plan


def profile_tensors(model):
    with open(os.path.join(PROFILES, model + ".pbtxt")) as f:
        return [(m.group(1), int(m.group(2))) for m in
                re.finditer(r'tensors \{ name: "([^"]+)" elements: (\d+)', f.read())]


def fusion_groups(tensors, below, cap):
    """Consecutive tensors under `below` bytes, packed into groups of at most `cap` bytes."""
    groups, current, size = [], [], 0
    for name, elements in tensors:
        nbytes = 4 * elements
        if nbytes >= below or size + nbytes > cap:
            if len(current) > 1:
                groups.append(current)
            current, size = [], 0
        if nbytes < below:
            current.append((name, elements))
            size += nbytes
    if len(current) > 1:
        groups.append(current)
    return groups


def rounds_per_iteration(tensors, groups):
    fused = {name for g in groups for name, _ in g}
    sizes = [4 * e for n, e in tensors if n not in fused]
    sizes += [4 * sum(e for _, e in g) for g in groups]
    return sum(max(1, -(-s // PARTITION_BYTES)) for s in sizes)


def strategy_text(groups, codec):
    lines = ["seed: 7"]
    if codec != "none":
        lines.append(f'tensors {{ name_pattern: "*" push_codec {{ name: "{codec}" }} }}')
    for i, g in enumerate(groups):
        members = " ".join(f'tensors: "{name}"' for name, _ in g)
        lines.append(f'fusion_groups {{ name: "fused.{i}" {members} }}')
    return "\n".join(lines) + "\n"


def alternate(args, files, run, unit):
    """run(scheduler arguments) for the plain and the fused job, --pairs times each, which goes
    first alternating; their medians (plain, fused). `files`: label -> (flag, file text): the
    scheduler gets --flag=<a file of that text>."""
    times = {"plain": [], "fused": []}
    with tempfile.TemporaryDirectory(prefix="bytecomp-fusion-") as tmp:
        scheduler_args = {}
        for label, (flag, text) in files.items():
            path = os.path.join(tmp, f"{label}.pbtxt")
            with open(path, "w") as f:
                f.write(text)
            scheduler_args[label] = [f"--{flag}={path}"]
        for pair in range(args.pairs):
            for label in ("plain", "fused") if pair % 2 == 0 else ("fused", "plain"):
                times[label].append(run(scheduler_args[label]))
                print(f"pair {pair + 1}/{args.pairs} {label}: {times[label][-1]:.2f} {unit}",
                      flush=True)
    return statistics.median(times["plain"]), statistics.median(times["fused"])


def strategies(groups, codec):
    return {"plain": ("strategy", strategy_text([], codec)),
            "fused": ("strategy", strategy_text(groups, codec))}


def tiny_job(args, scheduler_args):
    """Seconds for one exact_sum_worker job of --tiny one-element tensors."""
    cmd = [data_plane.cluster.binary("exact_sum_worker"), "--rounds", str(args.rounds),
           "--tiny-tensors", str(args.tiny), "--print-every", str(args.rounds)]
    start = time.monotonic()
    with data_plane.cluster.Cluster(workers=args.workers, servers=args.servers, worker_cmd=cmd,
                                    scheduler_args=scheduler_args) as c:
        codes = c.wait_workers(timeout=900)
        if codes != [0] * args.workers:
            raise RuntimeError(f"job failed: {codes}\n{c.dump()}")
        if args.auto:
            log = c.scheduler.output()
            m = re.search(r"; (fused|did not fuse) \d+ small tensors in (\d+) fusion groups", log)
            switch = re.search(r"strategy version 2 applies from round (\d+)", log)
            print(f"  {m.group(0)[2:] if m else 'fusion not planned'}; switched at round "
                  f"{switch.group(1) if switch else '-'}", flush=True)
            if m and m.group(1) == "fused":
                PLANNED_GROUPS.append(int(m.group(2)))
    return time.monotonic() - start


def main_tiny(args):
    names = [(f"tiny.{i}", 1) for i in range(args.tiny)]
    groups = [names[i:i + args.group] for i in range(0, len(names), args.group)]
    if args.auto:
        # --strategy=auto both times: every tensor alone, or fused as the plan chooses.
        cluster_file = os.path.join(PLANNER, "clusters", "4x1gpu-1g.pbtxt")
        auto = ["--strategy=auto", "--profile_rounds=3", f"--plan_cluster={cluster_file}",
                f"--plan_costs={os.path.join(PLANNER, 'costs', 'nominal.pbtxt')}"]
        files = {"plain": ("plan_options", "disable_fusion: true\n"),
                 "fused": ("plan_options", "")}
        plain, fused = alternate(args, files, lambda extra: tiny_job(args, auto + extra), "s")
    else:
        plain, fused = alternate(args, strategies(groups, args.codec),
                                 lambda extra: tiny_job(args, extra), "s")
    print(f"\n{args.tiny} one-element tensors, W={args.workers} S={args.servers}, loopback (the "
          f"CPU is the limit), {args.rounds} rounds a job, start-up included; medians of "
          f"{args.pairs}{'; --strategy=auto, fused as planned' if args.auto else ''}")
    print(f"{'':8} {'rounds/iteration':>17} {'ms/round':>9}")
    print(f"{'plain':8} {args.tiny:17d} {1000 * plain / args.rounds:9.2f}")
    if args.auto:  # the plan's groups (the rounds before the switch: every tensor alone)
        groups = [None] * int(statistics.median(PLANNED_GROUPS) if PLANNED_GROUPS else args.tiny)
    print(f"{'fused':8} {len(groups):17d} {1000 * fused / args.rounds:9.2f}")
    print(f"{'ratio':8} {args.tiny / len(groups):16.2f}x {plain / fused:8.2f}x (plain / fused)")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--below", type=int, default=1 << 20)
    p.add_argument("--cap", type=int, default=PARTITION_BYTES)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--codec", default="none")
    p.add_argument("--tiny", type=int, default=0)
    p.add_argument("--group", type=int, default=250)
    p.add_argument("--auto", action="store_true",
                   help="--tiny: both jobs --strategy=auto, fusion disabled or as planned")
    args = p.parse_args()
    if args.tiny:
        return main_tiny(args)

    tensors = profile_tensors(args.model)
    groups = fusion_groups(tensors, args.below, args.cap)
    plain_rounds = rounds_per_iteration(tensors, [])
    fused_rounds = rounds_per_iteration(tensors, groups)
    members = sum(len(g) for g in groups)
    plain, fused = alternate(
        args, strategies(groups, args.codec),
        lambda extra: data_plane.run_bench(args.workers, args.servers, args.model, args.rounds,
                                           extra_scheduler_args=extra)["median_round_ms"], "ms")
    print(f"\n{args.model}, W={args.workers} S={args.servers}, codec {args.codec}, loopback "
          f"(the CPU is the limit); {members} of {len(tensors)} tensors (under {args.below} "
          f"bytes) in {len(groups)} groups of at most {args.cap} bytes; medians of {args.pairs}")
    print(f"{'':8} {'rounds/iteration':>17} {'round ms':>9}")
    print(f"{'plain':8} {plain_rounds:17d} {plain:9.1f}")
    print(f"{'fused':8} {fused_rounds:17d} {fused:9.1f}")
    print(f"{'ratio':8} {plain_rounds / fused_rounds:16.2f}x {plain / fused:8.2f}x "
          "(plain / fused)")


if __name__ == "__main__":
    main()
