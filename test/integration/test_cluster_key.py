"""The cluster key (issue 13), with real processes on loopback.

- Clients without the key (a plain ZeroMQ DEALER, CURVE with a keypair of their own that trusts
  the job's public key, CURVE with another job's key) can neither register, push, pull, abort
  a round nor shut the job down: nothing they send reaches the scheduler or the servers (their
  logs show refusals and no bad message), while the job beside them finishes with exact sums.
  The same intruder against a job without a key does get answers (the check can fail).
- The host local reducer's root refuses them too.
- Without a key the daemons listen on loopback only; allow_insecure lifts that with a warning;
  a worker without a key refuses a scheduler that is not on loopback; key file errors are clear.
- bytecomp-run jobs are keyed by default: a fresh key per job, mode 0600, gone afterwards.
"""
import os
import re
import subprocess

import pytest

import cluster

LAUNCHER = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "bytecomp-run")
MODES = ("plain", "own-key", "other-job")
# The keyed jobs run until the test has sent its intruders (exact_sum_worker --until-file),
# at most this many rounds.
MAX_ROUNDS = 100000


def make_key(directory):
    path = os.path.join(directory, "cluster.key")
    out = subprocess.run([cluster.binary("bytecomp-keygen"), path], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert os.stat(path).st_mode & 0o777 == 0o600
    public = re.search(r"public key: (\S{40})", out.stdout).group(1)
    return path, public


def intruders(targets, public_key, wait_ms=1000, repeat=1, server_sealed=False):
    """Runs the three intruder modes at once against `targets` (intruder_client flags), each
    series `repeat` times (the plain mode then sends a raw NULL-mechanism greeting to each
    target, which the target itself must refuse and log; not to a server whose data messages
    are sealed, which takes plain connections and refuses their messages). Returns
    {mode: (rc, output)}."""
    procs = {}
    for mode in MODES:
        procs[mode] = subprocess.Popen(
            [cluster.binary("intruder_client"), f"--mode={mode}",
             f"--job_public_key={public_key}", f"--wait_ms={wait_ms}",
             f"--repeat={repeat}", f"--server_sealed={str(server_sealed).lower()}"] + targets,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = {}
    for mode, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        results[mode] = (proc.returncode, out)
    return results


def keyed_job_worker(tmp_path, max_bytes):
    """exact_sum_worker's command for a keyed job that runs until the file `done` exists."""
    done = os.path.join(str(tmp_path), "done")
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(MAX_ROUNDS), "--max-bytes",
           str(max_bytes), "--until-file", done]
    return cmd, done


def finish_job(c, done, rounds_at_least):
    """Ends a keyed job started with keyed_job_worker; asserts exact sums on every worker."""
    with open(done, "w") as f:
        f.write("done")
    assert c.wait_workers(timeout=120) == [0] * len(c.workers), c.dump()
    for w in c.workers:
        found = re.search(r"ALL SUMS EXACT: (\d+) rounds x", w.output())
        assert found and int(found.group(1)) >= rounds_at_least, c.dump()


# Under a sanitizer the sealed path alone (the others differ in a cipher or in CURVE's old
# path); every setting in the plain suite and the deep run.
PROTECTIONS = (["encrypt"] if cluster.SANITIZER and not cluster.DEEP
               else ["encrypt", "authenticate", "curve"])


@pytest.mark.parametrize("protection", PROTECTIONS)
def test_clients_without_the_key_get_nothing_through_and_the_job_sums_exactly(tmp_path,
                                                                             protection):
    # encrypt (the default) and authenticate seal the data messages under the nodes' data keys
    # on plain TCP; curve runs the data sockets on CURVE as the control plane.
    sealed = protection != "curve"
    key, public = make_key(str(tmp_path))
    cmd, done = keyed_job_worker(tmp_path, 300000)
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd,
                         extra_env={"BYTECOMP_KEY_FILE": key,
                                    "BYTECOMP_DATA_PROTECTION": protection}) as c:
        assert cluster.wait_for(lambda: "round 10/" in c.workers[0].output(), 90), c.dump()
        results = intruders([f"--scheduler=tcp://127.0.0.1:{c.port}",
                             f"--server=tcp://127.0.0.1:{c.server_ports[0]}"], public,
                            server_sealed=sealed)
        running = [w.proc.poll() is None for w in c.workers]
        for mode, (rc, out) in results.items():
            assert rc == 0, f"{mode} intruder got in:\n{out}\n" + c.dump()
            assert f"INTRUDER {mode}: 0 replies" in out, out
            assert out.count("no reply") == 7, out  # 3 to the scheduler, 4 to the server
        plain = results["plain"][1]
        for target in ("scheduler",) if sealed else ("scheduler", "server"):
            assert f"INTRUDER plain {target} NULL greeting: closed by the target" in plain, plain
        assert all(running), "the job ended before the intruders did: " + c.dump()
        finish_job(c, done, rounds_at_least=10)
        assert c.wait_scheduler(30) == 0, c.dump()  # no intruder's Shutdown stopped it
        assert c.wait_node(c.servers[0], 30) == 0, c.dump()
        sched, server = c.scheduler.output(), c.servers[0].output()
    # The daemons never saw the intruders' messages: no refusal of a message, no stranger.
    assert "CURVE with the cluster key " + public in sched, sched
    if sealed:
        # The plain intruder's messages reached the server's socket and were refused unopened;
        # the CURVE intruders' handshakes failed on its plain socket.
        assert f"data messages sealed (data_protection: {protection})" in server, server
        assert "refused a data message not sealed under a worker's data key" in server, server
        assert re.search(r"data messages not sealed under a worker's data key: refused \d+ "
                         r"messages? from \d+ peers?", server), server
    else:
        assert "data messages sealed" not in server, server
    for text, name in ((sched, "scheduler"),) if sealed else ((sched, "scheduler"),
                                                              (server, "server")):
        for line in ("that does not speak CURVE (no cluster key)",
                     "127.0.0.1: a CURVE key that is not the cluster key",
                     "that speaks CURVE without this job's key"):
            assert "cluster key: refused " in text and line in text, f"{name}: {line}\n{text}"
        assert re.search(r"cluster key: refused \d+ connections? from \d+ peers? without the "
                         r"cluster key", text), f"{name} has no summary at exit:\n{text}"
    assert "unregistered peer" not in sched and "bad message" not in sched, sched
    assert "intruder" not in sched, sched
    assert "rejected request" not in server, server


