"""A local ByteComp cluster for tests: one bytecomp-scheduler, S bytecomp-server and W worker
processes on loopback, bounded in time, and every process killed whatever happens.

Binaries come from $BYTECOMP_SCHEDULER_BINARY / $BYTECOMP_SERVER_BINARY, else
$BYTECOMP_BUILD_DIR/bin, else <repo>/build/bin. The engine library from $BYTECOMP_LIBRARY
(else the lookup of bytecomp._engine). Each process's output goes to a file in the work
directory; failures quote the tails.
"""

import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SYSTEM_PYTHON = "/usr/bin/python3"


def build_dir():
    return os.environ.get("BYTECOMP_BUILD_DIR", os.path.join(REPO, "build"))


def binary(name):
    env_name = "BYTECOMP_" + name.split("-")[1].upper() + "_BINARY"
    return os.environ.get(env_name) or os.path.join(build_dir(), "bin", name)


def engine_available():
    """(True, "") when the engine library and both daemons exist, else (False, why)."""
    sys.path.insert(0, os.path.join(REPO, "shim"))
    from bytecomp import _engine
    try:
        _engine.find_library()
    except OSError as e:
        return False, str(e)
    for name in ("bytecomp-scheduler", "bytecomp-server"):
        if not os.path.isfile(binary(name)):
            return False, f"{binary(name)} not built"
    return True, ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data[-n:].decode("utf-8", "replace")
    except OSError:
        return "(no output)"


class Process:
    def __init__(self, role, argv, env, log_path):
        self.role, self.log_path = role, log_path
        self._log = open(log_path, "wb")
        # Own session: the whole tree can be killed with one signal to its group.
        self.popen = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self):
        self._log.flush()
        return _tail(self.log_path)

    def kill(self):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


class WorkerResult:
    def __init__(self, index, returncode, output):
        self.index, self.returncode, self.output = index, returncode, output

    def __repr__(self):
        return f"<worker {self.index} rc={self.returncode}>"


class LocalCluster:
    """with LocalCluster(workdir, workers=4, servers=1) as c: results = c.run_workers([...])"""

    def __init__(self, workdir, workers, servers=1, heartbeat_timeout_ms=5000,
                 extra_scheduler_flags=()):
        self.workdir, self.workers, self.servers = str(workdir), workers, servers
        self.procs = []
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.extra_scheduler_flags = list(extra_scheduler_flags)
        self.scheduler = None

    def __enter__(self):
        env = dict(os.environ)
        self.scheduler = self._start("scheduler", [
            binary("bytecomp-scheduler"), f"--scheduler_address={self.address}",
            "--bind_host=127.0.0.1", f"--num_workers={self.workers}",
            f"--num_servers={self.servers}", "--connect_timeout_ms=30000",
            f"--heartbeat_timeout_ms={self.heartbeat_timeout_ms}"] + self.extra_scheduler_flags,
            env)
        for s in range(self.servers):
            self._start(f"server{s}", [
                binary("bytecomp-server"), f"--scheduler={self.address}",
                "--bind_host=127.0.0.1", "--advertise_host=127.0.0.1"], env)
        return self

    def _start(self, role, argv, env):
        p = Process(role, argv, env, os.path.join(self.workdir, f"{role}.log"))
        self.procs.append(p)
        return p

    def worker_env(self, extra=None):
        env = dict(os.environ)
        env["BYTECOMP_SCHEDULER"] = self.address
        env.setdefault("BYTECOMP_CONNECT_TIMEOUT_MS", "30000")
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(REPO, "shim"), HERE] +
            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["OMP_NUM_THREADS"] = "1"  # W workers share 2 cores
        env.update(extra or {})
        return env

    def run_workers(self, argv, timeout_s=90, python=SYSTEM_PYTHON, env=None,
                    per_worker_env=None):
        """Starts W copies of `python argv...`, waits for all (at most timeout_s), returns
        their WorkerResults. On timeout everything is killed and AssertionError raised with
        every process's output."""
        workers = []
        for i in range(self.workers):
            extra = dict(env or {})
            extra.update((per_worker_env or {}).get(i, {}))
            workers.append(self._start(f"worker{i}", [python] + list(argv),
                                       self.worker_env(extra)))
        deadline = time.monotonic() + timeout_s
        for w in workers:
            remaining = deadline - time.monotonic()
            try:
                w.popen.wait(max(remaining, 0.1))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"workers did not finish within {timeout_s} s\n" +
                                     self.report()) from None
        return [WorkerResult(i, w.popen.returncode, w.output()) for i, w in enumerate(workers)]

    def wait_scheduler(self, timeout_s=15):
        """The scheduler's exit status once every worker finished (None if still running)."""
        try:
            return self.scheduler.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def report(self):
        return "\n".join(f"--- {p.role} (rc={p.popen.poll()}) ---\n{p.output()}"
                         for p in self.procs)

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        return False


def run_python(code, env, timeout_s):
    """Runs `python -c code` in its own session, killed at timeout; returns (rc, output,
    seconds)."""
    return run_command([SYSTEM_PYTHON, "-c", code], env, timeout_s)


def run_command(argv, env, timeout_s):
    """Runs argv in its own session; at timeout the whole process group is killed and rc is
    None. Returns (rc, output, seconds)."""
    start = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out.decode("utf-8", "replace"), time.monotonic() - start
    return p.returncode, out.decode("utf-8", "replace"), time.monotonic() - start


if __name__ == "__main__":
    print(engine_available())
    sys.exit(0)
