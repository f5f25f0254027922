"""The tenant's own tools on the rehearsal cluster, with the real Kueue, JobSet and Trainer.

(a) The Kubeflow Python SDK (PyPI ``kubeflow``, pinned) run by a member of team-a: its own kubeconfig,
a client certificate in the tenant's groups (``Rehearsal.tenant_kubeconfig``), so RBAC alone decides.
It connects without the SDK's warning about the ``kubeflow-trainer-public`` ConfigMap, lists exactly
the approved runtimes, and submits a TrainJob with no queue label and an S3 dataset by URI only; Kueue
defaults the queue and admits it, and the TrainJob carries no object-store key. The transcript is printed.

(b) Tenant RBAC, asked of the API server by impersonating the tenant's group (SubjectAccessReview, what
``kubectl auth can-i --as --as-group`` sends) and checked with the real request (server-side dry run for
writes, so nothing changes): the matrix (who, verb, resource, namespace, allowed/denied) is printed.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import BIN_DIR
from trainyard.manifests.installs import TRAINER_PUBLIC
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from trainyard.rehearsal.controllers import FIELD_MANAGER, trainer_public_objects
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.sdk import TenantSdk
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster

TENANT, OTHER = "team-a", "team-b"
# What an object-store (or any) credential looks like in a container environment.
KEY_WORDS = ("ACCESS_KEY", "SECRET", "TOKEN", "PASSWORD")
SDK_CONFIGMAP_WARNING = "Trainer control-plane version info is not available"


def env_entries(obj: Any) -> Iterator[dict[str, Any]]:
    """Every ``env`` entry anywhere in a manifest."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "env" and isinstance(value, list):
                yield from value
            else:
                yield from env_entries(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from env_entries(item)


def test_kubeflow_sdk_as_a_tenant_lists_the_approved_runtimes_and_submits_a_job_kueue_admits(
        deployed_rehearsal: Rehearsal, capsys: pytest.CaptureFixture[str]) -> None:
    rehearsal = deployed_rehearsal
    kubeconfig = rehearsal.tenant_kubeconfig(TENANT)
    namespace = rehearsal.namespace_of(TENANT)
    groups = next(t.groups for t in rehearsal.config.tenants if t.name == TENANT)
    transcript = [f"$ export KUBECONFIG={kubeconfig.name}   # user {TENANT}-member, groups {', '.join(groups)} "
                  "(client certificate; no admin rights, no impersonation)"]

    # Without the ConfigMap the SDK warns (the check can fail) ...
    kube = rehearsal.kube
    kube.delete("configmap", TRAINER_PUBLIC, namespace="kubeflow-system", wait=True)
    try:
        assert any(SDK_CONFIGMAP_WARNING in w for w in TenantSdk(kubeconfig, namespace).warnings)
    finally:
        kube.apply(trainer_public_objects(rehearsal.config), field_manager=FIELD_MANAGER)
    # ... with it, as the rehearsal installs it with Trainer, it does not.
    sdk = TenantSdk(kubeconfig, namespace)
    transcript += [f'>>> client = TrainerClient(KubernetesBackendConfig(namespace="{namespace}"))',
                   f"# SDK warnings: {sdk.warnings or 'none'}"]
    assert sdk.warnings == []

    runtimes = sdk.runtimes()
    transcript += [">>> sorted(r.name for r in client.list_runtimes())", repr(runtimes)]
    assert runtimes == sorted(rehearsal.config.runtimes.approved)

    # The lab's runtime: dataset and base model by URI; the keys are the runtime's (its object-store Secret).
    # The tenant's approved entries (the stack's lineage), pinned in the trainer's env.
    approved = rehearsal.config.lineage.approved_for(TENANT)
    dataset, model = approved.datasets[0], approved.base_models[0]
    job = Job(name="sdk-as-tenant", tenant=TENANT, runtime="lora-peft", flavor="fake-a100", run_for="3s",
              dataset=dataset.uri, model=model.uri, submitted_by="sdk")
    name = sdk.submit(rehearsal.config, job)
    transcript += [f'>>> client.train(runtime=client.get_runtime("{job.runtime}"), initializer=Initializer('
                   f'dataset=S3DatasetInitializer(storage_uri="{job.dataset}"), '
                   f'model=S3ModelInitializer(storage_uri="{job.model}")), trainer=CustomTrainerContainer(image=..., '
                   f'env={{TRAINYARD_DATASET_VERSION, TRAINYARD_DATASET_DIGEST, TRAINYARD_BASE_MODEL_REVISION}}), '
                   f'options=[Name("{job.name}"), RuntimePatch(<kwok run time, pool node selector>)])', repr(name)]
    assert name == job.name

    trainjob = kube.get("trainjobs.trainer.kubeflow.org", name, namespace)
    labels = trainjob["metadata"].get("labels") or {}
    transcript.append(f"# TrainJob {namespace}/{name}: labels {json.dumps(labels)}, "
                      f"spec.initializer {json.dumps(trainjob['spec'].get('initializer'))}")
    assert labels.get(QUEUE_NAME_LABEL) == "default", "Kueue's LocalQueue defaulting labels it"
    # The SDK named no priority class: trainyard-trainjob-default-priority gave it the tenant's default.
    tenant = next(t for t in rehearsal.config.tenants if t.name == TENANT)
    assert labels.get(PRIORITY_CLASS_LABEL) == tenant.default_priority_class
    assert trainjob["spec"]["initializer"]["dataset"]["storageUri"] == job.dataset
    env = {e["name"]: e.get("value") for e in trainjob["spec"]["trainer"].get("env", [])}
    assert {k: env.get(k) for k in ("TRAINYARD_DATASET_VERSION", "TRAINYARD_DATASET_DIGEST",
                                    "TRAINYARD_BASE_MODEL_REVISION")} == {
        "TRAINYARD_DATASET_VERSION": dataset.version, "TRAINYARD_DATASET_DIGEST": dataset.digest,
        "TRAINYARD_BASE_MODEL_REVISION": model.revision}
    # The SDK sent dataset env []: trainyard-trainjob-initializer-env removed it (else Kueue could not resume it).
    assert "env" not in trainjob["spec"]["initializer"]["dataset"]
    keys = [e for e in env_entries(trainjob["spec"]) if any(w in str(e.get("name", "")).upper() for w in KEY_WORDS)
            or "secretKeyRef" in (e.get("valueFrom") or {})]
    assert keys == [], f"the TrainJob carries credentials: {keys}"

    def admitted() -> dict[str, Any] | None:
        for workload in rehearsal.workloads(namespace):
            owners = [o["name"] for o in workload["metadata"].get("ownerReferences", []) if o["kind"] == "TrainJob"]
            if name in owners and any(c["type"] == "Admitted" and c["status"] == "True"
                                      for c in workload.get("status", {}).get("conditions", [])):
                return workload
        return None

    workload = wait_until(f"the Workload of {name} to be admitted", admitted, 120)
    assignment = next(a for a in workload["status"]["admission"]["podSetAssignments"] if a["name"] == "node")
    transcript.append(f"# Workload {workload['metadata']['name']}: admitted by ClusterQueue "
                      f"{workload['status']['admission']['clusterQueue']}, flavor {assignment['flavors']['nvidia.com/gpu']}, "
                      f"podSets {[a['name'] for a in workload['status']['admission']['podSetAssignments']]}")
    assert workload["status"]["admission"]["clusterQueue"] == TENANT
    # Three stages (dataset and model initializers, then the node) of 3 s each on kwok: seconds when idle. CI
    # once saw it not complete in 120 s; the wait is longer, and the transcript says where the job stood.
    started = time.monotonic()
    rehearsal.wait_finished([name], namespace, timeout=300)
    transcript.append(f"# complete {time.monotonic() - started:.0f}s after admission:\n"
                      + rehearsal.where_jobs_stand([name], namespace))
    jobs = {j.name: j.status for j in sdk.client.list_jobs()}
    transcript += [">>> {j.name: j.status for j in client.list_jobs()}", repr(jobs)]
    assert jobs.get(name) == "Complete"
    with capsys.disabled():
        print("\n## The Kubeflow SDK as a tenant (kubeflow==0.5.0)\n\n```\n" + "\n".join(transcript) + "\n```")


# ------------------------------------------------------------------------------------------- RBAC


@dataclass(frozen=True)
class Access:
    verb: str
    resource: str  # plural.group, as kubectl names it
    namespace: str | None  # None: cluster-scoped
    allowed: bool
    name: str | None = None
    subresource: str | None = None  # e.g. pendingworkloads of Kueue's visibility API (read with get --raw)


VISIBILITY_LOCAL_QUEUES = "localqueues.visibility.kueue.x-k8s.io"
TENANT_POLICIES = "tenantpolicies.trainyard.dev"
TARGET = "rbac-target"  # a TrainJob the test creates (as admin) in both tenants' namespaces
WORKLOAD = "<its Workload>"  # resolved to the Workload Kueue made for it


def rbac_rows() -> list[Access]:
    own, other = TENANT, OTHER
    trainjobs, workloads = "trainjobs.trainer.kubeflow.org", "workloads.kueue.x-k8s.io"
    rows = []
    for namespace, allowed in ((own, True), (other, False)):
        rows += [Access("create", trainjobs, namespace, allowed), Access("watch", trainjobs, namespace, allowed),
                 Access("list", trainjobs, namespace, allowed), Access("get", trainjobs, namespace, allowed, TARGET),
                 Access("delete", trainjobs, namespace, allowed, TARGET),
                 Access("get", workloads, namespace, allowed, WORKLOAD), Access("watch", workloads, namespace, allowed),
                 Access("list", workloads, namespace, allowed),
                 Access("list", "localqueues.kueue.x-k8s.io", namespace, allowed),
                 # Kueue's visibility API: its LocalQueue's pending Workloads and their positions (trainyard status
                 # --tenant). Authorized before routing: allowed is a 404 here (not served on the rehearsal), denied a 403.
                 Access("get", VISIBILITY_LOCAL_QUEUES, namespace, allowed, "default", "pendingworkloads"),
                 # What is approved for the namespace: readable by its tenant (only).
                 Access("get", TENANT_POLICIES, namespace, allowed, "trainyard-policy")]
    rows += [
        # A submitted job and its Workload are changed by the controllers, not by hand.
        Access("update", trainjobs, own, False, TARGET),
        Access("update", workloads, own, False, WORKLOAD),
        Access("update", "localqueues.kueue.x-k8s.io", own, False, "default"),
        # A tenant cannot approve its own inputs: its params are the stack's.
        Access("update", TENANT_POLICIES, own, False, "trainyard-policy"),
        Access("patch", TENANT_POLICIES, own, False, "trainyard-policy"),
        Access("delete", TENANT_POLICIES, own, False, "trainyard-policy"),
        Access("create", TENANT_POLICIES, own, False),
        Access("list", "pods", own, True),
        Access("create", "pods", own, False),
        # The tenant quota limits no PVCs (tenants.resource_quota_for says why): tenants cannot make them.
        Access("create", "persistentvolumeclaims", own, False),
        Access("list", "secrets", own, False),
        Access("update", "resourcequotas", own, False, "trainyard-tenant"),
        Access("delete", "resourcequotas", own, False, "trainyard-tenant"),
        Access("list", "clustertrainingruntimes.trainer.kubeflow.org", None, True),
        Access("create", "clustertrainingruntimes.trainer.kubeflow.org", None, False),
        Access("update", "clustertrainingruntimes.trainer.kubeflow.org", None, False, "torch-distributed"),
        Access("delete", "clustertrainingruntimes.trainer.kubeflow.org", None, False, "torch-distributed"),
        Access("create", "trainingruntimes.trainer.kubeflow.org", own, False),
        Access("get", "clusterqueues.kueue.x-k8s.io", None, False, TENANT),
        # A ClusterQueue's pending Workloads (cluster-scoped): the tenant's own ClusterQueue is not granted either.
        Access("get", "clusterqueues.visibility.kueue.x-k8s.io", None, False, TENANT, "pendingworkloads"),
        Access("update", "clusterqueues.kueue.x-k8s.io", None, False, TENANT),
        Access("patch", "clusterqueues.kueue.x-k8s.io", None, False, TENANT),
        Access("create", "clusterqueues.kueue.x-k8s.io", None, False),
        Access("update", "resourceflavors.kueue.x-k8s.io", None, False, "fake-a100"),
        Access("update", "cohorts.kueue.x-k8s.io", None, False, "rehearsal"),
        Access("get", "configmaps", "kubeflow-system", True, TRAINER_PUBLIC),
        Access("get", "configmaps", "kubeflow-system", False, "kube-root-ca.crt"),
    ]
    return rows


class Impersonated:
    """The admin kubeconfig acting as a tenant member (``--as``/``--as-group``): the API server authorizes
    every request as that user in those groups (and ``system:authenticated``)."""

    def __init__(self, rehearsal: Rehearsal, user: str, groups: tuple[str, ...]) -> None:
        self.rehearsal = rehearsal
        self.kubeconfig = rehearsal.settings.kubeconfig
        self.flags = [f"--as={user}", *(f"--as-group={g}" for g in groups)]

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN_DIR / "kubectl"), "--kubeconfig", str(self.kubeconfig), *self.flags, *args],
                              input=stdin, capture_output=True, text=True, timeout=60, check=False)

    def can_i(self, row: Access, name: str | None) -> bool:
        if row.subresource:
            return self.self_review(row, name)
        target = f"{row.resource}/{name}" if name else row.resource
        result = self.kubectl("auth", "can-i", row.verb, target, *(["-n", row.namespace] if row.namespace else []))
        assert result.stdout.strip() in {"yes", "no"}, result.stderr
        return result.stdout.strip() == "yes"

    def self_review(self, row: Access, name: str | None) -> bool:
        """The SelfSubjectAccessReview ``kubectl auth can-i`` would send, written out: for an API group the server does
        not serve, kubectl cannot map the resource and asks about a group-less resource of that whole name instead
        (Ref: kubectl pkg/cmd/auth/cani.go, resourceFor)."""
        plural, group = row.resource.split(".", 1)
        attributes = {"verb": row.verb, "group": group, "resource": plural, "subresource": row.subresource,
                      **({"name": name} if name else {}), **({"namespace": row.namespace} if row.namespace else {})}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": attributes}}
        # --validate=false: kubectl's client-side validation of the review object can fall back to listing CRDs, which a
        # tenant may not do (seen in CI on the visibility row: "failed to check CRD: failed to list CRDs: ...
        # forbidden"); the API server validates the review itself, and what is asked is what the request carries.
        result = self.kubectl("create", "--validate=false", "-o", "json", "-f", "-", stdin=json.dumps(review))
        assert result.returncode == 0, result.stderr
        return bool(json.loads(result.stdout)["status"].get("allowed"))

    def attempt(self, row: Access, name: str | None, sample: dict[str, Any]) -> tuple[bool, str]:
        """The real request (writes as server-side dry runs: nothing changes); (authorized, what the server said)."""
        ns = ["-n", row.namespace] if row.namespace else []
        target = [row.resource, *([name] if name else [])]
        if row.subresource:  # an aggregated API's subresource: the path Kueue's clients GET
            plural, group = row.resource.split(".", 1)
            scope = f"namespaces/{row.namespace}/" if row.namespace else ""
            result = self.kubectl("get", "--raw", f"/apis/{group}/v1beta2/{scope}{plural}/{name}/{row.subresource}")
        elif row.verb == "create":
            result = self.kubectl("create", "--dry-run=server", "-f", "-", *ns, stdin=json.dumps(sample))
        elif row.verb == "update":  # PUT of the object as it is (read by the admin), with one annotation more
            assert name is not None
            current = self.rehearsal.kube.get(row.resource, name, row.namespace)
            current["metadata"].setdefault("annotations", {})["trainyard.dev/rbac-probe"] = "1"
            result = self.kubectl("replace", "--dry-run=server", "-f", "-", stdin=json.dumps(current))
        elif row.verb == "patch":
            result = self.kubectl("patch", *target, "--type=merge", "--dry-run=server", *ns,
                                  "-p", '{"metadata":{"annotations":{"trainyard.dev/rbac-probe":"1"}}}')
        elif row.verb == "delete":
            result = self.kubectl("delete", *target, "--dry-run=server", *ns)
        elif row.verb == "watch":
            result = self.kubectl("get", *target, "--watch-only", "--request-timeout=2s", *ns)
        else:  # get, list
            result = self.kubectl("get", *target, *ns)
        said = (result.stderr.strip() or result.stdout.strip() or "ok").splitlines()
        denied = "forbidden" in result.stderr.lower() and "cannot" in result.stderr.lower()
        return not denied, said[0][:110]


