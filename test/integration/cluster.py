"""A local ByteComp cluster of real processes for integration tests.

Starts bytecomp-scheduler, S bytecomp-server and W worker processes on loopback, each in its
own session (process group), with output captured to files. Every process is bounded in time
and killed on exit, whether the test passes or fails (context manager + atexit).
"""
import atexit
import os
import signal
import socket
import subprocess
import tempfile
import time

BIN_DIR = os.environ.get(
    "BYTECOMP_BIN_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))

_live = []


def _kill_all_live():
    for proc in list(_live):
        _stop(proc)


atexit.register(_kill_all_live)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, interval=0.05):
    """Polls predicate() until it is true (returns True) or timeout seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def binary(name):
    path = os.path.join(BIN_DIR, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name} not found in {BIN_DIR} (build first)")
    return path


def _stop(proc, grace=3.0):
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


class Node:
    def __init__(self, role, rank, proc, log_path):
        self.role, self.rank, self.proc, self.log_path = role, rank, proc, log_path

    @property
    def name(self):
        return self.role if self.rank is None else f"{self.role} {self.rank}"

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


class Cluster:
    def __init__(self, workers, servers, worker_cmd, heartbeat_timeout_ms=2000,
                 partition_bytes=None, extra_env=None, scheduler_args=(), worker_env=None):
        self.num_workers, self.num_servers = workers, servers
        self.worker_cmd = worker_cmd
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.partition_bytes = partition_bytes
        self.extra_env = extra_env or {}
        self.scheduler_args = list(scheduler_args)
        # Per worker rank: extra environment (e.g. BYTECOMP_MACHINE for hierarchical jobs).
        self.worker_env = worker_env or [{} for _ in range(workers)]
        self.dir = tempfile.mkdtemp(prefix="bytecomp-cluster-")
        self.port = free_port()
        self.server_ports = [free_port() for _ in range(servers)]
        self.scheduler = None
        self.servers = []
        self.workers = []

    def _spawn(self, role, rank, cmd, env=None):
        name = role if rank is None else f"{role}{rank}"
        log_path = os.path.join(self.dir, f"{name}.log")
        log = open(log_path, "wb")
        full_env = dict(os.environ)
        full_env.update(self.extra_env)
        full_env.update(env or {})
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
        log.close()
        _live.append(proc)
        return Node(role, rank, proc, log_path)

    def start(self):
        sched = [binary("bytecomp-scheduler"), f"--port={self.port}",
                 f"--num_workers={self.num_workers}", f"--num_servers={self.num_servers}",
                 f"--heartbeat_timeout_ms={self.heartbeat_timeout_ms}",
                 "--heartbeat_interval_ms=200"]
        if self.partition_bytes:
            sched.append(f"--partition_bytes={self.partition_bytes}")
        sched += self.scheduler_args
        self.scheduler = self._spawn("scheduler", None, sched)
        for i in range(self.num_servers):
            self.servers.append(self._spawn("server", i, [
                binary("bytecomp-server"), f"--scheduler=127.0.0.1:{self.port}", f"--rank={i}",
                "--bind_host=127.0.0.1", f"--port={self.server_ports[i]}"]))
        for i in range(self.num_workers):
            self.workers.append(self._spawn("worker", i, self.worker_cmd, dict(
                self.worker_env[i],
                BYTECOMP_SCHEDULER=f"127.0.0.1:{self.port}", BYTECOMP_RANK=str(i))))
        return self

    def nodes(self):
        return [n for n in [self.scheduler] + self.servers + self.workers if n is not None]

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
        try:
            return node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        for n in reversed(self.nodes()):
            _stop(n.proc)

    def dump(self):
        """All logs, for assertion messages."""
        return "\n".join(f"===== {n.name} (rc={n.proc.poll()})\n{n.output()[-4000:]}"
                         for n in self.nodes())

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
