"""Every codec through the cluster, W=4, S=2, one-way and two-way: each worker checks every
pulled result bit for bit against the reference aggregation it computes locally from the same
encoded bytes (codec_cluster_worker.cc)."""
import os

import cluster

# (codec, params, memory): every registered codec, with GRACE/BytePS defaults unless noted;
# "codec+label" names a second entry of one codec.
# "none" is the uncompressed path, which sums in arrival order (in place, no copy) and so is
# exact only for exactly representable sums: test_exact_sums covers it.
CODECS = [
    ("fp16", {}, ""), ("bf16", {}, ""),
    ("topk", {"ratio": "0.01"}, "residual"), ("randomk", {"ratio": "0.1"}, "residual"),
    ("threshold", {"threshold": "0.5"}, ""), ("dgc", {"ratio": "0.01"}, "dgc_momentum"),
    ("qsgd", {}, ""), ("terngrad", {}, ""), ("signsgd", {}, ""), ("efsignsgd", {}, "efsignsgd"),
    ("signum", {}, ""), ("onebit", {}, "residual"), ("natural", {}, ""), ("u8bit", {}, ""),
    ("dithering", {}, ""), ("powersgd", {"rank": "2"}, "powersgd"), ("adaq", {}, ""),
    ("sketch", {}, ""), ("inceptionn", {}, ""),
    # Block-sparse inputs (codec_cluster_worker.cc); "+ef": a threshold with error feedback,
    # whose two-way pull the servers re-encode with their own residual (threshold 0 two-way is
    # answered with the aggregator's block-sparse sum, as one-way is).
    ("blocksparse", {}, ""), ("blocksparse+ef", {"threshold": "0.5"}, "residual"),
    # artopk's two choosers: round robin (the default) and the largest smoothed norm.
    ("artopk", {"ratio": "0.01"}, "residual"),
    ("artopk+largest_norm", {"ratio": "0.01", "chooser": "largest_norm"}, "residual"),
]


def codec_block(field, name, params, memory):
    lines = [f"  {field} {{", f'    name: "{name}"']
    for k, v in params.items():
        lines.append(f'    params {{ key: "{k}" value: "{v}" }}')
    if memory:
        lines.append(f'    memory: "{memory}"')
    lines.append("  }")
    return lines


def strategy_text():
    lines = ["seed: 1234"]
    for name, params, memory in CODECS:
        for two_way in (False, True):
            lines.append("tensors {")
            lines.append(f'  name_pattern: "{name}.{"twoway" if two_way else "oneway"}"')
            codec = name.split("+")[0]
            lines += codec_block("push_codec", codec, params, memory)
            if two_way and codec != "none":
                lines += codec_block("pull_codec", codec, params, memory)
            lines.append("  force: true")
            lines.append("}")
    return "\n".join(lines) + "\n"


def test_every_codec_one_way_and_two_way_matches_the_reference(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(strategy_text())
    cmd = [cluster.binary("codec_cluster_worker"), f"--strategy={path}", "--rounds=3",
           "--elements=4099"]
    with cluster.Cluster(workers=4, servers=2, worker_cmd=cmd,
                         scheduler_args=[f"--strategy={path}"]) as c:
        codes = c.wait_workers(timeout=240)
        assert codes == [0, 0, 0, 0], c.dump()
        for w in c.workers:
            assert f"ALL {2 * len(CODECS)} TENSORS MATCH THE REFERENCE for 3 rounds" in w.output(), c.dump()
