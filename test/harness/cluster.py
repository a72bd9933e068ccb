"""The one local ByteComp cluster for every Python test (test/integration, test/python).

A Cluster starts bytecomp-scheduler and S bytecomp-server on loopback, then W worker
processes (a command of the test's choosing: a C++ test worker or a Python training script).
Every process runs in its own session (process group), writes its output to a file in the
cluster's work directory, and is stopped when the `with` block ends, whether the test passed or
failed, and at interpreter exit (atexit) if a test forgot. Waits are bounded; failures quote
the tail of every process's output (dump()).

Binaries: $BYTECOMP_SCHEDULER_BINARY / $BYTECOMP_SERVER_BINARY for the two daemons, else
$BYTECOMP_BIN_DIR, else $BYTECOMP_BUILD_DIR/bin, else <repo>/build/bin. The engine library (for
Python workers) from $BYTECOMP_LIBRARY, else the lookup of bytecomp._engine.
"""

import atexit
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(REPO, "shim")
# Workers run under the test's own interpreter (Debian's python3, or a virtual environment's
# with another torch or mxnet).
PYTHON = sys.executable


def bin_dir():
    if os.environ.get("BYTECOMP_BIN_DIR"):
        return os.environ["BYTECOMP_BIN_DIR"]
    build = os.environ.get("BYTECOMP_BUILD_DIR", os.path.join(REPO, "build"))
    return os.path.join(build, "bin")


BIN_DIR = bin_dir()

# deploy/check_sanitizers.sh's stages set BYTECOMP_SANITIZER (asan or tsan): their daemons and
# workers run several times slower there (ThreadSanitizer 5 to 15 times), and under ASan hold
# more memory (its shadow and the quarantine of freed blocks).
SANITIZER = os.environ.get("BYTECOMP_SANITIZER", "")
# `deploy/test.sh --deep` sets BYTECOMP_TEST_DEPTH=deep: the long jobs run their full size there
# (more rounds: rarer interleavings), and the test command's plain suite runs the same checks
# on less work, within its budget.
DEEP = os.environ.get("BYTECOMP_TEST_DEPTH", "") == "deep"


def sized(plain, sanitized, deep=None):
    """A long job's size (its rounds, its tensors' bytes, its epochs): `plain`, or `sanitized`
    under a sanitizer: the same checks on less work (every thread, message and hand-off of a
    round is in each round); `deep` (when given) in the deep run without a sanitizer."""
    if SANITIZER:
        return sanitized
    return deep if DEEP and deep is not None else plain


def binary(name, must_exist=True):
    """The path of a built program; the daemons may be overridden one by one
    (bytecomp-scheduler: $BYTECOMP_SCHEDULER_BINARY)."""
    override = None
    if name in ("bytecomp-scheduler", "bytecomp-server"):
        override = os.environ.get("BYTECOMP_" + name.split("-")[1].upper() + "_BINARY")
    path = override or os.path.join(bin_dir(), name)
    if must_exist and not os.path.exists(path):
        raise FileNotFoundError(f"{name} not found at {path} (build first)")
    return path


def engine_available():
    """(True, "") when the engine library and both daemons exist, else (False, why)."""
    if SHIM not in sys.path:
        sys.path.insert(0, SHIM)
    from bytecomp import _engine
    try:
        _engine.find_library()
    except OSError as e:
        return False, str(e)
    for name in ("bytecomp-scheduler", "bytecomp-server"):
        if not os.path.isfile(binary(name, must_exist=False)):
            return False, f"{binary(name, must_exist=False)} not built"
    return True, ""


