"""Configuration errors stop a daemon or a worker at once, naming what is wrong: the file, line
and field of a value out of range (also when a product would overflow), the environment
variable of a value that does not fit, and a scheduler host that does not resolve."""
import os

import pytest

import cluster


def env(**extra):
    e = dict(os.environ)
    e.update(extra)
    return e


def scheduler(config_text, tmp_path, **extra_env):
    path = tmp_path / "cluster.pbtxt"
    path.write_text(config_text)
    rc, out, _ = cluster.run_command([cluster.binary("bytecomp-scheduler"), f"--config={path}",
                                      f"--port={cluster.free_port()}", "--bind_host=127.0.0.1"],
                                     env(**extra_env), timeout_s=30)
    return rc, out, str(path)


def test_a_negative_partition_size_names_file_line_and_field(tmp_path):
    rc, out, path = scheduler("num_workers: 2\n# the size\npartition_bytes: -4096\n", tmp_path)
    assert rc == 2, out
    assert f"{path}:3:1: partition_bytes must be in [64, 1073741824], got -4096" in out, out


def test_an_interval_that_would_overflow_is_refused(tmp_path):
    rc, out, path = scheduler("heartbeat_interval_ms: 2147483647\nheartbeat_timeout_ms: 1000\n",
                              tmp_path)
    assert rc == 2, out
    assert (f"{path}:2:1: heartbeat_timeout_ms must be >= 2 x heartbeat_interval_ms "
            "(4294967294), got 1000") in out, out


def test_an_environment_value_that_does_not_fit_names_the_variable(tmp_path):
    rc, out, _ = scheduler("", tmp_path, BYTECOMP_NUM_WORKERS="4294967298")
    assert rc == 2, out
    assert ("environment variable BYTECOMP_NUM_WORKERS='4294967298' is out of range for "
            "num_workers") in out, out


@pytest.mark.parametrize("variable, value, said", [
    ("BYTECOMP_COMPRESS_THREADS", "100000", "BYTECOMP_COMPRESS_THREADS='100000' is not a thread "
     "count in [1, 256]"),
    ("BYTECOMP_PUSH_PULL_TIMEOUT_MS", "0", "environment variable BYTECOMP_PUSH_PULL_TIMEOUT_MS="
     "'0': push_pull_timeout_ms must be at least 1"),
])
def test_a_workers_variable_is_checked_before_it_connects(variable, value, said):
    """With no scheduler anywhere, the error names the variable, not the scheduler, at once."""
    rc, out, seconds = cluster.run_command(
        [cluster.binary("exact_sum_worker"), "--rounds", "1"],
        env(**{variable: value, "BYTECOMP_SCHEDULER": "127.0.0.1:1",
               "BYTECOMP_CONNECT_TIMEOUT_MS": "30000"}),
        timeout_s=30)
    assert rc != 0 and said in out, out
    assert "no topology from the scheduler" not in out, out
    assert seconds < 10, seconds


def test_a_scheduler_host_that_does_not_resolve_is_said_at_once():
    rc, out, seconds = cluster.run_command(
        [cluster.binary("exact_sum_worker"), "--rounds", "1"],
        env(BYTECOMP_SCHEDULER="no-such-host.invalid:9000", BYTECOMP_CONNECT_TIMEOUT_MS="30000"),
        timeout_s=30)
    assert rc == 2, out
    assert "scheduler host 'no-such-host.invalid'" in out and "does not resolve" in out, out
    assert "is bytecomp-scheduler running" not in out, out
    assert seconds < 15, seconds
