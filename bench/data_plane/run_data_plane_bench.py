#!/usr/bin/env python3
"""Data-plane benchmark (issue 2): measures the raw ZeroMQ loopback throughput R, then runs
bytecomp-bench on local clusters and prints each configuration's median round time against the
reference round 2 x W x model bytes / R (a round moves every worker's model to the servers and
back). Results also go to a JSON file (--out).

  python3 bench/data_plane/run_data_plane_bench.py [--quick] [--out bench-data-plane.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "test", "harness"))
import cluster  # noqa: E402

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


def run_bench(workers, servers, model, rounds):
    cmd = [cluster.binary("bytecomp-bench"), f"--preset={model}", f"--rounds={rounds}",
           "--warmup=2", "--check=true"]
    with cluster.Cluster(workers=workers, servers=servers, worker_cmd=cmd,
                         heartbeat_timeout_ms=10000) as c:
        codes = c.wait_workers(timeout=900)
        if codes != [0] * workers:
            raise RuntimeError(f"bench failed: {codes}\n{c.dump()}")
        for line in reversed(c.workers[0].output().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    raise RuntimeError("no JSON line from worker 0")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    parser.add_argument("--out", default="bench-data-plane.json")
    args = parser.parse_args()
    ref_before = reference(args.quick)
    rows = []
    for workers, servers, model, rounds in CONFIGS:
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
