#!/usr/bin/env bash
# Builds the CUDA configuration here (sm_90: H100, H200) and assembles what the GPU machine
# runs: a self-contained folder of stripped binaries, the engine library and every shared
# library they need that the GPU machine lacks (found through ldd), with a launcher that sets
# the library path; then packs it into one archive for the device tool to carry. The check
# itself, deploy/gpu_check.sh, and the Python side (shim, harness, tests) travel with the tree.
#
#   bash deploy/gpu_bundle.sh [--build-dir DIR] [--out DIR] [--no-build] [--no-archive]
#
# Out: DIR (out/gpu-bundle by default) with bin/, lib/, env.sh, run, MANIFEST; and DIR.tar.xz
# unless --no-archive. Then, on the GPU machine (the device tool: carry out/gpu-bundle.tar.xz):
#   bash deploy/gpu_check.sh "$OUT"
# Fails, naming them, when a binary needs a library that is neither bundled nor on
# deploy/gpu_provided_libs.txt, or when the folder or its archive is over 60 MiB (the device
# tool carries 64 MiB with the tree).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
out=$root/out/gpu-bundle
do_build=1
archive=1
while (($#)); do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --no-archive) archive=0; shift ;;
    *) echo "gpu_bundle: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
max_bytes=$((60 << 20))

# What the check runs: the daemons and the planner, the engine library (the shim loads it),
# the GPU codec, device backend, pinned pool and NCCL tests, and the codec benchmark.
bins=(bytecomp-scheduler bytecomp-server bytecomp-plan bytecomp-bench bytecomp-codec-bench
      cuda_codecs_gpu_test device_backend_test cpu_offload_test nccl_reducer_test)
libs=(libbytecomp_worker.so)

if ((do_build)); then
  BUILD_DIR=$build BYTECOMP_CUDA=ON bash "$root/deploy/build.sh" "${bins[@]}" bytecomp_worker
fi
for b in "${bins[@]}"; do
  [ -x "$build/bin/$b" ] || { echo "gpu_bundle: $build/bin/$b is missing (a build without CUDA?)" >&2; exit 1; }
done
for l in "${libs[@]}"; do
  [ -f "$build/lib/$l" ] || { echo "gpu_bundle: $build/lib/$l is missing" >&2; exit 1; }
done

mapfile -t provided < <(grep -v '^#' "$root/deploy/gpu_provided_libs.txt" | sed '/^$/d')
is_provided() {
  local name=$1 p
  for p in "${provided[@]}"; do [ "$p" = "$name" ] && return 0; done
  return 1
}

rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin" "$out/lib"
for b in "${bins[@]}"; do strip --strip-unneeded -o "$out/bin/$b" "$build/bin/$b"; done
for l in "${libs[@]}"; do strip --strip-unneeded -o "$out/lib/$l" "$build/lib/$l"; done

# Every library ldd resolves for the binaries and the engine library (ldd lists the whole
# closure), unless the GPU machine has it: copied under its soname, stripped.
declare -A bundled=()
while read -r name path; do
  is_provided "$name" && continue
  [ -n "${bundled[$name]:-}" ] && continue
  [ -f "$out/lib/$name" ] && continue
  strip --strip-unneeded -o "$out/lib/$name" "$(readlink -f "$path")"
  bundled[$name]=$path
done < <(for f in "$out"/bin/* "$out"/lib/*.so; do ldd "$f"; done |
         awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)

# The closure, read from the files themselves (not from this machine's ldd): each NEEDED entry
# of each bundled file is bundled or provided.
missing=()
for f in "$out"/bin/* "$out"/lib/*; do
  while read -r need; do
    [ -f "$out/lib/$need" ] || is_provided "$need" || missing+=("$(basename "$f") needs $need")
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
if ((${#missing[@]})); then
  printf 'gpu_bundle: not bundled and not on deploy/gpu_provided_libs.txt: %s\n' "${missing[@]}" >&2
  exit 1
fi

# The launcher: the bundle's libraries first, then the CUDA runtime, cuBLAS and NCCL of the
# torch wheels and of the toolkit, and the driver's.
cat >"$out/env.sh" <<'EOF'
# Sourced by deploy/gpu_check.sh (or a shell): the bundle's programs and libraries.
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
gpu_lib_dirs=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "**", "lib"), recursive=True)):
        if glob.glob(os.path.join(d, "lib*.so*")):
            dirs.append(d)
print(":".join(dirs))
PY
)
# Only the bundled libraries this machine lacks go on the path: where it has a soname too
# (zlib, OpenSSL, ...), its own stays, so that python3 and torch, which load them as well,
# find the versions they were built with.
needed=${TMPDIR:-/tmp}/bytecomp-bundle-lib.$(id -u)
rm -rf "$needed" && mkdir -p "$needed"
for f in "$bundle"/lib/*; do
  name=$(basename "$f")
  if [ "$name" = libbytecomp_worker.so ] || ! ldconfig -p | grep -q "^[[:space:]]*$name "; then
    ln -s "$f" "$needed/$name"
  fi
done
export BYTECOMP_BUNDLE=$bundle
export BYTECOMP_BUNDLE_LIBS=$needed
export BYTECOMP_BIN_DIR=$bundle/bin
export BYTECOMP_LIBRARY=$bundle/lib/libbytecomp_worker.so
export PATH=$bundle/bin:$PATH
export LD_LIBRARY_PATH=$needed${gpu_lib_dirs:+:$gpu_lib_dirs}:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
EOF
cat >"$out/run" <<'EOF'
#!/usr/bin/env bash
# Runs a command with the bundle's programs and libraries: run bytecomp-plan --help
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec "$@"
EOF
chmod +x "$out/run"

{
  echo "# ByteComp GPU bundle: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)," \
       "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# cuda architectures: $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")"
  (cd "$out" && find bin lib -type f -printf '%s %p\n' | sort -k2)
} >"$out/MANIFEST"
bytes=$(du -sb "$out" | cut -f1)
echo "gpu_bundle: $out: ${#bins[@]} programs, $(ls "$out/lib" | wc -l) libraries" \
     "(${#bundled[@]} from this machine), $((bytes >> 20)) MiB"
if ((bytes > max_bytes)); then
  echo "gpu_bundle: the bundle is over $((max_bytes >> 20)) MiB" >&2
  exit 1
fi
if ((archive)); then
  XZ_OPT="-6 -T0" tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
  size=$(stat -c %s "$out.tar.xz")
  echo "gpu_bundle: $out.tar.xz: $((size >> 20)) MiB (the device tool carries 64 MiB with the tree)"
  if ((size > max_bytes)); then
    echo "gpu_bundle: the archive is over $((max_bytes >> 20)) MiB" >&2
    exit 1
  fi
fi
