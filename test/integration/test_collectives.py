"""Collectives among the workers (Strategy scheme allreduce and allgather, gloo over loopback),
with real daemons:

- A W=4 job whose strategy mixes the three schemes (allreduce of fp32 tensors uncompressed and
  fp16-encoded, of fp16 tensors in their own type; fp16 allgather; fp16 through the servers)
  sums every element exactly, round after round.
- A strategy switch from ps to allreduce and back mid-training: every sum stays exact, every
  worker uses the same version in each round, and the servers' rounds of the keys that left
  them resume where they were (a collective round is no round on the servers).
- A job with a cluster key refuses a strategy entry that names a collective unless the strategy
  allows unencrypted collectives, naming the entry; so does a job without collectives. A keyed
  job whose strategy allows them names the tensors that travel unencrypted in the scheduler's
  log and on its status page (and /status.json), and sums exactly; once the mesh is formed, its
  workers listen on no port (gloo's listeners are gone, ZeroMQ connects out).
"""
import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request

import cluster
from test_cluster_key import make_key
from test_strategy_switch import check_one_switch

ROUNDS = 30
MIXED = """seed: 7
tensors { name_pattern: "fp32.1*" push_codec { name: "fp16" } force: true scheme: SCHEME_ALLREDUCE }
tensors { name_pattern: "fp32.?.*" scheme: SCHEME_ALLREDUCE }
tensors { name_pattern: "fp16.1?.*" scheme: SCHEME_ALLREDUCE }
tensors { name_pattern: "fp16.1*" push_codec { name: "fp16" } force: true }
tensors { name_pattern: "fp16.*" push_codec { name: "fp16" } force: true scheme: SCHEME_ALLGATHER }
"""
PS = 'seed: 7\ntensors { name_pattern: "*" push_codec { name: "fp16" } force: true }\n'
ALLREDUCE = ('seed: 7\ntensors { name_pattern: "*" push_codec { name: "fp16" } force: true '
             'scheme: SCHEME_ALLREDUCE }\n')


def collective_items(log):
    """The partition rounds a worker's log says its collectives ran (at shutdown)."""
    m = re.search(r"collectives: (\d+) partition rounds summed or gathered in (\d+) batches", log)
    assert m, log[-3000:]
    return int(m.group(1))


def worker_cmd(rounds):
    return [cluster.binary("exact_sum_worker"), "--rounds", str(rounds), "--shuffle", "1",
            "--max-bytes", str(cluster.sized(1000000, 250000))]


