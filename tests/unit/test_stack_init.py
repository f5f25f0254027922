"""`trainyard stack preflight|init` without an engine: the checks, and the reviewed file kept byte for byte.

A stand-in `pulumi` on PATH (a shell script) behaves as the real one does to the stack file on `stack init`:
it rewrites the whole file (comments gone, keys reordered) with `secretsprovider:` and `encryptedkey:`
added. The real CLI, backend and key service: tests/dataplane/test_operator_walkthrough.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import CRDS_DIR, ROOT, needs_crds
from trainyard.deploy.stack_init import (
    DeployError,
    check_backend,
    check_context,
    check_secrets_provider,
    init_stack,
    redact,
)
from trainyard.project import open_stack

TRAINYARD = Path(sys.executable).parent / "trainyard"
pytestmark = needs_crds  # the image-lock finding renders the stack

# `pulumi` as far as stack init uses it: `version`, `plugin ls`, `stack ls`, `stack init` (rewriting the file as
# Pulumi does, plus $FAKE_EXTRA, a YAML fragment merged in to simulate a rewrite that changes more), `config`.
FAKE_PULUMI = r'''#!/usr/bin/env python3
import json, os, sys, pathlib, yaml
args = sys.argv[1:]
state = pathlib.Path(os.environ["FAKE_STATE"])
stacks = json.loads(state.read_text()) if state.exists() else []
if args[:1] == ["version"]:
    print("v3.274.1"); sys.exit(0)
if args[:2] == ["plugin", "ls"]:
    print(json.dumps([{"name": "kubernetes", "kind": "resource", "version": os.environ.get("FAKE_PLUGIN", "4.25.0")}]))
    sys.exit(0)
if args[:2] == ["stack", "ls"]:
    print(json.dumps([{"name": "organization/trainyard/" + s} for s in stacks])); sys.exit(0)
if args[:2] == ["stack", "init"]:
    name = args[2]
    provider = args[args.index("--secrets-provider") + 1]
    path = pathlib.Path("stacks") / f"Pulumi.{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["secretsprovider"] = provider
    doc["encryptedkey"] = "AQICAHh0ZXN0LXdyYXBwZWQtZGF0YS1rZXk="
    doc.update(yaml.safe_load(os.environ.get("FAKE_EXTRA") or "{}"))
    path.write_text(yaml.safe_dump(dict(sorted(doc.items()))))
    state.write_text(json.dumps(stacks + [name])); sys.exit(0)
if args[:1] == ["config"]:
    print("{}"); sys.exit(0)
sys.exit(3)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's `local` stack in a project of its own, with a kubeconfig naming its context."""
    root = tmp_path / "project"
    (root / "stacks").mkdir(parents=True)
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("runtimes", "serving-runtimes", "images.lock.yaml", "platform"):
        (root / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "stacks" / "Pulumi.local.yaml", root / "stacks" / "Pulumi.local.yaml")
    return root


@pytest.fixture
def environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI.replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1))
    fake.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": [
        {"name": "trainyard-local", "context": {"cluster": "c", "user": "u"}},
        {"name": "other", "context": {"cluster": "c", "user": "u"}}]}))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path),
           "FAKE_STATE": str(tmp_path / "fake-state.json"), "TRAINYARD_CRDS_DIR": str(CRDS_DIR)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_a_stack_that_protects_data_refuses_a_local_backend_and_a_passphrase() -> None:
    assert check_backend("file:///srv/state", protect_data=True).level == "error"
    assert check_backend("file:///srv/state", protect_data=False).level == "ok"
    assert check_backend("s3://state?region=x", protect_data=True).level == "ok"
    assert check_backend("ftp://x", protect_data=False).level == "error"
    assert "endpoint=https://s3.lab:9000" in check_backend("s3://b?endpoint=s3.lab:9000", protect_data=False).fix
    assert check_backend(None, protect_data=False).fix.startswith("pass --backend")
    refused = check_secrets_provider("passphrase", protect_data=True)
    assert refused.level == "error" and "awskms://" in refused.fix
    assert check_secrets_provider("hashivault://trainyard-prod", protect_data=True).level == "ok"
    assert check_secrets_provider("rot13://x", protect_data=False).level == "error"


