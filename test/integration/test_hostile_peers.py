"""Peers that reach a live job's ports without being its nodes, and workers that declare beyond
the job's limits, are refused, counted, and change nothing: the daemons' resident memory stays
under the bounds stated below, and the real workers still get exact sums.

Without a cluster key (these tests), "a peer without the key" is any process on loopback; it
has no node's token. The attacks are the issue's: on a server's data port, the pull of a round's
sum, a value pushed as worker 1, a push with the error field set, a pull for a far round (whose
error must not say the key's round), and the pulls of every new round never read; on the
scheduler's port, a million one-byte messages never read, registering as a taken worker rank, as
a server, and as worker 1 every millisecond (a rank thief), shutting the job down without its
token; a frame announced as 1 GiB on either, and as 2 MiB on the scheduler's (it takes 1 MiB);
300 connections to either; 40 declarations of 2^40 elements and an 8 MiB tensor name (sent in
parts); and a local size of 2^31 - 1. (While the registration window is open, before the
job is full, only the cluster key keeps impostors out.)"""
import os
import re
import select
import socket
import struct
import subprocess
import time

import cluster

ATTACK_S = 6.0


def rss_mb(pid):
    """Resident memory of a process, from /proc/PID/status (VmRSS), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError(f"no VmRSS for pid {pid}")


def zmtp_big_frame(port, frame_bytes=1 << 30):
    """Speaks ZMTP 3.0 (NULL mechanism, as a DEALER) to 127.0.0.1:port, announces one frame of
    frame_bytes and sends 64 KiB of it. Returns True when the peer closed the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\x00") +
                  b"\x00" + b"\x00" * 31)
        greeting = b""
        while len(greeting) < 64:
            chunk = s.recv(64 - len(greeting))
            if not chunk:
                return True
            greeting += chunk
        prop = bytes([len("Socket-Type")]) + b"Socket-Type" + struct.pack(">I", 6) + b"DEALER"
        body = bytes([5]) + b"READY" + prop
        s.sendall(bytes([0x04, len(body)]) + body)
        s.sendall(bytes([0x02]) + struct.pack(">Q", frame_bytes) + b"\x00" * 65536)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if not s.recv(65536):
                    return True  # closed: the frame was refused before its bytes were held
            except socket.timeout:
                continue
            except ConnectionResetError:
                return True
        return False
    finally:
        s.close()


