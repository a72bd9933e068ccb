#!/usr/bin/env python3
"""Sparse exchanges on an emulated cluster (issue 15): samples/s and bytes per step of
uncompressed, gather-style top-k (topk 1% pushed, the servers' sparse union pulled: threshold
0), artopk 1% (one worker's indices, the values summed), blocksparse, and the planner's own
choice, on an embedding model (block-sparse gradients) and a dense MLP, with the planner's
predicted step time beside each measured one.

W machines (network namespaces, deploy/netns_cluster.sh --colocate: a server beside each
worker) joined by tbf links of --rate each way. In the same run, on this host: the codecs'
costs (bytecomp-plan --calibrate of the codecs used), each model's profile (sparse_train.py
--local: gradient hooks, block densities) and its step without communication. Predictions are
bytecomp-plan --evaluate of each system's Strategy, with links of --rate and --latency-us and
every process on this host's cores (host_cores). The planned system is bytecomp-plan's own
Strategy for gradients where the user accepts top-k 1% (PlannerOptions.allowed): it chooses
per tensor among uncompressed, topk (one-way, or the union), artopk and blocksparse.

Targets (issue 15): blocksparse within 1.5x of the ideal step its density sets (the local step
plus the uncompressed run's communication scaled by the bytes blocksparse moved against
uncompressed; the local step of one process alone, and of W copies run together, as the
emulated machines share this host's cores); artopk at least as fast as gather-style topk wherever the planner picks artopk.
Needs root for the namespaces; without them it runs on loopback and says so. Not a test: the
lead runs it full on a quiet machine.

    sudo python3 bench/e2e/sparse_bench.py                  # full: 2 models x 5 systems
    sudo python3 bench/e2e/sparse_bench.py --small          # a quick check of the harness
    --out FILE.json writes every figure.

With --contention the contention of the W workers and W servers on this host's cores is
calibrated too (scheduler/planner/tools/calibrate_contention.py) and every system is also
predicted with it (the cluster description's host_cpu_inflation and host_effective_cores).
"""

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "shim"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_bench import (calibrate_contention, calibrate_costs, evaluate_strategy,  # noqa: E402
                       namespaces_usable, rate_gbps, run_checked, with_contention)

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sparse_train.py")
SYSTEMS = ("none", "topk", "artopk", "blocksparse", "planned")
RESULT = re.compile(r"RESULT (\{.*\})")
TOPK = {"ratio": "0.01"}
# The cost table's codecs: the systems' push codecs (ratio: a placeholder the table's checks
# want; --calibrate measures and replaces it).
COST_TEMPLATE = """codecs { name: "topk" params { key: "ratio" value: "0.01" } memory: "residual" ratio: 1 }
codecs { name: "artopk" params { key: "ratio" value: "0.01" } memory: "residual" ratio: 1 }
codecs { name: "blocksparse" ratio: 1 }
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="embedding,dense")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rate", default="1gbit", help="each link, each way (tc tbf)")
    p.add_argument("--latency-us", type=float, default=50, help="the links' latency, planned")
    p.add_argument("--rows", type=int, default=1_000_000, help="embedding rows")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--small", action="store_true",
                   help="a quick check: 100k rows, 6 steps, --calibrate_seconds 0.002")
    p.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    p.add_argument("--loopback", action="store_true", help="no namespaces even as root")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--cluster-key", action="store_true",
                   help="run with the cluster key (CURVE: encrypted, authenticated; the planner's "
                        "costs do not include it); by default plain TCP (bytecomp-run --no-key)")
    p.add_argument("--contention", action="store_true",
                   help="also calibrate the W workers' and servers' contention on this host "
                   "and predict every system with it")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.small:
        args.rows, args.steps = 100_000, 6
    args.models = [m for m in args.models.split(",") if m]
    args.systems = [s for s in args.systems.split(",") if s]
    return args


def local_steps(cmd, copies, timeout, env):
    """ms per step of `copies` copies of cmd (a --local run) started together: the compute of
    the emulated machines, which share this host's cores. Their median."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for _ in range(copies)]
    ms = []
    for proc in procs:
        out, _ = proc.communicate(timeout=timeout)
        found = RESULT.search(out)
        if proc.returncode != 0 or found is None:
            raise SystemExit(f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{out[-3000:]}")
        ms.append(json.loads(found.group(1))["ms_per_step"])
    return statistics.median(ms)


def codec(name, params=None, memory=""):
    lines = [f'name: "{name}"']
    lines += [f'params {{ key: "{k}" value: "{v}" }}' for k, v in (params or {}).items()]
    if memory:
        lines.append(f'memory: "{memory}"')
    return " ".join(lines)


def strategy_text(system):
    """The Strategy of a fixed system: every gradient alike (force: the small ones too)."""
    push = {"topk": codec("topk", TOPK, "residual"),
            "artopk": codec("artopk", TOPK, "residual"),
            "blocksparse": codec("blocksparse")}.get(system)
    if push is None:
        return "seed: 1\n"
    pull = (f'  pull_codec {{ {codec("threshold", {"threshold": "0"})} }}\n'
            if system == "topk" else "")
    return (f'seed: 1\ntensors {{\n  name_pattern: "grad/*"\n  push_codec {{ {push} }}\n'
            f"{pull}  force: true\n}}\n")


def cluster_text(args):
    """A server beside each worker (netns_cluster.sh --colocate; on loopback every process
    shares the one host anyway): colocated_servers, so that each machine's link carries its
    server's traffic beside its worker's."""
    gbps = rate_gbps(args.rate)
    return (f"machines: {args.workers}\ngpus_per_machine: 0\nservers: {args.workers}\n"
            f"worker_link {{ bandwidth_gbps: {gbps} latency_us: {args.latency_us} }}\n"
            f"server_link {{ bandwidth_gbps: {gbps} latency_us: {args.latency_us} }}\n"
            f"cpu_pool_threads: 2\nhost_cores: {os.cpu_count()}\ncolocated_servers: true\n")


def planner_options(evaluate=False):
    """The user accepts top-k 1% for every gradient (and so artopk 1% or lossless codecs).
    To evaluate the fixed systems, whose strategies compress every tensor (force), the tree
    must offer every option: the smallest tensors' and the dominated ones too."""
    allowed = f'allowed {{ name_pattern: "grad/*" codecs {{ {codec("topk", TOPK)} }} }}\n'
    if evaluate:
        return "min_compress_bytes: 1\nkeep_dominated: true\n" + allowed
    return "min_compress_bytes: 4096\n" + allowed


def train_cmd(args, model, extra=()):
    return [sys.executable, TRAIN, "--model", model, "--rows", str(args.rows), "--steps",
            str(args.steps), "--batch-size", str(args.batch_size)] + list(extra)


def train(args, model, strategy, work, use_netns):
    """One distributed run; returns rank 0's RESULT figures."""
    w = args.workers
    launch = ["--bin-dir", args.bin_dir, "--timeout", str(args.timeout),
              f"--scheduler-args=--heartbeat_timeout_ms=30000 --strategy={strategy}"]
    if not args.cluster_key:
        launch.append("--no-key")
    if use_netns:
        cmd = (["bash", os.path.join(REPO, "deploy", "netns_cluster.sh"), "run", "--workers",
                str(w), "--servers", str(w), "--colocate", "--rate", args.rate, "--prefix",
                "bcs-"] + launch + ["--"] + train_cmd(args, model))
    else:
        cmd = ([sys.executable, os.path.join(REPO, "deploy", "bytecomp-run"), "-np", str(w),
                "--servers", str(w)] + launch + ["--"] + train_cmd(args, model))
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // w))
    env.setdefault("BYTECOMP_LIBRARY", os.path.join(os.path.dirname(args.bin_dir), "lib",
                                                    "libbytecomp_worker.so"))
    out = run_checked(cmd, args.timeout + 120, env)
    found = RESULT.search(out)
    if found is None:
        raise SystemExit(f"no RESULT from {' '.join(cmd)}:\n{out[-3000:]}")
    with open(os.path.join(work, f"{model}-{os.path.basename(strategy)}.log"), "w") as f:
        f.write(out)
    return json.loads(found.group(1))


def main(argv=None):
    args = parse_args(argv)
    use_netns, why = (False, "--loopback") if args.loopback else namespaces_usable()
    where = (f"{args.workers} emulated machines (netns, --colocate), {args.rate} tbf links"
             if use_netns else f"LOOPBACK ({why}): no link limits, compression shows little")
    where += ("; with the cluster key (CURVE)" if args.cluster_key else
              "; plain TCP (no cluster key; --cluster-key for CURVE)")
    print(f"sparse_bench: {where}; {args.steps} timed steps, batch {args.batch_size}/worker",
          flush=True)
    work = tempfile.mkdtemp(prefix="bytecomp-sparse-bench-")
    plan_bin = os.path.join(args.bin_dir, "bytecomp-plan")
    paths = {name: os.path.join(work, name) for name in
             ("template.pbtxt", "costs.pbtxt", "cluster.pbtxt", "options.pbtxt",
              "evaluate.pbtxt")}
    open(paths["template.pbtxt"], "w").write(COST_TEMPLATE)
    open(paths["cluster.pbtxt"], "w").write(cluster_text(args))
    open(paths["options.pbtxt"], "w").write(planner_options())
    open(paths["evaluate.pbtxt"], "w").write(planner_options(evaluate=True))
    calibrate_costs(args.bin_dir, paths["template.pbtxt"], paths["costs.pbtxt"], args.workers,
                    use_netns, 0.002 if args.small else 0.02)
    contention = None
    if args.contention:
        contention, _ = calibrate_contention(args.workers, args.workers, True, args.bin_dir,
                                             use_netns, os.path.join(work, "contention.json"))
        with_contention(paths["cluster.pbtxt"], contention,
                        os.path.join(work, "contention-cluster.pbtxt"))
    # A codec this build lacks (calibrate leaves it out and says so) has no system.
    left_out = re.search(r"left out: ([^\"]*)", open(paths["costs.pbtxt"]).read())
    missing = {c.strip() for c in left_out.group(1).split(",")} if left_out else set()
    for system in [s for s in args.systems if s in missing]:
        print(f"{system}: not in this build's codec registry, skipped")
        args.systems.remove(system)
    rows = []
    for model in args.models:
        profile = os.path.join(work, f"{model}-profile.pbtxt")
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // args.workers)))
        run_checked(train_cmd(args, model, ["--local", "--profile", profile]), args.timeout, env)
        local = json.loads(RESULT.search(
            run_checked(train_cmd(args, model, ["--local"]), args.timeout, env)).group(1))
        local_shared = local_steps(train_cmd(args, model, ["--local"]), args.workers,
                                   args.timeout, env)
        # The planner's own strategy, and its predictions of every system's.
        planned = os.path.join(work, f"{model}-planned.pbtxt")
        strategies = {}
        for system in args.systems:
            path = planned if system == "planned" else os.path.join(work, f"{model}-{system}.pbtxt")
            if system != "planned":
                open(path, "w").write(strategy_text(system))
            strategies[system] = path
        plan_cmd = [plan_bin, f"--profile={profile}", f"--cluster={paths['cluster.pbtxt']}",
                    f"--costs={paths['costs.pbtxt']}", f"--options={paths['options.pbtxt']}",
                    f"--out={planned}"]
        plan_out = run_checked(plan_cmd, 300)
        # The table's rows (explain.h, PlanTable): #, tensor, size (number and unit), the
        # chosen option ("topk(CPU,union:CPU)", then "hier" and "pN" when so), its settings, ...
        chosen = [(parts[1], " ".join(parts[4:5] + list(itertools.takewhile(
                      lambda word: re.fullmatch(r"hier|p\d+", word), parts[5:]))))
                  for parts in map(str.split, plan_out.splitlines())
                  if len(parts) > 6 and parts[0].isdigit()]
        def evaluate(system, path, cluster):
            try:
                return evaluate_strategy(args.bin_dir, profile, cluster, paths["costs.pbtxt"],
                                         path, options=paths["evaluate.pbtxt"],
                                         out=os.path.join(work, "ignored.pbtxt"))
            except SystemExit as e:  # a codec this build or cost table lacks
                print(f"  {model} {system}: no prediction ({str(e).splitlines()[-1]})")
                return None

        predicted, contended = {}, {}
        for system, path in strategies.items():
            predicted[system] = evaluate(system, path, paths["cluster.pbtxt"])
            if contention is not None:
                contended[system] = evaluate(system, path,
                                             os.path.join(work, "contention-cluster.pbtxt"))
        for system in args.systems:
            print(f"{model} {system} ...", flush=True)
            result = train(args, model, strategies[system], work, use_netns)
            result.update(system=system, predicted_ms=predicted[system],
                          predicted_contended_ms=contended.get(system),
                          local_ms=local["ms_per_step"], local_shared_ms=local_shared)
            rows.append(result)
            print(f"  {result['samples_per_s']:.0f} samples/s, {result['ms_per_step']:.1f} "
                  f"ms/step (predicted {predicted[system]}), "
                  f"{result['engine_bytes_per_step'] / 1e6:.3f} MB/step", flush=True)
        print(f"  {model}: the planner chose " + ", ".join(f"{t}: {o}" for t, o in chosen))
    report(rows, args, where, contention)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "namespaces": use_netns, "rows": rows}, f, indent=1)
        print(f"written {args.out}")
    print(f"files in {work}")