def samples(rehearsal: Rehearsal, namespace: str | None, resource: str) -> dict[str, Any]:
    """A valid object of ``resource`` to create (dry run) in ``namespace``."""
    if resource.startswith("trainjobs."):
        obj = rehearsal.trainjob(Job(name="rbac-probe", tenant=TENANT))
        obj["metadata"]["namespace"] = namespace
        return obj
    if resource == "pods":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac-probe", "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "registry.trainyard.internal/pause:3"}]}}
    if resource == "persistentvolumeclaims":
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "rbac-probe", "namespace": namespace},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    if resource == TENANT_POLICIES:
        return {"apiVersion": "trainyard.dev/v1alpha1", "kind": "TenantPolicy",
                "metadata": {"name": "rbac-probe", "namespace": namespace}, "data": {"dataset.x.name": "x"}}
    group = resource.split(".", 1)[1]
    kind = {"clustertrainingruntimes": "ClusterTrainingRuntime", "trainingruntimes": "TrainingRuntime",
            "clusterqueues": "ClusterQueue"}[resource.split(".", maxsplit=1)[0]]
    version = {"trainer.kubeflow.org": "v1alpha1", "kueue.x-k8s.io": "v1beta2"}[group]
    return {"apiVersion": f"{group}/{version}", "kind": kind,
            "metadata": {"name": "rbac-probe", **({"namespace": namespace} if namespace else {})}, "spec": {}}