def test_a_password_in_a_backend_url_is_never_printed() -> None:
    assert redact("postgres://pulumi:s3cret@db:5432/state") == "postgres://pulumi:***@db:5432/state"
    assert "s3cret" not in check_backend("postgres://pulumi:s3cret@db/state", protect_data=True).detail


def test_the_context_must_be_in_the_kubeconfig(project: Path, environ: dict[str, str]) -> None:
    stack = open_stack(str(project / "stacks" / "Pulumi.local.yaml"), project)
    assert check_context(stack.config.cluster, environ, stack.path.parent).level == "ok"
    other = stack.config.cluster.model_copy(update={"context": "gpu-prod-1-admin"})
    missing = check_context(other, environ, stack.path.parent)
    assert missing.level == "error" and "it has: other, trainyard-local" in missing.detail


def test_init_keeps_the_reviewed_file_and_appends_only_the_provider(project: Path, environ: dict[str, str]) -> None:
    path = project / "stacks" / "Pulumi.local.yaml"
    reviewed = path.read_bytes()
    stack = open_stack(str(path), project)
    result = init_stack(stack, "s3://state?region=us-east-1", "awskms://alias/x?region=us-east-1", environ)
    written = path.read_bytes()
    assert written.startswith(reviewed)  # comments and order as reviewed, though the fake rewrote the file
    appended = yaml.safe_load(written[len(reviewed):])
    assert appended == {"secretsprovider": "awskms://alias/x?region=us-east-1",
                        "encryptedkey": "AQICAHh0ZXN0LXdyYXBwZWQtZGF0YS1rZXk="}
    assert result.created and sorted(result.added) == ["encryptedkey", "secretsprovider"]
    assert yaml.safe_load(written)["config"] == yaml.safe_load(reviewed)["config"]

    again = init_stack(open_stack(str(path), project), "s3://state?region=us-east-1",
                       "awskms://alias/x?region=us-east-1", environ)
    assert not again.created and path.read_bytes() == written


def test_init_refuses_a_rewrite_that_changes_more_than_the_provider(project: Path, environ: dict[str, str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = project / "stacks" / "Pulumi.local.yaml"
    reviewed = path.read_bytes()
    monkeypatch.setenv("FAKE_EXTRA", "config: {trainyard:platform: {environment: changed}}")
    environ["FAKE_EXTRA"] = "config: {trainyard:platform: {environment: changed}}"
    with pytest.raises(DeployError, match="changed config besides the secrets provider"):
        init_stack(open_stack(str(path), project), "s3://state", "awskms://alias/x", environ)
    assert path.read_bytes() == reviewed


def test_init_refuses_a_plugin_of_another_version(project: Path, environ: dict[str, str]) -> None:
    path = project / "stacks" / "Pulumi.local.yaml"
    environ["FAKE_PLUGIN"] = "4.18.0"
    with pytest.raises(DeployError, match=r"kubernetes v4\.25\.0 is not installed \(installed: 4\.18\.0\)"):
        init_stack(open_stack(str(path), project), "s3://state", "awskms://alias/x", environ)


def test_the_command_exits_2_with_each_finding_and_its_fix(project: Path, environ: dict[str, str]) -> None:
    result = subprocess.run([str(TRAINYARD), "stack", "preflight", "stacks/Pulumi.local.yaml", "--backend", "ftp://x",
                             "--secrets-provider", "passphrase"], cwd=project, env=environ, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 2, result.stderr
    assert "ERROR   backend: ftp://x: not a backend Pulumi opens" in result.stdout
    assert "ok      kubeconfig context: trainyard-local" in result.stdout
    assert "Traceback" not in result.stderr


def test_preflight_asks_the_image_gate_the_program_applies() -> None:
    from trainyard.deploy.stack_init import check_image_lock

    prod = check_image_lock(open_stack("prod", ROOT))  # protects data; its lock still has placeholders
    assert prod.level == "error" and "trainyard images lock prod" in prod.fix
    local = check_image_lock(open_stack("local", ROOT))  # deploys by tag: a warning, not a refusal
    assert local.level in ("warning", "ok")
