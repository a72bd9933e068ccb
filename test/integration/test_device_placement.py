"""Device tensors (bytecomp_push_pull_device) through a real cluster on the emulated device
(BYTECOMP_DEVICE_BACKEND=emulated, a test facility: device memory is host memory, device codecs
are the CPU codecs run in stream order; see worker/device/.../emulated_device.h).

W=2 workers, S=1 server, 3 partitions per fp32 tensor (2 per fp16 one). Every worker checks every result bit for bit
against the reference it computes locally with the CPU codecs (codec_cluster_worker.cc), which
is also what host tensors on the CPU pool must equal (test_codecs). Each device tensor's
gradient is written by work queued on its stream just before the call, so an engine that read
it early would push NaN. The emulated device's codec call counts show which stages ran on the
device."""
import os
import re

import cluster
from test_codecs import codec_block

ELEMENTS, PARTITION_BYTES, ROUNDS = 4099, 8192, 3
PARTS = -(-ELEMENTS // (PARTITION_BYTES // 4))

# (codec, params, memory); every one has device kernels (powersgd and artopk two rounds of them:
# each round two encodes on the device, then its decode there).
CODECS = [
    ("topk", {"ratio": "0.01"}, "residual"), ("randomk", {"ratio": "0.1"}, "residual"),
    ("qsgd", {}, ""), ("efsignsgd", {}, "efsignsgd"), ("dgc", {"ratio": "0.01"}, "dgc_momentum"),
    ("fp16", {}, ""), ("powersgd", {"rank": "2"}, "powersgd"), ("blocksparse", {}, ""),
    ("u8bit", {}, ""), ("artopk", {"ratio": "0.01"}, "residual"),
]
TWO_ROUND = ("powersgd", "artopk")
GPU, CPU, DEFAULT = "PLACEMENT_GPU", "PLACEMENT_CPU_POOL", "PLACEMENT_DEFAULT"


def tensors():
    """(name, codec or None, placement, two_way); placement: one for both stages, or
    (compress_on, decompress_on)."""
    out = []
    for name, params, memory in CODECS:
        for placement in (GPU, CPU):
            for two_way in (False, True):
                way = "twoway" if two_way else "oneway"
                tag = "gpu" if placement == GPU else "cpu"
                out.append((f"{name}.{way}.{tag}.dev", (name, params, memory), placement, two_way))
    # No placement: the GPU for device tensors (strategy.proto).
    out.append(("qsgd.twoway.default.dev", CODECS[2], DEFAULT, True))
    # Encode on the device, decode on the pool, and the reverse.
    out.append(("topk.twoway.gpu-cpu.dev", CODECS[0], (GPU, CPU), True))
    out.append(("randomk.twoway.cpu-gpu.dev", CODECS[1], (CPU, GPU), True))
    # A host tensor whose strategy says GPU: compressed on the pool, and the engine says so.
    out.append(("topk.twoway.gpu.host", CODECS[0], GPU, True))
    # fp16 tensors: the device codecs take fp32, so a GPU placement runs on the pool (logged).
    out.append(("topk.twoway.gpu.dev.f16", CODECS[0], GPU, True))
    # A two-round codec's decode follows its encode; averaged, both run on the pool (logged).
    out.append(("powersgd.oneway.gpu.dev.avg", CODECS[6], GPU, False))
    out.append(("plain.dev.f16", None, GPU, False))
    out.append(("plain.dev.avg.f16", None, GPU, False))
    out.append(("plain.dev", None, GPU, False))
    out.append(("plain.dev.avg", None, GPU, False))
    out.append(("plain.host", None, GPU, False))
    # Collectives (COLLECTIVES): summed among the workers through the pinned host copy.
    out.append(("allreduce.plain.dev", None, GPU, False))
    out.append(("allgather.topk.gpu.dev", CODECS[0], GPU, False))
    out.append(("allgather.topk.default.dev", CODECS[0], DEFAULT, False))
    return out


# A collective's sum of W=2 contributions is the servers' (fp32 addition of two terms does not
# depend on their order), so the reference holds for them too.
COLLECTIVES = {"allreduce.plain.dev": "SCHEME_ALLREDUCE",
               "allgather.topk.gpu.dev": "SCHEME_ALLGATHER",
               "allgather.topk.default.dev": "SCHEME_ALLGATHER"}


def strategy_text():
    lines = ["seed: 4321"]
    for name, codec, placement, two_way in tensors():
        lines += ["tensors {", f'  name_pattern: "{name}"']
        if codec is not None:
            lines += codec_block("push_codec", *codec)
            if two_way:
                lines += codec_block("pull_codec", *codec)
            encode_on, decode_on = stages(placement)
            if encode_on != DEFAULT:
                lines.append(f"  compress_on: {encode_on}")
            if decode_on != DEFAULT:
                lines.append(f"  decompress_on: {decode_on}")
            lines.append("  force: true")
        if name in COLLECTIVES:
            lines.append(f"  scheme: {COLLECTIVES[name]}")
        lines.append("}")
    return "\n".join(lines) + "\n"


def stages(placement):
    return placement if isinstance(placement, tuple) else (placement, placement)


def expected_device_calls():
    """Device codec calls: device tensors whose stage the strategy puts on the GPU (or leaves
    at the default); a two-round codec's where its encode is (two encodes and a decode a
    round), averaged ones on the pool."""
    encodes = decodes = 0
    for name, codec, placement, two_way in tensors():
        if (codec is None or ".dev" not in name or name.endswith(".f16")
                or name in COLLECTIVES):
            continue
        encode_on, decode_on = stages(placement)
        if codec[0] in TWO_ROUND:
            if encode_on != CPU and ".avg" not in name:
                encodes += 2 * ROUNDS * PARTS
                decodes += ROUNDS * PARTS
            continue
        if encode_on != CPU:
            encodes += ROUNDS * PARTS
        if two_way and decode_on != CPU:
            decodes += ROUNDS * PARTS
    return encodes, decodes


def expected_state_saves():
    """Device tensors encoded on the device with an error-feedback memory refuse
    bytecomp_save_state; the others save."""
    refused = saved = 0
    for name, codec, placement, _ in tensors():
        if codec is None or ".dev" not in name:
            continue
        on_device = (stages(placement)[0] != CPU and name not in COLLECTIVES
                     and not (codec[0] in TWO_ROUND and ".avg" in name))
        if on_device and codec[2] and not name.endswith(".f16"):
            refused += 1
        else:
            saved += 1
    return refused, saved


def test_device_tensors_on_the_emulated_device_match_the_reference(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write(strategy_text())
    cmd = [cluster.binary("codec_cluster_worker"), f"--strategy={path}", f"--rounds={ROUNDS}",
           f"--elements={ELEMENTS}", f"--partition_elements={PARTITION_BYTES // 4}", "--device"]
    with cluster.Cluster(workers=2, servers=1, worker_cmd=cmd, partition_bytes=PARTITION_BYTES,
                         scheduler_args=["--collectives", f"--strategy={path}"],
                         extra_env={"BYTECOMP_DEVICE_BACKEND": "emulated"}) as c:
        codes = c.wait_workers(timeout=120)
        assert codes == [0, 0], c.dump()
        encodes, decodes = expected_device_calls()
        for w in c.workers:
            out = w.output()
            assert f"ALL {len(tensors())} TENSORS MATCH THE REFERENCE for {ROUNDS} rounds" in out, c.dump()
            assert f"EMULATED DEVICE: encodes={encodes} decodes={decodes}" in out, c.dump()
            # The collectives summed every partition of every round of their tensors.
            summed = re.search(r"collectives: (\d+) partition rounds summed or gathered", out)
            assert summed and int(summed.group(1)) == len(COLLECTIVES) * ROUNDS * PARTS, out
            refused, saved = expected_state_saves()
            assert f"DEVICE STATE: refused={refused} saved={saved}" in out, c.dump()
            # Once per tensor, not silently and not every round.
            assert out.count("'topk.twoway.gpu.host': the strategy places its compression on "
                             "the GPU, but it was given in host memory") == 1, out
            assert out.count("'powersgd.oneway.gpu.dev.avg': the strategy places its encode on "
                             "the GPU, but powersgd is two-round, its decode follows its encode, "
                             "and averaging (BYTECOMP_FLAG_AVERAGE) is done on the host") == 1, out
            assert "'powersgd.oneway.gpu.dev':" not in out, out
            assert out.count("'topk.twoway.gpu.dev.f16': the strategy places its encode on the "
                             "GPU, but fp16 tensors are converted to fp32 on the host") == 1, out


def test_device_api_without_a_device_refuses_clearly(tmp_path):
    path = os.path.join(tmp_path, "strategy.pbtxt")
    with open(path, "w") as f:
        f.write("seed: 1\n")
    cmd = [cluster.binary("codec_cluster_worker"), f"--strategy={path}", "--expect_device_refusal"]
    env = {"BYTECOMP_DEVICE_BACKEND": ""}
    with cluster.Cluster(workers=1, servers=1, worker_cmd=cmd, extra_env=env) as c:
        assert c.wait_workers(timeout=30) == [0], c.dump()
        out = c.workers[0].output()
        if "DEVICE PRESENT" in out:
            return  # a machine with a GPU: the device API works there
        assert "DEVICE REFUSED rc=-1" in out, out
        assert ("this engine was built without CUDA" in out
                or "no usable CUDA device for a device tensor (cudaGetDeviceCount:" in out), out
