"""--strategy=auto end to end: workers profile their gradients' ready times, the scheduler plans
with the ByteComp algorithm for a 1 Gbit/s cluster description and switches every node to the
planned strategy mid-run, and training goes on through it."""
import os
import re

import cluster

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
PLANNER = os.path.join(REPO, "scheduler", "planner")


def test_auto_strategy_plans_from_measured_profiles_and_switches():
    cmd = [cluster.binary("bytecomp-bench"), "--preset=resnet50", "--rounds=10", "--warmup=0",
           "--check=false"]
    args = ["--strategy=auto", "--profile_rounds=3",
            f"--plan_cluster={os.path.join(PLANNER, 'clusters', '4x1gpu-1g.pbtxt')}",
            f"--plan_costs={os.path.join(PLANNER, 'costs', 'nominal.pbtxt')}"]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd, scheduler_args=args) as c:
        codes = c.wait_workers(timeout=240)
        assert codes == [0, 0], c.dump()
        assert c.wait_node(c.scheduler, 15) == 0, c.dump()
        log = c.scheduler.output()
        planned = re.search(r"--strategy=auto: planned 162 tensors \(flat\) in [\d.]+ ms: (\d+) compressed",
                            log)
        assert planned and int(planned.group(1)) > 0, log
        # The profiled rounds ran uncompressed and were timed: the link fit says what it did
        # (on loopback they beat the 1 Gbit/s description, so the links are kept).
        assert "the profiled (uncompressed) rounds took" in log, log
        switch = re.search(r"strategy version 2 applies from round (\d+)", log)
        assert switch and int(switch.group(1)) <= 6, log
        assert f"strategy version 2 from round {switch.group(1)}" in c.servers[0].output(), c.dump()
        assert '"bench":"bytecomp-bench"' in c.workers[0].output(), c.dump()
