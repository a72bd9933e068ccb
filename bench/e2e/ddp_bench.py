#!/usr/bin/env python3
"""End-to-end training on an emulated cluster: ByteComp (through the DDP comm hook) against
PyTorch DDP over gloo, on models whose gradients dominate the step.

W machines (network namespaces, deploy/netns_cluster.sh --colocate) joined by tbf links of
--rate each way, one ByteComp server beside each worker (the BytePS layout; DDP's rings run on
the same links). Each system trains examples/train_ddp.py for --epochs on digits; the table
gives samples/s (median over epochs after the first, mean of the repetitions), the ratio to
DDP over gloo and to the best DDP variant measured in the same run, the bytes each machine's
NIC moved per step (sent + received), ByteComp's engine bytes per step, the final test
accuracy, rank 0's CPU seconds per step (its process: training and communication
threads; on a loaded host a steadier figure than wall time), and the step in ms beside the
planner's prediction of it for the ByteComp rows (bc-auto: the scheduler's plan; the others:
bytecomp-plan --evaluate of their strategy with the profile and links that plan used).
Repetitions run in alternating order (the second reversed), so drift on a shared machine falls
on every system alike. Needs root for the namespaces; without them it runs on
loopback (no slow links: compression can show little) and says so.

    sudo python3 bench/e2e/ddp_bench.py                       # full: 2 models x 7 systems x 2
    sudo python3 bench/e2e/ddp_bench.py --models mlp --systems bc-none,ddp-gloo --reps 1
    --out FILE.json writes every run's figures.

Systems: ddp-gloo (no hook), ddp-fp16 (fp16_compress_hook), ddp-powersgd (PowerSGD hook, rank
2, one bucket), bc-none, bc-fp16 (both ways), bc-topk (top-k 1% both ways, residual on the
workers and the servers; any bc-<preset> of bytecomp.strategy likewise), bc-<preset>-ar and
bc-<preset>-ag (the preset one-way, summed among the workers by gloo's allreduce or allgather
instead of on the servers: bc-none-ar, bc-powersgd-ar, bc-topk-ag), bc-auto
(--strategy=auto with collectives: the scheduler profiles, plans with the measured links and the
host's codec costs, calibrated first (calibrate_costs; --costs for a table), per tensor over the
servers, an allreduce or an allgather, and switches every node).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "shim"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bytecomp.strategy import PRESETS, strategy_text  # noqa: E402
from netns_probe import NetnsProbe  # noqa: E402

SYSTEMS = ("ddp-gloo", "ddp-fp16", "ddp-powersgd", "bc-none", "bc-fp16", "bc-topk", "bc-auto")
# Not in the default set: "local", the same processes training without communication.
# Beside these, bc-<codec> runs any preset of bytecomp.strategy both ways.
DDP_SYSTEMS = ("ddp-gloo", "ddp-fp16", "ddp-powersgd")
NOMINAL = os.path.join(REPO, "scheduler", "planner", "costs", "nominal.pbtxt")
RESULT = re.compile(r"RESULT (\{.*\})")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rate", default="1gbit", help="each link, each way (tc tbf)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    p.add_argument("--loopback", action="store_true", help="no namespaces even as root")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--out", default=None, help="JSON file for every run's figures")
    p.add_argument("--cluster-key", action="store_true",
                   help="ByteComp with its cluster key (CURVE control plane, sealed data "
                        "messages). By default it runs as DDP's gloo does, plain TCP "
                        "(bytecomp-run --no-key), so that both move the same unencrypted bytes; "
                        "a system named bc-X+key (+curve) runs keyed (with CURVE data sockets) "
                        "beside the others")
    p.add_argument("--base-dir", default=None,
                   help="another build (its bin/ and lib/): a system named SYSTEM@base runs "
                        "SYSTEM with that build's binaries and engine library, so that a "
                        "change and its baseline are measured in the same session")
    p.add_argument("--costs", default=None,
                   help="the planner's codec cost table for bc-auto and the predictions "
                        "(default: this host's, calibrated first: calibrate_costs, about 25 s)")
    p.add_argument("--profile", action="store_true",
                   help="also read, while each run goes, every process's CPU seconds, the tbf "
                        "queues' drops and the TCP retransmissions (netns_probe.py); per step")
    args = p.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    args.models = [m for m in args.models.split(",") if m]
    unknown = [s for s in args.systems
               if base_system(s) not in SYSTEMS + ("local",)
               and scheme_setting(base_system(s))[0][len("bc-"):] not in PRESETS]
    if any(key_setting(s)[0].endswith("@base") for s in args.systems) and not args.base_dir:
        p.error("a SYSTEM@base needs --base-dir")
    if unknown:
        p.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    return args


# A ByteComp system with one of these suffixes runs with the cluster key: +key under the
# default data_protection (encrypt: sealed data messages), +curve with CURVE data sockets.
KEY_SUFFIXES = {"+key": "encrypt", "+curve": "curve"}


def key_setting(system):
    """(system without a key suffix, its data_protection or None for no key)."""
    for suffix, protection in KEY_SUFFIXES.items():
        if system.endswith(suffix):
            return system[:-len(suffix)], protection
    return system, None


# A ByteComp system bc-<preset> with one of these suffixes sums among the workers (Strategy
# scheme) instead of on the servers.
SCHEME_SUFFIXES = {"-ar": "allreduce", "-ag": "allgather"}


def scheme_setting(system):
    """(system without a scheme suffix, its scheme or None for the servers)."""
    for suffix, scheme in SCHEME_SUFFIXES.items():
        if system.startswith("bc-") and system.endswith(suffix):
            return system[:-len(suffix)], scheme
    return system, None


def base_system(system):
    """The system a SYSTEM@base or SYSTEM+key row runs (with --base-dir's build for @base)."""
    system = key_setting(system)[0]
    return system[:-len("@base")] if system.endswith("@base") else system


def namespaces_usable():
    """(True, "") when this process may make network namespaces, else (False, why)."""
    if os.geteuid() != 0:
        return False, "not root"
    probe = f"bcprobe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return False, made.stderr.strip() or "ip netns add failed"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, ""


def rate_gbps(rate):
    m = re.fullmatch(r"(\d+)([kmg]?)bit", rate)
    if m is None:
        raise SystemExit(f"--rate {rate}: use e.g. 100mbit, 1gbit")
    return int(m.group(1)) * {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0}[m.group(2)]


def scheduler_args(system, args, work):
    """The scheduler's flags for a system: its strategy (none for DDP and bc-none)."""
    flags = ["--heartbeat_timeout_ms=30000"]  # a loaded shared host stalls processes
    preset, scheme = scheme_setting(system)
    codec = preset[len("bc-"):]
    if scheme is not None:
        # The preset one-way, every tensor summed among the workers by gloo.
        params, memory = PRESETS[codec]
        path = os.path.join(work, f"{system}.pbtxt")
        with open(path, "w") as f:
            f.write(strategy_text(codec, params=params, memory=memory, scheme=scheme))
        flags += [f"--strategy={path}", "--collectives"]
    elif codec in PRESETS and codec != "none":
        # The preset (topk: 1%, residual) both ways; the servers' re-encode gets the same
        # error-feedback memory as the workers' by default.
        params, memory = PRESETS[codec]
        path = os.path.join(work, f"{system}.pbtxt")
        with open(path, "w") as f:
            f.write(strategy_text(codec, params=params, memory=memory, two_way=True))
        flags.append(f"--strategy={path}")
    elif system == "bc-auto":
        cluster = os.path.join(work, "plan-cluster.pbtxt")
        with open(cluster, "w") as f:
            f.write(f"# {args.workers} emulated machines, a server beside each, "
                    f"{args.rate} links; every process shares this host's cores\n"
                    f"machines: {args.workers}\ngpus_per_machine: 0\nservers: {args.workers}\n"
                    f"worker_link {{ bandwidth_gbps: {rate_gbps(args.rate)} latency_us: 50 }}\n"
                    f"server_link {{ bandwidth_gbps: {rate_gbps(args.rate)} latency_us: 50 }}\n"
                    f"colocated_servers: true\n"
                    f"cpu_pool_threads: 2\nhost_cores: {os.cpu_count()}\n")
        # With collectives: the plan may sum a tensor among the workers where that wins.
        flags += ["--strategy=auto", f"--plan_cluster={cluster}", f"--plan_costs={args.costs}",
                  "--collectives"]
    return flags


def run_checked(cmd, timeout, env=None, with_stderr=False):
    """cmd's standard output (and its standard error after it, with_stderr); exits naming the
    command and its last output when it fails."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (rc {res.returncode}):\n"
                         f"{(res.stdout + res.stderr)[-3000:]}")
    return res.stdout + res.stderr if with_stderr else res.stdout


def calibrate_costs(bin_dir, template, out, workers, use_netns, seconds=0.02):
    """This host's costs for the planner: the codecs the cost table `template` lists, each
    measured by bytecomp-plan --calibrate (one thread, `seconds` a point) into `out`, then the
    CPU that moving a message costs (calibrate_transport). Prints both summaries; returns
    `out`."""
    text = run_checked([os.path.join(bin_dir, "bytecomp-plan"), "--calibrate", f"--costs={out}",
                        f"--calibrate_template={template}", f"--calibrate_seconds={seconds}"],
                       900, with_stderr=True)
    print(text.strip().splitlines()[-1], flush=True)
    print(calibrate_transport(out, workers, bin_dir, use_netns), flush=True)
    return out


def calibrate_transport(costs, workers, bin_dir, use_netns):
    """Adds to the cost table `costs` the CPU that moving a message costs this host
    (scheduler/planner/tools/calibrate_transport.py: real jobs of `workers` workers, plain TCP
    as the benchmarks run, on 10 Gbit/s emulated links where namespaces are usable so that the
    rate does not limit them), which the planner charges to the shared cores (host_cores).
    Returns the tool's summary line."""
    tool = os.path.join(REPO, "scheduler", "planner", "tools", "calibrate_transport.py")
    cmd = [sys.executable, tool, f"--costs={costs}", f"--out={costs}", f"--workers={workers}",
           f"--bin-dir={bin_dir}", "--no-key"] + (["--netns-rate=10gbit"] if use_netns else [])
    return run_checked(cmd, 900, with_stderr=True).strip().splitlines()[0]


def evaluate_strategy(bin_dir, profile, cluster, costs, strategy, options=None, out=None):
    """The iteration ms that bytecomp-plan --evaluate simulates for the Strategy file
    `strategy` with these inputs (its fusion groups included); SystemExit naming the command
    when it fails (a codec the build or the cost table lacks)."""
    cmd = [os.path.join(bin_dir, "bytecomp-plan"), f"--profile={profile}", f"--cluster={cluster}",
           f"--costs={costs}", f"--out={out or strategy + '.ignored'}", "--table=false",
           f"--evaluate={strategy}"] + ([f"--options={options}"] if options else [])
    text = run_checked(cmd, 300, with_stderr=True)
    found = re.search(r"evaluated .*: ([\d.]+) ms", text)
    if found is None:
        raise SystemExit(f"{' '.join(cmd)} printed no evaluation:\n{text[-3000:]}")
    return float(found.group(1))


def evaluate_strategies(bin_dir, profile, cluster, costs, strategies, work, tag):
    """evaluate_strategy of each {system: strategy file}, as written (the tree offers every
    option a fixed strategy may use: the small tensors' and the dominated ones too): {system:
    ms, or None where bytecomp-plan could not, which it prints after `tag`}."""
    options = os.path.join(work, "evaluate-options.pbtxt")
    with open(options, "w") as f:
        f.write("min_compress_bytes: 1\nkeep_dominated: true\n")
    predicted = {}
    for system, path in strategies.items():
        try:
            predicted[system] = evaluate_strategy(bin_dir, profile, cluster, costs, path,
                                                  options=options,
                                                  out=os.path.join(work, "ignored.pbtxt"))
        except SystemExit as e:
            print(f"  {tag} {system}: no prediction ({str(e).splitlines()[-1]})")
            predicted[system] = None
    return predicted


def calibrate_contention(workers, servers, colocate, bin_dir, use_netns, json_path,
                         keyed=False):
    """The contention of a job's W workers and S servers on this host's cores
    (scheduler/planner/tools/calibrate_contention.py: real jobs, plain TCP as the benchmarks
    run unless `keyed`, on 10 Gbit/s emulated links where namespaces are usable, `colocate`: a
    server beside each worker): ({field: value} for the cluster description, the tool's
    summary line)."""
    tool = os.path.join(REPO, "scheduler", "planner", "tools", "calibrate_contention.py")
    cmd = [sys.executable, tool, f"--workers={workers}", f"--servers={servers}",
           f"--bin-dir={bin_dir}", f"--json={json_path}"] + ([] if keyed else ["--no-key"])
    if use_netns:
        cmd += ["--netns-rate=10gbit"] + (["--colocate"] if colocate else [])
    text = run_checked(cmd, 900, with_stderr=True).strip()
    print(text, flush=True)
    with open(json_path) as f:
        found = json.load(f)
    return (dict(host_cpu_inflation=found["inflation"],
                 host_effective_cores=found["effective_cores"]), text.splitlines()[-1])


def with_contention(cluster, contention, path):
    """Writes to `path` the cluster description `cluster` with the contention fields set;
    returns `path`."""
    with open(cluster) as f:
        text = f.read()
    for field in contention:
        text = re.sub(rf"^{field}:.*\n?", "", text, flags=re.M)
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n" +
                "".join(f"{k}: {v:.4f}\n" for k, v in contention.items()))
    return path


