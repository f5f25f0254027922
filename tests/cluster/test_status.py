"""`trainyard status` against a real kube-apiserver: Kueue's CRDs, the prod stack's queues, Workloads with status.

Until the real Kueue controller runs in the rehearsal, the statuses Kueue would write (ClusterQueue
flavorsUsage, Workload conditions) are written here through the status subresource, so the API
server validates them against the real v1beta2 schemas; the report reads them back like any client.
The same snapshot, recorded (tests/fixtures/status/prod-snapshot.json), drives the offline test.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import BIN_DIR, Cluster, private_cluster, tools_problem
from tests.conftest import CRDS_DIR, ROOT, rendered

pytestmark = pytest.mark.cluster
KUEUE = "kueue.x-k8s.io/v1beta2"
# The prod stack's queues, without its Topology and WorkloadPriorityClasses: the session's cluster also
# carries the local stack, whose objects share some of those names.
QUEUEING_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue")
TENANTS = ("llm-research", "eval")


def workload(namespace: str, name: str, gpus: int, priority: int) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": {"name": name, "namespace": namespace},
            "spec": {"queueName": "default", "priority": priority, "podSets": [{
                "name": "node", "count": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "trainer", "image": "registry.trainyard.internal/pytorch/pytorch@sha256:" + "a" * 64,
                    "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}}]}}}]}}


def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-01T09:00:00Z", "observedGeneration": 1}


PENDING_MESSAGE = ("couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor "
                   "h100, 16 more needed, insufficient unused quota for nvidia.com/gpu in flavor h200, 8 more needed")


def build_scenario(cluster: Cluster) -> None:
    """Kueue CRDs, the prod queues and tenant namespaces, three Workloads, and the statuses Kueue would write."""
    assert CRDS_DIR is not None
    cluster.kubectl("apply", "--server-side", "-f", str(CRDS_DIR / "kueue" / "v0.19.2"))
    cluster.wait_established(*(f"{plural}.kueue.x-k8s.io" for plural in ("clusterqueues", "localqueues", "workloads",
                                                                         "resourceflavors", "cohorts")))
    platform = rendered("prod")
    objects = [o for o in platform.objects if o["kind"] in QUEUEING_KINDS]
    tenants = [o for t in TENANTS for o in platform.tenant_objects(t)]
    objects = [o for o in tenants if o["kind"] == "Namespace"] + objects + [o for o in tenants if o["kind"] == "LocalQueue"]
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))
    # Oldest first: creation timestamps come from the API server, a second apart.
    for namespace, name, gpus, priority in (("llm-research", "sft-70b", 8, 1000), ("eval", "sweep-lr", 4, 100),
                                            ("llm-research", "pretrain-8b", 8, 1000)):
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(workload(namespace, name, gpus, priority)))
        time.sleep(1.1)
    statuses = {
        ("llm-research", "sft-70b"): {"conditions": [condition("QuotaReserved", "False", "Pending", PENDING_MESSAGE)]},
        ("eval", "sweep-lr"): {"conditions": [condition(
            "QuotaReserved", "False", "Inadmissible",
            "ClusterQueue eval is inactive")]},
        ("llm-research", "pretrain-8b"): {
            "admission": {"clusterQueue": "llm-research", "podSetAssignments": [
                {"name": "node", "count": 2, "flavors": {"nvidia.com/gpu": "h100"},
                 "resourceUsage": {"nvidia.com/gpu": "16"}}]},
            "conditions": [condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue llm-research"),
                           condition("Admitted", "True", "Admitted", "The workload is admitted")]},
    }
    for (namespace, name), status in statuses.items():
        cluster.kubectl("patch", "workload", name, "-n", namespace, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": status}))
    usage = {"llm-research": {"admittedWorkloads": 1, "pendingWorkloads": 1, "reservingWorkloads": 1,
                              "flavorsUsage": [{"name": "h100", "resources": [
                                  {"name": "nvidia.com/gpu", "total": "64", "borrowed": "16"},
                                  {"name": "cpu", "total": "1536", "borrowed": "384"},
                                  {"name": "memory", "total": "14400Gi", "borrowed": "3600Gi"}]}]},
             "eval": {"admittedWorkloads": 0, "pendingWorkloads": 1, "reservingWorkloads": 0}}
    for queue, status in usage.items():
        cluster.kubectl("patch", "clusterqueue", queue, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": status}))


def run_status(cluster: Cluster, *args: str) -> str:
    import subprocess

    trainyard = Path(sys.executable).parent / "trainyard"
    result = subprocess.run([str(trainyard), "status", "prod", "--kubeconfig", str(cluster.kubeconfig),
                             "--context", "trainyard-local", "--kubectl", str(BIN_DIR / "kubectl"), *args],
                            capture_output=True, text=True, cwd=ROOT, env=cluster.env, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def remove_scenario(cluster: Cluster) -> None:
    """Leave the session's cluster as it was: the scenario's Workloads, queues, flavors, cohorts, namespaces."""
    platform = rendered("prod")
    for namespace in TENANTS:
        cluster.kubectl("delete", "workloads.kueue.x-k8s.io", "--all", "-n", namespace, "--ignore-not-found", check=False)
    for kind in reversed(QUEUEING_KINDS):
        names = [o["metadata"]["name"] for o in platform.objects if o["kind"] == kind]
        cluster.kubectl("delete", f"{kind.lower()}s.kueue.x-k8s.io", *names, "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", *TENANTS, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An API server without controllers: the statuses this test writes must not be rewritten by a live Kueue."""
    problem = tools_problem("etcd", "kube-apiserver")
    if problem is not None:
        pytest.skip(problem)
    with private_cluster(tmp_path_factory.mktemp("status-cluster"), with_fake_nodes=False) as running:
        yield running


def test_status_reads_quota_usage_borrowing_and_pending_reasons_from_the_api_server(bare_cluster: Cluster) -> None:
    cluster = bare_cluster
    try:
        build_scenario(cluster)
        check_report(cluster)
    finally:
        remove_scenario(cluster)


def check_report(cluster: Cluster) -> None:
    report = run_status(cluster)
    print(report)
    assert "| llm-research | research | h100 | nvidia.com/gpu | 48 | 64 | 16 | 32 | 24 | 1 | 1 |" in report
    pending = report.split("## Pending workloads, oldest first", 1)[1]
    assert pending.index("llm-research/sft-70b") < pending.index("eval/sweep-lr")
    assert "pretrain-8b" not in pending  # admitted
    assert "| Pending | couldn't assign flavors to pod set node: insufficient unused quota" in pending
    data = json.loads(run_status(cluster, "--format", "json"))
    research = next(q for q in data["queues"] if q["name"] == "llm-research")
    assert [w["name"] for w in research["workloads"]] == ["sft-70b"]
