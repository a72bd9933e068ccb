"""Seeing a live job (issue 16): Prometheus scrapes every daemon and worker of a running job and
its values equal the job's own counters; the scheduler's status page in a real headless browser;
the HTTP endpoints' answers to bad input, and a hostile HTTP client that cannot stall the data
path; the runtime timeline of workers and servers on one clock, merged with the planner's
prediction.

Each test runs one small job (W=2, S=2, exact_sum_worker) whose workers hold after their last
round (--hold-file) so that the live job can be looked at. Everything is bounded in time: each
test has TEST_LIMIT_S (an alarm fails it, and the daemons of its job are stopped on the way out),
Prometheus runs under timeout(1) and chromium in a session of its own that is killed whole, so
nothing outlives a failed or killed test (ctest's limit, in CMakeLists.txt, is above
4 x TEST_LIMIT_S)."""
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO, "tools")
ARTIFACTS = os.path.join(os.path.dirname(cluster.BIN_DIR), "test-artifacts")
OBSERVED_ENV = {"BYTECOMP_SERVER_HTTP": "0", "BYTECOMP_METRICS_ADDRESS": "0"}
TEST_LIMIT_S = int(os.environ.get("BYTECOMP_OBSERVE_TEST_LIMIT_S", "140"))


@pytest.fixture(autouse=True)
def time_limit():
    """Fails a test that runs past TEST_LIMIT_S: the alarm raises in the test, whose `with`
    blocks then stop its job, Prometheus and the browser."""
    def expired(signum, frame):
        raise TimeoutError(f"the test ran past its {TEST_LIMIT_S} s limit")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def kill_session(proc, grace=5.0):
    """Stops a process started with start_new_session and whatever it started: SIGTERM to its
    session's group, SIGKILL to what is left after `grace` seconds, even when the process itself
    has ended (chromium's helpers can outlive it; cluster's _stop spares a group whose leader
    has exited)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextlib.contextmanager
def prometheus_server(work, port, limit_s):
    """Debian's Prometheus on loopback, configured by WORK/prometheus.yml, for at most limit_s
    (timeout(1) ends it even if this test process is killed); stopped when the block ends."""
    proc = subprocess.Popen(
        ["timeout", "--kill-after=5", str(limit_s), "prometheus",
         f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=open(os.path.join(work, "log"), "w"), stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        kill_session(proc)


def run_browser(args, timeout=90):
    """Runs chromium with `args` in a session of its own; its helper processes (zygote,
    renderer) are killed with it when it ends or runs past `timeout`. Returns (rc, stdout,
    stderr); rc None on timeout. (cluster.run_command merges stderr into the DOM on stdout.)"""
    proc = subprocess.Popen([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars"]
                            + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        return None, "", f"chromium ran past {timeout} s"
    finally:
        kill_session(proc, grace=2.0)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def url_in(node, pattern):
    """The first http://host:port in the node's log after `pattern`."""
    def find():
        m = re.search(pattern + r".*?(http://[\d.]+:\d+)", node.output())
        return m.group(1) if m else None
    assert cluster.wait_for(lambda: find() is not None, 20), node.output()
    return find()


class HeldJob:
    """A job whose workers wait after their last round until release()."""

    def __init__(self, rounds=4, max_bytes=3000000, extra_env=None, scheduler_args=()):
        self.dir = tempfile.mkdtemp(prefix="bytecomp-observe-")
        self.hold = os.path.join(self.dir, "go")
        cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(rounds), "--max-bytes",
               str(max_bytes), "--hold-file", self.hold]
        env = dict(OBSERVED_ENV)
        env.update(extra_env or {})
        self.cluster = cluster.Cluster(workers=2, servers=2, worker_cmd=cmd, extra_env=env,
                                       scheduler_args=["--http_address=0"] + list(scheduler_args))

    def __enter__(self):
        self.cluster.__enter__()
        return self

    def __exit__(self, *exc):
        self.release()
        self.cluster.__exit__(*exc)
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_rounds_done(self, timeout=120):
        ok = cluster.wait_for(lambda: all("PULLED BYTES" in w.output() for w in self.cluster.workers)
                              or any(w.returncode is not None for w in self.cluster.workers), timeout)
        assert ok and all(w.returncode is None for w in self.cluster.workers), self.cluster.dump()
        for w in self.cluster.workers:
            assert "ALL SUMS EXACT" not in w.output()  # printed only after the hold
        return {key: [int(re.search(key + r": (\d+)", w.output()).group(1))
                      for w in self.cluster.workers]
                for key in ("PUSHED BYTES", "PULLED BYTES")}

    def release(self):
        open(self.hold, "w").close()

    def finish(self):
        self.release()
        codes = self.cluster.wait_workers(timeout=60)
        assert codes == [0, 0], self.cluster.dump()
        for w in self.cluster.workers:
            assert "ALL SUMS EXACT" in w.output(), self.cluster.dump()

    def scheduler_url(self):
        return url_in(self.cluster.scheduler, "status page and metrics on ")

    def metrics_urls(self):
        c = self.cluster
        return {"scheduler": [self.scheduler_url()],
                "servers": [url_in(s, "metrics on ") for s in c.servers],
                "workers": [url_in(w, "metrics on ") for w in c.workers]}


