#!/usr/bin/env python3
"""What moving a message costs the CPU of a host that runs a whole ByteComp job (the cost
table's transfer_cpu points, which the planner charges for every push and pull when the
cluster description sets host_cores).

It runs real jobs on this host's loopback (deploy/bytecomp-run: a scheduler, one server and W
bytecomp-bench workers, uncompressed) and reads their CPU time (user and system, every
process) from the operating system:
  - many small tensors (1 KiB) give the CPU per message,
  - one large tensor in 4 MiB partitions gives the CPU per byte, after the message part and
    the server's summing (which the planner charges on its own, at the table's summing speed).
Each is run with two round counts, so that start-up and shutdown cancel out; the small
tensors' difference, the noisier one, is the median of three such pairs.
What it measures is the engine as it runs, both ends together: ZeroMQ, the kernel's TCP, the
engine's threads and copies. With --netns-rate the jobs run on an emulated cluster
(deploy/netns_cluster.sh, as root) instead, whose veth pairs, bridge and tbf queues cost the
host more than loopback does; the rate should not limit the small-tensor job.

  calibrate_transport.py --costs IN.pbtxt --out OUT.pbtxt [--workers 4] [--bin-dir build/bin]
                         [--netns-rate 10gbit] [--no-key]

The jobs run with a cluster key (sealed data messages), as bytecomp-run starts them; --no-key
measures plain TCP, for jobs that run without one.

OUT is IN with its transfer_cpu points replaced. Prints what it measured.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
SMALL_TENSORS, SMALL_ELEMENTS = 500, 256
LARGE_BYTES, PARTITION_BYTES = 64 << 20, 4 << 20


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def launcher(bin_dir, workers, netns_rate, no_key=False, servers=1, colocate=False,
             scheduler_args=""):
    """The command that starts a job (before its "-- command"): bytecomp-run on loopback, or
    netns_cluster.sh run on emulated links of netns_rate (colocate: a server beside each of
    the first `servers` workers)."""
    key = ["--no-key"] if no_key else []
    if scheduler_args:
        key.append("--scheduler-args=" + scheduler_args)
    if netns_rate:
        return (["bash", os.path.join(REPO, "deploy", "netns_cluster.sh"), "run", "--workers",
                 str(workers), "--servers", str(servers)] + (["--colocate"] if colocate else []) +
                ["--rate", netns_rate, "--prefix", "bct-", "--bin-dir", bin_dir, "--timeout",
                 "120"] + key)
    return [sys.executable, os.path.join(REPO, "deploy", "bytecomp-run"), "-np", str(workers),
            "--servers", str(servers), "--bin-dir", bin_dir, "--timeout", "120"] + key


def job_cpu_seconds(launch, bin_dir, bench_args, rounds):
    """CPU seconds of a whole job (every process) running `rounds` timed rounds."""
    before = children_cpu_seconds()
    cmd = [*launch, "--", os.path.join(bin_dir, "bytecomp-bench"), *bench_args,
           f"--rounds={rounds}", "--warmup=1", "--check=false"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if res.returncode != 0:
        raise SystemExit(f"calibrate_transport: {' '.join(cmd)} failed "
                         f"({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return children_cpu_seconds() - before


def cpu_per_round(launch, bin_dir, bench_args, rounds, repeats):
    """Median over `repeats` pairs of jobs of the CPU a further round costs."""
    per_round = []
    for _ in range(repeats):
        a = job_cpu_seconds(launch, bin_dir, bench_args, rounds[0])
        b = job_cpu_seconds(launch, bin_dir, bench_args, rounds[1])
        per_round.append(max(0.0, (b - a) / (rounds[1] - rounds[0])))
    return statistics.median(per_round)


def summing_gbytes_per_s(costs_text):
    m = re.search(r"^sum_gbytes_per_s: ([\d.eE+-]+)", costs_text, re.M)
    return float(m.group(1)) if m else 8.0  # the planner's default summing speed


def measure(bin_dir, workers, costs_text, netns_rate=None, no_key=False):
    """Returns (us per message, ns per byte), both ends and every process together."""
    launch = launcher(bin_dir, workers, netns_rate, no_key)
    with tempfile.TemporaryDirectory(prefix="bytecomp-transport-") as work:
        small = os.path.join(work, "small.pbtxt")
        with open(small, "w") as f:
            f.write('model: "small tensors"\n')
            for i in range(SMALL_TENSORS):
                f.write(f'tensors {{ name: "t{i}" elements: {SMALL_ELEMENTS} }}\n')
        # Each round: every worker pushes and pulls every tensor and bytecomp-bench's barrier
        # (a message each way).
        messages = 2 * workers * (SMALL_TENSORS + 1)
        per_message_us = cpu_per_round(launch, bin_dir, [f"--profile={small}"],
                                       rounds=(3, 33), repeats=3) * 1e6 / messages
    large = cpu_per_round(launch, bin_dir, [f"--preset=flat:{LARGE_BYTES}B"],
                          rounds=(3, 13), repeats=1)
    partitions = -(-LARGE_BYTES // PARTITION_BYTES) + 1  # and the barrier
    moved = 2 * workers * LARGE_BYTES
    summing_s = workers * LARGE_BYTES / (summing_gbytes_per_s(costs_text) * 1e9)
    rest = large - 2 * workers * partitions * per_message_us * 1e-6 - summing_s
    return per_message_us, max(0.0, rest) * 1e9 / moved


def with_transfer_cpu(costs_text, per_message_us, per_byte_ns):
    text = re.sub(r"transfer_cpu \{[^}]*\}\s*", "", costs_text)
    points = "".join(f"transfer_cpu {{ bytes: {b} us: {per_message_us + per_byte_ns * b / 1e3:.3f} }}\n"
                     for b in SIZES)
    return (text.rstrip("\n") + "\n# transfer_cpu: measured by calibrate_transport.py "
            f"({per_message_us:.1f} us per message + {per_byte_ns:.3f} ns per byte)\n" + points)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--costs", required=True, help="cost table to start from")
    parser.add_argument("--out", required=True, help="where to write the table")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    parser.add_argument("--netns-rate", help="measure on an emulated cluster with links of this "
                        "tc rate (e.g. 10gbit; needs root) instead of loopback")
    parser.add_argument("--no-key", action="store_true",
                        help="jobs without a cluster key (plain TCP), as the measured ones run")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    try:
        costs_text = open(args.costs).read()
    except OSError as e:
        raise SystemExit(f"calibrate_transport: cannot read --costs: {e}")
    per_message_us, per_byte_ns = measure(args.bin_dir, args.workers, costs_text, args.netns_rate,
                                          args.no_key)
    where = f"emulated {args.netns_rate} links" if args.netns_rate else "loopback"
    where += ", no cluster key" if args.no_key else ", cluster key"
    print(f"transport on this host (W={args.workers}, S=1, {where}, both ends): "
          f"{per_message_us:.1f} us CPU per message + {per_byte_ns:.3f} ns CPU per byte")
    with open(args.out, "w") as f:
        f.write(with_transfer_cpu(costs_text, per_message_us, per_byte_ns))
    print(f"written {args.out}")


if __name__ == "__main__":
    sys.exit(main())
