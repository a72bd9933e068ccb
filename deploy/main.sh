#!/usr/bin/env bash
# README command (a): installs what is needed, builds, and runs the main job: a local cluster
# (bytecomp-run: 1 scheduler, S servers, W training processes) training an MLP on the digits
# data set with gradient compression, printing per-epoch loss, accuracy, samples/s and bytes
# sent against uncompressed.
#   CODEC=topk WORKERS=2 SERVERS=1 EPOCHS=20 bash deploy/main.sh
# CODEC: none fp16 topk onebit qsgd efsignsgd dgc powersgd randomk (presets: shim/bytecomp/strategy.py)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/deploy/setup.sh"
bash "$root/deploy/build.sh"
export BYTECOMP_LIBRARY="${BUILD_DIR:-$root/build}/lib/libbytecomp_worker.so"
exec /usr/bin/python3 "$root/examples/train_digits.py" \
  --workers "${WORKERS:-2}" --servers "${SERVERS:-1}" --epochs "${EPOCHS:-20}" \
  --codec "${CODEC:-topk}" ${TWO_WAY:+--two-way}
