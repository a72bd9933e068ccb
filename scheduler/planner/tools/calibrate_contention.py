#!/usr/bin/env python3
"""How a host's cores serve a whole ByteComp job, W workers and S servers on them: what a
unit of CPU work costs there over what it costs alone (the cluster description's
host_cpu_inflation, which the planner applies to the codec and summing work it charges to the
shared cores), and how many of the cores the job's processes get while they contend
(host_effective_cores, which takes host_cores' place in the planner's one-host model).

It runs real jobs on this host (deploy/bytecomp-run, or the emulated cluster with
--netns-rate, as calibrate_transport.py does): bytecomp-bench workers push and pull --tensors
tensors of --elements fp32 each, compressed one way with --codec (bytecomp.strategy's preset),
so that every worker's and every server's work per round is the same whatever W and S are.
While a job runs it reads, every 50 ms, /proc/<pid>/task/<tid>/schedstat of our own processes
only (bytecomp-scheduler, bytecomp-server, bytecomp-bench; never the host's total): each
thread's CPU time and its time runnable but waiting for a CPU. Each configuration runs with
two round counts, so that start-up and shutdown cancel out (median of --repeats pairs):
  - alone: 1 worker and 1 server (2 processes on the cores),
  - contended: W workers and S servers (as the job runs).
From them:
  inflation  = CPU per worker-round contended / CPU per worker-round alone (at least 1)
  cores used = CPU per round contended / the wall time a round adds (at most the host's
               cores: the job's threads wait for a CPU all along, so what they do not
               get went to the kernel's interrupt work or to other programs)
  waiting    = run-queue wait per round / the wall time a round adds (threads waiting for a
               CPU, on average)

  calibrate_contention.py [--workers 4] [--servers 4] [--colocate] [--netns-rate 10gbit]
                          [--codec topk] [--bin-dir build/bin] [--no-key]
                          [--cluster IN.pbtxt --out OUT.pbtxt] [--json FILE]

With --cluster and --out, OUT is IN with host_cpu_inflation and host_effective_cores set to
what was measured.
Prints what it measured.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "shim"))

from bytecomp.strategy import strategy_text  # noqa: E402
from calibrate_transport import launcher  # noqa: E402

# Our processes, by /proc/<pid>/comm (the kernel keeps 15 characters).
OUR_PROCESSES = ("bytecomp-schedu", "bytecomp-server", "bytecomp-bench")
RESULT = re.compile(r'\{"bench":"bytecomp-bench".*\}')


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the process or thread has exited
        return None


def descendants(root):
    """Pids of every process below root (through each thread's children file)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            text = read(f"/proc/{pid}/task/{tid}/children") or ""
            for child in text.split():
                found.append(int(child))
                todo.append(int(child))
    return found


class JobSchedstat:
    """Samples, while a job runs, every thread of our processes below `root`: the last
    (CPU ns, run-queue wait ns) read from its schedstat. A thread's last 50 ms before it exits
    are missed; the two round counts' difference cancels that, as it does start-up."""

    def __init__(self, root, period_s=0.05):
        self.root, self.period_s = root, period_s
        self.threads = {}  # (pid, tid) -> (comm, cpu_ns, wait_ns)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self):
        for pid in descendants(self.root):
            comm = (read(f"/proc/{pid}/comm") or "").strip()
            if comm not in OUR_PROCESSES:
                continue
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                fields = (read(f"/proc/{pid}/task/{tid}/schedstat") or "").split()
                if len(fields) >= 2:
                    self.threads[(pid, tid)] = (comm, int(fields[0]), int(fields[1]))

    def run(self):
        while not self.stop.wait(self.period_s):
            self.sample()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def totals(self):
        """{comm: [cpu seconds, wait seconds]} and the sum under "all"."""
        out = {"all": [0.0, 0.0]}
        for comm, cpu, wait in self.threads.values():
            for key in (comm, "all"):
                out.setdefault(key, [0.0, 0.0])
                out[key][0] += cpu / 1e9
                out[key][1] += wait / 1e9
        return out


def run_job(launch, bin_dir, bench_args, rounds):
    """One job of `rounds` timed rounds: (schedstat totals, rank 0's JSON line, wall seconds)."""
    cmd = [*launch, "--", os.path.join(bin_dir, "bytecomp-bench"), *bench_args,
           f"--rounds={rounds}", "--warmup=1", "--check=false"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with JobSchedstat(proc.pid) as stats:
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    found = RESULT.search(out)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"calibrate_contention: {' '.join(cmd)} failed "
                         f"({proc.returncode}):\n{out[-2000:]}{err[-2000:]}")
    return stats.totals(), json.loads(found.group(0)), time.monotonic() - start


def per_round(launch, bin_dir, bench_args, rounds, repeats):
    """Median over `repeats` pairs of jobs of what a further round costs: CPU and run-queue
    wait seconds of our processes (all, and by process), the wall seconds a round adds (its
    tensors' refill and barrier too) and rank 0's median round ms (the timed part)."""
    cpu, wait, by_comm, round_ms, period = [], [], {}, [], []
    for _ in range(repeats):
        a, _, wall_a = run_job(launch, bin_dir, bench_args, rounds[0])
        b, result, wall_b = run_job(launch, bin_dir, bench_args, rounds[1])
        n = rounds[1] - rounds[0]
        period.append((wall_b - wall_a) / n)
        cpu.append((b["all"][0] - a["all"][0]) / n)
        wait.append((b["all"][1] - a["all"][1]) / n)
        for comm in OUR_PROCESSES:
            d = (b.get(comm, [0, 0])[0] - a.get(comm, [0, 0])[0]) / n
            by_comm.setdefault(comm, []).append(d)
        round_ms.append(result["median_round_ms"])
    return dict(cpu_s=statistics.median(cpu), wait_s=statistics.median(wait),
                cpu_s_by_process={c: statistics.median(v) for c, v in by_comm.items()},
                round_ms=statistics.median(round_ms), period_s=statistics.median(period),
                cpu_s_runs=cpu, round_ms_runs=round_ms)


def measure(args):
    with tempfile.TemporaryDirectory(prefix="bytecomp-contention-") as work:
        profile = os.path.join(work, "profile.pbtxt")
        with open(profile, "w") as f:
            f.write('model: "contention"\n')
            for i in range(args.tensors):
                f.write(f'tensors {{ name: "t{i}" elements: {args.elements} }}\n')
        strategy = os.path.join(work, "strategy.pbtxt")
        with open(strategy, "w") as f:
            f.write(strategy_text(args.codec, name_pattern="t*") if args.codec != "none" else
                    "version: 1\nfirst_round: 0\n")
        bench = [f"--profile={profile}"]
        sched = f"--strategy={strategy}"
        found = {}
        for name, w, s in (("alone", 1, 1), ("contended", args.workers, args.servers)):
            launch = launcher(args.bin_dir, w, args.netns_rate, args.no_key, servers=s,
                              colocate=args.colocate, scheduler_args=sched)
            r = per_round(launch, args.bin_dir, bench, (args.rounds[0], args.rounds[1]),
                          args.repeats)
            r.update(workers=w, servers=s, cpu_s_per_worker_round=r["cpu_s"] / w,
                     cores_used=r["cpu_s"] / r["period_s"], waiting=r["wait_s"] / r["period_s"])
            found[name] = r
            print(f"{name}: W={w} S={s}: {1e3 * r['cpu_s']:.1f} ms CPU a round "
                  f"({1e3 * r['cpu_s'] / w:.1f} per worker; runs "
                  f"{', '.join(f'{1e3 * c / w:.1f}' for c in r['cpu_s_runs'])}), "
                  f"{1e3 * r['wait_s']:.1f} ms waiting for a CPU, round {r['round_ms']:.1f} ms "
                  f"({1e3 * r['period_s']:.1f} with refill and barrier): "
                  f"{r['cores_used']:.2f} cores used, {r['waiting']:.2f} threads waiting",
                  flush=True)
        found["inflation_measured"] = (found["contended"]["cpu_s_per_worker_round"] /
                                       found["alone"]["cpu_s_per_worker_round"])
        # Sharing the cores cannot make a unit of work cheaper: a figure below 1 is noise.
        found["inflation"] = max(1.0, found["inflation_measured"])
        found["effective_cores"] = min(float(os.cpu_count()), found["contended"]["cores_used"])
        return found


def with_contention(cluster_text, inflation, cores, summary):
    """The cluster description with the two contention fields set (replaced if present)."""
    text = re.sub(r"^(host_cpu_inflation|host_effective_cores):.*\n?", "", cluster_text,
                  flags=re.M)
    text = re.sub(r"^# contention: measured.*\n?", "", text, flags=re.M)
    return (text.rstrip("\n") + f"\n# contention: measured by calibrate_contention.py "
            f"({summary})\nhost_cpu_inflation: {inflation:.3f}\n"
            f"host_effective_cores: {cores:.3f}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--colocate", action="store_true",
                        help="with --netns-rate: a server beside each worker (servers <= workers)")
    parser.add_argument("--netns-rate", help="run on an emulated cluster with links of this tc "
                        "rate (e.g. 10gbit; needs root) instead of loopback")
    parser.add_argument("--no-key", action="store_true",
                        help="jobs without a cluster key (plain TCP), as the measured ones run")
    parser.add_argument("--codec", default="topk", help="bytecomp.strategy preset, one way")
    parser.add_argument("--tensors", type=int, default=4)
    parser.add_argument("--elements", type=int, default=1 << 20,
                        help="fp32 elements per tensor (default 4 MiB: one partition)")
    parser.add_argument("--rounds", default="3,23",
                        help="the two round counts whose difference is measured")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    parser.add_argument("--cluster", help="cluster description to start from (with --out)")
    parser.add_argument("--out", help="where to write the cluster description")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    try:
        args.rounds = [int(r) for r in args.rounds.split(",")]
    except ValueError:
        parser.error(f"--rounds must be two integers, got {args.rounds!r}")
    if len(args.rounds) != 2 or not 1 <= args.rounds[0] < args.rounds[1]:
        parser.error("--rounds must be two increasing round counts >= 1")
    if args.workers < 1 or args.servers < 1 or args.repeats < 1:
        parser.error("--workers, --servers and --repeats must be >= 1")
    if bool(args.cluster) != bool(args.out):
        parser.error("--cluster and --out go together")
    found = measure(args)
    inflation, cores = found["inflation"], found["effective_cores"]
    where = f"emulated {args.netns_rate} links" if args.netns_rate else "loopback"
    summary = (f"W={args.workers} S={args.servers} on {os.cpu_count()} cores, {where}, "
               f"{args.codec} one way: {found['contended']['cores_used']:.2f} cores used, "
               f"{found['contended']['waiting']:.2f} threads waiting")
    print(f"contention on this host ({summary}): a unit of work costs {inflation:.3f}x "
          f"its CPU alone; the job's processes get {cores:.2f} of the {os.cpu_count()} cores")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), **found), f, indent=1)
    if args.out:
        try:
            text = open(args.cluster).read()
        except OSError as e:
            raise SystemExit(f"calibrate_contention: cannot read --cluster: {e}")
        with open(args.out, "w") as f:
            f.write(with_contention(text, inflation, cores, summary))
        print(f"written {args.out}")


if __name__ == "__main__":
    sys.exit(main())
