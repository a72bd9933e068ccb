#!/usr/bin/env python3
"""Checks of the documentation-grade deployment files.

  test_deploy_files.py files     deploy/systemd units: syntax, flags, the cluster key as a
                                 credential, `systemd-analyze verify`
                                 where it exists (its only allowed complaint: the binaries are
                                 not installed on this machine); deploy/examples/cluster.pbtxt
                                 parses against proto/cluster_config.proto (protoc)
  test_deploy_files.py k8s       deploy/k8s manifests parse as YAML (python3-yaml) and fit
                                 together (selectors, ports, names, flags, the cluster key's
                                 Secret), and deploy/Dockerfile
                                 is the image they run (checked statically: no container engine
                                 runs here); exits 77 (skipped) when python3-yaml is missing
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
DOCKERFILE = os.path.join(REPO, "deploy", "Dockerfile")
INSTALL_RULES = os.path.join(REPO, "cmake", "Install.cmake")
EXAMPLE_CONFIG = os.path.join(REPO, "deploy", "examples", "cluster.pbtxt")
DAEMON_MAINS = {"bytecomp-scheduler": os.path.join(REPO, "scheduler", "main.cc"),
                "bytecomp-server": os.path.join(REPO, "server", "main.cc")}
KEY_SECRET = "bytecomp-cluster-key"
KEY_MOUNT = "/etc/bytecomp-key"
SKIP = 77


def daemon_has_flag(program, flag):
    """Whether the daemon's main.cc defines --flag (an Abseil flag)."""
    with open(DAEMON_MAINS[program]) as f:
        return re.search(r"ABSL_FLAG\([^,]+, %s," % re.escape(flag), f.read()) is not None


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
        self.assertEqual(exec_start[0], "/usr/bin/bytecomp-scheduler")
        self.assertEqual(exec_start[1:7], ["--port", "${BYTECOMP_SCHEDULER_PORT}",
                                           "--num_workers", "${BYTECOMP_NUM_WORKERS}",
                                           "--num_servers", "${BYTECOMP_NUM_SERVERS}"])
        self.assertEqual(self.value(unit, "Install", "WantedBy"), "multi-user.target")

    def test_server_template_unit(self):
        unit = self.unit("bytecomp-server@.service")
        env_files = [v for k, v in unit["Service"] if k == "EnvironmentFile"]
        self.assertEqual(env_files, ["/etc/bytecomp/server.env", "-/etc/bytecomp/server-%i.env"])
        exec_start = self.value(unit, "Service", "ExecStart").split()
        self.assertEqual(exec_start[:5], ["/usr/bin/bytecomp-server", "--scheduler",
                                          "${BYTECOMP_SCHEDULER}", "--rank", "%i"])

    def test_units_load_the_cluster_key_as_a_credential(self):
        # The root-only key file reaches the dynamic user as a private copy (%d: the
        # credentials directory), and the daemon is told where it is.
        for name in ("bytecomp-scheduler.service", "bytecomp-server@.service"):
            unit = self.unit(name)
            self.assertEqual(self.value(unit, "Service", "LoadCredential"),
                             "cluster.key:/etc/bytecomp/cluster.key", name)
            exec_start = self.value(unit, "Service", "ExecStart").split()
            program = os.path.basename(exec_start[0])
            index = exec_start.index("--key_file")
            self.assertEqual(exec_start[index + 1], "%d/cluster.key", name)
            self.assertTrue(daemon_has_flag(program, "key_file"), program)
        self.assertFalse(daemon_has_flag("bytecomp-server", "no_such_flag"))  # the check can fail

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
            r"Command /usr/bin/bytecomp-(scheduler|server) is not executable", line)]
        self.assertEqual(complaints, [], proc.stdout)

    def test_units_run_installed_programs_and_point_at_installed_documentation(self):
        # The paths are the Debian package's (cmake/Install.cmake rewrites /usr for another
        # prefix); the documentation is a file of the repository that the install rules put in
        # /usr/share/doc/bytecomp.
        with open(INSTALL_RULES) as f:
            rules = f.read()
        for name in ("bytecomp-scheduler.service", "bytecomp-server@.service"):
            unit = self.unit(name)
            program = self.value(unit, "Service", "ExecStart").split()[0]
            self.assertIn(os.path.basename(program), installed_programs())
            self.assertEqual(os.path.dirname(program), "/usr/bin")
            doc = self.value(unit, "Unit", "Documentation")
            self.assertTrue(doc.startswith("file:/usr/share/doc/bytecomp/"), doc)
            # The page is README.md or one of docs/, installed flat into the doc directory.
            source = os.path.basename(doc)
            if not os.path.isfile(os.path.join(REPO, source)):
                source = os.path.join("docs", source)
            self.assertTrue(os.path.isfile(os.path.join(REPO, source)), source)
            rule = re.search(r"install\(FILES ([^)]*)DESTINATION \$\{BYTECOMP_INSTALL_DOCDIR\}\)",
                             rules)
            self.assertTrue(rule and source in rule.group(1).split(), rules)


