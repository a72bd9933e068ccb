#!/usr/bin/env python3
"""How the data plane's cost grows with the job, measured on this machine: real jobs (a
scheduler, S servers and W bytecomp-bench workers, separate processes on loopback) of small
tensors at W = 2 .. 32 and S = 1 .. 8, every sum checked. For each job: the median round time,
the round time per byte of all workers (the work a round does grows with W: on one host the
CPU, not a link, is the limit), each worker's and each server's CPU per round and peak memory,
the scheduler's CPU and memory, and the messages per round the servers served. Then a fit of
how each grows with W (the exponent of a power law through the scaled rows, and the per-byte
ratio against the W=4 row of the same run).

  python3 bench/scale/run_scale_bench.py [--jobs 2x1,4x1,8x2,16x4,32x8] [--sweep 16x1,16x2,16x4,16x8]
      [--tensors 64] [--elements 4096] [--rounds 20] [--warmup 3] [--connections C] [--repeats N]
      [--out bench-scale.json]

--jobs: W x S of the rows scaled together (S = W/4 from W = 4: the same per-server fan-in of
bytes); --sweep: more rows (S at one W). Each worker's model: --tensors tensors of --elements
fp32 each (default 64 x 16 KiB = 1 MiB), one partition each, spread over the servers.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "test", "harness"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))
import cluster  # noqa: E402
from netns_probe import Sampler, _cpu_seconds  # noqa: E402


def peak_rss_kb(pid):
    """A live process's peak resident memory (VmHWM) in KiB, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"^VmHWM:\s+(\d+)", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return None


class DaemonUsage(Sampler):
    """The scheduler's and servers' CPU seconds and peak memory, sampled until the with-block
    ends; the last sample of each stands for its whole life (they exit when the job ends)."""

    def __init__(self, nodes):
        super().__init__(0.1)
        self.nodes = nodes
        self.last = {}

    def _sample(self):
        for n in self.nodes:
            cpu, rss = _cpu_seconds(n.proc.pid), peak_rss_kb(n.proc.pid)
            if cpu is not None and rss is not None:
                self.last[n.name] = (cpu[1], rss)


def write_profile(path, tensors, elements):
    with open(path, "w") as f:
        f.write(f'model: "scale-{tensors}x{elements}"\nforward_us: 0\n')
        for t in range(tensors):
            f.write(f'tensors {{ name: "layer{t}.weight" elements: {elements} }}\n')


def run_job(workers, servers, profile, args):
    cmd = [cluster.binary("bytecomp-bench"), f"--profile={profile}", f"--rounds={args.rounds}",
           f"--warmup={args.warmup}", "--check=true", "--report_every_rank=true"]
    with cluster.Cluster(workers=workers, servers=servers, worker_cmd=cmd,
                         heartbeat_timeout_ms=20000,
                         scheduler_args=["--connect_timeout_ms=120000"] +
                         ([f"--connections_per_server={args.connections}"]
                          if args.connections else [])) as c:
        with DaemonUsage([c.scheduler] + c.servers) as sampler:
            codes = c.wait_workers(timeout=600)
            if codes != [0] * workers:
                raise RuntimeError(f"W={workers} S={servers}: workers ended {codes}\n{c.dump()}")
            for s in c.servers:
                c.wait_node(s, 30)
        reports = []
        for w in c.workers:
            lines = [ln for ln in w.output().splitlines() if ln.startswith('{"bench"')]
            if not lines:
                raise RuntimeError(f"{w.name} printed no JSON line\n{c.dump()}")
            reports.append(json.loads(lines[-1]))
        served = 0
        for s in c.servers:
            m = re.search(r"served (\d+) requests", s.output())
            if m is None:
                raise RuntimeError(f"{s.name} did not say what it served\n{c.dump()}")
            served += int(m.group(1))
        usage = dict(sampler.last)
    rounds_run = args.warmup + args.rounds
    first = next(r for r in reports if r["rank"] == 0)
    server_cpu = [usage[s][0] * 1e3 / rounds_run for s in usage if s.startswith("server")]
    server_rss = [usage[s][1] for s in usage if s.startswith("server")]
    return {
        "W": workers, "S": servers, "bytes_per_worker": first["bytes_per_round"],
        "median_round_ms": first["median_round_ms"],
        "ns_per_byte": first["median_round_ms"] * 1e6 / (workers * first["bytes_per_round"]),
        "worker_cpu_ms_per_round": statistics.median(r["cpu_ms_per_round"] for r in reports),
        "worker_rss_kb": statistics.median(r["max_rss_kb"] for r in reports),
        "server_cpu_ms_per_round": statistics.median(server_cpu) if server_cpu else 0.0,
        "server_rss_kb": statistics.median(server_rss) if server_rss else 0,
        "scheduler_cpu_ms": usage.get("scheduler", (0, 0))[0] * 1e3,
        "scheduler_rss_kb": usage.get("scheduler", (0, 0))[1],
        "messages_per_round": served / rounds_run,
    }


