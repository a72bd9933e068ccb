#!/usr/bin/env python3
"""The Debian package on a fresh machine.

  test_debian_root.py --source-dir SRC --build-dir BUILD [--keep-roots]

1. Makes the package with CPack: from BUILD when it was configured without CUDA, else from
   BUILD/pkg-build, configured with -DBYTECOMP_CUDA=OFF and only the installed targets built
   (the package holds no CUDA code: cmake/Package.cmake). Checks its name, Depends and files.
2. Two fresh Debian 12 roots, each a new copy of a tarball cached in $BYTECOMP_TEST_CACHE
   (default /var/cache/bytecomp-test) together with the .debs apt downloaded, so that later
   runs on this machine need no network:
     minbase  `debootstrap --variant=minbase bookworm` from Debian's mirror;
     torch    minbase with python3-torch (about 1 GB installed; dpkg takes minutes, so it is
              installed once, not on every run).
3. In each root (chroot, in new mount and pid namespaces: /proc, /dev and the apt cache are
   mounted for it alone, and every process started there dies with the namespace, whether the
   test passes, fails or is killed) inside_root.sh installs the package with apt and uses the
   installed files only:
     minbase  the package's dependencies alone make the programs run; bytecomp-plan on the
              installed profile, cluster and cost table; a bytecomp-bench job (scheduler,
              server, two workers through bytecomp-run, every sum checked exactly);
              `systemd-analyze verify` on the installed units (systemd installed for it);
     torch    a two-worker PyTorch step through the installed shim (torch_step.py).

Exits 77 (skipped, with the reason) when not root, when debootstrap, unshare or chroot is
missing, when there is no cached root and Debian's mirror cannot be reached, with
BYTECOMP_SKIP_PACKAGE_TEST=1, and for a CUDA build unless BYTECOMP_TEST_DEPTH=deep (the second
build in step 1 costs more than the test command's budget has: deploy/test.sh --deep runs it).
Environment: BYTECOMP_DEBIAN_MIRROR (default http://deb.debian.org/debian),
BYTECOMP_TEST_CACHE, BYTECOMP_PACKAGE_JOBS (build jobs, default 2).
"""
import argparse
import fcntl
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.realpath(__file__))
SKIP = 77
SUITE = "bookworm"
MIRROR = os.environ.get("BYTECOMP_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CACHE = os.environ.get("BYTECOMP_TEST_CACHE", "/var/cache/bytecomp-test")
# What the package must hold (paths under /usr), besides the programs checked inside the root.
EXPECTED_FILES = [
    "bin/bytecomp-scheduler", "bin/bytecomp-server", "bin/bytecomp-run", "bin/bytecomp-plan",
    "bin/bytecomp-bench", "bin/bytecomp-keygen", "lib/libbytecomp_worker.so",
    "include/bytecomp/c_api.h",
    "lib/python3/dist-packages/bytecomp/torch.py",
    "lib/python3/dist-packages/bytecomp/_installed.py",
    "lib/systemd/system/bytecomp-scheduler.service",
    "lib/systemd/system/bytecomp-server@.service",
    "share/bytecomp/profiles/resnet50.pbtxt", "share/bytecomp/costs/nominal.pbtxt",
    "share/bytecomp/clusters/4x1gpu-1g.pbtxt", "share/bytecomp/examples/cluster.pbtxt",
    "share/bytecomp/systemd/scheduler.env.example", "share/doc/bytecomp/README.md",
    "share/doc/bytecomp/OPERATING.md",
]
UNITS = ["bytecomp-scheduler.service", "bytecomp-server@.service"]
# Upper bounds, in seconds.
BUILD_TIMEOUT = 1800
DEBOOTSTRAP_TIMEOUT = 1200
INSIDE_TIMEOUT = 1500


class Skip(Exception):
    pass


def log(message):
    print("[package test] %s" % message, flush=True)


def run(argv, timeout, **kwargs):
    """Runs argv, its output going to ours; raises CalledProcessError/TimeoutExpired."""
    log("$ " + " ".join(argv))
    return subprocess.run(argv, check=True, timeout=timeout, **kwargs)


def timed(what, fn, *args):
    start = time.monotonic()
    result = fn(*args)
    log("%s: %.0f s" % (what, time.monotonic() - start))
    return result


def cmake_cache_value(build_dir, name):
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return ""


def needs_package_build(build_dir):
    """Whether build_dir has CUDA code, which the package may not hold (cmake/Package.cmake)."""
    with open(os.path.join(build_dir, "CPackConfig.cmake")) as f:
        return "CPACK_BYTECOMP_REFUSE" in f.read()


def make_package(source_dir, build_dir):
    """Makes the .deb with CPack; returns its path."""
    if needs_package_build(build_dir):
        # A CUDA build: a build of its own without CUDA, of the installed targets only.
        package_build = os.path.join(build_dir, "pkg-build")
        log("%s has CUDA code; the package is made from %s (BYTECOMP_CUDA=OFF)"
            % (build_dir, package_build))
        # A unity build (each target's sources compiled in batches): it starts cold on a
        # fresh machine, and batching halves the compile (deploy/build.sh builds so too).
        configure = ["cmake", "-S", source_dir, "-B", package_build, "-G", "Ninja",
                     "-DBYTECOMP_CUDA=OFF", "-DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON",
                     "-DCMAKE_UNITY_BUILD=ON",
                     "-DCMAKE_BUILD_TYPE=" + (cmake_cache_value(build_dir, "CMAKE_BUILD_TYPE")
                                              or "RelWithDebInfo")]
        # A compiler cache makes the second and later runs quick (and shares the main
        # build's objects where their flags agree).
        launcher = (cmake_cache_value(build_dir, "CMAKE_CXX_COMPILER_LAUNCHER")
                    or shutil.which("ccache"))
        if launcher:
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + launcher)
        run(configure, BUILD_TIMEOUT, stdout=subprocess.DEVNULL)
        build_dir = package_build
    run(["cmake", "--build", build_dir, "--target", "bytecomp-installed", "-j",
         os.environ.get("BYTECOMP_PACKAGE_JOBS", "2")], BUILD_TIMEOUT)
    out = os.path.join(build_dir, "package")
    for old in glob.glob(os.path.join(out, "*.deb")):
        os.remove(old)
    run(["cpack", "--config", os.path.join(build_dir, "CPackConfig.cmake"), "-B", out],
        BUILD_TIMEOUT, stdout=subprocess.DEVNULL)
    debs = glob.glob(os.path.join(out, "*.deb"))
    if len(debs) != 1:
        raise AssertionError("cpack made %s, expected one .deb" % debs)
    return debs[0]


