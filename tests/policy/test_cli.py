"""``trainyard check`` and ``trainyard policy-config``: tables, exit codes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, STACKS, needs_crds
from trainyard.cli import main
from trainyard.policy import RULE_IDS

BAD = ROOT / "tests" / "fixtures" / "bad-manifests"


@needs_crds
@pytest.mark.parametrize("name", STACKS)
def test_check_passes_every_stack(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: 0 mandatory, 0 advisory findings")


@needs_crds
def test_check_prints_a_block_per_finding_and_fails_on_a_mandatory_finding(capsys: pytest.CaptureFixture[str]) -> None:
    job = BAD / "trainjob-priority-class--critical-not-allowed.yaml"
    assert main(["check", "prod", str(job)]) == 1
    out = capsys.readouterr().out
    head, where, message, hint = out.splitlines()[:4]
    assert head.split() == ["MANDATORY", "trainjob-priority-class", "TrainJob/llm-research/llama-sft"]
    assert where == f"  at {job}:3"
    assert message.startswith("  priority class 'critical' is not allowed") and hint.startswith("  hint: ")
    assert "prod: 1 mandatory, 0 advisory findings" in out


@needs_crds
def test_advisory_findings_do_not_fail_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "prod", str(BAD / "gpu-container-limits--notebook-without-memory-limit.yaml")]) == 0
    assert "prod: 0 mandatory, 1 advisory findings" in capsys.readouterr().out


@needs_crds
def test_namespace_option_places_extra_manifests_that_name_none(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = (BAD / "trainjob-priority-class--critical-not-allowed.yaml").read_text().replace("  namespace: llm-research\n", "")
    (tmp_path / "job.yaml").write_text(job)
    assert main(["check", "-n", "assistant", "prod", str(tmp_path / "job.yaml")]) == 0  # assistant may use critical
    assert "TrainJob/assistant/llama-sft" not in capsys.readouterr().out


@pytest.mark.parametrize(("content", "reason"), [
    (None, "cannot read"),
    ("kind: [unclosed\n", "not valid YAML"),
    ("- just\n- a list\n", "a manifest is a mapping"),
    ("apiVersion: v1\nmetadata: {name: x}\n", "kind: required field is missing"),
    ("apiVersion: v1\nkind: Pod\n", "metadata.name: required field is missing"),
])
def test_bad_extra_manifests_exit_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    content: str | None, reason: str) -> None:
    path = tmp_path / "pr.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["check", "prod", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and reason in err


def test_policy_config_writes_the_stack_enforcement_levels(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy-config", "local"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert set(config) == RULE_IDS
    assert config["data-protected"] == {"enforcementLevel": "disabled"}
    assert config["gpu-container-limits"] == {"enforcementLevel": "advisory"}
    assert config["no-host-path"] == {"enforcementLevel": "mandatory"}


def test_docs_list_every_rule_with_its_default_severity() -> None:
    from trainyard.policy import RULES

    docs = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    for rule in RULES:
        assert f"| `{rule.id}` | {rule.severity} |" in docs, rule.id
