"""Alerts and dashboards: real promtool checks and unit tests, and metric names that exist upstream.

The promtool tier needs the promtool binary that `make tools` builds (tools/build.sh promtool);
it skips with that reason where the binary is absent. `make test-monitoring` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered
from trainyard.manifests import alerts
from trainyard.manifests.metrics import KNOWN_METRICS, metric_names

TESTS = Path(__file__).parent / "alerts.test.yaml"
SHARING = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing.yaml")
MONITORED = ("staging", "prod", SHARING)


def promtool() -> str | None:
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
    candidate = tools / "bin" / "promtool"
    return str(candidate) if candidate.is_file() else shutil.which("promtool")


PROMTOOL = promtool()
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not built: run `make tools` "
                                    "(tools/build.sh promtool) or put promtool on PATH")


def prometheus_rules(stack: str) -> list[dict[str, Any]]:
    return [o for o in rendered(stack).objects if o["kind"] == "PrometheusRule"]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.promtool
@needs_promtool
@pytest.mark.parametrize("stack", MONITORED)
def test_promtool_check_rules_accepts_the_rendered_prometheus_rules(stack: str, tmp_path: Path) -> None:
    (rule,) = prometheus_rules(stack)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    result = _run("check", "rules", "rules.yaml", cwd=tmp_path)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.promtool
@needs_promtool
def test_promtool_unit_tests_of_every_alert_pass(tmp_path: Path) -> None:
    (rule,) = prometheus_rules("prod")
    (tmp_path / "alerts.rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    result = _run("test", "rules", TESTS.name, cwd=tmp_path)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.promtool
@needs_promtool
def test_a_broken_expectation_fails_promtool(tmp_path: Path) -> None:
    """The unit tests can fail: a threshold the tests do not expect makes promtool report it."""
    (rule,) = prometheus_rules("prod")
    groups = rule["spec"]["groups"]
    for group in groups:
        for item in group["rules"]:
            if item["alert"] == "TrainyardEvictionsRising":
                item["expr"] = item["expr"].replace("> 10", "> 100")
    (tmp_path / "alerts.rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    result = _run("test", "rules", TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "TrainyardEvictionsRising" in result.stdout + result.stderr


def test_every_alert_has_a_promtool_case() -> None:
    (rule,) = prometheus_rules("prod")
    declared = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    tested = {t["alertname"] for case in cases for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert declared == tested


@pytest.mark.parametrize("stack", MONITORED)
def test_alerts_query_only_metrics_that_exist_upstream(stack: str) -> None:
    (rule,) = prometheus_rules(stack)
    for group in rule["spec"]["groups"]:
        for item in group["rules"]:
            used = metric_names(item["expr"])
            assert used, item["alert"]
            assert used <= KNOWN_METRICS, f"{item['alert']} uses unknown metrics {used - KNOWN_METRICS}"


def test_metric_name_reader_sees_through_promql_syntax() -> None:
    expr = ('sum by (cluster_queue) (kueue_pending_workloads{replica_role!="follower",x="a b"}) > 0\n'
            'unless on (cluster_queue) sum(increase(kueue_admitted_workloads_total[30m])) > 0 or absent(up{job="k"})')
    assert metric_names(expr) == {"kueue_pending_workloads", "kueue_admitted_workloads_total", "up"}
    assert metric_names("kueue_workload_evictions_total > 1") - KNOWN_METRICS == {"kueue_workload_evictions_total"}


def test_the_stack_without_gpu_operator_alerts_on_no_dcgm_job() -> None:
    config = rendered("prod")  # prod runs the operator: DCGM is a scraped job
    assert alerts.DCGM_JOB in json.dumps([o for o in config.objects if o["kind"] == "PrometheusRule"])


@pytest.mark.parametrize("stack", MONITORED)
def test_dashboards_are_grafana_models_whose_queries_use_known_metrics(stack: str) -> None:
    maps = [o for o in rendered(stack).objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    assert maps
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((key, text),) = config_map["data"].items()
        assert key.endswith(".json")
        model = json.loads(text)
        assert {"uid", "title", "schemaVersion", "panels", "templating"} <= set(model)
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids))
        for panel in model["panels"]:
            assert {"type", "title", "gridPos", "datasource", "targets"} <= set(panel)
            assert [t["refId"] for t in panel["targets"]] == [chr(ord("A") + i) for i in range(len(panel["targets"]))]
            for target in panel["targets"]:
                used = metric_names(target["expr"])
                assert used and used <= KNOWN_METRICS, f"{model['uid']}/{panel['title']}: {used - KNOWN_METRICS}"
        for variable in model["templating"]["list"]:
            assert metric_names(variable["query"]) <= KNOWN_METRICS