def run_one(system, model, args, work, use_netns):
    """Trains one system once; returns rank 0's RESULT figures plus wall seconds."""
    label, system = system, base_system(system)
    from_base = key_setting(label)[0].endswith("@base")
    bin_dir = os.path.join(args.base_dir, "bin") if from_base else args.bin_dir
    comm = (system[len("ddp-"):] if system in DDP_SYSTEMS else
            "local" if system == "local" else "bytecomp")
    train = [sys.executable, os.path.join(REPO, "examples", "train_ddp.py"), "--comm", comm,
             "--model", model, "--epochs", str(args.epochs), "--batch-size",
             str(args.batch_size), "--lr", str(args.lr)]
    flags = scheduler_args(system, args, work)
    launch = ["--bin-dir", bin_dir, "--timeout", str(args.timeout),
              "--scheduler-args=" + " ".join(flags)]
    protection = key_setting(label)[1]
    if not args.cluster_key and protection is None:
        launch.append("--no-key")
    w = args.workers
    if use_netns:
        cmd = (["bash", os.path.join(REPO, "deploy", "netns_cluster.sh"), "run", "--workers",
                str(w), "--servers", str(w), "--colocate", "--rate", args.rate, "--prefix",
                "bce-"] + launch + ["--"] + train)
    else:
        cmd = ([sys.executable, os.path.join(REPO, "deploy", "bytecomp-run"), "-np", str(w),
                "--servers", str(w)] + launch + ["--"] + train)
    env = dict(os.environ)
    if protection is not None:
        env["BYTECOMP_DATA_PROTECTION"] = protection
    # Every emulated machine shares this host's cores: give each worker its share.
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // w))
    if from_base:
        env["BYTECOMP_LIBRARY"] = os.path.join(args.base_dir, "lib", "libbytecomp_worker.so")
    else:
        env.setdefault("BYTECOMP_LIBRARY", os.path.join(os.path.dirname(args.bin_dir), "lib",
                                                        "libbytecomp_worker.so"))
    start = time.monotonic()
    probe = NetnsProbe("bce-", w) if (args.profile and use_netns) else None
    if probe:
        probe.__enter__()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env,
                             timeout=args.timeout + 120)
    finally:
        if probe:
            probe.__exit__(None, None, None)
    wall = time.monotonic() - start
    log = os.path.join(work, f"{model}-{label}-{int(start)}.log")
    with open(log, "w") as f:
        f.write(res.stdout + res.stderr)
    found = RESULT.search(res.stdout)
    if res.returncode != 0 or found is None:
        tail = (res.stdout + res.stderr)[-3000:]
        raise SystemExit(f"{label} on {model} failed (rc {res.returncode}, log {log}):\n{tail}")
    result = json.loads(found.group(1))
    result.update(system=label, wall_s=wall, log=log)
    if probe:
        result["probe"] = probe.summary(args.epochs * result["steps_per_epoch"])
    text = res.stdout + res.stderr
    plan = re.search(r"--strategy=auto: (planned [^\n]*)", text)
    if plan:
        result["plan"] = plan.group(1)
        found = re.search(r"predicted iteration ([\d.]+) ms", plan.group(1))
        result["predicted_ms"] = float(found.group(1)) if found else None
        inputs = re.search(r"planned with (\S+)\.\{profile,cluster,options\}\.pbtxt", text)
        if inputs:
            result["plan_inputs"] = [f"{inputs.group(1)}.{kind}.pbtxt"
                                     for kind in ("profile", "cluster")]
    strategy = [f[len("--strategy="):] for f in flags
                if f.startswith("--strategy=") and f != "--strategy=auto"]
    result["strategy"] = strategy[0] if strategy else None
    result["step_ms"] = 1000.0 * args.batch_size * args.workers / result["samples_per_s"]
    return result