def _ephemeral_low():
    """The lowest port of the kernel's range for outgoing connections' local ports (and
    bind(0))."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_port_rng = random.Random()
_ports_given = set()  # every port free_port() has returned in this process
# Claims on ports across processes: cluster tests run side by side (ctest -j), and a test's
# port stays its own for the whole test, also while a daemon that died is being restarted on
# it (server failover, scheduler restart), when a bind check alone would hand it to another.
PORT_CLAIMS = os.environ.get("BYTECOMP_PORT_CLAIMS",
                             os.path.join(tempfile.gettempdir(), "bytecomp-test-ports"))


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim_port(port):
    """Claims `port` for this process (a file named after it holding our pid, made with
    O_EXCL); a claim whose process has ended is taken over. True when the port is ours."""
    os.makedirs(PORT_CLAIMS, exist_ok=True)
    path = os.path.join(PORT_CLAIMS, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                with open(path) as f:
                    owner = int(f.read().strip() or 0)
            except (OSError, ValueError):
                return False  # being written by its owner right now
            if owner == os.getpid() or _pid_alive(owner):
                return False
            try:
                os.unlink(path)  # its process is gone: the claim is stale
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


@atexit.register
def _release_ports():
    for port in _ports_given:
        try:
            os.unlink(os.path.join(PORT_CLAIMS, str(port)))
        except OSError:
            pass


def free_port():
    """A loopback TCP port that nothing listens on, for a daemon started next, claimed by this
    process for as long as it runs (tests run side by side: no other test process is given it,
    nor is it given twice here). Drawn below the kernel's ephemeral range: a port from bind(0)
    comes from that range, and between this check and the daemon's bind any outgoing
    connection of a test running beside this one (a worker connecting to its scheduler) could
    be given it as its local port ("Address already in use", seen under ASan at -j 2). Never
    twice: a cluster draws all its ports before any daemon binds one, so the bind check alone
    cannot tell two draws apart (two servers given one port, seen under TSan in CI)."""
    low = _ephemeral_low()
    first = 10000 if low > 12000 else 1024
    for _ in range(200):
        port = _port_rng.randrange(first, low)
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if not _claim_port(port):
            continue
        _ports_given.add(port)
        return port
    raise RuntimeError(f"no free loopback port found in {first}..{low - 1} after 200 draws")


def wait_for(predicate, timeout, interval=0.05):
    """Polls predicate() until it is true (returns True) or timeout seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def tail(text, n=4000):
    return text[-n:]


_live = []  # every Popen started here and not yet stopped


