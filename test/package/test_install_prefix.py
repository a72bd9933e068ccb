#!/usr/bin/env python3
"""`cmake --install BUILD --prefix P` into a temporary P (no root needed): the layout, the
units rewritten to P, and the installed tools finding each other without help: the shim
loads P's engine library with no BYTECOMP_LIBRARY, bytecomp-run starts P's daemons.

  test_install_prefix.py --build-dir BUILD
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

BUILD_DIR = None
EXPECTED = [
    "bin/bytecomp-scheduler", "bin/bytecomp-server", "bin/bytecomp-run", "bin/bytecomp-plan",
    "bin/bytecomp-bench", "bin/bytecomp-linkprobe", "bin/bytecomp-codec-bench",
    "bin/bytecomp-keygen",
    "lib/libbytecomp_worker.so", "include/bytecomp/c_api.h",
    "lib/python3/dist-packages/bytecomp/__init__.py",
    "lib/python3/dist-packages/bytecomp/torch.py",
    "share/bytecomp/profiles/resnet50.pbtxt", "share/bytecomp/costs/nominal.pbtxt",
    "share/bytecomp/clusters/8x1gpu-10g.pbtxt", "share/bytecomp/examples/cluster.pbtxt",
    "share/bytecomp/systemd/server.env.example", "share/bytecomp/k8s/scheduler.yaml",
    "share/doc/bytecomp/README.md", "share/doc/bytecomp/OPERATING.md",
]


class InstallPrefixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="bytecomp-install-")
        # A relative prefix, as an operator may type it: the installed paths become absolute.
        subprocess.run(["cmake", "--install", os.path.abspath(BUILD_DIR), "--prefix", "p"],
                       cwd=cls.tmp.name, check=True, stdout=subprocess.DEVNULL, timeout=120)
        cls.prefix = os.path.join(cls.tmp.name, "p")
        # Nothing of the checkout or the caller's settings may help the installed files.
        cls.env = {k: v for k, v in os.environ.items()
                   if not k.startswith("BYTECOMP_") and k != "PYTHONPATH"}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_layout(self):
        for path in EXPECTED:
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, path)), path)
        for program in ("bytecomp-scheduler", "bytecomp-server", "bytecomp-run"):
            self.assertTrue(os.access(os.path.join(self.prefix, "bin", program), os.X_OK))
        installed = os.path.join(self.prefix, "lib/python3/dist-packages/bytecomp")
        self.assertNotIn("__pycache__", os.listdir(installed))

    def test_units_name_the_prefix(self):
        for unit in ("bytecomp-scheduler.service", "bytecomp-server@.service"):
            with open(os.path.join(self.prefix, "lib/systemd/system", unit)) as f:
                text = f.read()
            exec_start = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
            self.assertEqual(os.path.dirname(exec_start), os.path.join(self.prefix, "bin"))
            self.assertTrue(os.access(exec_start, os.X_OK), exec_start)
            doc = re.search(r"^Documentation=file:(\S+)", text, re.M).group(1)
            self.assertTrue(os.path.isfile(doc), doc)
            self.assertNotIn("/usr/", text.replace(self.prefix, "P"))

    def test_shim_loads_the_installed_library_by_itself(self):
        code = ("import bytecomp._engine as e; print(e.find_library()); "
                "print(e.Engine().path)")
        env = dict(self.env, PYTHONPATH=os.path.join(self.prefix, "lib/python3/dist-packages"))
        proc = subprocess.run([sys.executable, "-B", "-c", code], env=env, cwd=self.tmp.name,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        library = os.path.join(self.prefix, "lib/libbytecomp_worker.so")
        self.assertEqual(proc.stdout.split(), [library, library])

    def test_launcher_finds_the_installed_daemons(self):
        env = dict(self.env, PATH="/usr/bin:/bin")
        proc = subprocess.run(
            [os.path.join(self.prefix, "bin/bytecomp-run"), "-np", "2", "--dry-run", "--",
             "true"], env=env, cwd=self.tmp.name, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for daemon in ("bytecomp-scheduler", "bytecomp-server"):
            self.assertIn(" %s/bin/%s --" % (self.prefix, daemon), proc.stdout)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    args, rest = parser.parse_known_args()
    BUILD_DIR = args.build_dir
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
