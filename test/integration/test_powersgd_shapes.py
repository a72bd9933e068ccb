"""PowerSGD on a layer's real shape, end to end: the shim declares a tensor with its shape
(bytecomp_declare_shape), the scheduler cuts it into whole rows and tells the workers and the
server, and every node's powersgd reads it as the layer's rows (48 x 30). A rank-2 layer sum is
then recovered exactly (the local reference: the sum of the workers' gradients), where the same
tensor declared flat (a near-square 38 x 38 matrix, not rank 2) is not."""
import json
import os
import tempfile

import cluster

HERE = os.path.dirname(os.path.abspath(__file__))


def test_a_shaped_layer_goes_through_powersgd_as_its_rows():
    work = tempfile.mkdtemp(prefix="bytecomp-powersgd-")
    strategy = os.path.join(work, "strategy.pbtxt")
    with open(strategy, "w") as f:
        f.write('tensors { name_pattern: "layer.*" push_codec { name: "powersgd" '
                'params { key: "rank" value: "2" } } force: true }\n')
    with cluster.Cluster(workers=2, servers=1, python_workers=True,
                         scheduler_args=[f"--strategy={strategy}"]) as c:
        procs = c.run_workers([os.path.join(HERE, "powersgd_shape_worker.py")], timeout_s=120)
        assert [p.returncode for p in procs] == [0, 0], c.dump()
        results = [json.loads(p.output().strip().splitlines()[-1]) for p in procs]
    for r in results:
        assert r["errors"]["layer.shaped"] < 1e-5, results
        assert r["errors"]["layer.flat"] > 0.05, results
