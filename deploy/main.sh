#!/usr/bin/env bash
# README command (a), as root: installs what is needed, builds, and trains a model whose
# gradients dominate the step (an MLP of 4.3M parameters on the digits data set) on 4 emulated
# machines joined by 1 Gbit/s links (network namespaces and tc tbf, deploy/netns_cluster.sh
# --colocate: a ByteComp server beside each worker), five times: PyTorch DDP over gloo and with
# its PowerSGD hook (what a user already runs), then DDP with ByteComp's comm hook uncompressed,
# with the planner's strategy (--strategy=auto) and with one fixed codec both ways. It ends with
# a side-by-side table: samples/s, the ratio to DDP over gloo and to the better DDP, bytes per
# step (each machine's NIC, and ByteComp's own), final test accuracy. Without network
# namespaces (not root, or no CAP_NET_ADMIN) it runs on loopback and says so in the table's
# heading.
# It sets up only what it uses (deploy/setup.sh --main) and builds only what it runs: the
# daemons, bytecomp-keygen and the engine library (no tests, no tools), without CUDA where no GPU
# is present (when it makes the build directory; a compiler cache where one is installed).
# From a fresh clone on a 2-core machine the table comes within 8 minutes.
#   CODEC=topk WORKERS=4 RATE=1gbit EPOCHS=8 MODEL=mlp bash deploy/main.sh
#   SYSTEMS=bc-none,bc-auto,bc-topk bash deploy/main.sh     # ByteComp alone
# CODEC: a preset of shim/bytecomp/strategy.py (fp16 topk onebit qsgd efsignsgd dgc powersgd
# randomk). ByteComp runs in plain TCP, as DDP's gloo does; CLUSTER_KEY=1 gives it its cluster
# key (CURVE, encrypted: slower on these 2 cores). bench/e2e/ddp_bench.py is the full benchmark
# against DDP's hooks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/deploy/setup.sh" --main
if [ ! -f "$build/CMakeCache.txt" ] && [ -z "${BYTECOMP_CUDA+set}" ] &&
   ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[main] no GPU here: the engine is built without CUDA code (BYTECOMP_CUDA=AUTO builds it)"
  export BYTECOMP_CUDA=OFF
fi
bash "$root/deploy/build.sh" bytecomp_worker bytecomp-scheduler bytecomp-server bytecomp-keygen
export BYTECOMP_LIBRARY="$build/lib/libbytecomp_worker.so"
exec /usr/bin/python3 "$root/bench/e2e/ddp_bench.py" --bin-dir "$build/bin" \
  --systems "${SYSTEMS:-ddp-gloo,ddp-powersgd,bc-none,bc-auto,bc-${CODEC:-topk}}" --models "${MODEL:-mlp}" --reps 1 \
  --workers "${WORKERS:-4}" --rate "${RATE:-1gbit}" --epochs "${EPOCHS:-8}" \
  ${CLUSTER_KEY:+--cluster-key}
