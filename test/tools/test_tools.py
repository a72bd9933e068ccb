"""bytecomp-timeline and bytecomp-plot on files: nodes' timelines put on one clock (including a
file cut off by a killed node), the prediction placed at a round, and PNG plots of the
benchmarks' JSON (kept in build/test-artifacts)."""
import json
import os
import struct
import subprocess
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TIMELINE = os.path.join(REPO, "tools", "bytecomp-timeline")
PLOT = os.path.join(REPO, "tools", "bytecomp-plot")
ARTIFACTS = os.environ.get("BYTECOMP_ARTIFACTS", tempfile.mkdtemp())


def run(*argv):
    res = subprocess.run(["/usr/bin/python3"] + list(argv), capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def node_file(path, name, events, offset, close=True):
    """A node's timeline as telemetry/timeline.cc writes it."""
    text = ('{"displayTimeUnit":"ms","traceEvents":[\n{"name":"process_name","ph":"M","pid":0,'
            '"args":{"name":"%s"}}' % name)
    text += ',\n{"name":"clock_offset","ph":"M","pid":0,"args":{"offset_us":%d}}' % offset
    for e in events:
        text += ",\n" + json.dumps(e)
    if close:
        text += '\n],"otherData":{"process":"%s","clock_offset_us":%d,"dropped_events":0}}\n' % (
            name, offset)
    open(path, "w").write(text)


def ev(name, ts, rnd, tid=1, ph="i", **extra):
    e = {"name": name, "cat": name, "pid": 0, "tid": tid, "ts": ts, "ph": ph,
         "args": {"tensor": "w", "tensor_id": 0, "partition": 0, "round": rnd, "bytes": 8,
                  "codec": "none"}}
    e.update(extra)
    return e


def test_merge_puts_every_node_on_the_scheduler_clock_and_the_prediction_at_a_round(tmp_path):
    d = str(tmp_path)
    # Worker 0's clock is 1000 us behind the scheduler's, worker 1's 500 us ahead.
    node_file(f"{d}/worker-0.json", "worker 0",
              [ev("ready", 9000, 0), ev("done", 10000, 0), ev("ready", 19000, 1),
               ev("done", 21000, 1)], offset=1000)
    node_file(f"{d}/worker-1.json", "worker 1",
              [ev("ready", 10500, 0), ev("done", 11500, 0), ev("ready", 20700, 1),
               ev("done", 22500, 1)], offset=-500)
    # A server killed while writing: its file has no end, and a half-written last event.
    node_file(f"{d}/server-0.json", "server 0",
              [ev("summed on server", 10200, 0, ph="b", id="0.0.0"),
               ev("summed on server", 10600, 0, ph="e", id="0.0.0")], offset=0, close=False)
    with open(f"{d}/server-0.json", "a") as f:
        f.write(',\n{"name":"summed on server","cat":"summ')
    plan = f"{d}/plan.json"
    json.dump({"displayTimeUnit": "ms", "traceEvents": [
        {"name": "push w[0]", "cat": "push", "ph": "X", "pid": 0, "tid": 300, "ts": 0, "dur": 700},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 300, "args": {"name": "nic_up 0"}}]},
        open(plan, "w"))
    out = f"{d}/merged.json"
    printed = run(TIMELINE, "merge", d, "--plan", plan, "-o", out)
    assert "prediction at round 1" in printed, printed
    merged = json.load(open(out))
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"]
             if e.get("name") == "process_name"}
    assert [names[p] for p in sorted(names)] == ["worker 0", "worker 1", "server 0",
                                                "prediction (planner)"]
    pid = {v: k for k, v in names.items()}
    ts = {}
    for e in merged["traceEvents"]:
        if "ts" in e:
            ts.setdefault((names[e["pid"]], e["name"], e.get("ph")), []).append(e["ts"])
    # Origin: the earliest event on the scheduler's clock (worker 0's first ready, 10000).
    assert merged["otherData"]["time_origin_us"] == 10000
    assert ts[("worker 0", "ready", "i")] == [0, 10000]
    assert ts[("worker 1", "ready", "i")] == [0, 10200]
    assert ts[("server 0", "summed on server", "b")] == [200]
    # Round 1 starts at its first ready (worker 0, 10000 after the origin).
    assert ts[("prediction (planner)", "push w[0]", "X")] == [10000]
    assert merged["otherData"]["prediction"]["aligned_to_round"] == 1
    assert pid["prediction (planner)"] == 4
    rounds = run(TIMELINE, "rounds", out)
    assert "round 0: 1.00 ms" in rounds and "round 1: 2.00 ms" in rounds, rounds


def test_merge_refuses_a_directory_without_timelines(tmp_path):
    res = subprocess.run(["/usr/bin/python3", TIMELINE, "merge", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "no worker-*.json or server-*.json" in res.stderr


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def test_plots_of_the_benchmarks_json(tmp_path):
    os.makedirs(ARTIFACTS, exist_ok=True)
    emulated = os.path.join(HERE, "data", "emulated-cluster-bench.json")
    # ddp_bench.py's JSON, one rate per file (values only to exercise the format).
    ddp = []
    for rate, speeds in (("100mbit", (300, 900, 1200)), ("1gbit", (2500, 3600, 3900))):
        path = str(tmp_path / f"ddp-{rate}.json")
        json.dump({"args": {"rate": rate}, "namespaces": True, "runs": [],
                   "rows": [{"model": "mlp", "system": s, "samples_per_s": v}
                            for s, v in zip(("bc-none", "bc-topk", "bc-auto"), speeds)]},
                  open(path, "w"))
        ddp.append(path)
    status = str(tmp_path / "status.json")
    json.dump({"nodes": [], "rounds": [[i, 100 + (i % 3) * 10] for i in range(20)]}, open(status, "w"))
    for kind, inputs, name in (("bandwidth", [emulated], "plot-bandwidth-emulated.png"),
                               ("bandwidth", ddp, "plot-bandwidth-ddp.png"),
                               ("prediction", [emulated], "plot-prediction.png"),
                               ("rounds", [status], "plot-rounds.png")):
        out = os.path.join(ARTIFACTS, name)
        if os.path.exists(out):
            os.remove(out)
        run(PLOT, kind, *inputs, "-o", out)
        width, height = png_size(out)
        assert width >= 600 and height >= 400, (name, width, height)


def test_plot_refuses_json_it_does_not_know(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"something": 1}')
    res = subprocess.run(["/usr/bin/python3", PLOT, "bandwidth", str(bad), "-o",
                          str(tmp_path / "x.png")], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "neither emulated_cluster_bench.py's nor ddp_bench.py's" in res.stderr
