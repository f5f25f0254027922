"""tools/pulumi-local.sh (``trainyard.rehearsal.engine``) with stand-in ``pulumi`` and ``kubectl``: what it runs, in
which directory and environment, and what it keeps between runs (salt, passphrase, the cluster's identity)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard.rehearsal.engine import CONTEXT, main

FAKE_PULUMI = """#!/bin/sh
echo "pulumi $* in $(basename "$PWD")" >> "$FAKE_LOG"
case "$1" in
  version) echo v3.0.0-fake ;;
  stack) grep -q '^encryptionsalt:' "stacks/Pulumi.$7.yaml" || sed -i '1i encryptionsalt: v1:fake-salt' "stacks/Pulumi.$7.yaml" ;;
  config) echo "secret of $(wc -c) bytes" >> "$FAKE_LOG" ;;
  up) state="${PULUMI_BACKEND_URL#file://}/.pulumi/stacks/trainyard"; mkdir -p "$state"
      echo '{"checkpoint": {"latest": {"secrets_providers": {"state": {"salt": "v1:fake-salt"}},
             "resources": [{"urn": "x"}]}}}' > "$state/local.json"; echo "up done" ;;
esac
"""
FAKE_KUBECTL = """#!/bin/sh
printf 'uid-%s' "$FAKE_UID"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A project like this one whose tools/build.sh reports every tool built."""
    project = tmp_path / "repo"
    (project / "tools").mkdir(parents=True)
    (project / "Pulumi.yaml").write_bytes((ROOT / "Pulumi.yaml").read_bytes())
    (project / "platform").mkdir()
    (project / "platform" / ".venv").symlink_to("../.venv")
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "python").symlink_to(Path(sys.executable))
    (project / "stacks").mkdir()
    (project / "stacks" / "Pulumi.local.yaml").write_bytes((ROOT / "stacks" / "Pulumi.local.yaml").read_bytes())
    build = project / "tools" / "build.sh"
    build.write_text("#!/bin/sh\nexit 0\n")
    build.chmod(0o755)
    return project


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    for name, text in (("pulumi", FAKE_PULUMI), ("kubectl", FAKE_KUBECTL)):
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    values = {"TRAINYARD_TOOLS_DIR": str(tools.parent), "TRAINYARD_STATE_DIR": str(tmp_path / "state"),
              "TRAINYARD_RUN_DIR": str(tmp_path / "run"), "TRAINYARD_PULUMI_HOME": str(tmp_path / "home"),
              "TRAINYARD_CLUSTER_DIR": str(tmp_path / "cluster"), "TRAINYARD_CLUSTER_EXTERNAL": "1",
              "TRAINYARD_CRDS_DIR": "/crds", "FAKE_LOG": str(tmp_path / "log"), "FAKE_UID": "1"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    for key in ("TRAINYARD_STACK_FILE", "TRAINYARD_CONFIG_SECRETS", "PULUMI_SKIP_CHECKPOINTS", "PULUMI_CONFIG_PASSPHRASE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    return values


def test_env_prints_what_pulumi_runs_with_and_the_run_directory(repo: Path, env: dict[str, str],
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "local"], repo=repo) == 0
    lines = [shlex.split(line) for line in capfd.readouterr().out.splitlines()]
    exported = dict(words[1].split("=", 1) for words in lines if words[0] == "export")
    assert exported["PULUMI_BACKEND_URL"] == f"file://{env['TRAINYARD_STATE_DIR']}"
    assert exported["PULUMI_SKIP_CHECKPOINTS"] == "true"
    assert exported["KUBECONFIG"] == f"{env['TRAINYARD_CLUSTER_DIR']}/kubeconfig"
    assert exported["TRAINYARD_CRDS_DIR"] == "/crds"
    assert lines[-1] == ["cd", env["TRAINYARD_RUN_DIR"]]
    run = Path(env["TRAINYARD_RUN_DIR"])
    assert (run / "platform").resolve() == (repo / "platform").resolve()
    assert (run / "stacks" / "Pulumi.local.yaml").read_bytes() == (repo / "stacks" / "Pulumi.local.yaml").read_bytes()
    passphrase = Path(env["TRAINYARD_STATE_DIR"]) / "passphrase"
    assert passphrase.stat().st_mode & 0o777 == 0o600 and len(passphrase.read_text().strip()) == 64


def test_up_keeps_the_salt_sets_the_secrets_and_refreshes_a_state_of_another_cluster(
        repo: Path, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "worker.kubeconfig"
    secret.write_text("kubeconfig\n")
    monkeypatch.setenv("TRAINYARD_CONFIG_SECRETS", f"worker={secret}\n")
    assert main(["up", "local", "--yes"], repo=repo) == 0
    out = capfd.readouterr()
    assert "up done" in out.out  # the engine's own output stays on stdout
    assert "==> pulumi up --stack local --yes" in out.err
    assert (Path(env["TRAINYARD_RUN_DIR"]) / ".encryptionsalt").read_text() == "encryptionsalt: v1:fake-salt\n"
    assert (Path(env["TRAINYARD_STATE_DIR"]) / "cluster-uid.local").read_text() == "uid-1\n"
    log = Path(env["FAKE_LOG"]).read_text().splitlines()
    assert log[1:4] == [f"pulumi login --non-interactive file://{env['TRAINYARD_STATE_DIR']} in run",
                        "pulumi stack select --non-interactive --create --secrets-provider passphrase local in run",
                        "pulumi config set --secret --non-interactive --stack local trainyard:worker in run"]
    assert log[4] == "secret of 11 bytes"

    # The same cluster: no refresh. Another one (recreated since): the state is refreshed first.
    assert main(["preview", "local"], repo=repo) == 0
    assert "--refresh" not in capfd.readouterr().err
    monkeypatch.setenv("FAKE_UID", "2")
    assert main(["up", "local", "--yes"], repo=repo) == 0
    assert "==> pulumi up --stack local --refresh --yes" in capfd.readouterr().err
    stack_file = Path(env["TRAINYARD_RUN_DIR"]) / "stacks" / "Pulumi.local.yaml"
    assert stack_file.read_text().splitlines()[0] == "encryptionsalt: v1:fake-salt"


@pytest.mark.parametrize(("argv", "message"), [
    (["bogus"], "unknown command 'bogus' (up|preview|destroy|refresh|state|env|rundir)"),
    (["up", "a/b"], "bad stack name 'a/b' (a name like local, not a path)"),
    (["state", "local"], "state needs a subcommand (e.g. state local unprotect --all --yes)"),
    (["up", "prod"], "stack prod targets cluster.context 'gpu-prod-1-admin'; this script only deploys to the local "
                     f"control plane (context {CONTEXT})"),
])
def test_bad_command_lines_exit_2_with_the_reason(repo: Path, env: dict[str, str], argv: list[str], message: str,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    (repo / "stacks" / "Pulumi.prod.yaml").write_bytes((ROOT / "stacks" / "Pulumi.prod.yaml").read_bytes())
    assert main(argv, repo=repo) == 2
    assert capfd.readouterr().err == f"pulumi-local.sh: {message}\n"


def test_the_script_is_a_thin_entry_point_to_the_module() -> None:
    script = ROOT / "tools" / "pulumi-local.sh"
    assert len(script.read_text().splitlines()) < 30
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("Run the real Pulumi engine")
