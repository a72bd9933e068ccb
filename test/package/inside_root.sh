#!/bin/sh
# Runs inside a fresh Debian root (chroot, its own mount and pid namespaces, made by
# test_debian_root.py), as a new machine would: installs the ByteComp package with apt, then
# uses the installed files only. Every step is bounded in time; the driver checks the output.
#   inside_root.sh PACKAGE.deb system   minbase root: the package's own dependencies only;
#                                       checks, bytecomp-plan, a bytecomp-bench job,
#                                       systemd-analyze verify
#   inside_root.sh PACKAGE.deb torch    root with python3-torch: a two-worker PyTorch step
set -eu
deb=$1
steps=$2
case $steps in system|torch) ;; *) echo "inside_root.sh: unknown steps '$steps'"; exit 2;; esac
here=$(dirname "$0")
export DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 OMP_NUM_THREADS=1
apt_opts="-y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io"

phase_start=0
phase() {  # phase NAME: prints how long the previous phase took
  now=$(date +%s)
  [ "$phase_start" = 0 ] || echo "[inside] $phase_name: $((now - phase_start)) s"
  phase_name=$1
  phase_start=$now
}

# apt's lists may be older than the mirror (the root is cached): refresh them once on failure.
apt_install() {
  timeout 900 apt-get install $apt_opts "$@" || {
    echo "[inside] apt-get install failed; refreshing the package lists and retrying"
    timeout 300 apt-get update -q
    timeout 900 apt-get install $apt_opts "$@"
  }
}

phase "installing the package"
apt_install "$deb"
dpkg-query -W -f='[inside] installed ${Package} ${Version}\n' bytecomp

if [ "$steps" = torch ]; then
  phase "two-worker PyTorch step through the installed shim"
  timeout 300 bytecomp-run -np 2 --servers 1 --timeout 240 -- \
    python3 "$here/torch_step.py" /usr/lib/libbytecomp_worker.so
  phase "done"
  echo "[inside] all steps passed"
  exit 0
fi

phase "checking the installed files"
for program in bytecomp-scheduler bytecomp-server bytecomp-plan bytecomp-bench \
               bytecomp-linkprobe bytecomp-codec-bench bytecomp-keygen; do
  path=$(command -v "$program")
  if ldd "$path" | grep "not found"; then
    echo "[inside] $path: a library is missing (the package's Depends are incomplete)"; exit 1
  fi
done
if ldd /usr/lib/libbytecomp_worker.so | grep "not found"; then exit 1; fi
test -f /usr/include/bytecomp/c_api.h
echo "[inside] shim finds $(python3 -c 'import bytecomp._engine as e; print(e.find_library())')"

phase "planning with the installed profile, cluster and cost table"
share=/usr/share/bytecomp
timeout 120 bytecomp-plan --profile "$share/profiles/resnet50.pbtxt" \
  --cluster "$share/clusters/4x1gpu-1g.pbtxt" --costs "$share/costs/nominal.pbtxt" \
  --out /tmp/strategy.pbtxt --table=false
grep -q "^tensors" /tmp/strategy.pbtxt
echo "[inside] bytecomp-plan wrote /tmp/strategy.pbtxt"

phase "bytecomp-bench job: scheduler, server, two workers"
timeout 300 bytecomp-run -np 2 --servers 1 --timeout 240 \
  --config "$share/examples/cluster.pbtxt" -- \
  bytecomp-bench --preset resnet50 --profiles_dir "$share/profiles" --rounds 2 --warmup 1

phase "systemd-analyze verify on the installed units"
# systemd is not a dependency (the units are for machines that run it); a fresh machine that
# uses them has it.
apt_install systemd
mkdir -p /tmp/units
# A template is verified through an instance.
cp /usr/lib/systemd/system/bytecomp-server@.service /tmp/units/bytecomp-server@0.service
complaints=$(timeout 120 systemd-analyze verify --man=no \
  /usr/lib/systemd/system/bytecomp-scheduler.service /tmp/units/bytecomp-server@0.service 2>&1) || {
  echo "$complaints"; echo "[inside] systemd-analyze verify failed"; exit 1; }
if [ -n "$complaints" ]; then
  echo "$complaints"; echo "[inside] systemd-analyze verify complained"; exit 1
fi
echo "[inside] systemd-analyze verify: no complaints"

phase "done"
echo "[inside] all steps passed"
