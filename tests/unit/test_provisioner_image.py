"""The object-store provisioner image's build files: what the provisioning program imports is what the image installs,
at the versions the tests run it with, and the image runs as the Job's restricted user."""

from __future__ import annotations

import ast
import re
import sys

from tests.conftest import ROOT
from trainyard.manifests.object_store import _restricted_pod

IMAGE = ROOT / "platform" / "trainyard" / "provisioning" / "image"
PROGRAM = ROOT / "platform" / "trainyard" / "provisioning" / "object_store.py"
# The import name of each distribution the image installs.
IMPORT_OF = {"boto3": {"boto3", "botocore"}, "minio": {"minio"}}


def pins(text: str) -> dict[str, str]:
    found = (re.match(r"^\s*([A-Za-z0-9_.-]+)==([^\s;#]+)", line) for line in text.splitlines())
    return {m.group(1).lower(): m.group(2) for m in found if m}


def third_party_imports() -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(PROGRAM.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "__future__"}


def test_every_library_the_program_imports_is_installed_pinned_in_the_image() -> None:
    installed = pins((IMAGE / "requirements.txt").read_text())
    assert set(installed) == set(IMPORT_OF), installed
    provided = set().union(*(IMPORT_OF[name] for name in installed))
    assert third_party_imports() == provided
    assert "trainyard" not in third_party_imports()  # the program runs alone in the Job, from a ConfigMap


def test_the_image_pins_are_the_versions_the_tests_run_the_program_with() -> None:
    dev = pins("\n".join(re.findall(r'"([^"]+==[^"]+)"', (ROOT / "pyproject.toml").read_text())))
    installed = pins((IMAGE / "requirements.txt").read_text())
    shared = set(installed) & set(dev)
    assert "boto3" in shared
    assert {name: installed[name] for name in shared} == {name: dev[name] for name in shared}


def test_the_image_runs_as_the_jobs_restricted_user_and_installs_the_requirements() -> None:
    containerfile = (IMAGE / "Containerfile").read_text()
    pod = _restricted_pod()
    assert f"USER {pod['runAsUser']}:{pod['runAsGroup']}" in containerfile.splitlines()
    assert "COPY requirements.txt" in containerfile and "-r /opt/trainyard/requirements.txt" in containerfile
    assert re.search(r"^FROM \$\{BASE\}$", containerfile, re.MULTILINE)
    assert re.search(r"^ARG BASE=registry\.trainyard\.internal/", containerfile, re.MULTILINE)
