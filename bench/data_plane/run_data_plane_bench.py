#!/usr/bin/env python3
"""Data-plane benchmark (issue 2): measures the raw ZeroMQ loopback throughput R, then runs
bytecomp-bench on local clusters and prints each configuration's median round time against the
reference round 2 x W x model bytes / R (a round moves every worker's model to the servers and
back). Results also go to a JSON file (--out).

The price of the cluster key (issue 13): the same jobs again with a key (CURVE on every
socket), each run right after its unkeyed twin, printed as the ratio of the keyed median round
time to the unkeyed one, with the raw ZeroMQ reference keyed and unkeyed beside them (one CURVE
stream's throughput). --key-connections C adds keyed and unkeyed rows with C connections per
server (and C ZeroMQ I/O threads per process, so that the CURVE streams run on several cores).

  python3 bench/data_plane/run_data_plane_bench.py [--quick] [--out bench-data-plane.json]
      [--configs 0,1] [--no-key-rows] [--key-connections 4]
  python3 bench/data_plane/run_data_plane_bench.py --timeline-overhead [--quick] [--pairs N]
      [--with-metrics] [--configs 0]

--timeline-overhead: the cost of the runtime timeline (BYTECOMP_TIMELINE) instead: each
configuration runs with the timeline off and on (--pairs times, which goes first alternating),
and the medians of the runs' median round times are compared; every node writes its timeline to
a temporary directory; --with-metrics: the 'on' runs also count and serve Prometheus metrics
(every node). --configs picks CONFIGS by index (0: W=2 S=1 flat:100MB).

  python3 bench/data_plane/run_data_plane_bench.py --protection-price [--quick] [--pairs N]
      [--configs 0,1]

--protection-price: each configuration without a key and with one under each data_protection
(curve: the data sockets on CURVE; encrypt and authenticate: sealed messages on plain TCP),
--pairs runs of each in rotating order; medians and their ratios to the unkeyed median.

  python3 bench/data_plane/run_data_plane_bench.py --failover-overhead [--quick] [--pairs N]
      [--configs 0]

--failover-overhead: the cost of server failover in the data plane (on by default: each worker
keeps a copy of its last push of every uncompressed partition, for a replacement server): each
configuration runs with it off (--server_replacement_timeout_ms=-1) and on, as the timeline's.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "test", "harness"))
import cluster  # noqa: E402

# --with-metrics: every node counts its Prometheus metrics and serves them on a free loopback port.
METRICS_ENV = {"BYTECOMP_SCHEDULER_HTTP": "0", "BYTECOMP_SERVER_HTTP": "0",
               "BYTECOMP_METRICS_ADDRESS": "0"}

CONFIGS = [  # (W, S, model, rounds)
    (2, 1, "flat:100MB", 20),
    (4, 2, "flat:100MB", 20),
    (8, 2, "flat:100MB", 10),
    (2, 1, "resnet50", 20),
]


def reference(quick, key_file=None):
    cmd = [cluster.binary("bytecomp-zmq-reference"), "--repeats", "3" if quick else "7"]
    if key_file:
        cmd.append(f"--key_file={key_file}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def make_key(directory):
    path = os.path.join(directory, "cluster.key")
    subprocess.run([cluster.binary("bytecomp-keygen"), path], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    return path


def run_bench(workers, servers, model, rounds, key_file=None, connections=None, extra_env=None,
              extra_scheduler_args=()):
    """One bytecomp-bench job; its worker 0's JSON line. key_file: keyed (CURVE);
    connections: connections per server and ZeroMQ I/O threads per process; extra_env: more
    environment for every node."""
    cmd = [cluster.binary("bytecomp-bench"), f"--preset={model}", f"--rounds={rounds}",
           "--warmup=2", "--check=true"]
    env = dict(extra_env or {})
    if key_file:
        env["BYTECOMP_KEY_FILE"] = key_file
    scheduler_args = list(extra_scheduler_args)
    if connections:
        scheduler_args.append(f"--connections_per_server={connections}")
        env["BYTECOMP_IO_THREADS"] = str(connections)
    with cluster.Cluster(workers=workers, servers=servers, worker_cmd=cmd,
                         heartbeat_timeout_ms=10000, extra_env=env,
                         scheduler_args=scheduler_args) as c:
        codes = c.wait_workers(timeout=900)
        if codes != [0] * workers:
            raise RuntimeError(f"bench failed: {codes}\n{c.dump()}")
        for line in reversed(c.workers[0].output().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    raise RuntimeError("no JSON line from worker 0")


def selected_configs(args):
    return CONFIGS if not args.configs else [CONFIGS[int(i)] for i in args.configs.split(",")]


def off_on_overhead(args, name, run, note=""):
    """Median round time of each configuration with a feature off and on: run(config, on)
    returns one job's median round time (and may count what it likes). args.pairs pairs per
    configuration, which goes first alternating, so that a warm-up or a drift in the machine's
    load does not favour one side. Prints the table and writes args.out under `name`; returns
    the rows, for the caller to add to."""
    rows = []
    print(f"{'W':>2} {'S':>2} {'model':<12} {'off ms':>9} {'on ms':>9} {'on/off':>7}  "
          f"(medians over pairs{note})")
    for config in selected_configs(args):
        workers, servers, model, rounds = config
        if args.quick:
            rounds = max(3, rounds // 4)
        config = (workers, servers, model, rounds)
        off, on = [], []
        for pair in range(args.pairs):
            for feature_on in ((False, True) if pair % 2 == 0 else (True, False)):
                (on if feature_on else off).append(run(config, feature_on))
        row = {"W": workers, "S": servers, "model": model, "rounds": rounds, "off_ms": off,
               "on_ms": on, "off_median_ms": statistics.median(off),
               "on_median_ms": statistics.median(on)}
        row["ratio"] = row["on_median_ms"] / row["off_median_ms"]
        rows.append(row)
        print(f"{workers:>2} {servers:>2} {model:<12} {row['off_median_ms']:>9.2f} "
              f"{row['on_median_ms']:>9.2f} {row['ratio']:>7.3f}", flush=True)
    with open(args.out, "w") as f:
        json.dump({name: rows}, f, indent=1)
    print(f"\nwritten {args.out}")
    return rows


def failover_overhead(args):
    """Median round time with server failover off and on, same configurations, alternating."""
    def run(config, on):
        flags = [] if on else ["--server_replacement_timeout_ms=-1"]
        return run_bench(*config, extra_scheduler_args=flags)["median_round_ms"]
    off_on_overhead(args, "failover_overhead", run)


def timeline_overhead(args):
    """Median round time with the timeline off and on, same configurations, alternating; the
    timeline events written and dropped in all."""
    counts = {"events": 0, "dropped": 0}

    def run(config, on):
        if not on:
            return run_bench(*config)["median_round_ms"]
        tl = tempfile.mkdtemp(prefix="bytecomp-timeline-bench-")
        try:
            env = {"BYTECOMP_TIMELINE": tl}
            if args.with_metrics:
                env.update(METRICS_ENV)
            ms = run_bench(*config, extra_env=env)["median_round_ms"]
            for name in os.listdir(tl):
                trace = json.load(open(os.path.join(tl, name)))
                counts["events"] += len(trace["traceEvents"])
                counts["dropped"] += trace["otherData"]["dropped_events"]
            return ms
        finally:
            shutil.rmtree(tl, ignore_errors=True)
    off_on_overhead(args, "timeline_overhead", run)
    print(f"timeline events written / dropped in all 'on' runs: {counts['events']} / "
          f"{counts['dropped']}")


PROTECTIONS = ("plain", "curve", "encrypt", "authenticate")


def protection_price(args):
    """Median round time of each configuration without a key and with one under each
    data_protection (curve: CURVE data sockets; encrypt, authenticate: sealed messages),
    args.pairs runs of each, the order rotated every run so that no setting always goes
    first; ratios against the unkeyed median of the same run."""
    key_dir = tempfile.mkdtemp(prefix="bytecomp-bench-key-")
    key_file = make_key(key_dir)
    rows = []
    print(f"{'W':>2} {'S':>2} {'model':<12} " + " ".join(f"{p + ' ms':>15}" for p in PROTECTIONS)
          + "  " + " ".join(f"{p + '/plain':>18}" for p in PROTECTIONS[1:])
          + f"  (medians of {args.pairs} runs each; loopback: the CPU is the limit)")
    for workers, servers, model, rounds in selected_configs(args):
        if args.rounds:
            rounds = args.rounds
        elif args.quick:
            rounds = max(3, rounds // 4)
        times = {p: [] for p in PROTECTIONS}
        for run in range(args.pairs):
            order = PROTECTIONS[run % 4:] + PROTECTIONS[:run % 4]
            for protection in order:
                keyed = protection != "plain"
                env = {"BYTECOMP_DATA_PROTECTION": protection} if keyed else {}
                result = run_bench(workers, servers, model, rounds,
                                   key_file if keyed else None, extra_env=env)
                times[protection].append(result["median_round_ms"])
                print(f"  ... {protection}: {result['median_round_ms']:.1f} ms", flush=True)
        medians = {p: statistics.median(t) for p, t in times.items()}
        row = {"W": workers, "S": servers, "model": model, "rounds": rounds, "round_ms": times,
               "median_round_ms": medians,
               "ratio_to_plain": {p: medians[p] / medians["plain"] for p in PROTECTIONS[1:]}}
        rows.append(row)
        print(f"{workers:>2} {servers:>2} {model:<12} "
              + " ".join(f"{medians[p]:>15.1f}" for p in PROTECTIONS) + "  "
              + " ".join(f"{row['ratio_to_plain'][p]:>18.2f}" for p in PROTECTIONS[1:]),
              flush=True)
    shutil.rmtree(key_dir, ignore_errors=True)
    with open(args.out, "w") as f:
        json.dump({"data_protection_price": rows, "load_average": os.getloadavg()}, f, indent=1)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}; written {args.out}")


def print_header(header):
    print(header)
    print("-" * len(header))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    parser.add_argument("--out", default="bench-data-plane.json")
    parser.add_argument("--configs", help="comma-separated indices into CONFIGS (default all)")
    parser.add_argument("--rounds", type=int, help="timed rounds per job (default per config)")
    parser.add_argument("--no-key-rows", action="store_true",
                        help="skip the keyed twins (the price of the cluster key)")
    parser.add_argument("--key-connections", type=int, default=0, metavar="C",
                        help="also run keyed and unkeyed twins with C connections per server "
                             "and C ZeroMQ I/O threads per process")
    parser.add_argument("--timeline-overhead", action="store_true",
                        help="measure the runtime timeline's cost instead (see above)")
    parser.add_argument("--failover-overhead", action="store_true",
                        help="measure server failover's cost instead (see above)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="--timeline-overhead, --failover-overhead: off/on runs per "
                             "configuration")
    parser.add_argument("--protection-price", action="store_true",
                        help="each configuration without a key and with one under each "
                             "data_protection (curve, encrypt, authenticate), --pairs runs each")
    parser.add_argument("--with-metrics", action="store_true",
                        help="--timeline-overhead: the 'on' runs also count and serve metrics")
    args = parser.parse_args()
    if args.timeline_overhead:
        return timeline_overhead(args)
    if args.failover_overhead:
        return failover_overhead(args)
    if args.protection_price:
        return protection_price(args)
    configs = selected_configs(args)
    key_dir = tempfile.mkdtemp(prefix="bytecomp-bench-key-")
    key_file = None if args.no_key_rows else make_key(key_dir)
    load_before = os.getloadavg()
    ref_before = reference(args.quick)
    rows, key_rows = [], []
    for workers, servers, model, rounds in configs:
        if args.rounds:
            rounds = args.rounds
        elif args.quick:
            rounds = max(3, rounds // 4)
        print(f"running W={workers} S={servers} {model} x {rounds} rounds ...", flush=True)
        rows.append(run_bench(workers, servers, model, rounds))
        if key_file is None:
            continue
        # The keyed twin right after its reference, so both see the same machine.
        for connections in [None] + ([args.key_connections] if args.key_connections else []):
            plain = rows[-1] if connections is None else run_bench(
                workers, servers, model, rounds, connections=connections)
            print(f"  ... keyed{'' if connections is None else f', {connections} connections'}",
                  flush=True)
            keyed = run_bench(workers, servers, model, rounds, key_file, connections)
            key_rows.append({"W": workers, "S": servers, "model": model,
                             "connections": connections or 2,
                             "plain_round_ms": plain["median_round_ms"],
                             "keyed_round_ms": keyed["median_round_ms"],
                             "keyed_goodput_gbytes_per_s": keyed["goodput_gbytes_per_s"],
                             "ratio": keyed["median_round_ms"] / plain["median_round_ms"]})
    ref_after = reference(args.quick)
    ref_keyed = reference(args.quick, key_file) if key_file else None
    load_after = os.getloadavg()
    r = sorted([ref_before["median_gbytes_per_s"], ref_after["median_gbytes_per_s"]])[1]
    print(f"\nreference: raw ZeroMQ loopback, 4 MiB messages: R = {r:.2f} GB/s "
          f"(before {ref_before['median_gbytes_per_s']:.2f}, after {ref_after['median_gbytes_per_s']:.2f})")
    print_header(f"{'W':>2} {'S':>2} {'model':<12} {'tensors':>7} {'MB/worker':>9} "
                 f"{'median ms':>9} {'ref ms':>8} {'ratio':>6} {'goodput GB/s':>12}")
    for row in rows:
        ref_ms = 2 * row["W"] * row["bytes_per_round"] / (r * 1e9) * 1e3
        row["reference_round_ms"] = ref_ms
        row["ratio_to_reference"] = row["median_round_ms"] / ref_ms
        print(f"{row['W']:>2} {row['S']:>2} {row['model']:<12} {row['tensors']:>7} "
              f"{row['bytes_per_round'] / 1e6:>9.1f} {row['median_round_ms']:>9.2f} "
              f"{ref_ms:>8.2f} {row['ratio_to_reference']:>6.2f} {row['goodput_gbytes_per_s']:>12.3f}")
    if key_rows:
        print(f"\nthe price of the cluster key (CURVE on every socket), loopback; raw ZeroMQ, one "
              f"stream: {ref_keyed['median_gbytes_per_s']:.2f} GB/s keyed against {r:.2f} plain")
        print_header(f"{'W':>2} {'S':>2} {'model':<12} {'conns':>5} {'plain ms':>9} "
                     f"{'keyed ms':>9} {'keyed/plain':>11} {'keyed GB/s':>10}")
        for k in key_rows:
            print(f"{k['W']:>2} {k['S']:>2} {k['model']:<12} {k['connections']:>5} "
                  f"{k['plain_round_ms']:>9.2f} {k['keyed_round_ms']:>9.2f} {k['ratio']:>11.2f} "
                  f"{k['keyed_goodput_gbytes_per_s']:>10.3f}")
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f} "
          f"on {os.cpu_count()} cores")
    with open(args.out, "w") as f:
        json.dump({"reference_gbytes_per_s": r, "rows": rows, "key_rows": key_rows,
                   "reference_keyed_gbytes_per_s":
                       ref_keyed["median_gbytes_per_s"] if ref_keyed else None,
                   "load_average": [load_before[0], load_after[0]]}, f, indent=1)
    subprocess.run(["rm", "-rf", key_dir], check=False)
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
