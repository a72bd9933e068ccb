"""package.gpu_bundle: deploy/gpu_bundle.sh assembles the GPU machine's bundle from this build
(no rebuild, no archive) and its closure holds: every library each bundled program and library
needs (their ELF NEEDED entries) is in the bundle or on deploy/gpu_provided_libs.txt, nothing on
that list is bundled, the bundle fits the device tool, and its launcher runs a program.
Skipped (77) in a build without CUDA, which has no GPU programs to bundle."""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = ap.parse_args().build_dir
    if not os.path.exists(os.path.join(build, "bin", "cuda_codecs_gpu_test")):
        print("skipped: a build without CUDA (no cuda_codecs_gpu_test)")
        return 77
    provided = {line.strip() for line in open(os.path.join(ROOT, "deploy", "gpu_provided_libs.txt"))
                if line.strip() and not line.startswith("#")}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "gpu-bundle")
        run = subprocess.run(["bash", os.path.join(ROOT, "deploy", "gpu_bundle.sh"), "--no-build",
                              "--no-archive", "--build-dir", build, "--out", out],
                             capture_output=True, text=True, timeout=240)
        print(run.stdout + run.stderr)
        assert run.returncode == 0, "gpu_bundle.sh failed"
        bins = sorted(os.listdir(os.path.join(out, "bin")))
        libs = sorted(os.listdir(os.path.join(out, "lib")))
        assert "cuda_codecs_gpu_test" in bins and "bytecomp-scheduler" in bins, bins
        assert "libbytecomp_worker.so" in libs and "libzmq.so.5" in libs, libs
        assert not provided & set(libs), f"bundled though the GPU machine has them: {provided & set(libs)}"
        unresolved = [f"{name} needs {lib}"
                      for d in ("bin", "lib") for name in os.listdir(os.path.join(out, d))
                      for lib in needed(os.path.join(out, d, name))
                      if lib not in libs and lib not in provided]
        assert not unresolved, unresolved
        size = sum(os.path.getsize(os.path.join(out, d, f))
                   for d in ("bin", "lib") for f in os.listdir(os.path.join(out, d)))
        assert size < 60 << 20, f"{size >> 20} MiB: over the 60 MiB the device tool carries"
        # The launcher: the bundle's programs on the path, the engine library named.
        probe = subprocess.run([os.path.join(out, "run"), "bash", "-c",
                                'command -v bytecomp-plan; echo "$BYTECOMP_LIBRARY"; '
                                'bytecomp-plan --profile="$1/profiles/lstm.pbtxt" '
                                '--cluster="$1/clusters/8x1gpu-10g.pbtxt" '
                                '--costs="$1/costs/nominal.pbtxt" --out="$2" --table=false '
                                ">/dev/null && echo ran", "probe",
                                os.path.join(ROOT, "scheduler", "planner"),
                                os.path.join(tmp, "plan.pbtxt")],
                               capture_output=True, text=True, timeout=60)
        lines = probe.stdout.split()
        assert probe.returncode == 0 and lines[0] == os.path.join(out, "bin", "bytecomp-plan") \
            and lines[1] == os.path.join(out, "lib", "libbytecomp_worker.so") and lines[2] == "ran", \
            probe.stdout + probe.stderr
        print(f"bundle: {len(bins)} programs, {len(libs)} libraries, {size >> 20} MiB; closure holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
