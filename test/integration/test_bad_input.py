"""A client sending malformed frames, bad link probes, and pushes and pulls as the job's workers
without their tokens (unknown keys, wrong sizes, a wrong dtype, a round far in the future, an
abort, a guessed token) to a live server gets error replies, each counted, while well-behaved
workers beside it still get exact sums and the server keeps running."""
import re
import subprocess
import time

import cluster


def test_bad_requests_get_errors_and_disturb_nothing(tmp_path):
    # The job sums until the two bad clients are done (--until-file); under a sanitizer,
    # smaller tensors.
    done = tmp_path / "done"
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", "100000", "--until-file", str(done),
           "--max-bytes", str(cluster.sized(2000000, 300000))]
    with cluster.Cluster(workers=2, servers=2, worker_cmd=cmd) as c:
        # Once the workers are summing, tensor 0 (fp32, 1 element, the first both workers
        # declared) lives on server 0.
        assert cluster.wait_for(lambda: "round 10/" in c.workers[0].output(), 60), c.dump()
        started = time.monotonic()
        for attempt in range(2):
            bad = subprocess.run(
                [cluster.binary("bad_input_client"), f"tcp://127.0.0.1:{c.server_ports[0]}", "0", "1"],
                capture_output=True, text=True, timeout=120)
            assert bad.returncode == 0, bad.stdout + bad.stderr + c.dump()
            assert "16 of 16 bad requests answered with the expected error" in bad.stdout
            assert c.servers[0].proc.poll() is None, c.dump()
        print(f"two bad clients took {time.monotonic() - started:.1f} s; the workers were at "
              f"round {c.rounds_done()}")
        assert all(w.proc.poll() is None for w in c.workers), \
            "workers finished before the bad client: " + c.dump()
        done.write_text("done")
        codes = c.wait_workers(timeout=240)
        assert codes == [0, 0], c.dump()
        for w in c.workers:
            rounds = re.search(r"ALL SUMS EXACT: (\d+) rounds x 40 tensors, W=2", w.output())
            assert rounds and int(rounds.group(1)) > 10, c.dump()
        assert c.wait_node(c.servers[0], 15) == 0, c.dump()
        out = c.servers[0].output()
        assert "rejected request" in out
        # Counted: 10 requests per run named a worker without its token.
        without = re.search(r"rejected (\d+) \((\d+) without the sender's token\)", out)
        assert without and int(without.group(2)) >= 20, out[-3000:]
