#!/usr/bin/env bash
# The GPU check: runs on the GPU machine (one H100 or H200, CUDA 13, python3 with torch; no
# package installs, no network) from the bundle deploy/gpu_bundle.sh made here, in at most 8
# minutes, and writes what it found into OUTDIR: gpu_check.log (every step's output),
# gpu_check.json (a summary: the GPU, each step's result, seconds and figures), the cost tables
# measured on the GPU (costs-gpu.pbtxt: every codec's defaults; costs-gpu-nominal.pbtxt: the
# shipped table's codecs), each codec's speed (gpu_speed.txt) and the measured model profiles
# (MODEL-GPU.pbtxt).
#
#   bash deploy/gpu_check.sh OUTDIR [--steps env,codecs,...]
#
# The bundle: out/gpu-bundle/ or out/gpu-bundle.tar.xz in this tree (the device tool carries it:
# carry out/gpu-bundle.tar.xz), or $BYTECOMP_BUNDLE. Steps, in order (each bounded in time; a
# failed step does not stop the others; steps left when 7.5 minutes have passed are skipped):
#   env         the GPU, the driver, torch; every bundled program finds its libraries
#   codecs      every CUDA codec's bytes against the CPU codec's (cuda_codecs_gpu_test)
#   device      the CUDA device backend (device_backend_test)
#   pinned      the pinned pool's cudaHostAlloc blocks (cpu_offload_test)
#   nccl        NCCL through the hierarchical path's reducer: a one-rank communicator, all
#               that one GPU allows (nccl_reducer_test)
#   torch       W=2 S=1 jobs of two processes sharing the GPU through the PyTorch shim: CUDA
#               tensors through every GPU codec against host tensors, bit for bit; DDP on CUDA
#               with bytecomp's comm hook against DDP's own allreduce (test/gpu)
#   calibrate   bytecomp-plan --calibrate on the GPU, then a plan with that table; each GPU
#               codec's encode and decode speed on 64 MiB next to a device-to-device copy, and
#               top-k next to torch.topk, in this run
#   profiles    resnet50, vgg16 and bert-base's forward and ready gaps measured on the GPU
#               (bench/e2e/gpu_profiles.py)
# Exit status: 0 when every step that ran passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
outdir=${1:?usage: deploy/gpu_check.sh OUTDIR [--steps a,b,...]}
shift
steps=env,codecs,device,pinned,nccl,torch,calibrate,profiles
[ "${1:-}" = --steps ] && steps=$2
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
log=$outdir/gpu_check.log
results=$outdir/steps.tsv
: >"$log"
: >"$results"
start=$(date +%s)
deadline=$((start + 450))

say() { echo "[gpu_check] $*" | tee -a "$log"; }

# The bundle.
bundle=${BYTECOMP_BUNDLE:-}
if [ -z "$bundle" ]; then
  if [ -d "$root/out/gpu-bundle" ]; then
    bundle=$root/out/gpu-bundle
  elif [ -f "$root/out/gpu-bundle.tar.xz" ]; then
    mkdir -p /tmp/bytecomp-gpu && tar -C /tmp/bytecomp-gpu -xJf "$root/out/gpu-bundle.tar.xz"
    bundle=/tmp/bytecomp-gpu/gpu-bundle
  fi
fi
if [ -z "$bundle" ] || [ ! -f "$bundle/env.sh" ]; then
  say "no bundle: run 'bash deploy/gpu_bundle.sh' on the build machine and carry out/gpu-bundle.tar.xz"
  exit 2
fi
# shellcheck disable=SC1091
source "$bundle/env.sh"
say "bundle: $(head -1 "$bundle/MANIFEST")"
export PYTHONUNBUFFERED=1
# The python3 that has torch (the GPU machine's plain python3; PYTHON overrides).
python=${PYTHON:-python3}