def exponent(rows, key):
    """The slope of log(key) against log(W) by least squares: 1 is linear in W."""
    pts = [(math.log(r["W"]), math.log(r[key])) for r in rows if r[key] > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else float("nan")


def parse_jobs(text):
    jobs = []
    for part in filter(None, text.split(",")):
        w, s = part.lower().split("x")
        jobs.append((int(w), int(s)))
    return jobs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="2x1,4x1,8x2,16x4,32x8")
    ap.add_argument("--sweep", default="16x1,16x2,16x8")
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--elements", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--connections", type=int, default=0,
                    help="connections each worker opens to each server (0: the config's, 5)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each job (medians)")
    ap.add_argument("--out", default="bench-scale.json")
    args = ap.parse_args()
    scaled, sweep = parse_jobs(args.jobs), parse_jobs(args.sweep)
    work = tempfile.mkdtemp(prefix="bytecomp-scale-")
    profile = os.path.join(work, "model.pbtxt")
    write_profile(profile, args.tensors, args.elements)
    print(f"each worker: {args.tensors} tensors x {args.elements} fp32 "
          f"({args.tensors * args.elements * 4 / 2**20:.2f} MiB), {args.rounds} timed rounds; "
          f"loopback on {os.cpu_count()} cores shared by every process: the CPU is the limit")
    header = (f"{'W':>3} {'S':>2} {'round ms':>9} {'ns/byte':>8} {'wkr cpu':>8} {'srv cpu':>8} "
              f"{'msgs/rnd':>9} {'wkr MB':>7} {'srv MB':>7} {'sched cpu':>10} {'sched MB':>9}")
    print(header)
    rows = []
    jobs = scaled + [j for j in sweep if j not in scaled]
    runs = {job: [] for job in jobs}
    for repeat in range(args.repeats):  # every job once per pass: a drift in load hits them all
        for workers, servers in jobs:
            print(f"  ... W={workers} S={servers} (pass {repeat + 1} of {args.repeats})",
                  file=sys.stderr, flush=True)
            runs[(workers, servers)].append(run_job(workers, servers, profile, args))
    for workers, servers in jobs:
        done = runs[(workers, servers)]
        r = {k: statistics.median(d[k] for d in done) for k in done[0]}
        r["W"], r["S"] = workers, servers
        r["round_ms_runs"] = [d["median_round_ms"] for d in done]
        r["scaled"] = (workers, servers) in scaled
        rows.append(r)
        print(f"{workers:>3} {servers:>2} {r['median_round_ms']:>9.2f} {r['ns_per_byte']:>8.3f} "
              f"{r['worker_cpu_ms_per_round']:>8.2f} {r['server_cpu_ms_per_round']:>8.2f} "
              f"{r['messages_per_round']:>9.0f} {r['worker_rss_kb'] / 1024:>7.1f} "
              f"{r['server_rss_kb'] / 1024:>7.1f} {r['scheduler_cpu_ms']:>10.0f} "
              f"{r['scheduler_rss_kb'] / 1024:>9.1f}", flush=True)
    print(f"medians of {args.repeats} run(s) of each job; round ms: worker 0's median; ns/byte: "
          "per byte of all workers' models; wkr/srv cpu: ms of one process's CPU per round (median over processes; servers over their whole "
          "life); msgs/rnd: requests the servers served per round; sched cpu: ms over the job")
    fit = [r for r in rows if r["scaled"]]
    print("\ngrowth with W over the scaled rows (exponent of a power law; 1 = linear in W):")
    for key, what in (("median_round_ms", "round time"),
                      ("worker_cpu_ms_per_round", "a worker's CPU per round"),
                      ("server_cpu_ms_per_round", "a server's CPU per round"),
                      ("messages_per_round", "messages per round"),
                      ("scheduler_cpu_ms", "the scheduler's CPU over the job")):
        print(f"  {what:<36} W^{exponent(fit, key):.2f}")
    base = next((r for r in fit if r["W"] == 4), None)
    top = max(fit, key=lambda r: r["W"]) if fit else None
    if base and top and top is not base:
        print(f"  round time per byte, W={top['W']} S={top['S']} against W=4 S={base['S']}: "
              f"{top['ns_per_byte'] / base['ns_per_byte']:.2f}x (target: at most 1.5x)")
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