def test_the_intruder_check_can_fail_without_a_key():
    # Against a job without a key the same plain client is answered: the scheduler refuses
    # its Register (rank out of range) and its Shutdown (not registered) with errors.
    with cluster.Cluster(workers=1, servers=1) as c:
        # Each keyed intruder waits out every attempt: 1 s is ample for the plain one's
        # replies on loopback, 3 s under a sanitizer.
        results = intruders([f"--scheduler=tcp://127.0.0.1:{c.port}"], "x" * 40,
                            wait_ms=cluster.sized(1000, 3000))
        rc, out = results["plain"]
        assert rc == 1 and "GOT A REPLY" in out, out + c.dump()
        assert results["own-key"][0] == 0 and results["other-job"][0] == 0, results


def test_the_local_root_refuses_clients_without_the_key(tmp_path):
    key, public = make_key(str(tmp_path))
    cmd, done = keyed_job_worker(tmp_path, 200000)
    machine = {"BYTECOMP_MACHINE": "keyed-machine"}
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd, scheduler_args=["--hierarchical"],
                         worker_env=[machine, machine],
                         extra_env={"BYTECOMP_KEY_FILE": key}) as c:
        assert cluster.wait_for(lambda: "round 10/" in c.workers[0].output(), 90), c.dump()
        root = next(w for w in c.workers if "local root of 2 workers" in w.output())
        endpoint = re.search(r"local root of 2 workers on this machine \((tcp://[\d.:]+)\)",
                             root.output()).group(1)
        results = intruders([f"--server={endpoint}"], public)
        assert all(rc == 0 for rc, _ in results.values()), results
        assert all(w.proc.poll() is None for w in c.workers), \
            "the job ended before the intruders did: " + c.dump()
        finish_job(c, done, rounds_at_least=10)
        out = root.output()
    assert f"cluster key: refused a peer on {endpoint} that does not speak CURVE" in out, out
    assert "cluster key: refused 127.0.0.1: a CURVE key that is not the cluster key" in out, out


