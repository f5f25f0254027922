"""A runtime's shared PVC (``volumeClaimPolicies``) against the tenant ResourceQuota, with the real JobSet.

JobSet v0.12.0 sends a Create for every ``volumeClaimPolicies`` PVC on each reconcile of the JobSet and
ignores AlreadyExists (pkg/controllers/volume_claim_policy.go, ``createPVCsIfNecessary``); the ResourceQuota
admission charges that create *before* storage refuses it (kubernetes/kubernetes#61530, #119593). So a
namespace quota on PVC storage refuses JobSet's re-create of a claim that already exists as soon as the
existing claims plus one more would not fit, and the refused reconcile stops before it creates the node
Jobs. That is why the tenant quota limits no PVCs (``manifests.tenants.resource_quota_for``).

1. With a storage quota that holds the job's claim once but not twice (what the old 1Ti quota became
   after a few reconciles charged it), the JobSet's reconciles after the first are all refused: its node
   Job is never created (and the Jobs it made while suspended are never resumed); the JobSet reports
   ``PVCCreationFailed ... exceeded quota``.
2. With the tenant quota as Trainyard declares it, the same job completes even though its claim is
   re-created again and again while it runs (each create answers AlreadyExists and charges nothing).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from trainyard.rehearsal.kube import KubeError, wait_until
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster

TENANT = "team-a"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
PROBE_QUOTA = "probe-storage"


def lab_job(rehearsal: Rehearsal, name: str) -> Job:
    approved = rehearsal.config.lineage.approved_for(TENANT)
    return Job(name=name, tenant=TENANT, runtime="lora-peft", flavor="fake-a100", run_for="3s",
               dataset=approved.datasets[0].uri, model=approved.base_models[0].uri)


def claims_of(rehearsal: Rehearsal, namespace: str, name: str) -> list[dict[str, Any]]:
    return rehearsal.kube.items("persistentvolumeclaims", namespace, selector=f"{JOBSET_NAME_LABEL}={name}")


def child_jobs(rehearsal: Rehearsal, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in rehearsal.kube.items("jobs.batch", namespace,
                                                                    selector=f"{JOBSET_NAME_LABEL}={name}")}


def complete(job: dict[str, Any]) -> bool:
    return any(c["type"] == "Complete" and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))


def recreate(rehearsal: Rehearsal, claim: dict[str, Any]) -> str:
    """What JobSet does on each reconcile: a Create of the claim that exists. The API server's answer."""
    again = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": claim["metadata"]["name"], "namespace": claim["metadata"]["namespace"]},
             "spec": {k: v for k, v in claim["spec"].items() if k in ("accessModes", "resources", "storageClassName")}}
    result = rehearsal.kube.run("create", "-f", "-", stdin=json.dumps(again), check=False)
    return result.stderr.strip()


def test_a_storage_quota_that_holds_the_claim_once_stalls_the_jobset_before_its_node_job(
        deployed_rehearsal: Rehearsal, capsys: pytest.CaptureFixture[str]) -> None:
    rehearsal = deployed_rehearsal
    namespace = rehearsal.namespace_of(TENANT)
    job = lab_job(rehearsal, "claim-under-quota")
    claim_size = 200  # Gi: lora-peft's initializer claim (runtimes/lora-peft.yaml)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": PROBE_QUOTA, "namespace": namespace},
             "spec": {"hard": {"requests.storage": f"{claim_size * 3 // 2}Gi"}}}
    rehearsal.kube.create(quota)
    try:
        wait_until("the probe quota's status", lambda: rehearsal.kube.get("resourcequota", PROBE_QUOTA, namespace)
                   .get("status", {}).get("hard"), 60)
        rehearsal.submit(job)

        def refused() -> str | None:
            for event in rehearsal.kube.items("events", namespace):
                involved = event.get("involvedObject", {})
                if (involved.get("kind"), involved.get("name"), event.get("reason")) == (
                        "JobSet", job.name, "PVCCreationFailed") and "exceeded quota" in event.get("message", ""):
                    return str(event["message"])
            return None

        message = wait_until(f"JobSet {job.name} to be refused its claim's re-create", refused, 120)
        time.sleep(20)  # reconciles go on (retries, Kueue's admission, Trainer's resume): none gets past the claim
        jobs = child_jobs(rehearsal, namespace, job.name)
        states = {n: ("suspended" if j["spec"].get("suspend") else "running") + (", complete" if complete(j) else "")
                  for n, j in sorted(jobs.items())}
        with capsys.disabled():
            print(f"\n## A storage quota of {quota['spec']['hard']['requests.storage']} and the {claim_size}Gi shared "
                  f"claim of {job.runtime}\n  JobSet event: PVCCreationFailed: {message[:240]}\n"
                  f"  claims: {[c['metadata']['name'] for c in claims_of(rehearsal, namespace, job.name)]}\n"
                  f"  child Jobs 20s later: {states}\n{rehearsal.where_jobs_stand([job.name], namespace)}")
        assert len(claims_of(rehearsal, namespace, job.name)) == 1, "the claim exists"
        assert not [n for n in jobs if n.startswith(f"{job.name}-node-")], states
        assert not all(complete(j) for j in jobs.values()) or not jobs, states
    finally:
        rehearsal.kube.delete("trainjobs.trainer.kubeflow.org", job.name, namespace=namespace, wait=True)
        rehearsal.kube.delete("resourcequota", PROBE_QUOTA, namespace=namespace, wait=True)


def test_the_lab_runtime_completes_under_the_tenant_quota_with_its_claim_recreated_while_it_runs(
        deployed_rehearsal: Rehearsal, capsys: pytest.CaptureFixture[str]) -> None:
    rehearsal = deployed_rehearsal
    namespace = rehearsal.namespace_of(TENANT)
    hard = rehearsal.kube.get("resourcequota", "trainyard-tenant", namespace)["spec"]["hard"]
    assert not [k for k in hard if "storage" in k or k == "persistentvolumeclaims"], hard
    job = lab_job(rehearsal, "claim-recreated")
    rehearsal.submit(job)
    claim = wait_until(f"the claim of {job.name}", lambda: (claims_of(rehearsal, namespace, job.name) or [None])[0], 120)
    answers = []
    for _ in range(8):  # more re-creates than the old 1Ti quota had room for at 200Gi each
        answers.append(recreate(rehearsal, claim))
        time.sleep(0.5)
    assert all("already exists" in a for a in answers), answers
    try:
        rehearsal.wait_finished([job.name], namespace, timeout=240)
    except (TimeoutError, KubeError) as error:
        pytest.fail(str(error))
    with capsys.disabled():
        print(f"\n## {job.runtime} under the tenant quota ({', '.join(sorted(hard))}): its claim re-created "
              f"{len(answers)} times ({answers[0][:80]!r}); complete:\n{rehearsal.where_jobs_stand([job.name], namespace)}")
    rehearsal.kube.delete("trainjobs.trainer.kubeflow.org", job.name, namespace=namespace, wait=True)