class PackageTest(unittest.TestCase):
    """Static checks of the .deb: name, fields, dependencies, files."""
    deb = None
    version = None

    def field(self, name):
        return subprocess.run(["dpkg-deb", "-f", self.deb, name], check=True,
                              stdout=subprocess.PIPE, text=True).stdout.strip()

    def test_name_and_fields(self):
        self.assertEqual(os.path.basename(self.deb), "bytecomp_%s_amd64.deb" % self.version)
        self.assertEqual(self.field("Package"), "bytecomp")
        self.assertEqual(self.field("Version"), self.version)
        self.assertEqual(self.field("Architecture"), "amd64")

    def test_depends_come_from_shlibdeps_and_name_no_cuda(self):
        depends = [d.strip().split()[0] for d in self.field("Depends").split(",")]
        # dpkg-shlibdeps names Debian's runtime packages of what the binaries link.
        for package in ("libzmq5", "libprotobuf32", "libstdc++6", "libc6", "python3"):
            self.assertIn(package, depends)
        self.assertTrue(any(d.startswith("libabsl") for d in depends), depends)
        self.assertFalse([d for d in depends if re.search("cuda|nccl|nvidia", d)], depends)

    def test_files(self):
        listing = subprocess.run(["dpkg-deb", "-c", self.deb], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout
        paths = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
        for path in EXPECTED_FILES:
            self.assertIn("/usr/" + path, paths)
        self.assertFalse([p for p in paths if "__pycache__" in p or "/build/" in p])

    def test_units_and_shim_name_the_installed_paths(self):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["dpkg-deb", "-x", self.deb, tmp], check=True)
            with open(os.path.join(tmp, "usr/lib/python3/dist-packages/bytecomp/"
                                        "_installed.py")) as f:
                self.assertIn('LIBRARY_PATH = "/usr/lib/libbytecomp_worker.so"', f.read())
            for unit in UNITS:
                with open(os.path.join(tmp, "usr/lib/systemd/system", unit)) as f:
                    text = f.read()
                exec_start = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
                self.assertTrue(os.path.isfile(tmp + exec_start), exec_start)
                documentation = re.search(r"^Documentation=file:(\S+)", text, re.M).group(1)
                self.assertTrue(os.path.isfile(tmp + documentation), documentation)


def mirror_reachable():
    try:
        with urllib.request.urlopen("%s/dists/%s/Release" % (MIRROR, SUITE), timeout=15) as r:
            return r.status == 200
    except OSError:
        return False


def mounts_under(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p == path or p.startswith(path + "/")]


def remove_root(root):
    # Mounts exist only in the namespace that died with the chroot; never delete through one.
    mounted = mounts_under(root)
    if mounted:
        raise RuntimeError("refusing to delete %s: still mounted: %s" % (root, mounted))
    shutil.rmtree(root, ignore_errors=True)


