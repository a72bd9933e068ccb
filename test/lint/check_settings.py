#!/usr/bin/env python3
"""lint.settings: the settings are described once, in proto/cluster_config.proto (each field's
comment: what it does and its default), and docs/CONFIGURATION.md is checked against it and
against the code, so that neither drifts:

1. Every ClusterConfig field is in the reference's ClusterConfig table, every name there is a
   field, and a default the table gives for a field alone on its row is the one the field's
   comment states ("default X").
2. Every daemon flag (ABSL_FLAG in scheduler/main.cc and server/main.cc) is a ClusterConfig
   field of the same name, or is named in the reference (`--flag`).
3. Every BYTECOMP_* environment variable the product reads (the C++ parts, the Python shim,
   the launcher, the examples, the deploy scripts' knobs) is in the reference's table of
   variables, and every variable in that table is read somewhere.

Prints each finding with where to fix it; exit status 1 when there is any.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO = os.path.join(ROOT, "proto", "cluster_config.proto")
REFERENCE = os.path.join(ROOT, "docs", "CONFIGURATION.md")
DAEMONS = [os.path.join(ROOT, "scheduler", "main.cc"), os.path.join(ROOT, "server", "main.cc")]
# Where the product reads its variables (tests and benchmarks have their own, in
# docs/TESTING.md and bench/).
PRODUCT_DIRS = ["common", "compress", "cpu_offload", "telemetry", "worker", "server",
                "scheduler", "shim", "examples", "tools", "deploy"]
# Variables the deploy scripts pass between themselves, not knobs for a user.
INTERNAL = {"BYTECOMP_STAGE_LOG", "BYTECOMP_STAGE_TITLE", "BYTECOMP_STAGE_BUDGETS"}
# How a file reads (or, for the scripts it starts, sets) a variable, by the file's kind.
CPP_READ = [re.compile(r'"(BYTECOMP_[A-Z0-9_]+)"')]                     # getenv("..."), tables
PY_READ = [re.compile(r'"(BYTECOMP_[A-Z0-9_]+)"'),                        # environ["..."], .get
           re.compile(r'\b(BYTECOMP_[A-Z0-9_]+)=')]                       # dict(env, NAME=...)
SH_READ = [re.compile(r'\$\{(BYTECOMP_[A-Z0-9_]+)'), re.compile(r'\$(BYTECOMP_[A-Z0-9_]+)')]


def proto_fields():
    """{field: its comment} of message ClusterConfig."""
    text = open(PROTO).read()
    body = text[text.index("message ClusterConfig {"):]
    fields, comment, nested = {}, [], 0
    for line in body.splitlines()[1:]:
        line = line.strip()
        if line.startswith("//"):
            comment.append(line[2:].strip())
            continue
        if line.endswith("{"):  # a nested enum or message: its values are not fields
            nested += 1
            continue
        if line == "}":
            if nested == 0:
                break
            nested -= 1
            comment = []
            continue
        m = None if nested else re.match(
            r"(?:optional\s+)?\w+\s+(\w+)\s*=\s*\d+\s*(?:\[[^\]]*\])?;", line)
        if m:
            fields[m.group(1)] = " ".join(comment)
        comment = [] if m or not line else comment
    return fields


def section(text, heading):
    """The lines of the markdown table that follows the paragraph naming `heading`."""
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and its rule


def check_cluster_config(fields, reference, problems):
    rows = section(reference, "`ClusterConfig` (`proto/cluster_config.proto`")
    listed = {}
    for cells in rows:
        names = re.findall(r"`(\w+)`", cells[0])
        for name in names:
            listed[name] = cells[-1] if len(names) == 1 else None
    for name in fields:
        if name not in listed:
            problems.append(f"{REFERENCE}: the ClusterConfig table lacks `{name}` "
                            f"({PROTO}: {fields[name][:80]}...)")
    for name, default in listed.items():
        if name not in fields:
            problems.append(f"{REFERENCE}: the ClusterConfig table names `{name}`, which is not "
                            f"a field of {PROTO}")
            continue
        stated = re.search(r"(?:\(d|\bD)efault:? ([^;,)]+?)(?:[;,)]|\.(?:\s|$)|$)", fields[name])
        if default is None or stated is None:
            continue
        want = stated.group(1).strip().strip("`")
        if want.split()[0] not in default.replace("`", ""):
            problems.append(f"{REFERENCE}: `{name}` has default '{default}' in the table, "
                            f"'{want}' in {PROTO}")


def check_flags(fields, reference, problems):
    for path in DAEMONS:
        for flag in re.findall(r"ABSL_FLAG\(\s*[\w:]+\s*,\s*(\w+)\s*,", open(path).read()):
            if flag in fields or f"`--{flag}" in reference:
                continue
            problems.append(f"{path}: --{flag} is neither a ClusterConfig field nor named in "
                            f"{REFERENCE}")


def product_reads():
    """{variable: first file that reads it}."""
    found = {}
    for top in PRODUCT_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".cc", ".h")):
                    patterns = CPP_READ
                elif name.endswith(".py") or name == "bytecomp-run":
                    patterns = PY_READ
                elif name.endswith(".sh"):
                    patterns = SH_READ
                else:
                    continue
                path = os.path.join(dirpath, name)
                text = open(path, errors="replace").read()
                for pattern in patterns:
                    for var in pattern.findall(text):
                        found.setdefault(var, os.path.relpath(path, ROOT))
    return {v: f for v, f in found.items() if v not in INTERNAL}


def check_variables(reference, problems):
    rows = section(reference, "Environment variables (every one the product reads):")
    documented = set()
    for cells in rows:
        documented.update(re.findall(r"`(BYTECOMP_[A-Z0-9_]+)`", cells[0]))
    read = product_reads()
    for var, where in sorted(read.items()):
        if var not in documented:
            problems.append(f"{REFERENCE}: the table of variables lacks {var} (read in {where})")
    for var in sorted(documented - set(read)):
        problems.append(f"{REFERENCE}: {var} is in the table of variables, but nothing in "
                        f"{', '.join(PRODUCT_DIRS)} reads it")


def main():
    fields = proto_fields()
    reference = open(REFERENCE).read()
    problems = []
    check_cluster_config(fields, reference, problems)
    check_flags(fields, reference, problems)
    check_variables(reference, problems)
    for p in problems:
        print(p)
    print(f"settings: {len(fields)} ClusterConfig fields, {len(product_reads())} variables; "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