def _stop(proc, grace=3.0):
    """SIGTERM to the process's group, SIGKILL after `grace` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    if proc in _live:
        _live.remove(proc)


@atexit.register
def _stop_all_live():
    for proc in list(_live):
        _stop(proc, grace=0.5)


class Node:
    """One process of the cluster: role ("scheduler", "server", "worker"), rank, Popen."""

    def __init__(self, role, rank, proc, log_path):
        self.role, self.rank, self.proc, self.log_path = role, rank, proc, log_path

    @property
    def name(self):
        return self.role if self.rank is None else f"{self.role} {self.rank}"

    @property
    def returncode(self):
        return self.proc.poll()

    def output(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return "(no output)"

    def __repr__(self):
        return f"<{self.name} rc={self.proc.poll()}>"


class Cluster:
    """with Cluster(workers=4, servers=2, worker_cmd=[...]) as c: c.wait_workers(60)

    worker_cmd: started W times by start() (None: start the workers later, with
    start_workers() or run_workers()). worker_env: a list of per-rank environments (e.g.
    BYTECOMP_MACHINE for hierarchical jobs). fixed_ranks: workers get BYTECOMP_RANK=i (the
    C++ test workers rely on it); otherwise the scheduler assigns ranks in arrival order.
    python_workers: the workers find the shim and `python_path` (PYTHONPATH) and use one
    thread each (W workers share this machine's cores)."""

    def __init__(self, workers, servers=1, worker_cmd=None, workdir=None,
                 heartbeat_timeout_ms=None, partition_bytes=None, extra_env=None,
                 scheduler_args=(), worker_env=None, fixed_ranks=True, python_workers=False,
                 python_path=(), stop_grace_s=3.0):
        self.num_workers, self.num_servers = workers, servers
        self.worker_cmd = worker_cmd
        # Python workers (torch on shared cores) get more slack before a silence counts.
        if heartbeat_timeout_ms is None:
            heartbeat_timeout_ms = 5000 if python_workers else 2000
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.partition_bytes = partition_bytes
        self.extra_env = dict(extra_env or {})
        self.scheduler_args = list(scheduler_args)
        self.worker_env = worker_env or [{} for _ in range(workers)]
        self.fixed_ranks = fixed_ranks
        self.python_workers = python_workers
        self.python_path = list(python_path)
        self.stop_grace_s = stop_grace_s
        # A work directory made here goes when the job ends well; after a failure it stays,
        # with every process's log (dump() names them).
        self._own_dir = workdir is None
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="bytecomp-cluster-")
        self.dir = str(workdir)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.server_ports = [free_port() for _ in range(servers)]
        self.scheduler = None
        self.old_schedulers = []
        self.old_servers = []
        self.servers = []
        self.workers = []

    # -- starting ----------------------------------------------------------------------------
    def _spawn(self, role, rank, cmd, env=None, name=None):
        name = name or (role if rank is None else f"{role}{rank}")
        log_path = os.path.join(self.dir, f"{name}.log")
        full_env = dict(os.environ)
        full_env.update(self.extra_env)
        full_env.update(env or {})
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        _live.append(proc)
        return Node(role, rank, proc, log_path)

    def start(self):
        sched = [binary("bytecomp-scheduler"), f"--port={self.port}", "--bind_host=127.0.0.1",
                 f"--num_workers={self.num_workers}", f"--num_servers={self.num_servers}",
                 f"--heartbeat_timeout_ms={self.heartbeat_timeout_ms}",
                 "--heartbeat_interval_ms=200"]
        if self.python_workers:
            sched.append("--connect_timeout_ms=30000")  # importing torch takes a while
        if self.partition_bytes:
            sched.append(f"--partition_bytes={self.partition_bytes}")
        self._scheduler_cmd = sched + self.scheduler_args
        self.scheduler = self._spawn("scheduler", None, self._scheduler_cmd)
        for i in range(self.num_servers):
            self.servers.append(self._spawn("server", i, self._server_cmd(i)))
        if self.worker_cmd is not None:
            self.start_workers(self.worker_cmd)
        return self

    def restart_scheduler(self, extra_args=()):
        """Starts the scheduler again with the same flags (and `extra_args`, which override
        them) on the same port (after it died):
        the job's nodes rejoin it. The new process becomes self.scheduler (log
        scheduler-<n>.log); the old ones stay in self.old_schedulers."""
        self.old_schedulers.append(self.scheduler)
        self.scheduler = self._spawn("scheduler", None, self._scheduler_cmd + list(extra_args),
                                     name=f"scheduler-{len(self.old_schedulers) + 1}")
        return self.scheduler

    def _server_cmd(self, rank):
        return [binary("bytecomp-server"), f"--scheduler={self.address}", f"--rank={rank}",
                "--bind_host=127.0.0.1", "--advertise_host=127.0.0.1",
                f"--port={self.server_ports[rank]}"]

    def restart_server(self, rank):
        """Starts server `rank` again on its port (after it died): it registers for its rank
        and, with server failover, takes its keys over. The new process becomes
        self.servers[rank] (log server<rank>-<n>.log); the old ones stay in self.old_servers."""
        self.old_servers.append(self.servers[rank])
        n = sum(1 for s in self.old_servers if s.rank == rank) + 1
        self.servers[rank] = self._spawn("server", rank, self._server_cmd(rank),
                                         name=f"server{rank}-{n}")
        return self.servers[rank]

    def worker_environment(self, rank, extra=None):
        env = {"BYTECOMP_SCHEDULER": self.address, "BYTECOMP_CONNECT_TIMEOUT_MS": "30000"}
        if self.fixed_ranks:
            env["BYTECOMP_RANK"] = str(rank)
        if self.python_workers:
            paths = [SHIM] + self.python_path + [os.environ.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
            env["OMP_NUM_THREADS"] = "1"  # W workers share this machine's cores
        env.update(self.worker_env[rank] if rank < len(self.worker_env) else {})
        env.update(extra or {})
        return env

    def start_workers(self, cmd, env=None, per_worker_env=None):
        for i in range(self.num_workers):
            extra = dict(env or {})
            extra.update((per_worker_env or {}).get(i, {}))
            self.workers.append(self._spawn("worker", i, list(cmd),
                                            self.worker_environment(i, extra)))
        return self.workers

    def run_workers(self, argv, timeout_s=90, python=PYTHON, env=None,
                    per_worker_env=None):
        """Starts W copies of `python argv...` and waits for all of them (at most timeout_s;
        then AssertionError with every process's output). Returns the worker Nodes."""
        workers = self.start_workers([python] + list(argv), env, per_worker_env)
        codes = self.wait_workers(timeout_s)
        if None in codes:
            raise AssertionError(f"workers did not finish within {timeout_s} s\n" + self.dump())
        return workers

    # -- waiting -----------------------------------------------------------------------------
    def wait_workers(self, timeout):
        """Waits for every worker; returns their exit codes (None for one still running)."""
        deadline = time.monotonic() + timeout
        for w in self.workers:
            try:
                w.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [w.proc.poll() for w in self.workers]

    def wait_node(self, node, timeout):
        """The node's exit status, or None if it still runs after timeout seconds."""
        try:
            return node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_scheduler(self, timeout=15):
        return self.wait_node(self.scheduler, timeout)

    def rounds_done(self):
        """The last round every worker reported (exact_sum_worker's "round k/N" lines)."""
        done = []
        for w in self.workers:
            rounds = re.findall(r"^round (\d+)/", w.output(), re.M)
            done.append(int(rounds[-1]) if rounds else 0)
        return min(done)

    def wait_workers_print(self, text, timeout=60):
        """Waits until every worker's output holds `text` (e.g. "round 10/"); AssertionError
        with every process's output after timeout seconds."""
        if not wait_for(lambda: all(text in w.output() for w in self.workers), timeout):
            raise AssertionError(f"not every worker printed {text!r} within {timeout} s\n" +
                                 self.dump())

    # -- reporting and stopping --------------------------------------------------------------
    def nodes(self):
        return [n for n in self.old_schedulers + [self.scheduler] + self.old_servers +
                self.servers + self.workers if n is not None]

    def dump(self):
        """Every process's exit status and the tail of its output, for assertion messages."""
        return "\n".join(f"===== {n.name} (rc={n.proc.poll()}) {n.log_path}\n{tail(n.output())}"
                         for n in self.nodes())

    def check_workers_ok(self):
        bad = [w for w in self.workers if w.proc.poll() != 0]
        assert not bad, f"workers failed: {bad}\n" + self.dump()

    def stop(self):
        for n in reversed(self.nodes()):
            _stop(n.proc, self.stop_grace_s)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if exc_type is None:
            # Whatever the test checked, no process may have logged a broken invariant of its
            # own (the engine's "internal error: ..."); the work directory then stays.
            broken = [f"{n.name} ({n.log_path}): {line.strip()}" for n in self.nodes()
                      for line in n.output().splitlines() if "internal error" in line]
            if broken:
                raise AssertionError("internal errors logged:\n" + "\n".join(broken[:20]))
            if self._own_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        return False


def python_cluster(workdir, workers, servers=1, extra_scheduler_flags=(), **kwargs):
    """A Cluster for Python training workers (the shims' tests): ranks in arrival order."""
    return Cluster(workers, servers, workdir=workdir, scheduler_args=extra_scheduler_flags,
                   python_workers=True, fixed_ranks=False, **kwargs)


def run_command(argv, env, timeout_s):
    """Runs argv in its own session; at timeout the whole process group is killed and rc is
    None. Returns (rc, output, seconds)."""
    start = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    _live.append(p)
    try:
        out, _ = p.communicate(timeout=timeout_s)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    finally:
        if p in _live:
            _live.remove(p)
    return rc, out.decode("utf-8", "replace"), time.monotonic() - start


def run_python(code, env, timeout_s, python=PYTHON):
    """Runs `python -c code` like run_command."""
    return run_command([python, "-c", code], env, timeout_s)


LAUNCHER = os.path.join(REPO, "deploy", "bytecomp-run")


def launch_kill_and_finish(workdir, launcher_args, kill_pattern, taken_up, rounds=100,
                           started="[worker 1] round 10/", sig=signal.SIGKILL):
    """Runs deploy/bytecomp-run with launcher_args (-np W among them) and exact_sum_worker for
    `rounds` rounds (held at the end until released), output to workdir/launcher.log. Once its
    output holds `started`, sends `sig` (SIGKILL) to the process whose command line matches
    kill_pattern (pgrep -f), waits for `taken_up` in the output, releases the workers and
    waits for the launcher. Asserts its exit status 0 and every worker's exact sums; returns
    its output. The whole job is killed whatever happens."""
    workers = int(launcher_args[list(launcher_args).index("-np") + 1])
    hold_file = os.path.join(workdir, "release")
    log_path = os.path.join(workdir, "launcher.log")
    worker_argv = [binary("exact_sum_worker"), "--rounds", str(rounds), "--max-bytes", "100000",
                   "--hold-file", hold_file]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["/usr/bin/python3", LAUNCHER, "--bin-dir", BIN_DIR] + list(launcher_args) + ["--"]
            + list(worker_argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _live.append(proc)

    def output():
        with open(log_path, errors="replace") as f:
            return f.read()
    try:
        assert wait_for(lambda: started in output(), 90), output()
        found = subprocess.run(["pgrep", "-f", kill_pattern], capture_output=True,
                               text=True).stdout.split()
        assert found, f"no process matches {kill_pattern!r}:\n" + output()
        os.kill(int(found[0]), sig)
        assert wait_for(lambda: taken_up in output(), 30), output()
        with open(hold_file, "w") as f:
            f.write("go")
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = output()
    assert rc == 0, out
    for w in range(workers):
        assert f"[worker {w}] ALL SUMS EXACT: {rounds} rounds" in out, out
    return out


def write_plan_cluster(path, machines, servers, gbps=1.0, latency_us=50):
    """A planner ClusterDescription (--plan_cluster) for machines without GPUs on this host:
    worker and server links of gbps and latency_us, the host's cores. Returns path."""
    with open(path, "w") as f:
        f.write(f"machines: {machines}\ngpus_per_machine: 0\nservers: {servers}\n"
                f"worker_link {{ bandwidth_gbps: {gbps} latency_us: {latency_us} }}\n"
                f"server_link {{ bandwidth_gbps: {gbps} latency_us: {latency_us} }}\n"
                f"cpu_pool_threads: 2\nhost_cores: {os.cpu_count()}\n")
    return str(path)

