#!/usr/bin/env python3
"""Checks of the documentation-grade deployment files.

  test_deploy_files.py files     deploy/systemd units: syntax, flags, `systemd-analyze verify`
                                 where it exists (its only allowed complaint: the binaries are
                                 not installed on this machine); deploy/examples/cluster.pbtxt
                                 parses against proto/cluster_config.proto (protoc)
  test_deploy_files.py k8s       deploy/k8s manifests parse as YAML (python3-yaml) and fit
                                 together (selectors, ports, names, flags); exits 77 (skipped)
                                 when python3-yaml is missing
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SYSTEMD = os.path.join(REPO, "deploy", "systemd")
K8S = os.path.join(REPO, "deploy", "k8s")
EXAMPLE_CONFIG = os.path.join(REPO, "deploy", "examples", "cluster.pbtxt")
SKIP = 77


def parse_unit(path):
    """Minimal systemd unit parser: {section: [(key, value)]}; raises on a malformed line."""
    sections = {}
    current = None
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                if not re.fullmatch(r"\[[A-Za-z]+\]", line):
                    raise ValueError("%s:%d: bad section header %r" % (path, number, line))
                current = line[1:-1]
                sections.setdefault(current, [])
                continue
            if current is None or "=" not in line:
                raise ValueError("%s:%d: not key=value in a section: %r" % (path, number, line))
            key, value = line.split("=", 1)
            if not re.fullmatch(r"[A-Za-z]+", key):
                raise ValueError("%s:%d: bad key %r" % (path, number, key))
            sections[current].append((key, value))
    return sections


class SystemdUnitsTest(unittest.TestCase):
    def unit(self, name):
        return parse_unit(os.path.join(SYSTEMD, name))

    def value(self, unit, section, key):
        values = [v for k, v in unit[section] if k == key]
        self.assertEqual(len(values), 1, "%s %s" % (section, key))
        return values[0]

    def test_scheduler_unit(self):
        unit = self.unit("bytecomp-scheduler.service")
        self.assertEqual(sorted(unit), ["Install", "Service", "Unit"])
        self.assertEqual(self.value(unit, "Service", "EnvironmentFile"),
                         "/etc/bytecomp/scheduler.env")
        exec_start = self.value(unit, "Service", "ExecStart").split()
        self.assertEqual(exec_start[0], "/usr/local/bin/bytecomp-scheduler")
        self.assertEqual(exec_start[1:7], ["--port", "${BYTECOMP_SCHEDULER_PORT}",
                                           "--num_workers", "${BYTECOMP_NUM_WORKERS}",
                                           "--num_servers", "${BYTECOMP_NUM_SERVERS}"])
        self.assertEqual(self.value(unit, "Install", "WantedBy"), "multi-user.target")

    def test_server_template_unit(self):
        unit = self.unit("bytecomp-server@.service")
        env_files = [v for k, v in unit["Service"] if k == "EnvironmentFile"]
        self.assertEqual(env_files, ["/etc/bytecomp/server.env", "-/etc/bytecomp/server-%i.env"])
        exec_start = self.value(unit, "Service", "ExecStart").split()
        self.assertEqual(exec_start[:5], ["/usr/local/bin/bytecomp-server", "--scheduler",
                                          "${BYTECOMP_SCHEDULER}", "--rank", "%i"])

    def test_env_examples_define_what_the_units_use(self):
        for unit_name, env_name in (("bytecomp-scheduler.service", "scheduler.env.example"),
                                    ("bytecomp-server@.service", "server.env.example")):
            with open(os.path.join(SYSTEMD, unit_name)) as f:
                used = set(re.findall(r"\$\{?(BYTECOMP_[A-Z_]+)", f.read()))
            with open(os.path.join(SYSTEMD, env_name)) as f:
                defined = set(re.findall(r"^(BYTECOMP_[A-Z_]+)=", f.read(), re.M))
            self.assertEqual(used, defined, unit_name)

    def test_systemd_analyze_verify(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze not installed")
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(SYSTEMD, "bytecomp-scheduler.service"), tmp)
            # A template is verified through an instance.
            shutil.copy(os.path.join(SYSTEMD, "bytecomp-server@.service"),
                        os.path.join(tmp, "bytecomp-server@0.service"))
            proc = subprocess.run(
                ["systemd-analyze", "verify", "--man=no",
                 os.path.join(tmp, "bytecomp-scheduler.service"),
                 os.path.join(tmp, "bytecomp-server@0.service")],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        complaints = [line for line in proc.stdout.splitlines() if line.strip() and not re.search(
            r"Command /usr/local/bin/bytecomp-(scheduler|server) is not executable", line)]
        self.assertEqual(complaints, [], proc.stdout)


def protoc_check_cluster_config(test, text):
    """Parses text as a ClusterConfig with protoc (strict text format); fails the test if not."""
    if shutil.which("protoc") is None:
        test.skipTest("protoc not installed")
    proc = subprocess.run(
        ["protoc", "--encode=bytecomp.proto.ClusterConfig", "-I", os.path.join(REPO, "proto"),
         os.path.join(REPO, "proto", "cluster_config.proto")],
        input=text.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    test.assertEqual(proc.returncode, 0, proc.stderr.decode())
    test.assertGreater(len(proc.stdout), 0, "no field set")


class ExampleConfigTest(unittest.TestCase):
    def test_example_cluster_config_parses(self):
        with open(EXAMPLE_CONFIG) as f:
            protoc_check_cluster_config(self, f.read())

    def test_protoc_check_rejects_unknown_fields(self):
        # The check above can fail: a misspelt field is an error.
        with self.assertRaises(AssertionError):
            protoc_check_cluster_config(self, "partition_byte: 4\n")


class KubernetesManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import yaml
        cls.docs = {}
        for name in sorted(os.listdir(K8S)):
            if name.endswith(".yaml"):
                with open(os.path.join(K8S, name)) as f:
                    for doc in yaml.safe_load_all(f):
                        cls.docs[(doc["kind"], doc["metadata"]["name"])] = doc

    def get(self, kind, name):
        self.assertIn((kind, name), self.docs)
        return self.docs[(kind, name)]

    def test_every_document_is_a_known_kind(self):
        expected = {("ConfigMap", "bytecomp-config"), ("Service", "bytecomp-scheduler"),
                    ("Deployment", "bytecomp-scheduler"), ("Service", "bytecomp-server"),
                    ("StatefulSet", "bytecomp-server")}
        self.assertEqual(set(self.docs), expected)
        for doc in self.docs.values():
            self.assertIn(doc["apiVersion"], ("v1", "apps/v1"))

    def check_workload(self, workload, service):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        selector = workload["spec"]["selector"]["matchLabels"]
        self.assertTrue(selector.items() <= labels.items(), "selector must match the pods")
        self.assertTrue(service["spec"]["selector"].items() <= labels.items(),
                        "the Service must select the pods")
        for volume in workload["spec"]["template"]["spec"]["volumes"]:
            self.get("ConfigMap", volume["configMap"]["name"])

    def test_scheduler(self):
        service = self.get("Service", "bytecomp-scheduler")
        deployment = self.get("Deployment", "bytecomp-scheduler")
        self.check_workload(deployment, service)
        self.assertEqual(deployment["spec"]["replicas"], 1)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        port = int(args[args.index("--port") + 1])
        self.assertEqual(service["spec"]["ports"][0]["port"], port)
        self.assertEqual(container["ports"][0]["containerPort"], port)
        num_servers = int(args[args.index("--num_servers") + 1])
        self.assertGreater(int(args[args.index("--num_workers") + 1]), 0)
        self.assertEqual(self.get("StatefulSet", "bytecomp-server")["spec"]["replicas"],
                         num_servers, "server replicas must equal --num_servers")
        self.assertEqual(args[args.index("--config") + 1], "/etc/bytecomp/cluster.pbtxt")

    def test_configmap_holds_a_valid_cluster_config(self):
        config = self.get("ConfigMap", "bytecomp-config")
        protoc_check_cluster_config(self, config["data"]["cluster.pbtxt"])

    def test_servers_take_their_rank_from_the_pod_ordinal(self):
        service = self.get("Service", "bytecomp-server")
        statefulset = self.get("StatefulSet", "bytecomp-server")
        self.check_workload(statefulset, service)
        self.assertEqual(statefulset["spec"]["serviceName"], "bytecomp-server")
        self.assertEqual(service["spec"]["clusterIP"], "None")
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        self.assertEqual(container["command"], ["/bin/sh", "-c"])
        # Run the container's shell line with a stand-in bytecomp-server that prints its argv.
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "bytecomp-server")
            with open(fake, "w") as f:
                f.write('#!/bin/sh\nprintf "%s\\n" "$@"\n')
            os.chmod(fake, 0o755)
            env = dict(os.environ, PATH=tmp + os.pathsep + os.environ["PATH"],
                       HOSTNAME="bytecomp-server-12")
            proc = subprocess.run(["/bin/sh", "-c"] + container["args"], env=env,
                                  stdout=subprocess.PIPE, text=True, timeout=10)
        self.assertEqual(proc.stdout.split("\n")[:-1],
                         ["--scheduler", "bytecomp-scheduler:9000", "--rank", "12",
                          "--config", "/etc/bytecomp/cluster.pbtxt"])


if __name__ == "__main__":
    which = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in ("files", "k8s") else None
    if which == "k8s":
        try:
            import yaml  # noqa: F401
        except ImportError:
            print("SKIP: python3-yaml is not installed; the manifests were not parsed")
            sys.exit(SKIP)
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(KubernetesManifestsTest)
    elif which == "files":
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(case)
                                   for case in (SystemdUnitsTest, ExampleConfigTest))
    else:
        sys.exit("usage: test_deploy_files.py files|k8s")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
