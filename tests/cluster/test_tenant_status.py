"""`trainyard status --tenant` as a member of team-a, with the real Kueue, JobSet and Trainer on the rehearsal.

The member (a client certificate in team-a's groups, ``Rehearsal.tenant_kubeconfig``: RBAC alone decides) submits
TrainJobs without queue or priority labels (Kueue and ``trainyard-trainjob-default-priority`` add them) that ask for
more than team-a's quota and borrowing limit allow: one runs, three wait. With the same credentials,
``trainyard status local --tenant team-a`` names the waiting jobs, their places in the queue (0 = next) and the
reason and message Kueue wrote in each Workload (read here as admin, to compare). The same member is refused
team-b's queue and Workloads, and every ClusterQueue.

Kueue's visibility API is not served on the rehearsal (``rehearsal/controllers.py`` turns VisibilityOnDemand off
and registers no APIService; docs/components/tenants.md says why), so the report estimates the positions from the
Workloads and says so: this is the path tested here. The visibility answer's parsing is tested against Kueue's
recorded response shape in tests/review/test_tenant_status.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import BIN_DIR, TRAINYARD
from tests.conftest import ROOT
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster

TENANT, OTHER = "team-a", "team-b"
# team-a: 8 nominal A100 GPUs and a borrowing limit of 6. The first job (8 GPUs) fills the nominal quota; each of the
# others (8 GPUs) would need 8 borrowed: Kueue keeps them pending, in creation order (equal priority).
RUNS = "status-runs"
WAITING = ("status-waits-1", "status-waits-2", "status-waits-3")


def submit_as_tenant(rehearsal: Rehearsal, kubeconfig: Path, name: str) -> None:
    """The rehearsal's TrainJob for ``name``, without the labels the cluster adds, created by the member."""
    trainjob = rehearsal.trainjob(Job(name=name, tenant=TENANT, nodes=2, gpus_per_node=4, flavor="fake-a100",
                                      run_for="10m"))
    for label in (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL):
        trainjob["metadata"]["labels"].pop(label, None)
    result = subprocess.run([str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig), "create", "-f", "-"],
                            input=json.dumps(trainjob), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def tenant_status(rehearsal: Rehearsal, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINYARD), "status", "local", "--kubeconfig", str(kubeconfig), "--context",
                           "trainyard-local", "--kubectl", str(BIN_DIR / "kubectl"), *args],
                          capture_output=True, text=True, cwd=ROOT, env=rehearsal.env, check=False, timeout=120)


def workload_of(rehearsal: Rehearsal, namespace: str, trainjob: str) -> dict[str, Any] | None:
    return next((w for w in rehearsal.workloads(namespace)
                 if any(o["kind"] == "TrainJob" and o["name"] == trainjob for o in w["metadata"].get("ownerReferences", []))),
                None)


def quota_reserved(workload: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = (workload or {}).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "QuotaReserved"), None)


