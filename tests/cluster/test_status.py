"""`trainyard status` against a real kube-apiserver: Kueue's CRDs, the prod stack's queues, Workloads with status.

The rehearsal runs the real Kueue controller, which would rewrite any status it did not compute, so this
test runs on a private API server without controllers (``bare_cluster``) and writes the statuses Kueue
would write (ClusterQueue flavorsUsage, Workload conditions) itself, through the status subresource:
the API server validates them against the real v1beta2 schemas and the report reads them back like any
client, with a known, fixed scenario to check it against.
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


# ------------------------------------------------------------------ with the real Kueue's own decisions

# Pinned to the A100 pool and long-running, so that the state holds while it is read: team-a fills its nominal 8,
# team-b uses 4 of its 8, team-a borrows 4 of team-b's idle ones, and a last team-a job would need 8 borrowed
# (its borrowing limit is 6): Kueue leaves it pending and says why.
LIVE_JOBS = (("a-nominal", "team-a", 2), ("b-own", "team-b", 1), ("a-borrows", "team-a", 1), ("a-waits", "team-a", 1))


def expected_from_workloads(workloads: list[dict[str, Any]], queues: list[dict[str, Any]],
                            local_queues: list[dict[str, Any]]) -> dict[str, Any]:
    """What `trainyard status` must say, computed from the Workloads alone (Kueue's admissions and conditions)."""
    from trainyard.quantity import parse_quantity
    from trainyard.review.status import is_pending

    def condition(w: dict[str, Any], kind: str) -> dict[str, Any] | None:
        return next((c for c in w.get("status", {}).get("conditions", []) if c["type"] == kind), None)

    cluster_queue_of = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"] for q in local_queues}
    out: dict[str, Any] = {}
    for queue in queues:
        name = queue["metadata"]["name"]
        usage: dict[tuple[str, str], float] = {}
        for w in workloads:
            admission = w.get("status", {}).get("admission")
            finished = condition(w, "Finished")
            if not admission or admission["clusterQueue"] != name or (finished and finished["status"] == "True"):
                continue
            for podset in admission["podSetAssignments"]:
                for resource, flavor in podset["flavors"].items():
                    used = parse_quantity(str(podset["resourceUsage"][resource]))
                    usage[(flavor, resource)] = usage.get((flavor, resource), 0) + used
        nominal = {(f["name"], r["name"]): parse_quantity(str(r["nominalQuota"]))
                   for g in queue["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"]}
        pending = sorted((w for w in workloads if is_pending(w)
                          and cluster_queue_of.get((w["metadata"]["namespace"], w["spec"]["queueName"])) == name),
                         key=lambda w: (w["metadata"]["creationTimestamp"], w["metadata"]["name"]))
        out[name] = {
            "usage": {f"{k[0]}/{k[1]}": usage.get(k, 0) for k in nominal},
            "borrowed": {f"{k[0]}/{k[1]}": max(0, usage.get(k, 0) - nominal[k]) for k in nominal},
            "pending": [(w["metadata"]["name"], (condition(w, "QuotaReserved") or {}).get("reason"),
                         (condition(w, "QuotaReserved") or {}).get("message")) for w in pending],
        }
    return out


def reported(status: dict[str, Any]) -> dict[str, Any]:
    from trainyard.quantity import parse_quantity

    return {q["name"]: {
        "usage": {f"{r['flavor']}/{r['resource']}": parse_quantity(r["usage"]) for r in q["resources"]},
        "borrowed": {f"{r['flavor']}/{r['resource']}": parse_quantity(r["borrowed"]) for r in q["resources"]},
        "pending": [(w["name"], w["reason"], w["message"]) for w in q["workloads"]],
    } for q in status["queues"]}


def test_status_agrees_with_the_real_kueues_decisions(deployed_rehearsal: Any) -> None:
    import subprocess

    from trainyard.rehearsal.kube import wait_until
    from trainyard.rehearsal.scenario import Job

    rehearsal = deployed_rehearsal
    kubeconfig = str(rehearsal.settings.kubeconfig)

    def status(*args: str) -> str:
        result = subprocess.run([str(Path(sys.executable).parent / "trainyard"), "status", "local", "--kubeconfig",
                                 kubeconfig, "--context", "trainyard-local", "--kubectl", str(BIN_DIR / "kubectl"), *args],
                                capture_output=True, text=True, cwd=ROOT, env=rehearsal.env, check=False, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout

    try:
        for name, tenant, nodes in LIVE_JOBS:
            rehearsal.submit(Job(name=name, tenant=tenant, nodes=nodes, gpus_per_node=4, flavor="fake-a100",
                                 run_for="10m"))
            time.sleep(1.1)  # creation timestamps a second apart: "oldest first" is then decided by the server

        def expectation() -> dict[str, Any]:
            return expected_from_workloads(rehearsal.workloads(), rehearsal.kube.items("clusterqueues", None),
                                           rehearsal.kube.items("localqueues.kueue.x-k8s.io"))

        def settled() -> dict[str, Any] | None:
            waiting = rehearsal_workloads(rehearsal, "a-waits")
            if not waiting or is_pending_for_lack_of_decision(waiting[0]):
                return None
            expected = expectation()
            return expected if expected == reported(json.loads(status("--format", "json", "--all-resources"))) else None

        try:
            expected = wait_until("trainyard status to agree with the Workloads", settled, 90, interval=2)
        except TimeoutError:
            pytest.fail(f"status disagrees with the Workloads:\nfrom the Workloads {expectation()}\n"
                        f"reported {reported(json.loads(status('--format', 'json', '--all-resources')))}")
        report = status()
        print(f"\n## `trainyard status local` on the rehearsal cluster (the real Kueue)\n\n{report}")
        assert expected["team-a"]["usage"]["fake-a100/nvidia.com/gpu"] == 12
        assert expected["team-a"]["borrowed"]["fake-a100/nvidia.com/gpu"] == 4
        assert expected["team-b"]["usage"]["fake-a100/nvidia.com/gpu"] == 4
        assert [p[0] for p in expected["team-a"]["pending"]] == [w["metadata"]["name"]
                                                                 for w in rehearsal_workloads(rehearsal, "a-waits")]
        assert "a-waits" in report.split("## Pending workloads, oldest first", 1)[1]
    finally:
        rehearsal.reset_jobs()


def is_pending_for_lack_of_decision(workload: dict[str, Any]) -> bool:
    """Kueue has not looked at it yet (no QuotaReserved condition)."""
    return not any(c["type"] == "QuotaReserved" for c in workload.get("status", {}).get("conditions", []))


def rehearsal_workloads(rehearsal: Any, trainjob: str) -> list[dict[str, Any]]:
    return [w for w in rehearsal.workloads()
            if any(o["kind"] == "TrainJob" and o["name"] == trainjob for o in w["metadata"].get("ownerReferences", []))]