def prometheus_query(base, query):
    q = urllib.parse.urlencode({"query": query})
    status, body = http_get(f"{base}/api/v1/query?{q}")
    data = json.loads(body)
    assert data["status"] == "success", body
    return data["data"]["result"]


def scalar(base, query):
    result = prometheus_query(base, query)
    return float(result[0]["value"][1]) if result else None


@pytest.mark.skipif(not shutil.which("prometheus") or not shutil.which("promtool"),
                    reason="Debian's prometheus package is not installed (deploy/setup.sh)")
def test_prometheus_scrapes_a_live_job_and_its_values_match_the_job():
    with HeldJob() as job:
        counters = job.wait_rounds_done()
        urls = job.metrics_urls()
        # Every endpoint is on loopback and passes promtool's lint.
        for role, hosts in urls.items():
            for url in hosts:
                assert url.startswith("http://127.0.0.1:"), url
                status, text = http_get(url + "/metrics")
                assert status == 200
                lint = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                                      capture_output=True, timeout=30)
                assert lint.returncode == 0, f"{role} {url}: {lint.stdout}{lint.stderr}\n{text}"
        # The real Prometheus server, on loopback, scraping every second.
        work = os.path.join(job.dir, "prometheus")
        os.makedirs(work)
        port = cluster.free_port()
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
            for role, hosts in urls.items():
                targets = ", ".join(f"'{u[len('http://'):]}'" for u in hosts)
                f.write(f"  - job_name: {role}\n    static_configs:\n      - targets: [{targets}]\n")
        base = f"http://127.0.0.1:{port}"
        with prometheus_server(work, port, limit_s=TEST_LIMIT_S):
            pushed = sum(counters["PUSHED BYTES"])
            pulled = sum(counters["PULLED BYTES"])
            want = {
                'sum(up)': 5,
                'sum(bytecomp_wire_bytes_total{job="workers",direction="out"})': pushed,
                'sum(bytecomp_wire_bytes_total{job="workers",direction="in"})': pulled,
                'sum(bytecomp_engine_pushed_bytes{job="workers"})': pushed,
                # What the servers received is what the workers pushed, and what they answered
                # is what the workers pulled.
                'sum(bytecomp_wire_bytes_total{job="servers",direction="in"})': pushed,
                'sum(bytecomp_wire_bytes_total{job="servers",direction="out"})': pulled,
                # 4 rounds of 40 tensors per worker; every key round summed once.
                'sum(bytecomp_rounds_total{job="workers"})': 2 * 4 * 40,
                'sum(bytecomp_round_duration_seconds_count{job="workers"})': 2 * 4 * 40,
                'count(bytecomp_heartbeat_age_seconds{job="scheduler"})': 4,
                'max(bytecomp_strategy_version{job="scheduler"})': 1,
            }
            got = {}

            def matches():
                for query, value in want.items():
                    try:
                        got[query] = scalar(base, query)
                    except (urllib.error.URLError, ConnectionError, socket.timeout):
                        got[query] = "not up"
                return all(got[q] == v for q, v in want.items())
            ok = cluster.wait_for(matches, 45, interval=1.0)
            assert ok, (f"Prometheus saw {got}\nexpected {want}\n"
                        + open(os.path.join(work, "log")).read()[-3000:])
            # The key rounds the servers summed: every partition of every tensor, 4 times.
            server_rounds = scalar(base, 'sum(bytecomp_rounds_total{job="servers"})')
            assert server_rounds is not None and server_rounds >= 4 * 40, server_rounds
            assert scalar(base, 'max(bytecomp_compression_ratio{job="workers",direction="out",codec="none"})') == 1.0
        job.finish()