def installed_programs():
    """The programs cmake/Install.cmake puts in bin/ (the targets' names and bytecomp-run)."""
    with open(INSTALL_RULES) as f:
        rules = f.read()
    programs = re.search(r"foreach\(program ([^)]*)\)", rules).group(1).split()
    return set(programs) | {"bytecomp-run"}


def package_version():
    """The version CPack gives the package (cmake/Package.cmake reads shim/pyproject.toml)."""
    with open(os.path.join(REPO, "shim", "pyproject.toml")) as f:
        return re.search(r'^version *= *"([^"]+)"', f.read(), re.M).group(1)


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


def load_manifests():
    """{(kind, name): document} of every deploy/k8s/*.yaml."""
    import yaml
    docs = {}
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml"):
            with open(os.path.join(K8S, name)) as f:
                for doc in yaml.safe_load_all(f):
                    docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


class ManifestsFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_manifests()

    def get(self, kind, name):
        self.assertIn((kind, name), self.docs)
        return self.docs[(kind, name)]


class KubernetesManifestsTest(ManifestsFixture):

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
            if "secret" in volume:  # made by the operator (kubectl create secret), not shipped
                self.assertEqual(volume["secret"]["secretName"], KEY_SECRET)
            else:
                self.get("ConfigMap", volume["configMap"]["name"])

    def test_daemons_mount_the_cluster_key_secret(self):
        for workload in (self.get("Deployment", "bytecomp-scheduler"),
                         self.get("StatefulSet", "bytecomp-server")):
            spec = workload["spec"]["template"]["spec"]
            (volume,) = [v for v in spec["volumes"] if "secret" in v]
            self.assertEqual(volume["secret"]["secretName"], KEY_SECRET)
            # Owner-only in the Secret; fsGroup makes it 0440 for the pods' user, which the
            # daemons accept with a warning (others may never read it).
            self.assertEqual(volume["secret"]["defaultMode"], 0o400)
            self.assertEqual(spec["securityContext"]["fsGroup"],
                             spec["securityContext"]["runAsGroup"])
            (container,) = spec["containers"]
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
            self.assertEqual(mount["mountPath"], KEY_MOUNT)
            self.assertTrue(mount["readOnly"])
            words = " ".join(container.get("command", []) + container.get("args", [])).split()
            self.assertEqual(words[words.index("--key_file") + 1], KEY_MOUNT + "/cluster.key")

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
            env = dict(os.environ, HOSTNAME="bytecomp-server-12")
            (line,) = container["args"]
            self.assertIn("exec /usr/bin/bytecomp-server ", line)
            line = line.replace("/usr/bin/bytecomp-server", fake)
            proc = subprocess.run(["/bin/sh", "-c", line], env=env,
                                  stdout=subprocess.PIPE, text=True, timeout=10)
        self.assertEqual(proc.stdout.split("\n")[:-1],
                         ["--scheduler", "bytecomp-scheduler:9000", "--rank", "12",
                          "--config", "/etc/bytecomp/cluster.pbtxt",
                          "--key_file", KEY_MOUNT + "/cluster.key"])


