#!/usr/bin/env python3
"""The planner's predictions against measurements on an emulated cluster (issue 5): scheduler,
servers and 4 workers each in a network namespace joined by tbf-limited links
(deploy/netns_cluster.sh), at 1 and 10 Gbit/s, for no compression, compress-everything (fp16
both ways) and --strategy=auto (the scheduler profiles the first rounds, plans, and switches
every node; only rounds after the switch are timed). The model is resnet50's tensors, pushed
all at once per round by bytecomp-bench (no compute). The codec costs are calibrated on this
host first (bytecomp-plan --calibrate), and so is the CPU that moving messages costs on the
emulated links (scheduler/planner/tools/calibrate_transport.py, with jobs unlike the measured
ones: 500 small tensors, one 64 MiB tensor); the cluster description says that every process
shares this host's cores (host_cores). Needs root. Prints a table; writes JSON with --out.
--colocate runs BytePS's layout instead: a server beside each worker (4 servers, in the
workers' namespaces: netns_cluster.sh --colocate), planned with colocated_servers.

Every job runs with a fresh cluster key (bytecomp-run's default), as the calibration's do.

The price of the cluster key (issues 13, 32): at each rate, resnet50 uncompressed with the key
(data_protection encrypt, the default: sealed data messages; then curve: CURVE data sockets)
right after the same job without one (bytecomp-run --no-key), as ratios of median round times; with --key-connections C also both with C connections per server
and C ZeroMQ I/O threads per process (one CURVE stream runs on one I/O thread). --key-only runs
just these rows (no calibration, no planning).

  python3 bench/planner/emulated_cluster_bench.py [--rounds 5] [--colocate] [--out emulated.json]
      [--key-only] [--key-connections 4] [--rates 1gbit,10gbit] [--contention]

--contention also calibrates how this host's cores serve the job's workers and servers
(scheduler/planner/tools/calibrate_contention.py, keyed jobs as these) and predicts every row
with it too: none and everything by bytecomp-plan, auto by bytecomp-plan --evaluate of the
strategy the scheduler planned, with the profile and fitted links it planned with.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(REPO, "build", "bin")
sys.path.insert(0, os.path.join(REPO, "bench", "e2e"))
from ddp_bench import calibrate_contention, evaluate_strategy, with_contention  # noqa: E402
PLANNER = os.path.join(REPO, "scheduler", "planner")
WORKERS, SERVERS = 4, 1
COLOCATE = False  # --colocate: SERVERS = WORKERS, each beside its worker


def run(cmd, timeout):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def profile_without_gaps(path):
    """resnet50's tensors with ready gaps 0 and no forward time: bytecomp-bench pushes every
    tensor at the start of a round, and computes nothing."""
    text = open(os.path.join(PLANNER, "profiles", "resnet50.pbtxt")).read()
    text = re.sub(r"ready_gap_us: [\d.]+", "ready_gap_us: 0", text)
    text = re.sub(r"forward_us: [\d.]+", "forward_us: 0", text)
    open(path, "w").write(text)


def cluster_description(path, gbps, latency_us):
    layout = "beside the workers" if COLOCATE else "in its own namespace"
    open(path, "w").write(
        f"# emulated: {WORKERS} worker namespaces, {SERVERS} servers {layout}, tbf at {gbps} "
        f"Gbit/s, CPU only,\n# every process on this host's {os.cpu_count()} cores\n"
        f"machines: {WORKERS}\ngpus_per_machine: 0\nservers: {SERVERS}\n"
        f"colocated_servers: {'true' if COLOCATE else 'false'}\n"
        f"worker_link {{ bandwidth_gbps: {gbps} latency_us: {latency_us} }}\n"
        f"server_link {{ bandwidth_gbps: {gbps} latency_us: {latency_us} }}\ncpu_pool_threads: 2\n"
        f"host_cores: {os.cpu_count()}\n")


def plan(profile, cluster, costs, out):
    res = run([os.path.join(BIN, "bytecomp-plan"), f"--profile={profile}", f"--cluster={cluster}",
               f"--costs={costs}", f"--out={out}", "--table=false", "--all_codec=fp16"], 120)
    if res.returncode != 0:
        raise SystemExit(res.stdout + res.stderr)
    m = re.search(r"no compression ([\d.]+) ms \| compress-everything \(\w+\) ([\d.]+) ms \| "
                  r"planned ([\d.]+) ms", res.stdout)
    return {"none": float(m.group(1)), "everything": float(m.group(2)), "planned": float(m.group(3))}


def measure(rate, scheduler_args, rounds, warmup=1, keyed=True, io_threads=None,
            protection=None):
    """Runs bytecomp-bench on the emulated cluster; returns its JSON result and the output.
    keyed: bytecomp-run's fresh cluster key (else --no-key); io_threads: BYTECOMP_IO_THREADS;
    protection: BYTECOMP_DATA_PROTECTION (None: the default, encrypt)."""
    cmd = ["bash", os.path.join(REPO, "deploy", "netns_cluster.sh"), "run", "--workers",
           str(WORKERS), "--servers", str(SERVERS)] + (["--colocate"] if COLOCATE else []) + [
           "--rate", rate, "--prefix", "bcb-", "--bin-dir", BIN, "--timeout", "600"] + (
           [] if keyed else ["--no-key"]) + [
           "--scheduler-args=--heartbeat_timeout_ms=30000 " + scheduler_args,
           "--", os.path.join(BIN, "bytecomp-bench"), "--preset=resnet50",
           f"--rounds={rounds}", f"--warmup={warmup}", "--check=false"]
    env = dict(os.environ)
    if io_threads:
        env["BYTECOMP_IO_THREADS"] = str(io_threads)
    if protection:
        env["BYTECOMP_DATA_PROTECTION"] = protection
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    for line in res.stdout.splitlines():
        if "{" in line and '"bench":"bytecomp-bench"' in line:
            return json.loads(line[line.index("{"):]), res.stdout + res.stderr
    raise SystemExit(f"no result from {' '.join(cmd)}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def measure_auto(rate, cluster, costs, rounds, links_from, plan_out):
    """--strategy=auto: 2 profiled rounds, then the switch; the timed rounds come after it.
    Returns the measured ms, the scheduler's predicted ms without the measured forward time
    (bytecomp-bench times a round from its first push to its last pull; the refill of the
    tensors before it is the profile's forward time), the links the probes measured
    (bandwidth Gbit/s, latency us), the fraction of their bandwidth the scheduler's link fit
    kept (1: not fitted) and its summary."""
    result, output = measure(rate, f"--strategy=auto --plan_cluster={cluster} "
                             f"--plan_costs={costs} --profile_rounds=2 "
                             f"--plan_links={'file' if links_from == 'nominal' else 'measured'} "
                             f"--plan_out={plan_out}", rounds, warmup=6)
    m = re.search(r"--strategy=auto: (planned .*predicted iteration ([\d.]+) ms.*)", output)
    if m is None:
        raise SystemExit(f"the scheduler printed no plan:\n{output[-3000:]}")
    predicted = float(m.group(2))
    forward = re.search(r"measured forward ([\d.]+) ms", m.group(1))
    forward_ms = float(forward.group(1)) if forward is not None else 0.0
    predicted -= forward_ms
    links = re.search(r"worker_link and server_link ([\d.]+) Gbit/s, ([\d.]+) us each", output)
    fitted = re.search(r"links fitted: ([\d.]+) of their bandwidth", m.group(1))
    versions = result.get("strategy_versions", [0, 0])
    if versions[0] < 2:
        raise SystemExit(f"timed rounds ran under strategy versions {versions}: the switch came "
                         "after the warm-up; raise warmup")
    return (result["median_round_ms"], predicted,
            (float(links.group(1)), float(links.group(2))) if links else None,
            float(fitted.group(1)) if fitted else 1.0, m.group(1), forward_ms)


def key_rows(rates, rounds, extra_connections):
    """Keyed (the default data_protection, encrypt: sealed messages; and curve: CURVE data
    sockets) against unkeyed, uncompressed, at each rate (and with more connections), one
    right after the other."""
    rows = []
    for rate in rates:
        for connections in [None] + ([extra_connections] if extra_connections else []):
            args = f"--connections_per_server={connections}" if connections else ""
            ms = {}
            for setting in ("off", "encrypt", "curve"):
                print(f"{rate} key {setting}"
                      f"{'' if connections is None else f', {connections} connections'} ...",
                      flush=True)
                ms[setting] = measure(rate, args, rounds, keyed=setting != "off",
                                      io_threads=connections,
                                      protection=None if setting == "off" else setting
                                      )[0]["median_round_ms"]
            rows.append({"rate": rate, "connections": connections or 2, "plain_ms": ms["off"],
                         "keyed_ms": ms["encrypt"], "curve_ms": ms["curve"],
                         "ratio": ms["encrypt"] / ms["off"], "curve_ratio": ms["curve"] / ms["off"]})
    return rows


def print_key_rows(rows, rounds):
    print(f"\nthe price of the cluster key: resnet50 uncompressed, W={WORKERS} S={SERVERS}, "
          f"median of {rounds} rounds, one right after the other")
    print(f"{'link':<7} {'conns':>5} {'no key ms':>10} {'encrypt ms':>10} {'curve ms':>10} "
          f"{'encrypt/no key':>14} {'curve/no key':>12}")
    for r in rows:
        print(f"{r['rate']:<7} {r['connections']:>5} {r['plain_ms']:>10.1f} {r['keyed_ms']:>10.1f} "
              f"{r['curve_ms']:>10.1f} {r['ratio']:>14.2f} {r['curve_ratio']:>12.2f}")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="emulated-cluster-bench.json")
    parser.add_argument("--key-only", action="store_true",
                        help="only the rows of the cluster key's price")
    parser.add_argument("--key-connections", type=int, default=0, metavar="C",
                        help="key rows also with C connections per server and C I/O threads")
    parser.add_argument("--rates", default="1gbit,10gbit",
                        help="tbf rates, comma-separated (the plan rows and the key rows)")
    parser.add_argument("--links", choices=("measured", "nominal"), default="measured",
                        help="plan with the links the workers' probes measured (the scheduler's "
                        "default), or with the tbf rates and 50 us (--plan_links=file)")
    parser.add_argument("--colocate", action="store_true",
                        help="a server beside each worker (BytePS's layout), planned as such")
    parser.add_argument("--contention", action="store_true",
                        help="also calibrate the job's contention on this host's cores and "
                        "predict every row with it")
    args = parser.parse_args()
    global SERVERS, COLOCATE
    if args.colocate:
        SERVERS, COLOCATE = WORKERS, True
    if args.key_only:
        rows = key_rows(args.rates.split(","), args.rounds, args.key_connections)
        print_key_rows(rows, args.rounds)
        json.dump({"key_rows": rows, "load_average": os.getloadavg()}, open(args.out, "w"),
                  indent=1)
        print(f"written {args.out}")
        return 0
    work = tempfile.mkdtemp(prefix="bytecomp-emulated-")
    costs = os.path.join(work, "costs.pbtxt")
    res = run([os.path.join(BIN, "bytecomp-plan"), "--calibrate", f"--costs={costs}",
               f"--calibrate_template={os.path.join(PLANNER, 'costs', 'nominal.pbtxt')}"], 300)
    if res.returncode != 0:
        raise SystemExit(res.stdout + res.stderr)
    res = run([sys.executable, os.path.join(PLANNER, "tools", "calibrate_transport.py"),
               f"--costs={costs}", f"--out={costs}", f"--workers={WORKERS}", f"--bin-dir={BIN}",
               "--netns-rate=10gbit"], 600)
    if res.returncode != 0:
        raise SystemExit(res.stdout + res.stderr)
    print(res.stdout.splitlines()[0], flush=True)
    contention = None
    if args.contention:
        # Keyed jobs, as these run.
        contention, _ = calibrate_contention(WORKERS, SERVERS, COLOCATE, BIN, True,
                                             os.path.join(work, "contention.json"), keyed=True)
    profile = os.path.join(work, "profile.pbtxt")
    profile_without_gaps(profile)
    everything = os.path.join(work, "everything.pbtxt")
    open(everything, "w").write('tensors { name_pattern: "*" push_codec { name: "fp16" } '
                                'pull_codec { name: "fp16" } force: true }\n')
    rows = []
    for rate in args.rates.split(","):
        gbps = float(re.match(r"([\d.]+)gbit$", rate).group(1))
        cluster = os.path.join(work, f"cluster-{rate}.pbtxt")
        cluster_description(cluster, gbps, 50)
        # Auto first: the scheduler plans with the links its workers measured (or the file's,
        # --links nominal), fitted to its profiled rounds; the predictions for the other two
        # use the same links.
        print(f"{rate} auto ...", flush=True)
        plan_out = os.path.join(work, f"auto-{rate}.pbtxt")
        measured, auto_predicted, links, fit, summary, forward_ms = measure_auto(
            rate, cluster, costs, args.rounds, args.links, plan_out)
        print(f"  scheduler: {summary}")
        auto_row = {"rate": rate, "strategy": "auto", "predicted_ms": auto_predicted,
                    "measured_ms": measured, "error": (auto_predicted - measured) / measured,
                    "scheduler": summary}
        measured_cluster = os.path.join(work, f"cluster-{rate}-measured.pbtxt")
        fitted_cluster = os.path.join(work, f"cluster-{rate}-fitted.pbtxt")
        if args.links == "nominal" or links is None:
            print("  the links planned with are the nominal ones (tbf rate, 50 us); fitted to the "
                  f"profiled rounds: {fit:.3f} of that")
            links = (gbps, 50)
        else:
            print(f"  links measured by the probes: {links[0]:.3f} Gbit/s, {links[1]:.1f} us; "
                  f"fitted to the profiled rounds: {fit:.3f} of that")
        cluster_description(measured_cluster, links[0], links[1])
        cluster_description(fitted_cluster, links[0] * fit, links[1])
        # As the scheduler plans: the links fitted to its profiled (uncompressed) rounds; and,
        # for comparison, the probes' links alone.
        predicted = plan(profile, fitted_cluster, costs, os.path.join(work, f"planned-{rate}.pbtxt"))
        unfitted_plan = plan(profile, measured_cluster, costs,
                             os.path.join(work, f"planned-{rate}-unfitted.pbtxt"))
        auto_row["predicted_unfitted_ms"] = None  # the scheduler's plan is for fitted links
        contended = {}
        if contention is not None:
            contended = plan(profile, with_contention(fitted_cluster, contention, os.path.join(
                work, f"cluster-{rate}-fitted-contention.pbtxt")), costs,
                os.path.join(work, f"planned-{rate}-contention.pbtxt"))
            # The scheduler's plan, with the profile and links it planned with (the measured
            # forward time left out, as in its prediction).
            inputs = (f"{plan_out}.profile.pbtxt", f"{plan_out}.cluster.pbtxt")
            auto_row["predicted_evaluated_ms"] = evaluate_strategy(BIN, *inputs, costs,
                                                                  plan_out) - forward_ms
            auto_row["predicted_contended_ms"] = evaluate_strategy(
                BIN, inputs[0], with_contention(inputs[1], contention,
                                                f"{plan_out}.cluster-contention.pbtxt"),
                costs, plan_out) - forward_ms
        for name, scheduler_args in (("none", ""), ("everything", f"--strategy={everything}")):
            print(f"{rate} {name} ...", flush=True)
            measured = measure(rate, scheduler_args, args.rounds)[0]["median_round_ms"]
            rows.append({"rate": rate, "strategy": name, "predicted_ms": predicted[name],
                         "predicted_unfitted_ms": unfitted_plan[name], "measured_ms": measured,
                         "error": (predicted[name] - measured) / measured,
                         "predicted_contended_ms": contended.get(name)})
        rows.append(auto_row)
    print(f"\nresnet50, W={WORKERS} S={SERVERS}{' (colocated)' if COLOCATE else ''}, emulated "
          f"links (netns + tbf), median of {args.rounds} rounds")
    print("predicted: with the links fitted to the profiled rounds (none ran in them); "
          "unfitted: with the probes' links")
    print(f"{'link':<7} {'strategy':<11} {'predicted ms':>12} {'measured ms':>12} {'error':>7} "
          f"{'unfitted ms':>12} {'error':>7}")
    for r in rows:
        unfitted = ""
        if r["predicted_unfitted_ms"] is not None:
            error = (r["predicted_unfitted_ms"] - r["measured_ms"]) / r["measured_ms"]
            unfitted = f"{r['predicted_unfitted_ms']:>12.1f} {100 * error:>+6.1f}%"
        print(f"{r['rate']:<7} {r['strategy']:<11} {r['predicted_ms']:>12.1f} "
              f"{r['measured_ms']:>12.1f} {100 * r['error']:>+6.1f}% {unfitted}")
    if contention is not None:
        print("\npredicted with the calibrated contention (" +
              ", ".join(f"{k} {v:.3f}" for k, v in contention.items()) +
              "); auto: bytecomp-plan --evaluate of the scheduler's plan, without and with it")
        print(f"{'link':<7} {'strategy':<11} {'measured ms':>12} {'without ms':>11} {'error':>7} "
              f"{'with ms':>9} {'error':>7}")
        for r in rows:
            without = r.get("predicted_evaluated_ms", r["predicted_ms"])
            with_it = r["predicted_contended_ms"]
            print(f"{r['rate']:<7} {r['strategy']:<11} {r['measured_ms']:>12.1f} {without:>11.1f} "
                  f"{100 * (without - r['measured_ms']) / r['measured_ms']:>+6.1f}% "
                  f"{with_it:>9.1f} {100 * (with_it - r['measured_ms']) / r['measured_ms']:>+6.1f}%")
    keyed = key_rows(args.rates.split(","), args.rounds, args.key_connections)
    print_key_rows(keyed, args.rounds)
    json.dump({"rows": rows, "key_rows": keyed, "load_average": os.getloadavg()},
              open(args.out, "w"), indent=1)
    print(f"written {args.out}")


if __name__ == "__main__":
    sys.exit(main())
