"""The scenario observer's borrowed GPUs are those at the moment of a job's admission, however late it looks.

``Observer._admission`` counts the GPUs its ClusterQueue holds beyond its nominal quota from the admitted Workloads;
on a loaded machine (a cold CI run) the observer saw a job's admission after the next job had been admitted too and
counted both (cohort-borrowing: "expected ... borrow 4 GPUs after admission, saw 6"). Workloads admitted after the
job, by their Admitted conditions' times, are not counted.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import ROOT
from trainyard import catalog
from trainyard.project import open_stack
from trainyard.rehearsal.report import Observer
from trainyard.rehearsal.scenario import load_scenario

QUEUE = "team-a"
FLAVOR = "fake-a100"


def workload(name: str, gpus: int, admitted_at: str | None) -> dict[str, Any]:
    conditions = [] if admitted_at is None else [
        {"type": "Admitted", "status": "True", "lastTransitionTime": admitted_at}]
    return {"metadata": {"name": name, "namespace": "team-a"},
            "status": {"conditions": conditions,
                       "admission": {"clusterQueue": QUEUE, "podSetAssignments": [
                           {"flavors": {catalog.GPU_RESOURCE: FLAVOR},
                            "resourceUsage": {catalog.GPU_RESOURCE: str(gpus)}}]}}}


class FakeKube:
    def __init__(self, workloads: list[dict[str, Any]]) -> None:
        self.workloads = workloads

    def get(self, resource: str, name: str) -> dict[str, Any]:
        assert (resource, name) == ("clusterqueues.kueue.x-k8s.io", QUEUE)
        return {"spec": {"resourceGroups": [{"flavors": [
            {"name": FLAVOR, "resources": [{"name": catalog.GPU_RESOURCE, "nominalQuota": "8"}]}]}]}}

    def items(self, resource: str, namespace: str | None) -> list[dict[str, Any]]:
        assert resource == "workloads.kueue.x-k8s.io"
        return self.workloads


def observer(workloads: list[dict[str, Any]]) -> Observer:
    scenario = load_scenario(ROOT / "scenarios" / "cohort-borrowing.yaml")
    return Observer(FakeKube(workloads), open_stack("local").config, scenario)  # type: ignore[arg-type]


def test_a_job_admitted_later_is_not_counted_in_an_earlier_ones_borrowing() -> None:
    nominal = workload("nominal", 8, "2026-12-07T19:40:00Z")
    borrow_4 = workload("borrow-4", 4, "2026-12-07T19:40:02Z")
    borrow_6 = workload("borrow-6", 2, "2026-12-07T19:40:04Z")
    seen = observer([nominal, borrow_4, borrow_6])
    assert seen._admission(borrow_4) == (FLAVOR, 4)
    assert seen._admission(borrow_6) == (FLAVOR, 6)
    assert seen._admission(nominal) == (FLAVOR, 0)


def test_jobs_admitted_in_the_same_second_count_and_pending_ones_never_do() -> None:
    nominal = workload("nominal", 8, "2026-12-07T19:40:00Z")
    borrow_4 = workload("borrow-4", 4, "2026-12-07T19:40:02Z")
    same_second = workload("borrow-6", 2, "2026-12-07T19:40:02Z")
    pending = workload("over-limit", 1, None)
    assert observer([nominal, borrow_4, same_second, pending])._admission(borrow_4) == (FLAVOR, 6)


def test_an_admission_without_a_time_counts_every_admitted_workload() -> None:
    nominal = workload("nominal", 8, "2026-12-07T19:40:00Z")
    untimed = workload("borrow-4", 4, "")
    later = workload("borrow-6", 2, "2026-12-07T19:40:04Z")
    assert observer([nominal, untimed, later])._admission(untimed) == (FLAVOR, 6)
