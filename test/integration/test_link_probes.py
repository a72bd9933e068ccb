"""Link probes at start: every worker measures latency and bandwidth to every server before its
first push, the scheduler prints them as one table and --strategy=auto plans with them; the
measured forward time reaches the plan; bytecomp-linkprobe measures a running job's servers;
link_probe_count 0 turns the probes off."""
import json
import os
import re
import subprocess

import cluster

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
PLANNER = os.path.join(REPO, "scheduler", "planner")
AUTO = [f"--plan_cluster={os.path.join(PLANNER, 'clusters', '4x1gpu-1g.pbtxt')}",
        f"--plan_costs={os.path.join(PLANNER, 'costs', 'nominal.pbtxt')}"]
ROW = re.compile(r"^.*?\s+(\d+|median)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*(.*)$")


def table_rows(log):
    """(worker, server) -> (latency_us, up, down, note) from the scheduler's link table."""
    start = log.find("link probes of ")
    assert start >= 0, log
    rows = {}
    for line in log[start:].splitlines()[2:]:
        m = ROW.match(line)
        if not m:
            break
        rows[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(4)),
                                               float(m.group(5)), m.group(6).strip())
    return rows


def test_probes_reach_the_scheduler_and_auto_planning_uses_them():
    # 40 ms of "forward pass" before every round.
    cmd = [cluster.binary("bytecomp-bench"), "--preset=resnet50", "--rounds=8", "--warmup=0",
           "--check=false", "--forward_ms=40"]
    args = ["--strategy=auto", "--profile_rounds=3"] + AUTO
    with cluster.Cluster(workers=2, servers=2, worker_cmd=cmd, scheduler_args=args) as c:
        # While the job runs: the probe tool against its servers (a tool outside the job).
        assert cluster.wait_for(lambda: "link probes of 2 workers" in c.scheduler.output(), 60), \
            c.dump()
        tool = subprocess.run(
            [cluster.binary("bytecomp-linkprobe"), "--json", "--count=2", "--bytes=262144",
             "--servers=" + ",".join(f"tcp://127.0.0.1:{p}" for p in c.server_ports)],
            capture_output=True, text=True, timeout=60)
        assert c.wait_workers(timeout=240) == [0, 0], c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        log = c.scheduler.output()

    rows = table_rows(log)
    for worker in ("0", "1", "median"):
        for server in (0, 1):
            latency, up, down, note = rows.get((worker, server), (0, 0, 0, "missing"))
            assert latency > 0 and up > 0 and down > 0 and note == "", (worker, server, log)
            # Loopback: well under 100 ms per round trip, and faster than 10 Mbit/s.
            assert latency < 100000 and up > 0.01 and down > 0.01, (worker, server, log)
    assert len(rows) == 6, log
    used = re.search(r"--strategy=auto: links from the probes of 2 workers \(4 worker-server "
                     r"pairs; medians: round trip ([\d.]+) us, up ([\d.]+) Gbit/s, down "
                     r"([\d.]+) Gbit/s\): worker_link and server_link ([\d.]+) Gbit/s", log)
    assert used, log
    # The slower direction, to two significant digits (auto_planner.h: TwoSignificantDigits).
    slower = min(float(used.group(2)), float(used.group(3)))
    assert abs(float(used.group(4)) - slower) <= 0.05 * slower, log
    assert re.search(r"--strategy=auto: planned 162 tensors \(flat\) in [\d.]+ ms", log), log
    forward = re.search(r"\(measured forward ([\d.]+) ms\)", log)
    # The bench sleeps 40 ms between a round's last wait and the next round's first push_pull
    # (plus refilling 25M floats); the median over rounds 1..3 and both workers.
    assert forward and 40 <= float(forward.group(1)) < 2000, log

    assert tool.returncode == 0, tool.stdout + tool.stderr
    results = [json.loads(line) for line in tool.stdout.splitlines()]
    assert [r["server"] for r in results] == [f"tcp://127.0.0.1:{p}" for p in c.server_ports]
    for r in results:
        assert r["ok"] and r["latency_us"] > 0 and r["up_gbps"] > 0 and r["down_gbps"] > 0, r


def test_plan_links_file_keeps_the_cluster_files_links():
    cmd = [cluster.binary("bytecomp-bench"), "--preset=resnet50", "--rounds=5", "--warmup=0",
           "--check=false"]
    args = ["--strategy=auto", "--profile_rounds=2", "--plan_links=file"] + AUTO
    with cluster.Cluster(workers=1, servers=1, worker_cmd=cmd, scheduler_args=args) as c:
        assert c.wait_workers(timeout=240) == [0], c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        log = c.scheduler.output()
    assert "link probes of 1 workers" in log, log
    assert "--strategy=auto: links from --plan_cluster (--plan_links=file): worker_link " \
           "1.000 Gbit/s" in log, log


def test_link_probe_count_zero_turns_the_probes_off():
    cmd = [cluster.binary("bytecomp-bench"), "--preset=flat:4MB", "--rounds=3", "--warmup=0"]
    with cluster.Cluster(workers=1, servers=1, worker_cmd=cmd,
                         scheduler_args=["--link_probe_count=0"]) as c:
        assert c.wait_workers(timeout=120) == [0], c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        assert "link probes of" not in c.scheduler.output(), c.dump()


def test_four_workers_on_one_server_take_turns_and_all_complete():
    # More workers than servers: their transfers to the one server wait for its bandwidth turn
    # (one worker at a time); every worker's probe must still complete within the time limit.
    cmd = [cluster.binary("bytecomp-bench"), "--preset=flat:4MB", "--rounds=3", "--warmup=0",
           "--check=false"]
    with cluster.Cluster(workers=4, servers=1, worker_cmd=cmd) as c:
        assert c.wait_workers(timeout=240) == [0, 0, 0, 0], c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        log = c.scheduler.output()
        server_log = c.servers[0].output()
    rows = table_rows(log)
    for worker in ("0", "1", "2", "3", "median"):
        latency, up, down, note = rows.get((worker, 0), (0, 0, 0, "missing"))
        assert latency > 0 and up > 0.01 and down > 0.01 and note == "", (worker, log)
    assert len(rows) == 5, log
    # Nobody's turn had to be taken back, and no END was refused.
    assert "took the bandwidth turn back" not in server_log, server_log
    assert "PROBE_TURN_END" not in server_log, server_log
