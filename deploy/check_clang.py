#!/usr/bin/env python3
"""The lock-rule check, run by deploy/test.sh: every C++ translation unit is compiled once
with clang and -Wthread-safety -Werror (plus the project's own warnings), so a broken
ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED rule fails CI.

Steps:
  1. The canary, deploy/clang_canary.cc: with its lock rule kept it must compile, with it
     broken (-DBREAK_LOCK_RULE) it must be refused by the thread-safety analysis, which proves
     that the flags and Abseil's annotations are in force (a check that cannot fail would let
     anything through).
  2. Configure a separate build directory (build-clang) for clang, without CUDA, with a
     compilation database, and generate the protobuf headers (nothing else is built).
  3. Run each translation unit of the database with -fsyntax-only -Wthread-safety -Werror,
     --jobs at a time (no object files: the check costs parsing and analysis only).

Prints one line per failing file with its first diagnostics, and a summary with the time.
Exit status 0 when every unit passes, 1 otherwise.

Usage: python3 deploy/check_clang.py [--build-dir DIR] [--jobs N] [--only REGEX]
Environment: CLANG_CXX, CLANG_CC (default clang++, clang); CLANG_BUILD_DIR; CLANG_JOBS.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANARY = os.path.join(ROOT, "deploy", "clang_canary.cc")
# -Wno-unknown-pragmas: clang ignores GCC's own pragmas (compress/ tunes GCC's vectoriser with
# #pragma GCC optimize); they say nothing about lock rules.
CHECK_FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror", "-Wno-unknown-pragmas"]
# Compile-command arguments that produce files; a syntax-only run drops them.
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP_ALONE = {"-c", "-MD", "-MMD"}


def log(message):
    print(f"[clang-check] {message}", flush=True)


def run(args, cwd=None):
    return subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def check_canary(cxx):
    """The kept rule compiles; the broken one is refused by the thread-safety analysis."""
    flags = ["-std=c++20", "-Wall", "-Wextra"] + CHECK_FLAGS
    kept = run([cxx] + flags + [CANARY])
    if kept.returncode != 0:
        log("FAILED: the canary with a kept lock rule does not compile, so the check cannot "
            "run:\n" + kept.stdout)
        return False
    broken = run([cxx] + flags + ["-DBREAK_LOCK_RULE", CANARY])
    if broken.returncode == 0 or "-Wthread-safety" not in broken.stdout:
        log("FAILED: clang accepted the canary with a broken lock rule "
            "(deploy/clang_canary.cc -DBREAK_LOCK_RULE), so this check would let one through:\n"
            + broken.stdout)
        return False
    log("canary: a broken lock rule is refused, a kept one compiles")
    return True


def configure(build_dir, cc, cxx, jobs):
    """Configures build_dir for clang and generates the protobuf headers the sources include."""
    result = run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                  f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}",
                  "-DCMAKE_C_COMPILER_LAUNCHER=", "-DCMAKE_CXX_COMPILER_LAUNCHER=",
                  "-DBYTECOMP_CUDA=OFF", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"])
    if result.returncode != 0:
        log("FAILED: cmake could not configure " + build_dir + ":\n" + result.stdout)
        return False
    targets = run(["ninja", "-C", build_dir, "-t", "targets", "all"])
    generated = sorted({line.split(":")[0] for line in targets.stdout.splitlines()
                        if line.split(":")[0].endswith(".pb.h")})
    if not generated:
        log("FAILED: no generated protobuf headers (*.pb.h) among the build's targets")
        return False
    result = run(["ninja", "-C", build_dir, "-j", str(jobs)] + generated)
    if result.returncode != 0:
        log("FAILED: generating the protobuf headers:\n" + result.stdout)
        return False
    return True


def units(build_dir, only):
    """The project's translation units from the compilation database, one entry per file."""
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        database = json.load(f)
    seen, selected = set(), []
    for entry in database:
        path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        relative = os.path.relpath(path, ROOT)
        # Generated code (protobuf) and anything in a build directory is not ours to check.
        if relative.startswith("..") or relative.split(os.sep)[0].startswith("build"):
            continue
        if not relative.endswith((".cc", ".cpp", ".cxx")) or relative in seen:
            continue
        if only and not re.search(only, relative):
            continue
        seen.add(relative)
        args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
        kept, skip = [], False
        for arg in args:
            if skip:
                skip = False
            elif arg in DROP_WITH_VALUE:
                skip = True
            elif arg not in DROP_ALONE:
                kept.append(arg)
        selected.append((relative, entry["directory"], kept + CHECK_FLAGS))
    return sorted(selected)


def check_unit(unit):
    relative, directory, args = unit
    start = time.monotonic()
    result = run(args, cwd=directory)
    return relative, result.returncode, result.stdout, time.monotonic() - start


def first_diagnostics(output, limit=6):
    lines = [l for l in output.splitlines() if re.search(r"(error|warning):", l)]
    return lines[:limit] or output.splitlines()[:limit]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default=os.environ.get(
        "CLANG_BUILD_DIR", os.path.join(ROOT, "build-clang")))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("CLANG_JOBS", "2")))
    parser.add_argument("--only", help="check only the files whose path matches this regex")
    options = parser.parse_args()
    cxx = os.environ.get("CLANG_CXX", "clang++")
    cc = os.environ.get("CLANG_CC", "clang")
    if shutil.which(cxx) is None:
        log(f"FAILED: {cxx} not found; deploy/setup.sh installs Debian's clang")
        return 1
    version = run([cxx, "--version"]).stdout.splitlines()[0]
    started = time.monotonic()
    if not check_canary(cxx):
        return 1
    if not configure(options.build_dir, cc, cxx, options.jobs):
        return 1
    prepared = time.monotonic()
    todo = units(options.build_dir, options.only)
    log(f"{version}: {len(todo)} translation units, {options.jobs} at a time")
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        for relative, code, output, seconds in pool.map(check_unit, todo):
            if code != 0:
                failed.append(relative)
                log(f"FAILED {relative} ({seconds:.1f} s):")
                for line in first_diagnostics(output):
                    print("    " + line)
    done = time.monotonic()
    log(f"{len(todo) - len(failed)} of {len(todo)} translation units pass -Wthread-safety -Werror "
        f"in {done - started:.0f} s (set-up {prepared - started:.0f} s, units "
        f"{done - prepared:.0f} s)")
    if failed:
        log("failing files (first diagnostics above; reproduce with --only REGEX):")
        for relative in failed:
            print("    " + relative)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
