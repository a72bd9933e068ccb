#!/usr/bin/env python3
"""Data-plane benchmark (issue 2): measures the raw ZeroMQ loopback throughput R, then runs
bytecomp-bench on local clusters and prints each configuration's median round time against the
reference round 2 x W x model bytes / R (a round moves every worker's model to the servers and
back). Results also go to a JSON file (--out).

  python3 bench/data_plane/run_data_plane_bench.py [--quick] [--out bench-data-plane.json]
  python3 bench/data_plane/run_data_plane_bench.py --timeline-overhead [--quick] [--pairs N]
      [--with-metrics] [--config I ...]

--timeline-overhead: the cost of the runtime timeline (BYTECOMP_TIMELINE) instead: each
configuration runs with the timeline off and on (--pairs times, which goes first alternating),
and the medians of the runs' median round times are compared; every node writes its timeline to
a temporary directory; --with-metrics: the 'on' runs also count and serve Prometheus metrics
(every node). --config I (repeatable) runs only CONFIGS[I] (0: W=2 S=1 flat:100MB).
"""
import shutil
import statistics
import tempfile
import argparse
import json
import os
import sys

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


def reference(quick):
    out = cluster.subprocess.run(
        [cluster.binary("bytecomp-zmq-reference"), "--repeats", "3" if quick else "7"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_bench(workers, servers, model, rounds, extra_env=None):
    cmd = [cluster.binary("bytecomp-bench"), f"--preset={model}", f"--rounds={rounds}",
           "--warmup=2", "--check=true"]
    with cluster.Cluster(workers=workers, servers=servers, worker_cmd=cmd,
                         heartbeat_timeout_ms=10000, extra_env=extra_env) as c:
        codes = c.wait_workers(timeout=900)
        if codes != [0] * workers:
            raise RuntimeError(f"bench failed: {codes}\n{c.dump()}")
        for line in reversed(c.workers[0].output().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    raise RuntimeError("no JSON line from worker 0")


def selected_configs(args):
    return [CONFIGS[i] for i in args.config] if args.config else CONFIGS


def timeline_overhead(args):
    """Median round time with the timeline off and on, same configurations, alternating."""
    rows = []
    print(f"{'W':>2} {'S':>2} {'model':<12} {'off ms':>9} {'on ms':>9} {'on/off':>7}  "
          "(medians over pairs; events written / dropped)")
    for workers, servers, model, rounds in selected_configs(args):
        if args.quick:
            rounds = max(3, rounds // 4)
        off, on, events, dropped = [], [], 0, 0
        for pair in range(args.pairs):
            # Alternating which goes first, so that a warm-up or a drift in the machine's load
            # does not favour one side.
            for timeline_on in ((False, True) if pair % 2 == 0 else (True, False)):
                if not timeline_on:
                    off.append(run_bench(workers, servers, model, rounds)["median_round_ms"])
                    continue
                tl = tempfile.mkdtemp(prefix="bytecomp-timeline-bench-")
                try:
                    env = {"BYTECOMP_TIMELINE": tl}
                    if args.with_metrics:
                        env.update(METRICS_ENV)
                    on.append(run_bench(workers, servers, model, rounds,
                                        extra_env=env)["median_round_ms"])
                    for name in os.listdir(tl):
                        trace = json.load(open(os.path.join(tl, name)))
                        events += len(trace["traceEvents"])
                        dropped += trace["otherData"]["dropped_events"]
                finally:
                    shutil.rmtree(tl, ignore_errors=True)
        row = {"W": workers, "S": servers, "model": model, "rounds": rounds,
               "off_ms": off, "on_ms": on, "off_median_ms": statistics.median(off),
               "on_median_ms": statistics.median(on), "events": events, "dropped": dropped}
        row["ratio"] = row["on_median_ms"] / row["off_median_ms"]
        rows.append(row)
        print(f"{workers:>2} {servers:>2} {model:<12} {row['off_median_ms']:>9.2f} "
              f"{row['on_median_ms']:>9.2f} {row['ratio']:>7.3f}  ({events} / {dropped})",
              flush=True)
    with open(args.out, "w") as f:
        json.dump({"timeline_overhead": rows}, f, indent=1)
    print(f"\nwritten {args.out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    parser.add_argument("--out", default="bench-data-plane.json")
    parser.add_argument("--timeline-overhead", action="store_true",
                        help="measure the runtime timeline's cost instead (see above)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="--timeline-overhead: off/on runs per configuration")
    parser.add_argument("--with-metrics", action="store_true",
                        help="--timeline-overhead: the 'on' runs also count and serve metrics")
    parser.add_argument("--config", type=int, action="append", choices=range(len(CONFIGS)),
                        help="run only CONFIGS[I] (repeatable); all by default")
    args = parser.parse_args()
    if args.timeline_overhead:
        return timeline_overhead(args)
    ref_before = reference(args.quick)
    rows = []
    for workers, servers, model, rounds in selected_configs(args):
        if args.quick:
            rounds = max(3, rounds // 4)
        print(f"running W={workers} S={servers} {model} x {rounds} rounds ...", flush=True)
        rows.append(run_bench(workers, servers, model, rounds))
    ref_after = reference(args.quick)
    r = sorted([ref_before["median_gbytes_per_s"], ref_after["median_gbytes_per_s"]])[1]
    print(f"\nreference: raw ZeroMQ loopback, 4 MiB messages: R = {r:.2f} GB/s "
          f"(before {ref_before['median_gbytes_per_s']:.2f}, after {ref_after['median_gbytes_per_s']:.2f})")
    header = (f"{'W':>2} {'S':>2} {'model':<12} {'tensors':>7} {'MB/worker':>9} "
              f"{'median ms':>9} {'ref ms':>8} {'ratio':>6} {'goodput GB/s':>12}")
    print(header)
    print("-" * len(header))
    for row in rows:
        ref_ms = 2 * row["W"] * row["bytes_per_round"] / (r * 1e9) * 1e3
        row["reference_round_ms"] = ref_ms
        row["ratio_to_reference"] = row["median_round_ms"] / ref_ms
        print(f"{row['W']:>2} {row['S']:>2} {row['model']:<12} {row['tensors']:>7} "
              f"{row['bytes_per_round'] / 1e6:>9.1f} {row['median_round_ms']:>9.2f} "
              f"{ref_ms:>8.2f} {row['ratio_to_reference']:>6.2f} {row['goodput_gbytes_per_s']:>12.3f}")
    with open(args.out, "w") as f:
        json.dump({"reference_gbytes_per_s": r, "rows": rows}, f, indent=1)
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
