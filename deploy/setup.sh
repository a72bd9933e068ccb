#!/usr/bin/env bash
# Installs every system package the build, the tests and the main job need (Debian 12, root).
# Idempotent: a package already present is not fetched again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libsodium-dev
  iproute2 procps psmisc
  python3-torch python3-sklearn python3-numpy python3-pytest python3-venv python3-pip
  python3-yaml
  # Packaging test (test/package): dpkg-shlibdeps for the .deb's dependencies, debootstrap for
  # the fresh Debian root it installs into, systemd-analyze to verify the installed units.
  dpkg-dev debootstrap systemd
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all system packages present"
fi

# MXNet for the MXNet shim's tests: mxnet 1.9.1 from PyPI with a numpy it accepts, in a virtual
# environment beside the checkout (it sees Debian's packages for the rest). Best effort: without
# it the MXNet tests are left out and the reason is printed here.
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-mxnet"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mxnet" 2>/dev/null; then
  echo "[setup] mxnet present in $venv"
elif [ "${BYTECOMP_SKIP_MXNET:-0}" = 1 ]; then
  echo "[setup] BYTECOMP_SKIP_MXNET=1: MXNet tests will be left out"
else
  echo "[setup] creating $venv with mxnet==1.9.1"
  if /usr/bin/python3 -m venv --system-site-packages "$venv" &&
     "$venv/bin/pip" install -q --disable-pip-version-check mxnet==1.9.1 "numpy<1.24" &&
     "$venv/bin/python" -c "import mxnet" ; then
    echo "[setup] mxnet installed"
  else
    echo "[setup] WARNING: mxnet could not be installed or imported (see above); the MXNet" \
         "shim tests will be left out" >&2
    rm -rf "$venv"
  fi
fi
