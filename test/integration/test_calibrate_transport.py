"""scheduler/planner/tools/calibrate_transport.py: real jobs on loopback measure what moving a
message costs the host's CPU, and the cost table it writes makes the planner charge it on a
one-host cluster (host_cores)."""
import json
import os
import re
import subprocess
import sys

import cluster

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
PLANNER = os.path.join(REPO, "scheduler", "planner")
TOOL = os.path.join(PLANNER, "tools", "calibrate_transport.py")


def run_tool(*args, timeout=240):
    return subprocess.run([sys.executable, TOOL, "--bin-dir", cluster.BIN_DIR, *args],
                          capture_output=True, text=True, timeout=timeout)


def test_measures_messages_and_bytes_and_the_planner_charges_them(tmp_path):
    out = tmp_path / "costs.pbtxt"
    res = run_tool("--costs", os.path.join(PLANNER, "costs", "nominal.pbtxt"), "--out", str(out),
                   "--workers", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    m = re.search(r"([\d.]+) us CPU per message \+ ([\d.]+) ns CPU per byte", res.stdout)
    assert m, res.stdout
    per_message, per_byte = float(m.group(1)), float(m.group(2))
    # A message costs a kernel round and the engine's hand-offs; a byte at least one copy.
    assert 0.5 < per_message < 1000, res.stdout
    assert 0.01 < per_byte < 50, res.stdout
    text = out.read_text()
    points = [(int(b), float(us)) for b, us in
              re.findall(r"transfer_cpu \{ bytes: (\d+) us: ([\d.]+) \}", text)]
    assert [b for b, _ in points] == [4096, 65536, 1 << 20, 16 << 20], text
    assert all(a[1] < b[1] for a, b in zip(points, points[1:])), points
    assert 'name: "fp16"' in text  # the rest of the table is kept

    # The planner charges it on one host: "transport cpu" spans in the predicted timeline.
    cluster_file = tmp_path / "cluster.pbtxt"
    cluster_file.write_text(
        "machines: 2\ngpus_per_machine: 0\nservers: 1\ncpu_pool_threads: 2\nhost_cores: 2\n"
        "worker_link { bandwidth_gbps: 10 latency_us: 10 }\n"
        "server_link { bandwidth_gbps: 10 latency_us: 10 }\n")
    trace = tmp_path / "plan.json"
    plan = subprocess.run(
        [cluster.binary("bytecomp-plan"), f"--profile={os.path.join(PLANNER, 'profiles', 'resnet50.pbtxt')}",
         f"--cluster={cluster_file}", f"--costs={out}", f"--out={tmp_path / 'plan.pbtxt'}",
         f"--trace={trace}", "--table=false"], capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    spans = [e for e in json.loads(trace.read_text())["traceEvents"]
             if e.get("cat") == "transport cpu"]
    assert spans, "no transport spans in the predicted timeline"


def test_bad_arguments_are_named(tmp_path):
    res = run_tool("--costs", str(tmp_path / "missing.pbtxt"), "--out", str(tmp_path / "o"))
    assert res.returncode != 0
    assert "cannot read --costs" in res.stdout + res.stderr
    res = run_tool("--costs", "x", "--out", "y", "--workers", "0")
    assert res.returncode == 2
    assert "--workers must be >= 1, got 0" in res.stderr