def connections_cut(port, count, enough, seconds=10):
    """Opens `count` TCP connections to 127.0.0.1:port and says how many the daemon closed
    within `seconds`, or as soon as `enough` were (those beyond its connection caps are cut as they are accepted; what ZeroMQ
    sends first, its greeting, is read and skipped). Closes them all."""
    conns = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
    cut, deadline = set(), time.monotonic() + seconds
    try:
        while len(cut) < enough and time.monotonic() < deadline:
            live = [s for s in conns if s not in cut]
            ready, _, _ = select.select(live, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            for s in ready:
                try:
                    if not s.recv(4096):
                        cut.add(s)
                except OSError:
                    cut.add(s)
    finally:
        for s in conns:
            s.close()
    return len(cut)


def test_floods_big_frames_impostors_and_huge_declarations_change_nothing(tmp_path):
    # Both workers first declare 40 tensors of 2^40 elements and one with an 8 MiB name (the
    # job's limits refuse them), then sum 40 tensors until the attacks are over
    # (--until-file); rank 1 is slowed (at least 150 ms a round), so the job's own load stays
    # what it was when these bounds were set. Under a sanitizer tensors of up to 1 MB, not 2.
    done = tmp_path / "done"
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--until-file", str(done),
           "--max-bytes", str(cluster.sized(2000000, 1000000)),
           "--hostile-declarations", "1", "--slow-rank", "1", "--slow-ms", "30"]
    # Under ASan the scheduler refuses a flood's messages about 9 times slower (41,000 a second
    # alone, against 370,000 in the plain build), and here it shares 2 cores with two
    # busy-looping flooders and the job: its heartbeats once stalled past the 2 s timeouts and
    # the job ended. There the nodes allow 10 s of silence; the plain build keeps 2 s.
    silence_ms = cluster.sized(2000, 10000)
    # Under ASan a process also holds the blocks it freed, up to ASan's quarantine: 32 MB here
    # for the job's processes. With ASan's default of 256 MB the scheduler's peak under the
    # control flood came out within a few MB of the bound either way (468 MB against 464).
    quarantine, env = 0, {}
    if cluster.SANITIZER == "asan":
        quarantine = 32
        env["ASAN_OPTIONS"] = ":".join(o for o in (os.environ.get("ASAN_OPTIONS", ""),
                                                    f"quarantine_size_mb={quarantine}") if o)
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd, heartbeat_timeout_ms=silence_ms,
                         scheduler_args=[f"--scheduler_timeout_ms={silence_ms}"],
                         extra_env=env) as c:
        c.wait_workers_print("round 10/")
        server, scheduler = c.servers[0].proc.pid, c.scheduler.proc.pid
        # The job's own working set, sampled while it sums.
        base_server = max(rss_mb(server) for _ in range(5) if time.sleep(0.1) is None)
        base_scheduler = max(rss_mb(scheduler) for _ in range(5) if time.sleep(0.1) is None)
        # 300 connections to each port: beyond the job's caps (about 44 for this server's
        # data socket, 28 for the scheduler's, its own connections included) they are cut when
        # accepted, so partial messages cannot be held on all of them. Before the floods: from
        # the same address they would take the floods' places while they last.
        for port, cap in ((c.server_ports[0], 44), (c.port, 28)):
            cut = connections_cut(port, 300, 300 - cap, seconds=cluster.sized(10, 30))
            assert cut >= 300 - cap, (port, cut)
        floods = [
            subprocess.Popen([cluster.binary("hostile_peer"), "pull-flood",
                              f"tcp://127.0.0.1:{c.server_ports[0]}", str(ATTACK_S)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
            subprocess.Popen([cluster.binary("hostile_peer"), "control-flood",
                              f"tcp://127.0.0.1:{c.port}", str(ATTACK_S)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        ]
        try:
            # A frame announced as 1 GiB: the connection is dropped, nothing is held.
            assert zmtp_big_frame(c.server_ports[0]), "the server kept a 1 GiB frame's connection"
            assert zmtp_big_frame(c.port), "the scheduler kept a 1 GiB frame's connection"
            # The scheduler takes frames of at most 1 MiB from anyone (a node's larger reports
            # come in parts, after it registered): a 2 MiB frame is refused as well.
            assert zmtp_big_frame(c.port, 2 << 20), "the scheduler kept a 2 MiB frame's connection"
            impostor = subprocess.run([cluster.binary("hostile_peer"), "control-impostor",
                                       f"tcp://127.0.0.1:{c.port}"],
                                      capture_output=True, text=True, timeout=60)
            assert impostor.returncode == 0, impostor.stdout + impostor.stderr + c.dump()
            assert "0 of 6 impostor messages accepted" in impostor.stdout, impostor.stdout
            assert "0 impostor messages accepted in all" in impostor.stdout, impostor.stdout
            # Pulls of the sum, pushes and aborts as worker 1, a far round: each refused for
            # want of the worker's token, no error naming the key's round.
            bad = subprocess.run([cluster.binary("bad_input_client"),
                                  f"tcp://127.0.0.1:{c.server_ports[0]}", "0", "1"],
                                 capture_output=True, text=True, timeout=200)  # 16 x 8 s its own
            assert bad.returncode == 0, bad.stdout + bad.stderr + c.dump()
            assert "16 of 16 bad requests answered with the expected error" in bad.stdout
            peak_server, peak_scheduler = base_server, base_scheduler
            end = time.monotonic() + ATTACK_S + 1
            while time.monotonic() < end:
                peak_server = max(peak_server, rss_mb(server))
                peak_scheduler = max(peak_scheduler, rss_mb(scheduler))
                time.sleep(0.1)
        finally:
            outs = [f.communicate(timeout=30)[0] for f in floods]
        sent = [int(re.search(r"sent (\d+)", o).group(1)) for o in outs]
        assert sent[0] > 10000 and sent[1] > 10000, outs
        print(impostor.stdout, *outs, sep="\n")
        print(f"RSS MB: server {base_server:.0f} -> peak {peak_server:.0f}, "
              f"scheduler {base_scheduler:.0f} -> peak {peak_scheduler:.0f}")
        # The declarations of 2^40 elements came before the base was sampled: the issue saw
        # them grow a server to 538 MB.
        assert base_server < 256 + quarantine, base_server
        # The bound: twice the job's own working set (the issue saw 26 MB grow to 2.9 GB).
        assert peak_server <= 2 * base_server + quarantine, (peak_server, base_server, outs)
        assert peak_scheduler <= 2 * base_scheduler + quarantine, (peak_scheduler, base_scheduler, outs)
        assert all(w.proc.poll() is None for w in c.workers), \
            "the job ended before the attacks did: " + c.dump()
        done.write_text("done")
        codes = c.wait_workers(timeout=240)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            assert "HOSTILE DECLARATIONS SENT" in w.output()
            rounds = re.search(r"ALL SUMS EXACT: (\d+) rounds x 40 tensors, W=2", w.output())
            assert rounds and int(rounds.group(1)) > 10, c.dump()
        assert c.wait_node(c.servers[0], 15) == 0, c.dump()
        assert c.wait_scheduler() == 0, c.dump()
        sched = c.scheduler.output()
        assert "ClusterConfig.max_declared_bytes" in sched, sched[-3000:]
        assert "ClusterConfig.max_tensor_name_bytes" in sched, sched[-3000:]
        # Refusals are counted and summed up; their log lines are rate-limited and short.
        m = re.search(r"bad messages: refused (\d+) messages from (\d+) peers", sched)
        assert m and int(m.group(1)) > 10000, sched[-3000:]
        assert max(len(line) for line in sched.splitlines()) < 4096
        assert len(sched) < 2_000_000, f"scheduler log of {len(sched)} bytes"
        srv = c.servers[0].output()
        m = re.search(r"rejected (\d+) \((\d+) without the sender's token\)", srv)
        assert m and int(m.group(2)) > 10000, srv[-3000:]
        assert len(srv) < 2_000_000, f"server log of {len(srv)} bytes"


def test_a_local_size_beyond_the_job_is_refused_and_the_job_goes_on():
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "3", "--max-bytes", "100000"]
    env = [{"BYTECOMP_MACHINE": "m0", "BYTECOMP_LOCAL_RANK": "0"},
           {"BYTECOMP_MACHINE": "m1", "BYTECOMP_LOCAL_RANK": "0",
            "BYTECOMP_LOCAL_SIZE": "2147483647"}]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd, worker_env=env,
                         scheduler_args=["--hierarchical"]) as c:
        assert c.wait_node(c.workers[1], 30) == 2, c.dump()
        out = c.workers[1].output()
        assert ("declared local size 2147483647 (BYTECOMP_LOCAL_SIZE) is outside [1, 2]: the "
                "job has 2 workers") in out, c.dump()
        assert c.scheduler.proc.poll() is None, "the scheduler died: " + c.dump()
        # The rank is still free: a worker with a sane slot completes the job.
        c.workers[1] = c._spawn("worker", 1, cmd, c.worker_environment(
            1, {"BYTECOMP_LOCAL_SIZE": "1"}))
        codes = c.wait_workers(timeout=120)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            assert "ALL SUMS EXACT: 3 rounds x 40 tensors, W=2" in w.output(), c.dump()
        assert max(len(line) for line in c.scheduler.output().splitlines()) < 4096


def test_servers_take_the_jobs_message_limit_when_it_is_larger_than_their_own():
    # The scheduler's 32 MiB partitions make 20 MB pushes, above the limit of a server started
    # with the default 4 MiB (16.5 MiB): the server binds its port again with the job's limit.
    part = 32 << 20
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "2", "--max-bytes", "21000000",
           "--partition-bytes", str(part)]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd, partition_bytes=part) as c:
        codes = c.wait_workers(timeout=120)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            assert "ALL SUMS EXACT: 2 rounds x 40 tensors, W=2" in w.output(), c.dump()


def test_many_small_tensors_stay_within_the_socket_queues():
    # 20000 one-element tensors on one connection per server: more requests than a data socket
    # queues (16384 messages). The server takes the burst of declarations before the requests
    # that wait for them (else more than kMaxParkedRequests wait and the rest are refused as
    # unknown keys); the worker keeps at most 4096 pushes and 4096 pulls per server
    # unanswered, so the server never has more replies for it than its queue holds.
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "2", "--tiny-tensors", "20000"]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd,
                         scheduler_args=["--connections_per_server=1"]) as c:
        codes = c.wait_workers(timeout=180)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            assert "ALL SUMS EXACT: 2 rounds x 20000 tensors, W=2" in w.output(), c.dump()