def run(argv, env=None, timeout=60):
    rc, out, _ = cluster.run_command(argv, dict(os.environ, **(env or {})), timeout)
    assert rc is not None, f"{argv} did not finish within {timeout} s:\n{out}"
    return rc, out


def test_without_a_key_the_daemons_listen_on_loopback_only(tmp_path):
    scheduler = [cluster.binary("bytecomp-scheduler"), f"--port={cluster.free_port()}",
                 "--num_workers=1", "--num_servers=1", "--connect_timeout_ms=300"]
    rc, out = run(scheduler)
    assert rc == 1 and "listening on 127.0.0.1:" in out, out  # then no node came
    assert "no cluster key (plain TCP, loopback only)" in out, out
    rc, out = run(scheduler + ["--bind_host=0.0.0.0"])
    assert rc == 2, out
    assert "scheduler: the listen address 0.0.0.0 is not loopback, and this process has no " \
           "cluster key" in out, out
    assert "allow_insecure" in out and "bytecomp-keygen" in out, out
    rc, out = run(scheduler + ["--bind_host=0.0.0.0", "--allow_insecure"])
    assert rc == 1 and "listening on 0.0.0.0:" in out, out
    assert "allow_insecure: scheduler: the listen address 0.0.0.0 is not loopback" in out, out
    key, public = make_key(str(tmp_path))
    rc, out = run(scheduler + [f"--key_file={key}"])
    assert rc == 1 and "listening on 0.0.0.0:" in out, out
    assert f"CURVE with the cluster key {public} from {key}" in out, out

    server = [cluster.binary("bytecomp-server"), f"--scheduler=127.0.0.1:{cluster.free_port()}",
              "--bind_host=0.0.0.0"]
    rc, out = run(server, {"BYTECOMP_CONNECT_TIMEOUT_MS": "300"})
    assert rc != 0 and "server: the listen address 0.0.0.0 is not loopback" in out, out


def test_a_worker_without_a_key_refuses_a_scheduler_off_loopback(tmp_path):
    worker = [cluster.binary("exact_sum_worker"), "--rounds", "1"]
    env = {"BYTECOMP_SCHEDULER": "192.0.2.1:9000", "BYTECOMP_RANK": "0",
           "BYTECOMP_CONNECT_TIMEOUT_MS": "1500"}
    rc, out = run(worker, env)
    assert rc != 0, out
    assert "the scheduler address 192.0.2.1 is not loopback, and this process has no cluster " \
           "key" in out, out
    # With allow_insecure it tries (and finds no scheduler there).
    rc, out = run(worker, dict(env, BYTECOMP_ALLOW_INSECURE="1"))
    assert rc != 0 and "no topology from the scheduler at 192.0.2.1:9000" in out, out
    assert "allow_insecure: the scheduler address 192.0.2.1 is not loopback" in out, out
    # Keys that do not match are reported at once, well before the registration timeout
    # (5 s): by the mechanism the scheduler's greeting names where it got out before the
    # scheduler closed the connection, else by the closed handshakes.
    key, _ = make_key(str(tmp_path))
    other = str(tmp_path / "other")
    os.mkdir(other)
    other_key, _ = make_key(other)
    at = {"BYTECOMP_RANK": "0", "BYTECOMP_CONNECT_TIMEOUT_MS": "5000"}

    def refused_at_once(env, address, *reasons):
        rc, out = run(worker, env)
        assert rc != 0, out
        assert f"cannot register with the scheduler at {address}: " in out, out
        assert any(r in out for r in reasons), out
        assert "no topology" not in out, out  # not the timeout

    cut = "it closed the connection during the handshake, twice: "
    with cluster.Cluster(workers=1, servers=1) as c:
        refused_at_once(dict(at, BYTECOMP_SCHEDULER=c.address, BYTECOMP_KEY_FILE=key), c.address,
                        "it does not speak CURVE: it runs without a cluster key, and this node "
                        "has one", cut + "it runs without a cluster key or with another one")
    with cluster.Cluster(workers=1, servers=1, extra_env={"BYTECOMP_KEY_FILE": key}) as c:
        refused_at_once(dict(at, BYTECOMP_SCHEDULER=c.address), c.address,
                        "it speaks CURVE: the job has a cluster key and this node has none",
                        cut + "the job likely has a cluster key and this node has none")
        refused_at_once(dict(at, BYTECOMP_SCHEDULER=c.address, BYTECOMP_KEY_FILE=other_key),
                        c.address, cut + "it runs without a cluster key or with another one")