def test_a_tenant_sees_its_waiting_jobs_their_places_and_kueues_reasons_and_nothing_of_other_tenants(
        deployed_rehearsal: Rehearsal, capsys: pytest.CaptureFixture[str]) -> None:
    rehearsal = deployed_rehearsal
    namespace = rehearsal.namespace_of(TENANT)
    kubeconfig = rehearsal.tenant_kubeconfig(TENANT)
    try:
        for name in (RUNS, *WAITING):
            submit_as_tenant(rehearsal, kubeconfig, name)
            time.sleep(1.1)  # creation timestamps a second apart: the queue order is then the server's

        def settled() -> dict[str, dict[str, Any]] | None:
            workloads = {name: workload_of(rehearsal, namespace, name) for name in (RUNS, *WAITING)}
            runs = quota_reserved(workloads[RUNS])
            waiting = [quota_reserved(workloads[name]) for name in WAITING]
            # Kueue tries the head of the queue; the jobs behind it may carry no QuotaReserved condition yet
            # (they wait for the head: seen on Kueue v0.19.2), so only the head's reason is waited for.
            if (runs is None or runs["status"] != "True" or waiting[0] is None or waiting[0]["status"] != "False"
                    or any(c is not None and c["status"] != "False" for c in waiting)):
                return None
            # ... and Kueue has counted them in the LocalQueue's status (its own reconcile, a moment later).
            status = rehearsal.kube.get("localqueues.kueue.x-k8s.io", "default", namespace).get("status", {})
            if status.get("pendingWorkloads") != len(WAITING) or not status.get("flavorsReservation"):
                return None
            return {name: w for name, w in workloads.items() if w is not None}

        try:
            workloads = wait_until("one job admitted and three waiting with Kueue's reason", settled, 120, interval=2)
        except TimeoutError:
            seen = {name: (workload_of(rehearsal, namespace, name) or {}).get("status") for name in (RUNS, *WAITING)}
            queue = rehearsal.kube.get("localqueues.kueue.x-k8s.io", "default", namespace).get("status")
            raise AssertionError(f"not settled: workloads {json.dumps(seen, indent=1)}\nLocalQueue {queue}") from None
        for name in workloads:
            trainjob = rehearsal.kube.get("trainjobs.trainer.kubeflow.org", name, namespace)
            assert trainjob["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"  # Kueue's LocalQueue defaulting
            assert trainjob["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "standard"  # trainyard-trainjob-default-priority

        saved = rehearsal.settings.state_dir / "tenant-status-snapshot.json"
        result = tenant_status(rehearsal, kubeconfig, "--tenant", TENANT, "--format", "json", "--save", str(saved))
        assert result.returncode == 0, result.stderr
        # TRAINYARD_RECORD_TENANT_SNAPSHOT=tests/fixtures/status/tenant-team-a-snapshot.json re-records the snapshot
        # tests/review/test_tenant_status.py reads (its last test).
        if os.environ.get("TRAINYARD_RECORD_TENANT_SNAPSHOT"):
            Path(os.environ["TRAINYARD_RECORD_TENANT_SNAPSHOT"]).write_text(saved.read_text())
        report = json.loads(result.stdout)
        (queue,) = report["queues"]
        assert (queue["name"], queue["cluster_queue"]) == ("default", TENANT)
        assert queue["pending"] == len(WAITING) and queue["admitted"] + queue["reserving"] >= 1
        # Not served here: the report says so, with what the API server answered, and estimates the positions.
        assert queue["positions"] == "estimated from the Workloads"
        assert "could not find the requested resource" in queue["visibility_error"]
        reserved = {(u["flavor"], u["resource"]): u["reserved"] for u in queue["usage"]}
        assert reserved[("fake-a100", "nvidia.com/gpu")] == "8"

        by_job = {w["job"]: w for w in report["workloads"]}
        assert by_job[f"TrainJob/{RUNS}"]["state"] in {"admitted", "quota reserved"}
        assert by_job[f"TrainJob/{RUNS}"]["position_in_local_queue"] is None
        for place, name in enumerate(WAITING):
            entry, kueue_says = by_job[f"TrainJob/{name}"], quota_reserved(workloads[name])
            assert (entry["state"], entry["position_in_local_queue"], entry["position_in_cluster_queue"]) == (
                "pending", place, place), entry
            if kueue_says is None:  # behind the head, not tried yet: no reason of Kueue's to repeat
                continue
            # Kueue's own words, as the Workload carries them (read as admin).
            current = quota_reserved(workload_of(rehearsal, namespace, name)) or kueue_says
            assert (entry["reason"], entry["message"]) in {(kueue_says["reason"], kueue_says["message"]),
                                                          (current["reason"], current["message"])}
        assert "insufficient" in by_job[f"TrainJob/{WAITING[0]}"]["message"]

        markdown = tenant_status(rehearsal, kubeconfig, "--tenant", TENANT)
        assert markdown.returncode == 0, markdown.stderr
        assert all(f"TrainJob/{name}" in markdown.stdout for name in WAITING)

        # The same member, for another tenant: refused by the API server (exit 2, what it said).
        other = tenant_status(rehearsal, kubeconfig, "--tenant", OTHER)
        assert other.returncode == 2
        assert f'User "{TENANT}-member" cannot list resource "localqueues"' in other.stderr
        assert f'in the namespace "{rehearsal.namespace_of(OTHER)}"' in other.stderr
        refusals = refused_requests(kubeconfig, rehearsal.namespace_of(OTHER))
        with capsys.disabled():
            print(f"\n## `trainyard status local --tenant {TENANT}` as {TENANT}-member (its own certificate)\n")
            print(markdown.stdout)
            print(f"## the same member: `trainyard status local --tenant {OTHER}` (exit {other.returncode})\n")
            print(other.stderr.strip() + "\n")
            print("\n".join(f"- {line}" for line in refusals))
    finally:
        rehearsal.reset_jobs()


def refused_requests(kubeconfig: Path, other_namespace: str) -> list[str]:
    """Other tenants' data and the cluster-wide views, read as the member: each refused by RBAC (403), while its
    own LocalQueue's visibility path is authorized (404 here: the API is not served)."""
    kubectl = [str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig)]
    own = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/default/pendingworkloads"
    requests = {
        "workloads of team-b": ["get", "workloads.kueue.x-k8s.io", "-n", other_namespace],
        "LocalQueues of team-b": ["get", "localqueues.kueue.x-k8s.io", "-n", other_namespace],
        "team-b's pending workloads (visibility)": ["get", "--raw", own.replace("team-a", other_namespace)],
        "ClusterQueues": ["get", "clusterqueues.kueue.x-k8s.io"],
        "a ClusterQueue's pending workloads (visibility)": [
            "get", "--raw", "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/team-a/pendingworkloads"],
    }
    lines = []
    for what, args in requests.items():
        result = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60, check=False)
        said = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "ok"
        assert result.returncode != 0 and "forbidden" in said.lower(), f"{what}: {said}"
        lines.append(f"{what}: {said}")
    mine = subprocess.run([*kubectl, "get", "--raw", own], capture_output=True, text=True, timeout=60, check=False)
    assert "forbidden" not in mine.stderr.lower(), mine.stderr  # authorized; not served on the rehearsal
    lines.append(f"its own LocalQueue's pending workloads (visibility): {mine.stderr.strip() or 'ok'}")
    return lines
