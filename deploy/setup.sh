#!/usr/bin/env bash
# Installs every system package the build, the tests and the main job need (Debian 12, root).
# Idempotent: a package already present is not fetched again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libsodium-dev
  iproute2 procps psmisc
  python3-torch python3-sklearn python3-numpy python3-pytest python3-venv python3-pip
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