def predict_fixed(runs, model, args, work):
    """Each fixed ByteComp system's step as bytecomp-plan --evaluate simulates its strategy with
    the profile and links the scheduler planned bc-auto with (the last bc-auto run of `model`;
    bc-none: no strategy, every tensor uncompressed): {system: ms}, empty without a bc-auto
    run."""
    auto = [r for r in runs if r["model"] == model and r.get("plan_inputs")
            and all(os.path.exists(p) for p in r["plan_inputs"])]
    if not auto:
        return {}
    profile, cluster = auto[-1]["plan_inputs"]
    uncompressed = os.path.join(work, "uncompressed.pbtxt")
    with open(uncompressed, "w") as f:
        f.write("version: 1\nfirst_round: 0\n")
    strategies = {}
    for r in runs:
        system = r["system"]
        if (r["model"] != model or not system.startswith("bc-") or system == "bc-auto"
                or "@base" in system or "+" in system):
            continue
        strategy = r.get("strategy") or (uncompressed if base_system(system) == "bc-none"
                                         else None)
        if strategy is not None:
            strategies[system] = strategy
    predicted = evaluate_strategies(args.bin_dir, profile, cluster, args.costs, strategies,
                                    work, model)
    return {s: ms for s, ms in predicted.items() if ms is not None}