def test_mixed_schemes_sum_exactly(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(MIXED)
    with cluster.Cluster(workers=4, servers=2, worker_cmd=worker_cmd(ROUNDS),
                         scheduler_args=["--collectives", f"--strategy={path}"]) as c:
        codes = c.wait_workers(timeout=240)
        assert codes == [0] * 4, c.dump()
        for w in c.workers:
            assert f"ALL SUMS EXACT: {ROUNDS} rounds" in w.output(), c.dump()
            # 20 fp32 and 19 fp16 tensors a round (fp16.1.* alone goes to the servers).
            items = collective_items(w.output())
            assert items >= 39 * ROUNDS, c.dump()


def test_switch_ps_to_allreduce_and_back_keeps_sums_exact(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(PS)
    rounds = 60
    with cluster.Cluster(workers=3, servers=1, worker_cmd=worker_cmd(rounds) + ["--slow-rank",
                                                                               "1", "--slow-ms",
                                                                               "20"],
                         scheduler_args=["--collectives", f"--strategy={path}"]) as c:
        assert cluster.wait_for(lambda: "round 10/" in c.workers[0].output(), 120), c.dump()
        with open(path, "w") as f:
            f.write(ALLREDUCE)
        c.scheduler.proc.send_signal(signal.SIGHUP)
        assert cluster.wait_for(
            lambda: "strategy version 2 applies" in c.scheduler.output(), 60), c.dump()
        assert cluster.wait_for(lambda: "round 30/" in c.workers[0].output(), 120), c.dump()
        with open(path, "w") as f:
            f.write(PS)
        c.scheduler.proc.send_signal(signal.SIGHUP)
        codes = c.wait_workers(timeout=240)
        assert codes == [0] * 3, c.dump()
        versions = None
        for w in c.workers:
            out = w.output()
            assert f"ALL SUMS EXACT: {rounds} rounds" in out, c.dump()
            line = next(l for l in out.splitlines()
                        if l.startswith("STRATEGY VERSIONS BY ROUND:"))
            seq = [int(v) for v in line.split(":")[1].split()]
            assert versions is None or seq == versions, (seq, versions)
            versions = seq
        assert versions[0] == 1 and versions[-1] == 3 and versions == sorted(versions), versions
        allreduced = versions.count(2)
        assert allreduced > 0, versions
        for w in c.workers:
            assert collective_items(w.output()) >= 40 * allreduced, c.dump()


def run_scheduler(args, timeout=30):
    port = cluster.free_port()
    out = subprocess.run([cluster.binary("bytecomp-scheduler"), f"--port={port}",
                          "--bind_host=127.0.0.1", "--num_workers=2", "--num_servers=1"] + args,
                         capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def test_keyed_job_refuses_unencrypted_collectives_naming_the_entry(tmp_path):
    key, _ = make_key(str(tmp_path))
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(MIXED)
    rc, out = run_scheduler([f"--key_file={key}", "--collectives", f"--strategy={path}"])
    assert rc != 0, out
    assert "tensors[0] ('fp32.1*') asks for SCHEME_ALLREDUCE" in out, out
    assert "allow_unencrypted_collectives" in out, out
    # Without collectives in the job, the same entry is refused for that.
    rc, out = run_scheduler([f"--strategy={path}"])
    assert rc != 0, out
    assert "tensors[0] ('fp32.1*')" in out and "collectives is off" in out, out


def listening_ports(pid):
    """The TCP ports process pid listens on (its socket inodes in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
        if m:
            inodes.add(m.group(1))
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.append(int(fields[1].split(":")[1], 16))
    return ports


ALLOWED = """seed: 7
allow_unencrypted_collectives: true
tensors { name_pattern: "fp32.?.*" scheme: SCHEME_ALLREDUCE }
tensors { name_pattern: "*" push_codec { name: "fp16" } force: true }
"""


def test_keyed_job_names_its_unencrypted_tensors_in_the_log_and_on_the_status_page(tmp_path):
    key, _ = make_key(str(tmp_path))
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(ALLOWED)
    hold = os.path.join(tmp_path, "go")  # the workers wait after their last round until it exists
    with cluster.Cluster(workers=2, servers=1, worker_cmd=worker_cmd(6) + ["--hold-file", hold],
                         extra_env={"BYTECOMP_KEY_FILE": key},
                         scheduler_args=["--collectives", f"--strategy={path}",
                                         "--http_address=0"]) as c:
        def url():
            m = re.search(r"status page and metrics on (http://[\d.]+:\d+)", c.scheduler.output())
            return m.group(1) if m else None
        assert cluster.wait_for(lambda: url() is not None, 30), c.dump()

        def status():
            try:
                with urllib.request.urlopen(url() + "/status.json", timeout=5) as r:
                    return json.loads(r.read().decode())
            except urllib.error.HTTPError as e:  # 503 until the first snapshot
                assert e.code == 503, e
                return {"tensors": []}

        def reported():  # both workers' reports of every round (they come every second or so)
            tensors = status()["tensors"]
            return len(tensors) > 0 and all(t["rounds"] >= 12 for t in tensors)
        assert cluster.wait_for(reported, 120), c.dump()
        s = status()
        assert s["keyed"] is True, s
        schemes = {t["name"]: (t["scheme"], t["unencrypted"]) for t in s["tensors"]}
        summed = [n for n in schemes if re.match(r"fp32\.\d\.", n)]
        assert summed and len(summed) < len(schemes), schemes
        for name, (scheme, unencrypted) in schemes.items():
            expected = name in summed
            assert (scheme == "allreduce") == expected and unencrypted == expected, schemes
        # gloo listens only while the mesh forms: a running worker has no port a stranger
        # could reach (its ZeroMQ sockets connect out).
        assert c.port in listening_ports(c.scheduler.proc.pid)  # the check sees listeners
        for w in c.workers:
            assert listening_ports(w.proc.pid) == [], c.dump()
        with urllib.request.urlopen(url() + "/", timeout=5) as r:
            page = r.read().decode()
        assert f"{len(summed)} tensors travel unencrypted</b> in this keyed job" in page, page
        assert "<td>allreduce (unencrypted)</td>" in page, page
        open(hold, "w").close()
        codes = c.wait_workers(timeout=120)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            assert "ALL SUMS EXACT: 6 rounds" in w.output(), c.dump()
        log = c.scheduler.output()
    assert ("strategy version 1: the tensors of these entries travel unencrypted in this keyed job"
            in log and "tensors[0] ('fp32.?.*') SCHEME_ALLREDUCE" in log), log
