#!/usr/bin/env bash
# README command (a), as root: installs what is needed, builds, and trains a model whose
# gradients dominate the step (an MLP of 4.3M parameters on the digits data set, PyTorch DDP
# with ByteComp's comm hook) on 4 emulated machines joined by 1 Gbit/s links (network
# namespaces and tc tbf, deploy/netns_cluster.sh --colocate: a ByteComp server beside each
# worker), three times: uncompressed, the planner's strategy (--strategy=auto) and one fixed
# codec both ways. It ends with a side-by-side table: samples/s, bytes per step (each
# machine's NIC, and ByteComp's own), final test accuracy. Without network namespaces (not
# root, or no CAP_NET_ADMIN) it runs on loopback and says so in the table's heading.
# About 3-5 minutes after the build on an idle 2-core machine.
#   CODEC=topk WORKERS=4 RATE=1gbit EPOCHS=8 MODEL=mlp bash deploy/main.sh
#   SYSTEMS=ddp-gloo,bc-none,bc-auto,bc-topk bash deploy/main.sh     # add DDP over gloo
# CODEC: a preset of shim/bytecomp/strategy.py (fp16 topk onebit qsgd efsignsgd dgc powersgd
# randomk). ByteComp runs in plain TCP, as DDP's gloo does; CLUSTER_KEY=1 gives it its cluster
# key (CURVE, encrypted: slower on these 2 cores). bench/e2e/ddp_bench.py is the full benchmark
# against DDP's hooks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/deploy/setup.sh"
bash "$root/deploy/build.sh"
build=${BUILD_DIR:-$root/build}
export BYTECOMP_LIBRARY="$build/lib/libbytecomp_worker.so"
exec /usr/bin/python3 "$root/bench/e2e/ddp_bench.py" --bin-dir "$build/bin" \
  --systems "${SYSTEMS:-bc-none,bc-auto,bc-${CODEC:-topk}}" --models "${MODEL:-mlp}" --reps 1 \
  --workers "${WORKERS:-4}" --rate "${RATE:-1gbit}" --epochs "${EPOCHS:-8}" \
  ${CLUSTER_KEY:+--cluster-key}