def test_key_file_errors_name_the_file(tmp_path):
    scheduler = [cluster.binary("bytecomp-scheduler"), f"--port={cluster.free_port()}",
                 "--num_workers=1", "--num_servers=1", "--connect_timeout_ms=300"]
    missing = str(tmp_path / "missing.key")
    rc, out = run(scheduler + [f"--key_file={missing}"])
    assert rc == 2 and f"cluster key file '{missing}': No such file or directory" in out, out
    key, _ = make_key(str(tmp_path))
    os.chmod(key, 0o644)
    rc, out = run(scheduler, {"BYTECOMP_KEY_FILE": key})
    assert rc == 2 and "has mode 0644: others may read it" in out and "chmod 600" in out, out
    bad = tmp_path / "bad.key"
    bad.write_text("# a key\nsecret_key = 12345\n")
    os.chmod(bad, 0o600)
    config = tmp_path / "cluster.pbtxt"
    config.write_text(f'key_file: "{bad}"\n')
    rc, out = run(scheduler + [f"--config={config}"])
    assert rc == 2 and f"{bad}:2: not a cluster key line" in out, out
    # bytecomp-keygen does not replace a key unless told to.
    rc, out = run([cluster.binary("bytecomp-keygen"), key])
    assert rc == 1 and "exists; pass --force" in out, out
    rc, out = run([cluster.binary("bytecomp-keygen"), "--force", key])
    assert rc == 0 and os.stat(key).st_mode & 0o777 == 0o600, out


def test_bytecomp_run_jobs_are_keyed_by_default():
    # The worker command reports the key file it was given and its mode, then sums.
    show = ('stat -c "KEY %a %n" "$BYTECOMP_KEY_FILE"; exec "$0" --rounds 3 --max-bytes 200000')
    publics = []
    for _ in range(2):
        rc, out = run(["/usr/bin/python3", LAUNCHER, "--bin-dir", cluster.BIN_DIR, "-np", "2",
                       "--timeout", "120", "--", "sh", "-c", show,
                       cluster.binary("exact_sum_worker")], timeout=150)
        assert rc == 0, out
        keys = set(re.findall(r"\[worker \d\] KEY (\d+) (\S+)", out))
        assert len(keys) == 1, out  # one key, for both workers
        ((mode, path),) = keys
        assert mode == "600", out
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path)), path
        assert out.count("ALL SUMS EXACT: 3 rounds") == 2, out
        publics.append(re.search(r"\[scheduler\] .*CURVE with the cluster key (\S{40}) from "
                                 + re.escape(path), out).group(1))
    assert publics[0] != publics[1], "each job gets a fresh key"