def report(rows, args, where, contention=None):
    print(f"\nW={args.workers}, {where}; embedding {args.rows} rows x 16, dense MLP "
          f"256-1024-1024-10; batch {args.batch_size}/worker")
    if contention:
        print("with contention: predicted with the calibrated " +
              ", ".join(f"{k} {v:.3f}" for k, v in contention.items()))
    print(f"{'model':<10} {'system':<12} {'samples/s':>9} {'ms/step':>8} {'predicted':>9} "
          f"{'error':>7}" + (f" {'with contention':>15} {'error':>6}" if contention else "") +
          f" {'MB/step':>8} {'vs none':>8}")

    def error(pred, r):
        return f"{100 * (pred - r['ms_per_step']) / r['ms_per_step']:+.0f}%" if pred else "-"

    for r in rows:
        none = next((n for n in rows if n["model"] == r["model"] and n["system"] == "none"), None)
        pred, contended = r["predicted_ms"], r.get("predicted_contended_ms")
        speed = f"{r['samples_per_s'] / none['samples_per_s']:.2f}x" if none else "-"
        with_it = (f" {contended if contended else '-':>15} {error(contended, r):>6}"
                   if contention else "")
        print(f"{r['model']:<10} {r['system']:<12} {r['samples_per_s']:>9.0f} "
              f"{r['ms_per_step']:>8.1f} {pred if pred else '-':>9} {error(pred, r):>7}"
              f"{with_it} {r['engine_bytes_per_step'] / 1e6:>8.3f} {speed:>8}")
    for model in args.models:
        by = {r["system"]: r for r in rows if r["model"] == model}
        if "blocksparse" in by and "none" in by:
            b, n = by["blocksparse"], by["none"]
            density = b["engine_bytes_per_step"] / n["engine_bytes_per_step"]
            # The compute without communication: one process alone (a machine of its own),
            # and W processes together (the emulated machines share this host's cores).
            for key, what in (("local_ms", "1 process alone"),
                              ("local_shared_ms", f"{args.workers} processes together")):
                ideal = b[key] + density * max(0.0, n["ms_per_step"] - n[key])
                print(f"{model}: blocksparse {b['ms_per_step']:.1f} ms/step against the ideal "
                      f"{ideal:.1f} ms its density sets ({density:.4f} of the bytes; compute "
                      f"{b[key]:.1f} ms/step, {what}): {b['ms_per_step'] / ideal:.2f}x "
                      f"(target <= 1.5x)")
        if "artopk" in by and "topk" in by:
            print(f"{model}: artopk {by['artopk']['ms_per_step']:.1f} ms/step, gather topk "
                  f"{by['topk']['ms_per_step']:.1f} ms/step")


if __name__ == "__main__":
    main()
