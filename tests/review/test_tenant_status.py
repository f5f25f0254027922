"""`trainyard status --tenant` offline: the report from a tenant's snapshot, with Kueue's visibility answer and without.

The visibility answer is Kueue's v0.19.2 ``PendingWorkloadsSummary`` in the shape upstream documents and serves
(tests/fixtures/status/pendingworkloads-v1beta2.json; Ref: kueue v0.19.2 apis/visibility/v1beta2/types.go,
site/content/en/docs/tasks/manage/monitor_pending_workloads/pending_workloads_on_demand.md). Its order differs from
the estimate on purpose (Kueue keeps a sticky head in front: pkg/cache/queue/cluster_queue.go baseCompareFunc), so a
report that used the estimate where Kueue answered would fail. The fallback is proven live on the rehearsal
(tests/cluster/test_tenant_status.py), whose recorded snapshot drives the last test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainyard.cli import main
from trainyard.review.tenant_status import ESTIMATED, VISIBILITY, estimated_positions, tenant_report

FIXTURES = ROOT / "tests" / "fixtures" / "status"
SUMMARY = json.loads((FIXTURES / "pendingworkloads-v1beta2.json").read_text())
NOT_SERVED = "Error from server (NotFound): the server could not find the requested resource"
PENDING = ("couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor h100, "
           "8 more needed")


def cond(kind: str, status: str, reason: str, message: str = "", at: str = "2026-12-01T09:00:00Z") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def workload(job: str, created: str, priority: int, *conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    suffix = next((i["metadata"]["name"].rsplit("-", 1)[1] for i in SUMMARY["items"]
                   if i["metadata"]["ownerReferences"][0]["name"] == job), "00000")
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"trainjob-{job}-{suffix}", "namespace": "llm-research", "creationTimestamp": created,
                         "uid": f"uid-{job}", "ownerReferences": [
                             {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": job,
                              "uid": f"tj-{job}", "controller": True}]},
            "spec": {"queueName": "default", "priority": priority, "active": status.pop("active", True)},
            "status": {"conditions": list(conditions), **status}}


def snapshot(visibility: dict[str, Any] | None = None) -> dict[str, Any]:
    waiting = cond("QuotaReserved", "False", "Pending", PENDING)
    return {
        "kind": "trainyard.tenant-status/v1", "namespace": "llm-research", "readAt": "2026-12-01T09:20:00Z",
        "localqueues": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                         "metadata": {"name": "default", "namespace": "llm-research"},
                         "spec": {"clusterQueue": "llm-research"},
                         "status": {"pendingWorkloads": 3, "reservingWorkloads": 1, "admittedWorkloads": 1,
                                    "flavorsReservation": [{"name": "h100", "resources": [
                                        {"name": "nvidia.com/gpu", "total": "48"}, {"name": "cpu", "total": "1152"}]}],
                                    "flavorsUsage": [{"name": "h100", "resources": [
                                        {"name": "nvidia.com/gpu", "total": "48"}, {"name": "cpu", "total": "1152"}]}]}}],
        "workloads": [
            workload("pretrain-8b", "2026-12-01T08:00:00Z", 1000, cond("QuotaReserved", "True", "QuotaReserved"),
                     cond("Admitted", "True", "Admitted", "The workload is admitted")),
            workload("sft-70b", "2026-12-01T09:00:00Z", 1000, waiting),
            # Evicted for not getting its pods ready, requeued once: Kueue orders it by the eviction (requeuing
            # timestamp Eviction), behind sft-70b although created before it.
            workload("sweep-lr", "2026-12-01T08:30:00Z", 1000, waiting,
                     cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout llm-research/x",
                          at="2026-12-01T09:01:00Z"),
                     requeueState={"count": 1, "requeueAt": "2026-12-01T09:02:00Z"}),
            workload("urgent-eval", "2026-12-01T09:05:00Z", 10000, waiting),
            # Waiting out its backoff until 09:30: not in the queue yet.
            workload("backoff", "2026-12-01T08:40:00Z", 1000, waiting,
                     cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout", at="2026-12-01T09:10:00Z"),
                     requeueState={"count": 2, "requeueAt": "2026-12-01T09:30:00Z"}),
            workload("gave-up", "2026-12-01T07:00:00Z", 1000,
                     cond("Evicted", "True", "Deactivated", "The workload is deactivated due to exceeding the maximum "
                          "number of re-queuing retries"), active=False, requeueState={"count": 3}),
            workload("done", "2026-12-01T06:00:00Z", 1000, cond("Finished", "True", "Succeeded", "Job finished")),
        ],
        "pendingWorkloads": {"default": visibility if visibility is not None else {"error": NOT_SERVED}},
    }


def by_job(report: Any) -> dict[str, Any]:
    return {w.job.split("/", 1)[1]: w for w in report.workloads}


def test_positions_come_from_kueues_visibility_answer_where_it_is_served() -> None:
    report = tenant_report(snapshot(SUMMARY), "test", "Eviction")
    (queue,) = report.queues
    assert (queue.positions, queue.visibility_error) == (VISIBILITY, None)
    jobs = by_job(report)
    assert {name: (w.position_in_local_queue, w.position_in_cluster_queue, w.positions) for name, w in jobs.items()
            if w.state == "pending"} == {
        "sft-70b": (0, 0, VISIBILITY), "urgent-eval": (1, 1, VISIBILITY), "sweep-lr": (2, 2, VISIBILITY),
        "backoff": (None, None, None)}  # not in Kueue's answer: not queued yet


def test_without_the_visibility_api_positions_are_estimated_in_kueues_order_and_the_report_says_why() -> None:
    report = tenant_report(snapshot(), "test", "Eviction")
    (queue,) = report.queues
    assert (queue.positions, queue.visibility_error) == (ESTIMATED, NOT_SERVED)
    jobs = by_job(report)
    # Higher priority first, then the queue timestamp: sweep-lr's eviction (09:01) is after sft-70b's creation (09:00).
    assert {name: w.position_in_local_queue for name, w in jobs.items() if w.position_in_local_queue is not None} == {
        "urgent-eval": 0, "sft-70b": 1, "sweep-lr": 2}
    assert [w.job for w in report.workloads][:3] == ["TrainJob/urgent-eval", "TrainJob/sft-70b", "TrainJob/sweep-lr"]


def test_with_creation_timestamps_for_requeuing_an_evicted_workload_keeps_its_place() -> None:
    positions = estimated_positions(snapshot()["workloads"], {"default": "llm-research"}, "Creation",
                                    "2026-12-01T09:20:00Z")
    assert {name.split("-", 1)[1].rsplit("-", 1)[0]: p for name, p in positions.items()} == {
        "urgent-eval": (0, 0), "sweep-lr": (1, 1), "sft-70b": (2, 2)}


def test_each_workload_says_why_it_waits_with_kueues_reason_eviction_and_requeue_state() -> None:
    jobs = by_job(tenant_report(snapshot(), "test", "Eviction"))
    assert (jobs["sft-70b"].state, jobs["sft-70b"].reason, jobs["sft-70b"].message) == ("pending", "Pending", PENDING)
    assert jobs["sweep-lr"].evicted == "PodsReadyTimeout: Exceeded the PodsReady timeout llm-research/x"
    assert jobs["sweep-lr"].requeue == "requeued 1 time, queued again at 2026-12-01T09:02:00Z"
    assert jobs["backoff"].requeue == "requeued 2 times, queued again at 2026-12-01T09:30:00Z"
    assert (jobs["gave-up"].state, jobs["gave-up"].reason) == ("deactivated", "Deactivated")
    assert (jobs["pretrain-8b"].state, jobs["done"].state) == ("admitted", "finished")
    assert jobs["pretrain-8b"].position_in_local_queue is None


def test_a_workload_holding_quota_but_not_admitted_waits_for_its_admission_checks() -> None:
    data = snapshot()
    data["workloads"][1]["status"]["conditions"] = [
        cond("QuotaReserved", "True", "QuotaReserved"),
        cond("Admitted", "False", "NoReservationUnsatisfiedChecks", "The workload has not all checks ready")]
    jobs = by_job(tenant_report(data, "test", "Eviction"))
    assert (jobs["sft-70b"].state, jobs["sft-70b"].reason) == ("quota reserved", "NoReservationUnsatisfiedChecks")


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    path = tmp_path / "llm-research.json"
    path.write_text(json.dumps(snapshot(SUMMARY)))
    return path


def test_markdown_lists_the_local_queue_and_each_jobs_place_and_reason(recorded: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "prod", "--tenant", "llm-research", "--from", str(recorded)]) == 0
    out = capsys.readouterr().out
    assert "Positions in LocalQueue default: from Kueue's visibility API (GET /apis/visibility.kueue.x-k8s.io/v1beta2/" \
           "namespaces/llm-research/localqueues/default/pendingworkloads)." in out
    assert "| default | llm-research | 3 | 1 | 1 | h100 | nvidia.com/gpu | 48 | 48 |" in out
    assert "| cpu |" not in out
    assert f"| TrainJob/sft-70b | trainjob-sft-70b-3c1f2 | default | pending | 1000 | 0 | 0 | Pending: {PENDING} |" in out


def test_the_json_report_carries_kueues_zero_based_positions(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "prod", "-n", "llm-research", "--from", str(recorded), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    urgent = next(w for w in data["workloads"] if w["job"] == "TrainJob/urgent-eval")
    assert (urgent["position_in_local_queue"], urgent["positions"]) == (1, VISIBILITY)


@pytest.mark.parametrize(("args", "reason"), [
    (["--tenant", "nobody"], "'nobody' is not a tenant of stack prod"),
    (["--tenant", "eval"], "not a recorded snapshot of namespace eval"),
])
def test_bad_input_exits_2_with_the_reason(recorded: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                           reason: str) -> None:
    assert main(["status", "prod", *args, "--from", str(recorded)]) == 2
    assert reason in capsys.readouterr().err


def test_a_snapshot_of_the_wrong_shape_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = snapshot()
    data["workloads"][0] = {"spec": {}}  # no metadata
    (tmp_path / "bad.json").write_text(json.dumps(data))
    assert main(["status", "prod", "--tenant", "llm-research", "--from", str(tmp_path / "bad.json")]) == 2
    assert "not the shape of Kueue's LocalQueues, Workloads and visibility answers" in capsys.readouterr().err


def test_the_report_of_a_rehearsal_snapshot_names_the_waiting_jobs_in_order() -> None:
    """Recorded by tests/cluster/test_tenant_status.py (`--save`), as team-a's member read it from the real Kueue."""
    recorded = json.loads((FIXTURES / "tenant-team-a-snapshot.json").read_text())
    report = tenant_report(copy.deepcopy(recorded), "recorded", "Eviction")
    (queue,) = report.queues
    assert queue.positions == ESTIMATED and "could not find the requested resource" in str(queue.visibility_error)
    waiting = [(w.job, w.position_in_local_queue) for w in report.workloads if w.state == "pending"]
    assert waiting == [("TrainJob/status-waits-1", 0), ("TrainJob/status-waits-2", 1), ("TrainJob/status-waits-3", 2)]
    assert all("insufficient" in w.message or w.reason for w in report.workloads if w.state == "pending")
