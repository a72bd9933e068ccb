"""The PyTorch shim with CUDA tensors through a real cluster, on a GPU (deploy/gpu_check.sh runs
these on the GPU machine; without a CUDA device they skip, and the suite does not run them).

W=2 workers sharing the one GPU, S=1 server, on loopback:
- every GPU codec (the GPU placement forced by the strategy) on CUDA tensors gives the same bits
  as the same job on host tensors (CPU codecs), over rounds with error feedback, and so do CUDA
  tensors summed by the collectives (allreduce, and top-k allgather); integer sums are exact;
- DistributedDataParallel on CUDA with bytecomp.torch.ddp_comm_hook ends where DDP's own
  allreduce (gloo) ends."""
import os
import re
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test", "harness"))
sys.path.insert(0, os.path.join(REPO, "test", "python"))

from cluster import engine_available, python_cluster  # noqa: E402
from equivalence_common import max_relative_difference  # noqa: E402

available, why = engine_available()
needs_gpu = pytest.mark.skipif(not (available and torch.cuda.is_available()),
                               reason=why if not available else "no CUDA device")

# (codec, params, memory): the codecs with GPU kernels (compress/include/bytecomp/compress/
# gpu_codecs.h), each with a memory it fuses where it has one.
GPU_CODECS = [
    ("fp16", {}, ""), ("bf16", {}, ""),
    ("topk", {"ratio": "0.01"}, "residual"), ("randomk", {"ratio": "0.1"}, "residual"),
    ("dgc", {"ratio": "0.01"}, "dgc_momentum"), ("qsgd", {}, ""), ("terngrad", {}, ""),
    ("natural", {}, ""), ("signsgd", {}, ""), ("efsignsgd", {}, "efsignsgd"), ("signum", {}, ""),
    ("onebit", {}, "residual"), ("u8bit", {}, "residual"), ("dithering", {}, "residual"),
    ("inceptionn", {}, "residual"), ("sketch", {}, "residual"), ("threshold", {}, "residual"),
    ("adaq", {}, "residual"), ("blocksparse", {}, "residual"),
    ("powersgd", {"rank": "2"}, "powersgd"),  # two rounds on the device (DeviceTwoRound)
    ("artopk", {"ratio": "0.01"}, "residual"),  # two rounds, the chooser's indices
]


# Tensors summed among the workers by the collectives (gloo, through the pinned host copy).
COLLECTIVES = ['tensors { name_pattern: "allreduce.*" force: true scheme: SCHEME_ALLREDUCE }',
               'tensors { name_pattern: "allgather.*" push_codec { name: "topk" params { key: '
               '"ratio" value: "0.01" } memory: "residual" } force: true scheme: SCHEME_ALLGATHER }']


def strategy_text():
    lines = ["version: 1", "first_round: 0", "seed: 1234"] + COLLECTIVES
    for name, params, memory in GPU_CODECS:
        lines += ["tensors {", f'  name_pattern: "{name}.*"', "  push_codec {", f'    name: "{name}"']
        lines += [f'    params {{ key: "{k}" value: "{v}" }}' for k, v in params.items()]
        if memory:
            lines.append(f'    memory: "{memory}"')
        lines += ["  }", "  force: true", "  compress_on: PLACEMENT_GPU",
                  "  decompress_on: PLACEMENT_GPU", "}"]
    return "\n".join(lines) + "\n"


def run_job(tmp_path, device, codecs):
    strategy = tmp_path / "strategy.pbtxt"
    strategy.write_text(strategy_text())
    with python_cluster(tmp_path / device, workers=2, servers=1, partition_bytes=65536,
                        extra_scheduler_flags=["--collectives",
                                               f"--strategy={strategy}"]) as cluster:
        # The uncompressed allreduce of CUDA tensors runs through NCCL. Both workers share the
        # one GPU, which NCCL refuses within a host: another host id each makes them two
        # "machines", so NCCL takes its network transport, as across real machines.
        cluster.run_workers([os.path.join(HERE, "workers", "gpu_codecs_worker.py"),
                             str(tmp_path), device, ",".join(codecs)], timeout_s=150,
                            per_worker_env={r: {"NCCL_HOSTID": f"bytecomp-gpu-check-{r}"}
                                            for r in range(2)})
        cluster.check_workers_ok()
        return [w.output() for w in cluster.workers]


@needs_gpu
def test_cuda_tensors_through_every_gpu_codec_match_the_cpu_codecs_bit_for_bit(tmp_path):
    codecs = [c for c, _, _ in GPU_CODECS] + ["allreduce", "allgather"]
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cpu").mkdir()
    outputs = run_job(tmp_path, "cuda", codecs)
    run_job(tmp_path, "cpu", codecs)
    # Every codec ran on the GPU: a GPU placement the engine cannot honour is logged.
    for out in outputs:
        assert "so it runs on the CPU pool" not in out, out[-4000:]
        # The allreduce tensors went through NCCL.
        assert re.search(r"; (\d+) summed in device memory \(NCCL\)", out), out[-4000:]
    for rank in range(2):
        gpu = torch.load(tmp_path / f"rank{rank}.cuda.pt")
        cpu = torch.load(tmp_path / f"rank{rank}.cpu.pt")
        assert sorted(gpu) == sorted(cpu)
        differ = [key for key in sorted(gpu) if not torch.equal(gpu[key], cpu[key])]
        assert not differ, f"rank {rank}: GPU and CPU codecs disagree on {differ}"
        want = sum((torch.arange(4099, dtype=torch.float32) % 1000 + r) for r in range(2))
        assert torch.equal(gpu[("exact", 0)], want)


@needs_gpu
def test_ddp_comm_hook_on_cuda_ends_where_ddp_over_gloo_ends(tmp_path):
    with python_cluster(tmp_path, workers=2, servers=1,
                        python_path=[os.path.join(REPO, "test", "python")]) as cluster:
        cluster.run_workers([os.path.join(REPO, "test", "python", "workers", "torch_ddp.py"),
                             str(tmp_path), "cuda"], timeout_s=150)
        cluster.check_workers_ok()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    gloo = ranks[0]["gloo"]
    for rank, got in enumerate(ranks):
        assert got["device"] == "cuda"
        for per in ("parameter", "bucket"):
            diff = max_relative_difference(got[per]["params"], gloo["params"])
            assert diff < 1e-5, f"rank {rank} per {per}: relative difference {diff} to gloo"