def dockerfile_instructions(path):
    """[(INSTRUCTION, arguments)] of a Dockerfile: comments dropped, continuations joined."""
    instructions, pending = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            word, _, rest = line.strip().partition(" ")
            instructions.append((word.upper(), " ".join(rest.split())))
    if pending:
        raise ValueError("%s: the last line continues into nothing" % path)
    return instructions


class ContainerImageTest(ManifestsFixture):
    """deploy/Dockerfile is the image the manifests run. No container engine runs on the
    machines this is tested on, so the image is never built here: these are static checks of
    the recipe against the manifests and the package CPack makes."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.instructions = dockerfile_instructions(DOCKERFILE)
        cls.version = package_version()

    def workloads(self):
        return [self.get("Deployment", "bytecomp-scheduler"),
                self.get("StatefulSet", "bytecomp-server")]

    def all_of(self, instruction):
        return [args for word, args in self.instructions if word == instruction]

    def test_debian_12_slim(self):
        self.assertEqual(self.instructions[0][0], "FROM")
        self.assertEqual(self.all_of("FROM"), ["debian:12-slim"])

    def test_installs_the_package_cpack_makes(self):
        deb = "bytecomp_%s_amd64.deb" % self.version
        self.assertIn("BYTECOMP_DEB=" + deb, self.all_of("ARG"))
        (copy,) = self.all_of("COPY")
        source, destination = copy.split()
        self.assertEqual(source, "${BYTECOMP_DEB}")
        installs = [r for r in self.all_of("RUN") if "apt-get install" in r]
        self.assertEqual(len(installs), 1)
        self.assertRegex(installs[0], r"apt-get install -y --no-install-recommends %s( |$)"
                         % re.escape(destination))

    def test_runs_as_the_manifests_non_root_user(self):
        users = self.all_of("USER")
        self.assertTrue(users, "no USER: the image would run as root")
        uid, _, gid = users[-1].partition(":")
        self.assertTrue(uid.isdigit() and int(uid) != 0, "USER %s: numeric, not 0" % users[-1])
        # The user exists in the image, created before USER switches to it.
        user_index = self.instructions.index(("USER", users[-1]))
        created = [r for w, r in self.instructions[:user_index]
                   if w == "RUN" and "useradd" in r and "--uid %s " % uid in r]
        self.assertTrue(created, "no useradd --uid %s before USER" % uid)
        for workload in self.workloads():
            context = workload["spec"]["template"]["spec"]["securityContext"]
            self.assertIs(context["runAsNonRoot"], True)
            self.assertEqual(str(context["runAsUser"]), uid)
            if gid:
                self.assertEqual(str(context["runAsGroup"]), gid)

    def test_manifests_run_this_image_and_its_installed_programs(self):
        tags = set(re.findall(r"docker build .*-t (\S+)", open(DOCKERFILE).read()))
        self.assertEqual(tags, {"bytecomp:" + self.version}, "the build command's tag")
        for workload in self.workloads():
            (container,) = workload["spec"]["template"]["spec"]["containers"]
            self.assertEqual(container["image"], "bytecomp:" + self.version)
            command = " ".join(container["command"] + container.get("args", []))
            programs = re.findall(r"/usr/bin/(bytecomp-[a-z-]+)", command)
            self.assertTrue(programs, command)
            for program in programs:
                self.assertIn(program, installed_programs())


if __name__ == "__main__":
    which = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in ("files", "k8s") else None
    if which == "k8s":
        try:
            import yaml  # noqa: F401
        except ImportError:
            print("SKIP: python3-yaml is not installed; the manifests were not parsed")
            sys.exit(SKIP)
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(case)
                                   for case in (KubernetesManifestsTest, ContainerImageTest))
    elif which == "files":
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(case)
                                   for case in (SystemdUnitsTest, ExampleConfigTest))
    else:
        sys.exit("usage: test_deploy_files.py files|k8s")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