def chromium():
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed (deploy/setup.sh)")
def test_status_page_in_a_headless_browser():
    strategy = tempfile.NamedTemporaryFile("w", suffix=".pbtxt", delete=False)
    # fp16 both ways keeps exact_sum_worker's small integers exact; tensors under 64 KiB stay raw.
    strategy.write('tensors { name_pattern: "fp32.*" push_codec { name: "fp16" } '
                   'pull_codec { name: "fp16" } }\n')
    strategy.close()
    try:
        with HeldJob(rounds=6, scheduler_args=[f"--strategy={strategy.name}"]) as job:
            job.wait_rounds_done()
            url = job.scheduler_url() + "/"
            time.sleep(1.0)  # the last stats reports and a fresh snapshot
            profile = f"--user-data-dir={job.dir}/chromium"
            rc, html, err = run_browser([profile, "--dump-dom", url])
            assert rc == 0, err[-3000:]
            # The nodes and their health.
            for node in ("worker 0", "worker 1", "server 0", "server 1"):
                assert f"<td>{node}</td>" in html, html
            # Healthy: heard from within the heartbeat timeout (2 s here; "late" after half of it).
            assert html.count('class="badge ok"') + html.count('class="badge late"') == 4, html
            assert 'class="badge silent"' not in html
            # The strategy per tensor: a large fp32 tensor two-way fp16 on the CPU pool, the fp16
            # tensors and the small ones uncompressed.
            rows = re.findall(r"<tr><td>(fp(?:32|16)\.[^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>",
                              html)
            assert len(rows) == 40, html
            codecs = {name: (codec, way) for name, codec, way in rows}
            assert codecs["fp32.19.750000"] == ("fp16", "two-way (fp16)"), codecs
            assert codecs["fp16.19.1500000"] == ("none", "-"), codecs
            assert codecs["fp32.0.1"] == ("none", "-"), codecs
            # Bytes and ratio: the fp16-compressed tensor moved half its bytes.
            # Every round of both workers reported (the last ones within a heartbeat interval).
            assert re.search(r"<td>fp32\.19\.750000</td><td>fp16</td><td>two-way \(fp16\)</td><td>"
                             r"default[^<]*</td><td>ps</td><td class=\"n\">12</td>"
                             r"<td class=\"n\">34\.3 MiB</td><td class=\"n\">17\.2 MiB</td>"
                             r"<td class=\"n\">2\.00x</td>", html), html
            # The round-time chart, with a point per reported round.
            assert '<svg id="round-chart"' in html
            assert html.count("<circle") >= 4, html
            assert "v1 (" in html
            os.makedirs(ARTIFACTS, exist_ok=True)
            shot = os.path.join(ARTIFACTS, "status-page.png")
            if os.path.exists(shot):
                os.remove(shot)
            rc, _, err = run_browser([profile, f"--screenshot={shot}", "--window-size=1280,1700",
                                      url])
            assert rc == 0 and os.path.exists(shot) and os.path.getsize(shot) > 20000, err[-3000:]
            job.finish()
    finally:
        os.unlink(strategy.name)


def raw_request(port, data, timeout=5):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return s.recv(200).decode(errors="replace")


def test_http_endpoints_refuse_bad_input_and_a_hostile_client_cannot_stall_the_job():
    with HeldJob(rounds=30, max_bytes=2000000) as job:
        urls = job.metrics_urls()
        targets = [urls["scheduler"][0], urls["servers"][0], urls["workers"][0]]
        ports = [int(u.rsplit(":", 1)[1]) for u in targets]
        # While the job runs: never-ending headers and idle connections on every endpoint.
        stop = threading.Event()
        opened = []

        def hostile(port):
            conns = []
            for _ in range(40):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=2)
                    s.sendall(b"GET /metrics HTTP/1.1\r\nX-Endless: ")
                    conns.append(s)
                except OSError:
                    pass
            opened.append(len(conns))
            while not stop.is_set():
                for s in conns:
                    try:
                        s.sendall(b"a" * 512)
                    except OSError:
                        pass
                stop.wait(0.05)
            for s in conns:
                s.close()
        threads = [threading.Thread(target=hostile, args=(p,)) for p in ports]
        start = time.monotonic()
        for t in threads:
            t.start()
        try:
            counters = job.wait_rounds_done(timeout=120)
        finally:
            stop.set()
            for t in threads:
                t.join()
        took = time.monotonic() - start
        assert sum(opened) >= 3 * 10, opened
        assert took < 100, took
        assert all(v > 0 for v in counters["PUSHED BYTES"])
        # Once the hostile client is gone, every endpoint answers again, and bad requests get
        # their codes: unknown path 404, another method 405, a malformed request 400.
        for url, port in zip(targets, ports):
            assert cluster.wait_for(lambda: http_get(url + "/metrics")[0] == 200, 15)
            with pytest.raises(urllib.error.HTTPError) as e:
                http_get(url + "/no/such/page")
            assert e.value.code == 404
            req = urllib.request.Request(url + "/metrics", data=b"x=1", method="POST")
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=5)
            assert e.value.code == 405
            assert raw_request(port, b"NONSENSE\r\n\r\n").startswith("HTTP/1.") and \
                " 400 " in raw_request(port, b"NONSENSE\r\n\r\n")
            assert " 400 " in raw_request(port, b"GET /metrics HTTP/1.1\r\nBroken header\r\n\r\n")
        job.finish()


