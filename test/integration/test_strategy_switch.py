"""A strategy switch during training (SIGHUP to the scheduler after the file changed) keeps every
sum exact across the switch, every worker uses the same strategy version in each round, and
the servers switch at the same round. An invalid file is rejected with an error naming line and
field, and the old strategy stays."""
import os
import re
import signal

import cluster

ROUNDS = 40
V1 = "seed: 7\n"
BAD = 'seed: 7\ntensors {\n  name_pattern: "*"\n  push_codec { name: "fp61" }\n}\n'
# fp16 both ways is exact for the workers' small-integer values, so sums stay exact.
V2 = ('seed: 7\ntensors {\n  name_pattern: "*"\n  push_codec { name: "fp16" }\n'
      '  pull_codec { name: "fp16" }\n  force: true\n}\n')



def check_one_switch(c, rounds, timeout):
    """Every worker of the cluster c ends with exact sums and reports, round by round, the
    same strategy versions: 1, then 2 from one round on, at which every server switched too.
    Returns that round."""
    codes = c.wait_workers(timeout=timeout)
    assert codes == [0] * len(c.workers), c.dump()
    sequences = []
    for w in c.workers:
        out = w.output()
        assert f"ALL SUMS EXACT: {rounds} rounds" in out, c.dump()
        line = next(l for l in out.splitlines() if l.startswith("STRATEGY VERSIONS BY ROUND:"))
        sequences.append([int(v) for v in line.split(":")[1].split()])
    assert all(s == sequences[0] for s in sequences), sequences
    seq = sequences[0]
    assert seq[0] == 1 and seq[-1] == 2 and seq == sorted(seq), seq
    switch_round = seq.index(2)
    for s in c.servers:
        c.wait_node(s, 15)
        assert f"strategy version 2 from round {switch_round}" in s.output(), c.dump()
    return switch_round

def test_switch_mid_training_keeps_sums_exact_and_versions_agree(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(V1)
    cmd = [cluster.binary("exact_sum_worker"), "--rounds", str(ROUNDS),
           "--max-bytes", str(cluster.sized(1000000, 250000)), "--slow-rank", "1", "--slow-ms", "20"]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=[f"--strategy={path}"]) as c:
        assert cluster.wait_for(lambda: "round 10/" in c.workers[0].output(), 60), c.dump()
        # A broken file: rejected with file, line and field; the job goes on with version 1.
        with open(path, "w") as f:
            f.write(BAD)
        c.scheduler.proc.send_signal(signal.SIGHUP)
        assert cluster.wait_for(lambda: "strategy not reloaded" in c.scheduler.output(), 10), \
            c.dump()
        log = c.scheduler.output()
        assert f"{path}:4:" in log and "tensors[0].push_codec" in log and "fp61" in log, log
        # The real switch.
        with open(path, "w") as f:
            f.write(V2)
        c.scheduler.proc.send_signal(signal.SIGHUP)
        switch_round = check_one_switch(c, ROUNDS, timeout=240)
        assert re.search(rf"strategy version 2 applies from round {switch_round}\b",
                         c.scheduler.output()), c.dump()