def in_namespace_chroot(root, argv, timeout, archives=None):
    """Runs argv chrooted in root, in new mount and pid namespaces: /proc, /dev (and the apt
    archive cache) are mounted for it alone, and when it ends, is killed, or this process
    dies, the namespace's processes are killed and its mounts vanish with it."""
    setup = ('set -e; mount -t proc proc "$1/proc"; mount --rbind /dev "$1/dev"; '
             '[ -z "$2" ] || mount --bind "$2" "$1/var/cache/apt/archives"; '
             'root=$1; shift 2; exec chroot "$root" /usr/bin/env -i '
             'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root '
             'LANG=C.UTF-8 "$@"')
    return subprocess.run(["unshare", "--mount", "--pid", "--fork", "--kill-child", "--",
                           "/bin/sh", "-c", setup, "sh", root, archives or ""] + argv,
                          timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def root_tarball(name):
    return os.path.join(CACHE, "%s-%s.tar" % (SUITE, name))


def save_root(work, name):
    for leftover in glob.glob(os.path.join(work, "var/cache/apt/archives/*.deb")):
        os.remove(leftover)
    tarball = root_tarball(name)
    run(["tar", "-C", work, "-cf", tarball + ".tmp", "."], 1200)
    os.rename(tarball + ".tmp", tarball)


def make_minbase_root():
    """debootstrap's minbase bookworm, with fresh apt lists."""
    if not mirror_reachable():
        raise Skip("no cached Debian root (%s) and %s cannot be reached"
                   % (root_tarball("minbase"), MIRROR))
    work = tempfile.mkdtemp(prefix="root-", dir=CACHE)
    try:
        run(["debootstrap", "--variant=minbase", SUITE, work, MIRROR], DEBOOTSTRAP_TIMEOUT,
            stdout=subprocess.DEVNULL)
        shutil.copy("/etc/resolv.conf", os.path.join(work, "etc/resolv.conf"))
        proc = in_namespace_chroot(work, ["apt-get", "update", "-q"], 600)
        if proc.returncode != 0:
            raise AssertionError("apt-get update in the new root failed:\n" + proc.stdout)
        save_root(work, "minbase")
    finally:
        remove_root(work)


def make_torch_root():
    """The minbase root with python3-torch: installing it takes dpkg minutes (311 packages,
    about 1 GB), so it is done once and kept."""
    work = tempfile.mkdtemp(prefix="root-", dir=CACHE)
    try:
        unpack_root("minbase", work)
        proc = in_namespace_chroot(
            work, ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o",
                   "Dpkg::Options::=--force-unsafe-io", "python3-torch"],
            DEBOOTSTRAP_TIMEOUT, apt_archives())
        if proc.returncode != 0:
            raise AssertionError("installing python3-torch in the root failed:\n"
                                 + proc.stdout[-20000:])
        save_root(work, "torch")
    finally:
        remove_root(work)


def apt_archives():
    """apt's download cache, shared by the roots (mounted at /var/cache/apt/archives)."""
    archives = os.path.join(CACHE, "apt-archives")
    os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
    return archives


def unpack_root(name, root):
    """Unpacks the cached root `name` into root, making it (and what it builds on) first."""
    tarball = root_tarball(name)
    if os.path.exists(tarball):
        log("using the cached Debian root %s" % tarball)
    elif name == "minbase":
        timed("debootstrap (first run on this machine)", make_minbase_root)
    else:
        timed("making the %s root (first run on this machine)" % name, make_torch_root)
    if os.path.exists(root):
        remove_root(root)
    os.makedirs(root)
    timed("unpacking the %s root" % name, run, ["tar", "-C", root, "-xf", tarball], 1200)
    shutil.copy("/etc/resolv.conf", os.path.join(root, "etc/resolv.conf"))


ROOT_OF_STEPS = {"system": "minbase", "torch": "torch"}


def run_in_fresh_root(deb, root, steps, keep_root=False):
    """Runs inside_root.sh's `steps` in a fresh copy of their cached root (ROOT_OF_STEPS);
    returns what they printed."""
    unpack_root(ROOT_OF_STEPS[steps], root)
    test_dir = os.path.join(root, "tmp/bytecomp-test")
    os.makedirs(test_dir)
    for script in ("inside_root.sh", "torch_step.py"):
        shutil.copy(os.path.join(HERE, script), test_dir)
    shutil.copy(deb, test_dir)
    start = time.monotonic()
    try:
        proc = in_namespace_chroot(
            root, ["/bin/sh", "/tmp/bytecomp-test/inside_root.sh",
                   "/tmp/bytecomp-test/" + os.path.basename(deb), steps], INSIDE_TIMEOUT,
            apt_archives())
    except subprocess.TimeoutExpired as err:
        output = err.output.decode() if isinstance(err.output, bytes) else (err.output or "")
        raise AssertionError("the steps in the root ran past %d s (every process there was "
                             "killed):\n%s" % (INSIDE_TIMEOUT, output))
    finally:
        if not keep_root:
            remove_root(root)
    print(proc.stdout, flush=True)
    log("%s steps in the root: %.0f s" % (steps, time.monotonic() - start))
    if proc.returncode != 0:
        raise AssertionError("the %s steps in the root failed (exit %d); output above"
                             % (steps, proc.returncode))
    return proc.stdout