def mb(value):
    return "-" if value is None else f"{value / 1e6:.2f}"


def summarize(runs, systems, models, predicted):
    """One row per (model, system): means over repetitions, ratios to DDP of the same run, the
    planner's prediction of the step (`predicted`: {model: {system: ms}} for the fixed
    systems; bc-auto's is the scheduler's) against the measured one."""
    rows = []
    for model in models:
        by_system = {s: [r for r in runs if r["model"] == model and r["system"] == s]
                     for s in systems}
        speed = {s: statistics.mean(r["samples_per_s"] for r in rs)
                 for s, rs in by_system.items() if rs}
        ddp = [s for s in DDP_SYSTEMS if s in speed]
        best_ddp = max(ddp, key=lambda s: speed[s]) if ddp else None
        for s in systems:
            rs = by_system[s]
            if not rs:
                continue
            nic = [r["nic_bytes_per_step"] for r in rs if r["nic_bytes_per_step"] is not None]
            step_ms = statistics.mean(r["step_ms"] for r in rs)
            by_scheduler = [r["predicted_ms"] for r in rs if r.get("predicted_ms")]
            pred = (statistics.median(by_scheduler) if by_scheduler
                    else predicted.get(model, {}).get(s))
            rows.append(dict(
                step_ms=step_ms, predicted_ms=pred,
                predicted_error=None if pred is None else pred / step_ms - 1,
                model=model, system=s, samples_per_s=speed[s],
                per_rep=[r["samples_per_s"] for r in rs],
                vs_ddp_gloo=speed[s] / speed["ddp-gloo"] if "ddp-gloo" in speed else None,
                vs_best_ddp=speed[s] / speed[best_ddp] if best_ddp else None,
                best_ddp=best_ddp,
                nic_bytes_per_step=statistics.mean(nic) if nic else None,
                engine_bytes_per_step=statistics.mean(r["engine_bytes_per_step"] for r in rs),
                accuracy=statistics.mean(r["final_accuracy"] for r in rs),
                worker_cpu_s_per_step=statistics.mean(r["worker_cpu_s_per_step"] for r in rs),
                plan=next((r["plan"] for r in rs if r.get("plan")), None),
                probe=[r["probe"] for r in rs if r.get("probe")]))
    return rows


