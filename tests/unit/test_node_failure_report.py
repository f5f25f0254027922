"""What the node tier prints about the platform's pods when a test on it failed (tests/node/one_node.py
``restarted_or_not_ready``): each restarted container with its count and last end, then the pods not Ready."""

from __future__ import annotations

from typing import Any, cast

from tests.node.one_node import restarted_or_not_ready
from trainyard.rehearsal.kube import KubeError
from trainyard.rehearsal.session import Rehearsal


class FakeKube:
    def __init__(self, pods: list[dict[str, Any]] | None) -> None:
        self.pods = pods

    def items(self, resource: str, namespace: str | None = "*", selector: str | None = None) -> list[dict[str, Any]]:
        assert (resource, namespace) == ("pods", "*")
        if self.pods is None:
            raise KubeError("kubectl get pods: connection refused")
        return self.pods


class FakeSession:
    def __init__(self, pods: list[dict[str, Any]] | None, not_ready: list[str]) -> None:
        self.kube = FakeKube(pods)
        self.not_ready = not_ready

    def pods_not_ready(self) -> list[str]:
        return self.not_ready


def pod(namespace: str, name: str, *statuses: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "status": {"containerStatuses": list(statuses)}}


def test_restarted_containers_then_the_pods_not_ready() -> None:
    pods = [pod("seaweedfs", "seaweedfs-0", {"name": "seaweedfs", "restartCount": 2, "lastState": {"terminated": {
                "reason": "OOMKilled", "exitCode": 137, "finishedAt": "2026-12-07T16:20:00Z"}}}),
            pod("mlflow", "mlflow-1", {"name": "mlflow", "restartCount": 0}),
            pod("kserve", "kserve-controller", {"name": "manager", "restartCount": 1, "lastState": {}})]
    session = cast(Rehearsal, FakeSession(pods, ["mlflow/mlflow-1: mlflow running, not ready"]))
    assert restarted_or_not_ready(session) == [
        "seaweedfs/seaweedfs-0: seaweedfs restarted 2x, last OOMKilled (exit 137 at 2026-12-07T16:20:00Z)",
        "kserve/kserve-controller: manager restarted 1x, last ? (exit ? at ?)",
        "mlflow/mlflow-1: mlflow running, not ready"]


def test_all_well_and_an_api_server_that_does_not_answer_say_so() -> None:
    assert restarted_or_not_ready(cast(Rehearsal, FakeSession([pod("a", "b", {"name": "c", "restartCount": 0})], []))) \
        == ["(every pod Ready, none restarted)"]
    assert restarted_or_not_ready(cast(Rehearsal, FakeSession(None, []))) == [
        "(the pods could not be listed: kubectl get pods: connection refused)"]
