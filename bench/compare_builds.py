#!/usr/bin/env python3
"""Two builds side by side on this machine, alternating which goes first, so that the machine's
load drifts over both alike: the codec benchmark (bytecomp-codec-bench: encode and decode GB/s
against memcpy measured in the same process) and the data plane (bytecomp-bench on a local
cluster: median round time against the raw ZeroMQ loopback reference measured right before),
and with --planner CLUSTER the planner (planner_bench: each shipped profile's plan CPU time, and
its simulated events, which do not depend on the load). Prints, per row, each build's median
and after/before. For a change that must not cost speed (a restructuring): ratios within the
spread between repetitions are noise.

  python3 bench/compare_builds.py --before /path/to/old/build/bin --after build/bin \\
      [--reps 3] [--codecs topk,onebit,fp16,dgc] [--size N] [--codec-args=--params=ratio=0.01]
      [--configs 0,1] [--planner 8x1gpu-10g] [--out compare.json]

The codec rows come in pairs: against memcpy (the figure to compare) and in GB/s (which drifts
with the machine's load). --configs= (empty) leaves the data plane out.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "data_plane"))
import run_data_plane_bench as data_plane_bench  # noqa: E402

DATA_CONFIGS = [  # (W, S, model, rounds)
    (2, 1, "flat:100MB", 10),
    (4, 2, "flat:100MB", 10),
    (2, 1, "resnet50", 10),
]


def codec_bench(bin_dir, codecs, size, extra_args=()):
    out = subprocess.run([os.path.join(bin_dir, "bytecomp-codec-bench"), f"--codecs={codecs}",
                          f"--sizes={size}", "--reps=5", *extra_args], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(\w+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)\s+([\d.]+)%", line)
        if m:  # codec, enc GB/s, enc/memcpy %, dec GB/s, dec/memcpy %
            rows[m.group(1)] = {"enc_vs_memcpy": float(m.group(3)) / 100,
                                "dec_vs_memcpy": float(m.group(5)) / 100,
                                "enc_gbs": float(m.group(2)), "dec_gbs": float(m.group(4))}
    return rows


def planner_bench(bin_dir, cluster):
    """planner_bench's rows (5 plans each, the median): {model: (plan CPU ms, events)}."""
    out = subprocess.run([os.path.join(bin_dir, "planner_bench"), "--repeats=5",
                          f"--cluster={cluster}"], capture_output=True, text=True, timeout=900,
                         check=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()  # model tensors options | wall cpu published | sim plan/sim | sims events
        if len(f) > 12 and f[1].isdigit() and f[3] == "|":
            rows[f[0]] = (float(f[5]), int(f[12]))
    return rows


def data_plane(bin_dir, workers, servers, model, rounds):
    """Median round time over the reference round 2 x W x bytes / R (run_data_plane_bench's
    jobs and reference, on `bin_dir`'s binaries)."""
    os.environ["BYTECOMP_BIN_DIR"] = bin_dir
    gbps = data_plane_bench.reference(quick=True)["median_gbytes_per_s"]
    row = data_plane_bench.run_bench(workers, servers, model, rounds)
    ref_ms = 2 * workers * row["bytes_per_round"] / (gbps * 1e9) * 1e3
    return row["median_round_ms"] / ref_ms


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="bin/ of the reference build")
    p.add_argument("--after", required=True, help="bin/ of the build under test")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--codecs", default="fp16,topk,dgc,onebit,qsgd,randomk")
    p.add_argument("--size", type=int, default=4 * 1024 * 1024, help="floats per codec call")
    p.add_argument("--codec-args", default="",
                   help="more bytecomp-codec-bench arguments, space-separated "
                        "(e.g. --codec-args=--params=ratio=0.01)")
    p.add_argument("--configs", default="0,1,2", help="indices into DATA_CONFIGS")
    p.add_argument("--planner", default="",
                   help="a cluster of scheduler/planner/clusters: planner_bench rows on it")
    p.add_argument("--out", default="compare-builds.json")
    args = p.parse_args()
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    configs = [DATA_CONFIGS[int(i)] for i in args.configs.split(",") if i != ""]
    samples = {}  # (row, build) -> [value]

    def add(row, build, value):
        samples.setdefault((row, build), []).append(value)

    load_before = os.getloadavg()[0]
    for rep in range(args.reps):
        order = ("before", "after") if rep % 2 == 0 else ("after", "before")
        print(f"repetition {rep + 1}/{args.reps} ({order[0]} first)", flush=True)
        for build in order:
            for codec, r in codec_bench(builds[build], args.codecs, args.size,
                                        args.codec_args.split()).items():
                add(f"codec {codec} encode / memcpy", build, r["enc_vs_memcpy"])
                add(f"codec {codec} decode / memcpy", build, r["dec_vs_memcpy"])
                add(f"codec {codec} encode GB/s", build, r["enc_gbs"])
                add(f"codec {codec} decode GB/s", build, r["dec_gbs"])
        if args.planner:
            for build in order:
                for model, (cpu_ms, events) in planner_bench(builds[build], args.planner).items():
                    add(f"planner {model} plan CPU ms", build, cpu_ms)
                    add(f"planner {model} events", build, events)
        for w, s, model, rounds in configs:
            for build in order:
                add(f"data plane W={w} S={s} {model}: round / reference", build,
                    data_plane(builds[build], w, s, model, rounds))
    rows = sorted({row for row, _ in samples}, key=lambda r: (not r.startswith("codec"), r))
    print(f"\n{'row':<52} {'before':>8} {'after':>8} {'after/before':>12}  (medians of "
          f"{args.reps}; spread = max/min of a build's repetitions)")
    table = []
    for row in rows:
        if (row, "before") not in samples or (row, "after") not in samples:
            only = "before" if (row, "before") in samples else "after"
            value = statistics.median(samples[(row, only)])
            print(f"{row:<52} {value if only == 'before' else '-':>8} "
                  f"{value if only == 'after' else '-':>8}  (in one build only)")
            continue
        b = statistics.median(samples[(row, "before")])
        a = statistics.median(samples[(row, "after")])
        spread = max(max(v) / min(v) for v in (samples[(row, "before")], samples[(row, "after")])
                     if min(v) > 0)
        table.append({"row": row, "before": samples[(row, "before")],
                      "after": samples[(row, "after")], "ratio": a / b, "spread": spread})
        print(f"{row:<52} {b:>8.3f} {a:>8.3f} {a / b:>12.3f}  (spread {spread:.2f})")
    print("codec rows: higher is faster; data-plane and planner rows: lower is faster. "
          "Load average "
          f"{load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with open(args.out, "w") as f:
        json.dump({"builds": builds, "rows": table}, f, indent=1)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
