#!/usr/bin/env bash
# The torch shim's tests under a current torch 2.x from PyPI (README): set-up makes the
# .venv-torch2 virtual environment (BYTECOMP_TORCH2=1; about 3 GB of CUDA-build wheels that
# import torch needs even on a CPU, so it is not part of deploy/test.sh), the build picks it up,
# and ctest runs the python_torch2.* tests: unit tests, equivalence with one process, the DDP
# hook against DDP over gloo and its convergence with top-k, the checkpoint of error feedback.
#   BYTECOMP_TORCH2_VERSION=2.15.0 bash deploy/test_torch2.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BYTECOMP_TORCH2=1 bash "$root/deploy/setup.sh"
bash "$root/deploy/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" -R '^python_torch2\.'
