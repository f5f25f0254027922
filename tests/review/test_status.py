"""`trainyard status` offline: the report from a snapshot recorded on a real kube-apiserver (tests/cluster/test_status.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from trainyard.cli import main
from trainyard.review.status import is_pending, status_report

SNAPSHOT = ROOT / "tests" / "fixtures" / "status" / "prod-snapshot.json"


def test_markdown_lists_quota_usage_borrowing_and_pending_reasons_oldest_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "prod", "--from", str(SNAPSHOT)]) == 0
    out = capsys.readouterr().out
    assert "| llm-research | research | h100 | nvidia.com/gpu | 48 | 64 | 16 | 32 | 24 | 1 | 1 |" in out
    pending = out.split("## Pending workloads, oldest first", 1)[1]
    assert pending.index("llm-research/sft-70b") < pending.index("eval/sweep-lr")
    assert "pretrain-8b" not in pending
    assert "| Inadmissible | ClusterQueue eval is inactive |" in pending
    assert "| cpu |" not in out  # GPU resources only, unless --all-resources


def test_json_groups_pending_workloads_under_their_cluster_queue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "prod", "--from", str(SNAPSHOT), "--format", "json", "--all-resources"]) == 0
    data = json.loads(capsys.readouterr().out)
    queues = {q["name"]: q for q in data["queues"]}
    assert [w["name"] for w in queues["llm-research"]["workloads"]] == ["sft-70b"]
    assert queues["llm-research"]["workloads"][0]["reason"] == "Pending"
    h100 = next(r for r in queues["llm-research"]["resources"] if (r["flavor"], r["resource"]) == ("h100", "memory"))
    assert (h100["usage"], h100["borrowed"]) == ("14400Gi", "3600Gi")


def test_a_workload_on_a_missing_local_queue_is_reported_apart() -> None:
    snapshot = json.loads(SNAPSHOT.read_text())
    stray = json.loads(json.dumps(next(w for w in snapshot["workloads"] if w["metadata"]["name"] == "sweep-lr")))
    stray["metadata"]["name"], stray["spec"]["queueName"] = "lost", "nowhere"
    del stray["status"]
    snapshot["workloads"].append(stray)
    report = status_report(snapshot, "test")
    assert [(w.name, w.reason) for w in report.unqueued] == [("lost", "NotConsidered")]


def test_finished_admitted_and_deactivated_workloads_are_not_pending() -> None:
    def workload(conditions: list[dict[str, str]], active: bool = True) -> dict[str, object]:
        return {"spec": {"active": active}, "status": {"conditions": conditions}}
    assert is_pending(workload([{"type": "QuotaReserved", "status": "False"}]))
    assert not is_pending(workload([{"type": "QuotaReserved", "status": "True"}]))
    assert not is_pending(workload([{"type": "Finished", "status": "True"}]))
    assert not is_pending(workload([], active=False))


def test_an_unreadable_snapshot_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "prod", "--from", str(ROOT / "README.md")]) == 2
    assert "cannot read a recorded snapshot" in capsys.readouterr().err