# step NAME SECONDS COMMAND...: runs it bounded in time, its output into the log.
step() {
  local name=$1 limit=$2
  shift 2
  [[ ",$steps," == *",$name,"* ]] || return 0
  local now
  now=$(date +%s)
  if ((now + 20 > deadline)); then
    say "$name: skipped (the check's 8 minutes are nearly spent)"
    printf '%s\tskipped\t0\n' "$name" >>"$results"
    return 0
  fi
  ((limit > deadline - now)) && limit=$((deadline - now))
  say "$name: $* (at most ${limit} s)"
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" >>"$log" 2>&1
  rc=$?
  local took=$((SECONDS - t0)) result=passed
  ((rc == 124 || rc == 137)) && result=timeout
  ((rc != 0 && rc != 124 && rc != 137)) && result="failed($rc)"
  say "$name: $result after ${took} s"
  printf '%s\t%s\t%s\n' "$name" "$result" "$took" >>"$results"
}

env_step() {
  nvidia-smi -L || return 1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
  local missing=0 f
  for f in "$bundle"/bin/* "$BYTECOMP_LIBRARY"; do
    if ldd "$f" | grep 'not found'; then
      echo "$(basename "$f"): libraries not found (above)"
      missing=1
    fi
  done
  return $missing
}

calibrate_step() {
  # Every registered codec with its default parameters, then the shipped table's codecs (the
  # parameters and memories the planner plans with): CPU costs on this host, GPU costs of
  # each one with a kernel.
  bytecomp-plan --calibrate --costs="$outdir/costs-gpu.pbtxt" || return 1
  bytecomp-plan --calibrate --calibrate_template="$root/scheduler/planner/costs/nominal.pbtxt" \
    --costs="$outdir/costs-gpu-nominal.pbtxt" || return 1
  local table
  for table in costs-gpu costs-gpu-nominal; do
    grep -q "DEVICE_GPU" "$outdir/$table.pbtxt" || { echo "no GPU costs in $table"; return 1; }
  done
  bytecomp-plan --profile="$root/scheduler/planner/profiles/resnet50.pbtxt" \
    --cluster="$root/scheduler/planner/clusters/8x1gpu-10g.pbtxt" \
    --costs="$outdir/costs-gpu-nominal.pbtxt" --out=/tmp/bytecomp-plan-resnet50.pbtxt \
    --table=false || return 1
  "$python" "$root/deploy/gpu_speed.py" "$outdir/costs-gpu.pbtxt" \
    "$outdir/costs-gpu-nominal.pbtxt" | tee "$outdir/gpu_speed.txt"
}

# The steps' shell functions run under timeout in a child bash.
export -f env_step calibrate_step
export root outdir bundle python
cd "$root" || exit 2
step env 60 env_step
step codecs 150 cuda_codecs_gpu_test
step device 60 device_backend_test
step pinned 60 cpu_offload_test --gtest_filter='PinnedMemoryPool.*'
step nccl 90 nccl_reducer_test
step torch 240 "$python" -m pytest -q -p no:cacheprovider -rs test/gpu
step calibrate 150 calibrate_step
step profiles 180 "$python" bench/e2e/gpu_profiles.py --out "$outdir" --iters 10

# The summary.
python3 - "$results" "$outdir" "$((SECONDS))" >"$outdir/gpu_check.json" <<'PY'
import json, os, subprocess, sys
results, outdir, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [dict(zip(("step", "result", "seconds"), line.rstrip("\n").split("\t")))
         for line in open(results) if line.strip()]
for s in steps:
    s["seconds"] = int(s["seconds"])
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20).stdout.strip()
except Exception as e:  # noqa: BLE001
    gpu = f"unknown ({e})"
speed = os.path.join(outdir, "gpu_speed.txt")
print(json.dumps({"gpu": gpu, "seconds": seconds, "steps": steps,
                  "passed": all(s["result"] in ("passed", "skipped") for s in steps),
                  "codec_speed": open(speed).read().splitlines() if os.path.exists(speed) else [],
                  "files": sorted(os.listdir(outdir))}, indent=2))
PY
rm -f "$results"
say "summary: $outdir/gpu_check.json"
cat "$outdir/gpu_check.json" | tee -a "$log"
! grep -q '"passed": false' "$outdir/gpu_check.json"