def workload_of(rehearsal: Rehearsal, namespace: str, trainjob: str) -> str | None:
    for workload in rehearsal.workloads(namespace):
        if any(o["kind"] == "TrainJob" and o["name"] == trainjob for o in workload["metadata"].get("ownerReferences", [])):
            return str(workload["metadata"]["name"])
    return None


def test_tenant_rbac_by_impersonating_the_tenant_group(deployed_rehearsal: Rehearsal,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    rehearsal = deployed_rehearsal
    groups = next(t.groups for t in rehearsal.config.tenants if t.name == TENANT)
    who = Impersonated(rehearsal, f"{TENANT}-member", groups)
    try:
        check_matrix(rehearsal, who, groups, capsys)
    finally:
        rehearsal.reset_jobs()


def check_matrix(rehearsal: Rehearsal, who: Impersonated, groups: tuple[str, ...],
                 capsys: pytest.CaptureFixture[str]) -> None:
    for tenant in (TENANT, OTHER):  # long-running, so that it and its Workload exist while the matrix is made
        rehearsal.submit(Job(name=TARGET, tenant=tenant, run_for="10m"))
    names = {ns: wait_until(f"the Workload of {ns}/{TARGET}", lambda ns=ns: workload_of(rehearsal, ns, TARGET), 60)
             for ns in (TENANT, OTHER)}
    lines = ["| who | verb | resource | namespace | expected | SubjectAccessReview | real request | the server said |",
             "|---|---|---|---|---|---|---|---|"]
    wrong = []
    for row in rbac_rows():
        name = names[row.namespace or ""] if row.name == WORKLOAD else row.name
        review = who.can_i(row, name)
        sample = samples(rehearsal, row.namespace, row.resource) if row.verb == "create" else {}
        real, said = who.attempt(row, name, sample)
        cells = [f"{TENANT}-member ({', '.join(groups)})", row.verb,
                 row.resource + (f"/{name}" if name else "") + (f"/{row.subresource}" if row.subresource else ""),
                 row.namespace or "(cluster)", "allowed" if row.allowed else "denied", "allowed" if review else "denied",
                 "allowed" if real else "denied", said.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
        if review != row.allowed or real != row.allowed:
            wrong.append(" ".join(cells[1:5]) + f": review {review}, request {real} ({said})")
    with capsys.disabled():
        print("\n## Tenant RBAC (impersonated: --as " + f"{TENANT}-member --as-group {' --as-group '.join(groups)})\n")
        print("\n".join(lines))
    assert wrong == []


def test_a_tenant_kubeconfig_is_refused_where_rbac_says_so(deployed_rehearsal: Rehearsal, tmp_path: Path) -> None:
    """The certificate identity (not impersonation) meets the same RBAC: team-a's member cannot list team-b's jobs."""
    kubeconfig = deployed_rehearsal.tenant_kubeconfig(TENANT)
    base = [str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig)]
    own = subprocess.run([*base, "get", "trainjobs.trainer.kubeflow.org", "-n", TENANT], capture_output=True, text=True,
                         timeout=60, check=False)
    other = subprocess.run([*base, "get", "trainjobs.trainer.kubeflow.org", "-n", OTHER], capture_output=True, text=True,
                           timeout=60, check=False)
    assert own.returncode == 0, own.stderr
    assert other.returncode != 0
    assert f'User "{TENANT}-member" cannot list resource "trainjobs"' in other.stderr