def test_timeline_of_workers_and_servers_on_one_clock_merged_with_the_prediction():
    tl = tempfile.mkdtemp(prefix="bytecomp-timeline-")
    try:
        with HeldJob(rounds=4, extra_env={"BYTECOMP_TIMELINE": tl}) as job:
            job.wait_rounds_done()
            job.finish()
            for n in [job.cluster.scheduler] + job.cluster.servers:
                assert job.cluster.wait_node(n, 15) == 0, job.cluster.dump()
        files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tl, "*.json")))
        assert files == ["server-0.json", "server-1.json", "worker-0.json", "worker-1.json"], files
        plan = os.path.join(tl, "plan.json")
        res = subprocess.run([os.path.join(cluster.BIN_DIR, "bytecomp-plan"),
                              f"--profile={REPO}/scheduler/planner/profiles/lstm.pbtxt",
                              f"--cluster={REPO}/scheduler/planner/clusters/4x1gpu-1g.pbtxt",
                              f"--costs={REPO}/scheduler/planner/costs/nominal.pbtxt",
                              f"--out={tl}/plan.pbtxt", f"--trace={plan}", "--table=false"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        merged = os.path.join(tl, "merged.json")
        res = subprocess.run(["/usr/bin/python3", os.path.join(TOOLS, "bytecomp-timeline"), "merge",
                              tl, "--plan", plan, "-o", merged], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        assert "prediction at round 3" in res.stdout, res.stdout
        trace = json.load(open(merged))
        events = trace["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
        assert sorted(names.values()) == ["prediction (planner)", "server 0", "server 1",
                                          "worker 0", "worker 1"], names
        pid_of = {v: k for k, v in names.items()}
        by = {}
        for e in events:
            if "ts" in e:
                by.setdefault((names[e["pid"]], e["name"]), []).append(e)
        for w in ("worker 0", "worker 1"):
            for stage in ("ready", "queued", "push sent", "push..pull", "pull received", "decode",
                          "done"):
                assert by.get((w, stage)), (w, stage)
            # 40 tensors x 4 rounds, each with its bytes and codec.
            assert len(by[(w, "done")]) == 160
            assert all(e["args"]["codec"] == "none" and e["args"]["bytes"] > 0
                       for e in by[(w, "push sent")])
        assert by.get(("server 0", "summed on server")) and by.get(("server 1", "summed on server"))
        assert by.get(("prediction (planner)", "backward")) or len(
            [e for e in events if e["pid"] == pid_of["prediction (planner)"]]) > 10
        # One clock: a key's round is summed on its server after the last worker pushed it and
        # before that worker received the pull (tolerance: the offsets' error on a loaded host).
        tolerance_us = 20000
        sent = {}
        for w in ("worker 0", "worker 1"):
            for e in by[(w, "push sent")]:
                a = e["args"]
                sent.setdefault((a["tensor_id"], a["partition"], a["round"]), []).append(e["ts"])
        received = {}
        for w in ("worker 0", "worker 1"):
            for e in by[(w, "pull received")]:
                a = e["args"]
                key = (a["tensor_id"], a["partition"], a["round"])
                received[key] = min(received.get(key, e["ts"]), e["ts"])
        checked = 0
        for s in ("server 0", "server 1"):
            begins = [e for e in by[(s, "summed on server")] if e["ph"] == "b"]
            ends = {e["id"]: e["ts"] for e in by[(s, "summed on server")] if e["ph"] == "e"}
            for b in begins:
                a = b["args"]
                key = (a["tensor_id"], a["partition"], a["round"])
                if key not in sent or key not in received:
                    continue
                assert b["ts"] >= min(sent[key]) - tolerance_us, (key, b, sent[key])
                assert ends[b["id"]] >= max(sent[key]) - tolerance_us, (key, b, sent[key])
                assert ends[b["id"]] <= received[key] + tolerance_us, (key, b, received[key])
                checked += 1
        assert checked >= 100, checked
    finally:
        shutil.rmtree(tl, ignore_errors=True)