def print_table(rows, header):
    print(f"\n{header}")
    print(f"{'model':<5} {'system':<13} {'samples/s':>9} {'reps':>13} {'vs gloo':>8} "
          f"{'vs best DDP':>11} {'NIC MB/step':>11} {'engine MB/step':>14} {'accuracy':>8} "
          f"{'CPU s/step':>10} {'step ms':>7} {'predicted':>9} {'error':>6}")
    for r in rows:
        ratio = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
        reps = "/".join(f"{v:.0f}" for v in r["per_rep"])
        pred = "-" if r["predicted_ms"] is None else f"{r['predicted_ms']:.0f}"
        err = "-" if r["predicted_error"] is None else f"{100 * r['predicted_error']:+.0f}%"
        print(f"{r['model']:<5} {r['system']:<13} {r['samples_per_s']:>9.0f} {reps:>13} "
              f"{ratio(r['vs_ddp_gloo']):>8} {ratio(r['vs_best_ddp']):>11} "
              f"{mb(r['nic_bytes_per_step']):>11} {mb(r['engine_bytes_per_step']):>14} "
              f"{r['accuracy']:>8.4f} {r['worker_cpu_s_per_step']:>10.3f} "
              f"{r['step_ms']:>7.0f} {pred:>9} {err:>6}")
    if any(r["predicted_ms"] is not None for r in rows):
        print("predicted: the planner's step (bc-auto: the scheduler's plan; the other ByteComp "
              "rows: bytecomp-plan --evaluate of their strategy with the profile and links that "
              "plan used)")
    for r in rows:
        if r["plan"]:
            print(f"{r['model']} {r['system']}: {r['plan']}")
    if any(r["probe"] for r in rows):
        print("\nper training step, all machines together (whole run, start-up included; "
              "mean of repetitions):")
        print(f"{'model':<5} {'system':<13} {'CPU s worker':>12} {'CPU s server':>12} "
              f"{'tbf drops':>9} {'tbf overlimits':>14} {'TCP retrans':>11} {'TCP segs':>9}")
        for r in rows:
            if not r["probe"]:
                continue
            mean = lambda f: statistics.mean(f(p) or 0 for p in r["probe"])  # noqa: E731
            print(f"{r['model']:<5} {r['system']:<13} "
                  f"{mean(lambda p: p['cpu_s_per_step'].get('worker')):>12.3f} "
                  f"{mean(lambda p: p['cpu_s_per_step'].get('server')):>12.3f} "
                  f"{mean(lambda p: p['tbf_drops_per_step']):>9.1f} "
                  f"{mean(lambda p: p['tbf_overlimits_per_step']):>14.1f} "
                  f"{mean(lambda p: p['tcp_retrans_per_step']):>11.1f} "
                  f"{mean(lambda p: p['tcp_out_segs_per_step']):>9.0f}")


