"""Tenants: a namespace per ML team, its queue, identity, permissions and quotas.

A tenant may create and watch TrainJobs and read the Kueue Workloads and pods they make, its
LocalQueue and, through Kueue's visibility API, the places of its pending Workloads in it (never a
ClusterQueue: those are cluster-scoped), and the approved runtimes (what the Kubeflow SDK's ``list_runtimes`` reads: the
cluster's ClusterTrainingRuntimes and its namespace's TrainingRuntimes).
It may not touch runtimes, queues or quotas: those are the platform team's, declared here.
"""

from __future__ import annotations

from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig, Tenant
from trainyard.manifests import kueue
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import POLICY_PARAMS_GROUP, POLICY_PARAMS_PLURAL, TENANT_LABEL, Manifest, metadata
from trainyard.quantity import format_quantity, parse_quantity

# Kueue's aggregated visibility API (served by the Kueue manager behind the APIService the chart installs).
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"

# Pod Security Admission, enforced at the restricted level in every tenant namespace.
# Ref: https://kubernetes.io/docs/concepts/security/pod-security-admission/
PSA_LEVEL = "restricted"
PSA_LABELS = {f"pod-security.kubernetes.io/{mode}": PSA_LEVEL for mode in ("enforce", "audit", "warn")}


def namespace_for(tenant: Tenant) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(tenant.namespace_name, labels={TENANT_LABEL: tenant.name, **PSA_LABELS}),
    }


def service_account_for(tenant: Tenant) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata("trainer", namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        # Training pods get no API credentials unless a job asks for them explicitly.
        "automountServiceAccountToken": False,
    }


def role_for(tenant: Tenant) -> Manifest:
    read = ["get", "list", "watch"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata("trainyard-tenant", namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        "rules": [
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": [*read, "create", "delete"]},
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status"], "verbs": ["get"]},
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"], "verbs": read},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": read},
            # Kueue's visibility API: the pending Workloads of a LocalQueue of this namespace with their positions
            # (what `trainyard status --tenant` reads). Its storage serves only get; a ClusterQueue's list (cluster-
            # scoped, every namespace's jobs) is not granted.
            # Ref: kueue v0.19.2 pkg/visibility/storage/storage.go, pending_workloads_lq.go (rest.GetterWithOptions).
            {"apiGroups": [VISIBILITY_GROUP], "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]},
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": read},
            # What is approved for this namespace (datasets, base models, bucket, flavors): read, never written.
            {"apiGroups": [POLICY_PARAMS_GROUP], "resources": [POLICY_PARAMS_PLURAL], "verbs": read},
            {"apiGroups": [""], "resources": ["pods", "events"], "verbs": read},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
    }


RUNTIME_READER = "trainyard-tenant-runtimes"


def runtime_reader(config: PlatformConfig) -> list[Manifest]:
    """Read access to the approved ClusterTrainingRuntimes for every tenant group (they are cluster-scoped).

    The Kubeflow SDK lists them for ``TrainerClient().list_runtimes()`` and reads one in ``train()``
    (Ref: kubeflow sdk 0.5.0 kubeflow/trainer/backends/kubernetes/backend.py, list_runtimes/get_runtime);
    without this a tenant's SDK fails before it submits anything. Only approved runtimes exist on the
    cluster (``runtimes.approved``), so listing shows exactly those.
    """
    groups = sorted({g for t in config.tenants for g in t.groups})
    if not groups:
        return []
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata(RUNTIME_READER),
         "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": metadata(RUNTIME_READER),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUNTIME_READER},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups]},
    ]


def role_binding_for(tenant: Tenant, role: str = "trainyard-tenant") -> Manifest:
    """Binds the tenant's identity-provider groups to ``role`` in its namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(role, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in tenant.groups],
    }


def resource_quota_for(config: PlatformConfig, tenant: Tenant) -> Manifest:
    """A namespace ceiling backing Kueue: at most nominal + borrowing of each resource.

    Kueue decides admission; the ResourceQuota stops anything that bypasses Kueue (a bare pod)
    from taking more than the tenant could ever be admitted for.

    It limits no PVC storage or count, on purpose. JobSet v0.12.0 creates the shared PVCs of a
    runtime's ``volumeClaimPolicies`` with a Create on *every* reconcile and ignores AlreadyExists
    (Ref: jobset v0.12.0 pkg/controllers/volume_claim_policy.go, createPVCsIfNecessary), and the
    quota admission charges a create before storage refuses it, so each refused create adds the claim
    to ``status.used`` until the quota controller recalculates (Ref: kubernetes/kubernetes#61530,
    #119593). A few reconciles later the Create is refused "exceeded quota", the reconcile stops
    before the JobSet's later steps (creating the node Jobs, suspending them on preemption), and the
    job stalls until Kueue's waitForPodsReady evicts it. Storage stays bounded without it: tenants
    cannot create PVCs (``role_for``), so a namespace holds at most ``max_trainjobs`` x the claims of
    the largest approved runtime (docs/components/tenants.md, "Storage").
    """
    gpus, cpu, memory = 0, parse_quantity(0), parse_quantity(0)
    for quota in tenant.quotas:
        pool = config.pool(quota.flavor)
        resources = {r["name"]: r for r in kueue.flavor_resources(pool, quota)}
        if quota.borrowing_limit is None and tenant.cohort is not None:
            # Unlimited borrowing: the ceiling is the whole pool (a CPU pool: its CPU and memory).
            gpu_pool = config.gpu_pool(quota.flavor)
            gpus += gpu_pool.gpus if gpu_pool is not None else 0
            cpu += parse_quantity(pool.cpu_per_node) * pool.nodes
            memory += parse_quantity(pool.memory_per_node) * pool.nodes
            continue
        gpus += quota.gpus + (quota.borrowing_limit or 0)
        for name in ("cpu", "memory"):
            total = parse_quantity(resources[name]["nominalQuota"]) + parse_quantity(resources[name].get("borrowingLimit", 0))
            if name == "cpu":
                cpu += total
            else:
                memory += total
    hard: dict[str, Any] = {
        f"requests.{catalog.GPU_RESOURCE}": str(gpus),
        "requests.cpu": format_quantity(cpu, binary=False),
        "requests.memory": format_quantity(memory, binary=True),
        "count/trainjobs.trainer.kubeflow.org": str(tenant.max_trainjobs),
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata("trainyard-tenant", namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        "spec": {"hard": hard},
    }


def build(config: PlatformConfig) -> Concern:
    """Tenants: each team's namespace and its access and quota objects."""
    return Concern("tenants", objects=tuple(runtime_reader(config)), tenant_objects={
        tenant.name: (
            namespace_for(tenant),
            service_account_for(tenant),
            role_for(tenant),
            role_binding_for(tenant),
            resource_quota_for(config, tenant),
        )
        for tenant in config.tenants
    })