class FreshRootTest(unittest.TestCase):
    """What the steps in each root printed (or why they failed)."""
    outputs = {}

    def output(self, name):
        result = self.outputs.get(name)
        if isinstance(result, Exception):
            self.fail(str(result))
        self.assertIn("[inside] all steps passed", result)
        return result

    def test_package_installs_with_its_dependencies_only(self):
        output = self.output("system")
        self.assertIn("[inside] installed bytecomp %s" % PackageTest.version, output)
        self.assertIn("[inside] shim finds /usr/lib/libbytecomp_worker.so", output)

    def test_bench_job_checked_every_sum(self):
        # Rank 0 prints the result line; any worker whose sum is wrong exits 1, which fails
        # bytecomp-run and the steps in the root.
        results = [json.loads(match.group(1)) for match in
                   re.finditer(r"^\[worker 0\] (\{\"bench\".*\})$", self.output("system"),
                               re.M)]
        self.assertEqual(len(results), 1, "one result line")
        self.assertEqual((results[0]["W"], results[0]["S"]), (2, 1))
        self.assertEqual(results[0]["model"], "resnet50")  # the installed profile
        self.assertTrue(results[0]["checked"], results[0])

    def test_systemd_analyze_verify_passed(self):
        self.assertIn("[inside] systemd-analyze verify: no complaints", self.output("system"))

    def test_torch_step_exact_on_both_workers(self):
        output = self.output("torch")
        for rank in (0, 1):
            self.assertIn("[worker %d] torch step ok: rank %d" % (rank, rank), output)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--keep-roots", action="store_true",
                        help="leave the roots (BUILD/package-root-*) for inspection")
    args = parser.parse_args()
    try:
        if os.environ.get("BYTECOMP_SKIP_PACKAGE_TEST") == "1":
            raise Skip("BYTECOMP_SKIP_PACKAGE_TEST=1")
        if os.geteuid() != 0:
            raise Skip("not root: debootstrap, chroot and mounts need root")
        for tool in ("debootstrap", "unshare", "chroot", "dpkg-deb", "dpkg-shlibdeps", "tar"):
            if shutil.which(tool) is None:
                raise Skip("%s is not installed (deploy/setup.sh installs it)" % tool)
        if (needs_package_build(args.build_dir)
                and os.environ.get("BYTECOMP_TEST_DEPTH") != "deep"):
            raise Skip("%s has CUDA code, so the package needs a second, CUDA-free build of "
                       "its own (about 17 CPU-minutes here, over the test command's budget): "
                       "deploy/test.sh --deep runs this test; a BYTECOMP_CUDA=OFF build runs "
                       "it from its own files" % args.build_dir)
        os.makedirs(CACHE, exist_ok=True)
    except Skip as reason:
        print("SKIP: %s" % reason, flush=True)
        return SKIP

    total = time.monotonic()
    deb = timed("making the package", make_package, args.source_dir, args.build_dir)
    log("%s: %.1f MB" % (deb, os.path.getsize(deb) / 1e6))
    PackageTest.deb = deb
    PackageTest.version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True,
                                         stdout=subprocess.PIPE, text=True).stdout.strip()
    runner = unittest.TextTestRunner(verbosity=2)
    ok = runner.run(unittest.defaultTestLoader.loadTestsFromTestCase(PackageTest)).wasSuccessful()

    # One test at a time per machine uses the cache (apt's archive cache is shared).
    with open(os.path.join(CACHE, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for name in ("system", "torch"):
                root = os.path.join(args.build_dir, "package-root-" + name)
                try:
                    FreshRootTest.outputs[name] = run_in_fresh_root(
                        deb, root, name, args.keep_roots)
                except (AssertionError, subprocess.SubprocessError) as err:
                    FreshRootTest.outputs[name] = err
        except Skip as reason:
            print("SKIP: %s" % reason, flush=True)
            return SKIP
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(FreshRootTest)
    ok = runner.run(suite).wasSuccessful() and ok
    log("total: %.0f s" % (time.monotonic() - total))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
