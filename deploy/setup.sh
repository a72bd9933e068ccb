#!/usr/bin/env bash
# Installs the system packages (Debian 12, root) that the build, the tests and the main job
# need: `setup.sh` everything the test command uses (deploy/test.sh), `setup.sh --main` only
# what building the daemons and the engine and running the main job need (deploy/main.sh: no
# clang, sanitizer runtimes, browser, Prometheus, packaging tools or MXNet environment).
# Idempotent: a package already present is not fetched again.
# Quiet: one line per step; apt's and pip's output goes to $BYTECOMP_SETUP_LOG (default
# /tmp/bytecomp-setup.log) and is printed only when a step fails. BYTECOMP_VERBOSE_SETUP=1
# shows it as it comes.
set -euo pipefail

setup_log=${BYTECOMP_SETUP_LOG:-/tmp/bytecomp-setup.log}
: >"$setup_log"
# Runs a command with its output in the log (or on the terminal when verbose); on failure the
# log's tail is printed, so the cause is on screen without the noise of a good run.
quietly() {
  if [ "${BYTECOMP_VERBOSE_SETUP:-0}" = 1 ]; then
    "$@"
    return
  fi
  if ! "$@" >>"$setup_log" 2>&1; then
    echo "[setup] failed: $* (last lines of $setup_log below)" >&2
    tail -n 30 "$setup_log" >&2
    return 1
  fi
}

profile=all
case "${1:-}" in
  "") ;;
  --main) profile=main ;;
  *) echo "setup.sh: unknown argument '$1' (--main)" >&2; exit 2 ;;
esac

# The build (CMake finds GoogleTest even when no test is built), the daemons and the engine,
# and the main job: PyTorch DDP training on digits in network namespaces.
packages=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  googletest libgtest-dev libgmock-dev
  libsodium-dev
  # libcrypto's AES-256-GCM for sealed data frames (common/include/bytecomp/common/frame_seal.h).
  libssl-dev
  # gloo for the workers' collectives (allreduce, allgather over TCP).
  libgloo-dev
  # prometheus-cpp for the daemons' /metrics.
  prometheus-cpp-dev
  iproute2 procps psmisc
  python3-torch python3-sklearn python3-numpy
  # An optimised BLAS for Debian's torch (it calls libblas.so.3, which is otherwise the
  # reference implementation, about 20x slower); the OpenMP build follows torch's threads.
  libopenblas0-openmp
)
if [ "$profile" = all ]; then
  packages+=(
    clang
    # lint.format (test/lint/check_format.sh): the house style, checked.
    clang-format
    # The sanitized and fuzz stages (deploy/check_sanitizers.sh): clang's sanitizer runtimes
    # and libFuzzer, and llvm-symbolizer for readable reports.
    libclang-rt-14-dev llvm-14
    libbenchmark-dev
    python3-pytest python3-venv python3-pip python3-yaml
    # Observability's tests: the real Prometheus server and promtool, headless Chromium for
    # the status page; matplotlib for tools/bytecomp-plot.
    prometheus chromium python3-matplotlib
    # Packaging test (test/package): dpkg-shlibdeps for the .deb's dependencies, debootstrap
    # for the fresh Debian root it installs into, systemd-analyze to verify the installed units.
    dpkg-dev debootstrap systemd
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "[setup] installing ${#missing[@]} packages: ${missing[*]} (log: $setup_log)"
  export DEBIAN_FRONTEND=noninteractive
  quietly apt-get update -qq
  quietly apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "[setup] packages installed"
else
  echo "[setup] all system packages present"
fi

# MXNet for the MXNet shim's tests: mxnet 1.9.1 from PyPI with a numpy it accepts, in a virtual
# environment beside the checkout (it sees Debian's packages for the rest). Best effort: without
# it the MXNet tests are left out and the reason is printed here.
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-mxnet"
if [ "$profile" = main ]; then
  :  # the main job runs no MXNet
elif [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mxnet" 2>/dev/null; then
  echo "[setup] mxnet present in $venv"
elif [ "${BYTECOMP_SKIP_MXNET:-0}" = 1 ]; then
  echo "[setup] BYTECOMP_SKIP_MXNET=1: MXNet tests will be left out"
else
  echo "[setup] creating $venv with mxnet==1.9.1"
  if quietly /usr/bin/python3 -m venv --system-site-packages "$venv" &&
     quietly "$venv/bin/pip" install -q --disable-pip-version-check mxnet==1.9.1 "numpy<1.24" &&
     quietly "$venv/bin/python" -c "import mxnet" ; then
    echo "[setup] mxnet installed"
  else
    echo "[setup] WARNING: mxnet could not be installed or imported ($setup_log); the MXNet" \
         "shim tests will be left out" >&2
    rm -rf "$venv"
  fi
fi

# torch 2.x from PyPI for the shim's tests under a current torch (opt-in: BYTECOMP_TORCH2=1, as
# deploy/test_torch2.sh sets). PyPI's Linux wheel is a CUDA build: torch==2.15.0 with its
# dependencies is 29 wheels, 2.97 GB (torch 539 MB, cudnn 519 MB, cublas 405 MB, triton 286 MB,
# ...), which import torch needs even on a CPU (measured: 162 s to download here).
torch2_version=${BYTECOMP_TORCH2_VERSION:-2.15.0}
venv="$root/.venv-torch2"
if [ "${BYTECOMP_TORCH2:-0}" = 1 ]; then
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "[setup] torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') present in $venv"
  else
    echo "[setup] creating $venv with torch==$torch2_version (about 3 GB from PyPI)"
    rm -rf "$venv"
    # Debian's numpy, sklearn and pytest are seen; the venv's torch shadows Debian's.
    if quietly /usr/bin/python3 -m venv --system-site-packages "$venv" &&
       quietly "$venv/bin/pip" install -q --disable-pip-version-check "torch==$torch2_version" &&
       quietly "$venv/bin/python" -c "import torch" ; then
      echo "[setup] torch $torch2_version installed in $venv"
    else
      echo "[setup] WARNING: torch $torch2_version could not be installed ($setup_log)" >&2
      rm -rf "$venv"
    fi
  fi
fi