def main(argv=None):
    args = parse_args(argv)
    use_netns, why = (False, "--loopback") if args.loopback else namespaces_usable()
    if use_netns:
        where = (f"{args.workers} emulated machines (network namespaces), {args.rate} tbf links "
                 "each way, a ByteComp server beside each worker")
    else:
        where = (f"LOOPBACK ({why}: no network namespaces): {args.workers} workers and servers "
                 "on this host without link limits, so communication is cheap and compression "
                 "shows little")
    key = ("ByteComp with its cluster key (data messages sealed)" if args.cluster_key else
           "ByteComp in plain TCP as gloo unless a system says +key or +curve (no cluster key; "
           "--cluster-key for all)")
    where += f"; {key}"
    print(f"ddp_bench: {where}; {args.epochs} epochs, batch {args.batch_size}/worker, "
          f"{args.reps} repetition(s) in alternating order", flush=True)
    work = tempfile.mkdtemp(prefix="bytecomp-ddp-bench-")
    if args.costs is None and any(s.startswith("bc-") for s in args.systems):
        args.costs = calibrate_costs(args.bin_dir, NOMINAL, os.path.join(work, "costs.pbtxt"),
                                     args.workers, use_netns)
    runs = []
    for rep in range(args.reps):
        for model in args.models:
            order = args.systems if rep % 2 == 0 else list(reversed(args.systems))
            for system in order:
                result = run_one(system, model, args, work, use_netns)
                result.update(model=model, rep=rep)
                runs.append(result)
                print(f"  rep {rep + 1} {model:<4} {system:<13} "
                      f"{result['samples_per_s']:7.0f} samples/s  acc "
                      f"{result['final_accuracy']:.4f}  NIC {mb(result['nic_bytes_per_step'])} "
                      f"MB/step  ({result['wall_s']:.0f} s)", flush=True)
    predicted = {model: predict_fixed(runs, model, args, work) for model in args.models}
    rows = summarize(runs, args.systems, args.models, predicted)
    print_table(rows, f"digits, W={args.workers}, {where}")
    print(f"logs in {work}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "namespaces": use_netns, "runs": runs, "rows": rows},
                      f, indent=1)
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
