#!/usr/bin/env python3
"""What server failover costs (issue 14): a W=4 S=2 local cluster of exact_sum_worker, server 1
killed with SIGKILL mid-run and started again for its rank, --kills times. Prints, per kill, the
time from the kill to the replacement taking over (the scheduler's log) and to the next ten
rounds done by every worker, and the peak memory (VmHWM) of each server process: the original
server 1 and its replacements beside server 0, which was never killed.

  /usr/bin/python3 bench/e2e/failover_cost.py [--kills 3] [--rounds 200] [--max-bytes 20000000]
      [--heartbeat-interval-ms 1000] [--heartbeat-timeout-ms 5000]
"""
import argparse
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "test", "harness"))
import cluster  # noqa: E402


def peak_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--max-bytes", type=int, default=20 << 20)
    p.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=5000)
    args = p.parse_args()
    hold = os.path.join(tempfile.mkdtemp(prefix="bytecomp-failover-cost-"), "release")
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(args.rounds), "--max-bytes",
           str(args.max_bytes), "--hold-file", hold]
    rows = []
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         heartbeat_timeout_ms=args.heartbeat_timeout_ms,
                         scheduler_args=[f"--heartbeat_interval_ms={args.heartbeat_interval_ms}"]
                         ) as c:
        step = max(10, args.rounds // (args.kills + 2) // 10 * 10)
        for k in range(args.kills):
            c.wait_workers_print(f"round {step * (k + 1)}/", timeout=600)
            old = c.servers[1]
            old_peak = peak_kib(old.proc.pid)
            before, backs = c.rounds_done(), c.scheduler.output().count(" is back: ")
            killed_at = time.monotonic()
            old.proc.send_signal(signal.SIGKILL)
            c.wait_node(old, 10)
            started_at = time.monotonic()
            c.restart_server(1)
            assert cluster.wait_for(
                lambda: c.scheduler.output().count(" is back: ") > backs, 60, 0.01), c.dump()
            taken = time.monotonic() - killed_at
            assert cluster.wait_for(lambda: c.rounds_done() >= before + 10, 120, 0.01), c.dump()
            rows.append({"kill": k + 1, "takeover_s": taken,
                         "ten_rounds_s": time.monotonic() - killed_at,
                         "restart_to_takeover_s": taken - (started_at - killed_at),
                         "killed_peak_kib": old_peak})
        time.sleep(1)
        peaks = {"server 0 (never killed)": peak_kib(c.servers[0].proc.pid),
                 f"server 1 (replacement {args.kills})": peak_kib(c.servers[1].proc.pid)}
        with open(hold, "w") as f:
            f.write("go")
        codes = c.wait_workers(timeout=600)
        assert codes == [0, 0, 0, 0], c.dump()
        exact = all(f"ALL SUMS EXACT: {args.rounds} rounds" in w.output() for w in c.workers)
    print(f"W=4 S=2, {args.rounds} rounds of 40 tensors up to {args.max_bytes} bytes; heartbeat "
          f"interval {args.heartbeat_interval_ms} ms, timeout {args.heartbeat_timeout_ms} ms; "
          f"sums exact: {exact}")
    print(f"{'kill':>4} {'kill->takeover s':>17} {'kill->10 rounds s':>18} "
          f"{'start->takeover s':>18} {'killed server peak MiB':>23}")
    for r in rows:
        peak = "?" if r["killed_peak_kib"] is None else f"{r['killed_peak_kib'] / 1024:.0f}"
        print(f"{r['kill']:>4} {r['takeover_s']:>17.2f} {r['ten_rounds_s']:>18.2f} "
              f"{r['restart_to_takeover_s']:>18.2f} {peak:>23}")
    for name, kib in peaks.items():
        print(f"peak memory of {name}: {'?' if kib is None else f'{kib / 1024:.0f} MiB'}")


if __name__ == "__main__":
    main()
