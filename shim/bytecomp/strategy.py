"""Strategy files (proto/strategy.proto, text format) for a codec chosen by name.

The scheduler holds the Strategy and broadcasts it to every worker and server; a training
script does not pick codecs itself. This module writes the file that the launcher hands to the
scheduler (bytecomp-run ... --strategy FILE), for the common case "this codec for every
tensor". Presets follow GRACE/BytePS names and the issue's evaluation rows.
"""

# name -> (codec params, memory): the configurations the convergence table evaluates.
PRESETS = {
    "none": ({}, ""),
    "fp16": ({}, ""),
    "topk": ({"ratio": "0.01"}, "residual"),
    "onebit": ({}, "residual"),
    "qsgd": ({"quantum_num": "127"}, ""),
    "efsignsgd": ({}, "efsignsgd"),
    "dgc": ({"ratio": "0.01"}, "dgc_momentum"),
    "powersgd": ({"rank": "2"}, "powersgd"),
    "randomk": ({"ratio": "0.1"}, "residual"),
    # AR-Topk: one worker's top-k indices, every worker's values there, summed (two rounds).
    "artopk": ({"ratio": "0.01"}, "residual"),
}


def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _codec_block(field, name, params, memory):
    lines = [f"  {field} {{", f"    name: {_quote(name)}"]
    for key in sorted(params):
        lines.append(f"    params {{ key: {_quote(key)} value: {_quote(params[key])} }}")
    if memory:
        lines.append(f"    memory: {_quote(memory)}")
    lines.append("  }")
    return lines


def strategy_text(codec, params=None, memory=None, two_way=False, min_compress_bytes=None,
                  force=False, seed=0, name_pattern="grad/*", pull_memory="",
                  adaptive_ratio=None, scheme=None):
    """A Strategy applying `codec` to every tensor matching name_pattern (by default every
    gradient of DistributedOptimizer; broadcasts and metrics stay exact). params/memory default
    to the preset for the name; two_way re-encodes pulls with the same codec on the servers;
    force compresses tensors under min_compress_bytes (64 KiB) too; pull_memory is the servers'
    error-feedback memory for the re-encode (two_way): "" gives them the push codec's memory
    (the nodes resolve it: compress/strategy.h, PlanFor), "none" none; adaptive_ratio, a dict of
    proto/strategy.proto AdaptiveRatio fields (min_ratio, max_ratio, window_rounds, ...), lets
    the scheduler change the codec's ratio within bounds during training; scheme "allreduce" or
    "allgather" sums the tensors among the workers with gloo instead of on the servers (the job
    needs ClusterConfig.collectives: bytecomp-scheduler --collectives; one-way only)."""
    preset_params, preset_memory = PRESETS.get(codec, ({}, ""))
    params = preset_params if params is None else params
    memory = preset_memory if memory is None else memory
    lines = ["# Written by bytecomp.strategy: one codec for every tensor.", "version: 1",
             "first_round: 0", f"seed: {int(seed)}"]
    if min_compress_bytes is not None:
        lines.append(f"min_compress_bytes: {int(min_compress_bytes)}")
    lines.append("tensors {")
    lines.append(f"  name_pattern: {_quote(name_pattern)}")
    if codec and codec != "none":
        lines += _codec_block("push_codec", codec, params, memory)
        if two_way:
            lines += _codec_block("pull_codec", codec, params, pull_memory)
    if force:
        lines.append("  force: true")
    if scheme and scheme != "ps":
        if two_way:
            raise ValueError(f"scheme {scheme} is one-way: two_way must be False")
        lines.append(f"  scheme: SCHEME_{scheme.upper()}")
    if adaptive_ratio:
        lines.append("  adaptive_ratio {")
        for key in sorted(adaptive_ratio):
            lines.append(f"    {key}: {adaptive_ratio[key]}")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_strategy(path, codec, **kwargs):
    with open(path, "w") as f:
        f.write(strategy_text(codec, **kwargs))
    return path
