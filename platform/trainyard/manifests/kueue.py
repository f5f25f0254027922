"""Kueue: the controller configuration and the queueing objects (all ``kueue.x-k8s.io/v1beta2``).

One ResourceFlavor per GPU pool, one ClusterQueue per tenant (admitting only its
namespace), one LocalQueue named ``default`` in each tenant namespace, Cohorts for
borrowing, WorkloadPriorityClasses, and a Topology when the stack enables TAS.

Ref: https://kueue.sigs.k8s.io/docs/concepts/ and the v0.19.2 CRDs in ../shared/crds/kueue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainyard import catalog
from trainyard.config.gpu_operator import MIG_PREFIX, compute_slices
from trainyard.config.gpu_pools import advertised_resources, gpu_equivalent, mig_resources
from trainyard.config.model import FlavorQuota, GpuPool, NodePool, PlatformConfig, Tenant, gpu_share
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, TENANT_LABEL, Manifest, metadata
from trainyard.quantity import canonical_quantity, format_quantity, parse_quantity

API = catalog.KUEUE_API
# The MIG slice budget (kueue.mig_slice_budget): a resource no pod requests, derived by a Kueue resource
# transformation from each MIG instance a pod requests, and a flavor without node labels that holds its quota.
MIG_SLICES = "trainyard.dev/mig-slices"
MIG_SLICE_FLAVOR = "mig-slices"

# The chart's webhook Service for a release named "kueue" (fullname = release name).
# Ref: kueue v0.19.2 charts/kueue/templates/webhook/service.yaml ('{{ include "kueue.fullname" . }}-webhook-service').
WEBHOOK_SERVICE = "kueue-webhook-service"


@dataclass(frozen=True)
class ConversionWebhook:
    """The patch that points one converted Kueue CRD at Kueue's conversion webhook in ``namespace``.

    A value, not a closure: a rendered platform (its CRD sources with their patches) pickles, which is how
    ``trainyard diff`` brings the base side back from the process that prepared it (review/beside.py)."""

    namespace: str

    def __call__(self, crd: Manifest) -> Manifest:
        return {**crd, "spec": {"conversion": _conversion_webhook(self.namespace), **crd["spec"]}}


def conversion_patches(config: PlatformConfig) -> dict[str, Callable[[Manifest], Manifest]]:
    """By CRD name, what Trainyard changes in Kueue's CRDs: the converted ones call Kueue's conversion webhook,
    as upstream installs them.

    Trainyard's CRDs are the only ones applied (the chart's copies are dropped by the
    post-renderer), so they must carry what the chart's copies would: without
    ``spec.conversion`` a v1beta1 request to a v1beta2-stored object is not converted, and
    Kueue's certificate rotator, which writes its CA into exactly these five CRDs'
    ``spec.conversion.webhook.clientConfig``, has nothing to write into
    (Ref: kueue pkg/util/cert/cert.go, ``cert.CRDConversion`` entries). Where
    Kueue is external (the rehearsal) no webhook serves, and the CRDs stay as upstream wrote
    them. The chart-truth tests check these specs equal the chart's CRDs field for field.
    """
    if "kueue" in config.rehearsal.external_controllers:
        return {}
    patch = ConversionWebhook(catalog.release("kueue", config.versions.kueue).namespace)
    return {f"{plural}.kueue.x-k8s.io": patch for plural in catalog.KUEUE_CONVERTED_CRDS}


def _conversion_webhook(namespace: str) -> dict[str, Any]:
    # A new dict per CRD (a shared one would render as a YAML alias). The caBundle is injected
    # at run time by Kueue's internal certificate management (internalCertManagement.enable).
    return {"strategy": "Webhook", "webhook": {
        "clientConfig": {"service": {"name": WEBHOOK_SERVICE, "namespace": namespace, "path": "/convert"}},
        "conversionReviewVersions": ["v1"]}}


def topology(config: PlatformConfig) -> list[Manifest]:
    if config.topology is None:
        return []
    return [{
        "apiVersion": API,
        "kind": "Topology",
        "metadata": metadata(config.topology.name),
        "spec": {"levels": [{"nodeLabel": level.node_label} for level in config.topology.levels]},
    }]


def resource_flavor(config: PlatformConfig, pool: NodePool) -> Manifest:
    spec: dict[str, Any] = {"nodeLabels": dict(sorted(pool.node_labels.items()))}
    if pool.taints:
        spec["nodeTaints"] = [_taint(t.key, t.value, t.effect) for t in pool.taints]
        # Pods admitted to this flavor get tolerations for its taints, so tenants' jobs do not
        # need to know the pool's taints. Ref: ResourceFlavor v1beta2 spec.tolerations.
        spec["tolerations"] = [toleration_for(t.key, t.value, t.effect) for t in pool.taints]
    if config.topology is not None:
        spec["topologyName"] = config.topology.name
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": metadata(pool.name, labels={"trainyard.dev/gpu-product": _label_safe(pool.gpu_product)}
                             if isinstance(pool, GpuPool) else {"trainyard.dev/pool-kind": "cpu"}),
        "spec": spec,
    }


def cohort(config: PlatformConfig, name: str) -> Manifest:
    definition = next(c for c in config.cohorts if c.name == name)
    spec: dict[str, Any] = {}
    if definition.parent:
        spec["parentName"] = definition.parent
    if definition.fair_share_weight is not None and config.kueue.fair_sharing.enabled:
        spec["fairSharing"] = {"weight": canonical_quantity(definition.fair_share_weight)}
    return {"apiVersion": API, "kind": "Cohort", "metadata": metadata(name), "spec": spec}


def workload_priority_classes(config: PlatformConfig) -> list[Manifest]:
    out = []
    for priority in config.priority_classes:
        obj: Manifest = {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata(priority.name),
            "value": priority.value,
        }
        if priority.description:
            obj["description"] = priority.description
        out.append(obj)
    return out


def cluster_queue_for(config: PlatformConfig, tenant: Tenant) -> Manifest:
    settings = config.kueue
    preemption: dict[str, Any] = {
        "withinClusterQueue": settings.preemption.within_cluster_queue,
        "reclaimWithinCohort": settings.preemption.reclaim_within_cohort,
    }
    if tenant.cohort is not None:
        borrow: dict[str, Any] = {"policy": settings.preemption.borrow_within_cohort.policy}
        if settings.preemption.borrow_within_cohort.max_priority_threshold is not None:
            borrow["maxPriorityThreshold"] = settings.preemption.borrow_within_cohort.max_priority_threshold
        preemption["borrowWithinCohort"] = borrow
    spec: dict[str, Any] = {}
    if tenant.cohort is not None:
        spec["cohortName"] = tenant.cohort
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": tenant.namespace_name}}
    spec["queueingStrategy"] = settings.queueing_strategy
    # Kueue's ClusterQueue webhook writes these defaults on create; declared here, so that the second
    # `pulumi up` has nothing to change (seen on the rehearsal with the real Kueue, docs/rehearsal.md).
    spec["flavorFungibility"] = {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}
    spec["stopPolicy"] = "None"
    spec["preemption"] = preemption
    if settings.fair_sharing.enabled and tenant.fair_share_weight is not None:
        spec["fairSharing"] = {"weight": canonical_quantity(tenant.fair_share_weight)}
    if config.multikueue is not None and config.multikueue.role == "manager":
        # Every workload of a manager's queue is dispatched to a worker. Ref: ClusterQueue v1beta2
        # spec.admissionChecksStrategy (v1beta2 has no plain spec.admissionChecks list).
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": config.multikueue.admission_check}]}
    spec["resourceGroups"] = [{
        "coveredResources": covered_resources(config, tenant),
        "flavors": [
            {"name": quota.flavor, "resources": flavor_resources(config.pool(quota.flavor), quota,
                                                                 covered_resources(config, tenant))}
            for quota in flavor_order(config, tenant)
        ],
    }]
    if config.kueue.mig_slice_budget and tenant.mig_slices is not None:
        # A second group: a resource or flavor can be in only one. Ref: Kueue docs, tasks/manage/share_quotas_across_flavors.
        spec["resourceGroups"].append({
            "coveredResources": [MIG_SLICES],
            "flavors": [{"name": MIG_SLICE_FLAVOR,
                         "resources": [{"name": MIG_SLICES, "nominalQuota": canonical_quantity(tenant.mig_slices)}]}],
        })
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": metadata(tenant.name, labels={TENANT_LABEL: tenant.name}),
        "spec": spec,
    }


def flavor_order(config: PlatformConfig, tenant: Tenant) -> list[FlavorQuota]:
    """The tenant's quotas in the order Kueue tries their flavors: CPU pools first, then GPU pools, each as listed.

    Kueue assigns a workload the first flavor of the group where every covered resource fits. A CPU
    flavor has no GPU quota, so a GPU job always goes on to a GPU flavor; listed first, it keeps a
    CPU-only job off the GPU nodes while it has room (a CPU-only job may still use a GPU flavor's CPU
    quota when the CPU flavor cannot fit it: Kueue has no flavor a job must not use).
    Ref: Kueue docs concepts/cluster_queue "Flavors and resources" (flavors are tried in order).
    """
    return sorted(tenant.quotas, key=lambda quota: config.gpu_pool(quota.flavor) is not None)


def covered_resources(config: PlatformConfig, tenant: Tenant) -> list[str]:
    """The resources of a tenant's one resource group: whole GPUs, every shared-GPU resource its flavors offer, CPU, memory.

    One group, not one per kind of GPU: CPU and memory can be covered by only one group, and a
    MIG pod asks for CPU and memory on the same flavor as its slices. A flavor lists every
    covered resource; those it does not advertise get a zero quota, so Kueue never assigns it.
    Ref: ClusterQueue v1beta2 spec.resourceGroups (a resource is in at most one group).
    """
    shared = sorted({name for quota in tenant.quotas for name in advertised_resources(config.pool(quota.flavor))}
                    - {catalog.GPU_RESOURCE})
    return [catalog.GPU_RESOURCE, *shared, "cpu", "memory"]


def flavor_resources(pool: NodePool, quota: FlavorQuota, covered: list[str] | None = None) -> list[dict[str, Any]]:
    """Quotas of one flavor, in ``covered`` order. On a GPU pool, CPU and memory follow the GPU share of a node.

    The share counts whole GPUs and shared units at their GPU equivalent (a 1g MIG slice is
    1/7 of a GPU, a time-sliced replica 1/replicas). A CPU pool's quota is its CPU and memory; every
    GPU resource gets zero there.
    """
    covered = covered or [catalog.GPU_RESOURCE, "cpu", "memory"]
    if not isinstance(pool, GpuPool):
        explicit = {"cpu": (quota.cpu, False), "memory": (quota.memory, True)}
        return [{"name": name, "nominalQuota": _quantity_down(parse_quantity(explicit[name][0] or 0), explicit[name][1])
                 if name in explicit else "0"} for name in covered]
    shared = {q.resource: q for q in quota.shared}

    def equivalent(limit: str) -> Fraction | None:
        """GPU equivalents of the nominal quota or of one limit; None when some GPU resource has no such limit."""
        total = Fraction(0)
        entries: list[tuple[int | None, Fraction]] = [
            (getattr(quota, limit) if limit != "nominal" else quota.gpus, Fraction(1))]
        entries += [(getattr(q, limit), gpu_equivalent(pool, q.resource)) for q in quota.shared]
        for amount, per_unit in entries:
            if amount is None:
                return None
            total += amount * per_unit
        return total

    nominal_gpus = equivalent("nominal") or Fraction(0)

    def amounts(per_node: int | str, explicit: int | str | None, binary: bool) -> dict[str, Any]:
        nominal = parse_quantity(explicit) if explicit is not None else gpu_share(pool, nominal_gpus, per_node)
        # Limits scale with the same ratio as the GPU limits.
        ratio = nominal / nominal_gpus if nominal_gpus else gpu_share(pool, 1, per_node)
        out: dict[str, Any] = {"nominalQuota": _quantity_down(nominal, binary)}
        for limit, key in (("borrowing_limit", "borrowingLimit"), ("lending_limit", "lendingLimit")):
            gpus = equivalent(limit)
            if gpus is not None:
                out[key] = _quantity_down(ratio * gpus, binary)
        return out

    def units(nominal: int, borrowing: int | None, lending: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"nominalQuota": canonical_quantity(nominal)}
        if borrowing is not None:
            out["borrowingLimit"] = canonical_quantity(borrowing)
        if lending is not None:
            out["lendingLimit"] = canonical_quantity(lending)
        return out

    rows: list[dict[str, Any]] = []
    for name in covered:
        if name == catalog.GPU_RESOURCE:
            rows.append({"name": name, **units(quota.gpus, quota.borrowing_limit, quota.lending_limit)})
        elif name == "cpu":
            rows.append({"name": name, **amounts(pool.cpu_per_node, quota.cpu, binary=False)})
        elif name == "memory":
            rows.append({"name": name, **amounts(pool.memory_per_node, quota.memory, binary=True)})
        elif name in shared:
            q = shared[name]
            rows.append({"name": name, **units(q.nominal, q.borrowing_limit, q.lending_limit)})
        else:
            rows.append({"name": name, "nominalQuota": "0"})
    return rows


def _quantity_down(value: Fraction, binary: bool) -> str:
    """``value`` as a quantity; a share that is no exact quantity (a seventh of a node for a 1g MIG slice)
    is rounded down to the milli-CPU or the MiB, so a derived quota never exceeds its share."""
    try:
        return format_quantity(value, binary=binary)
    except ValueError:
        unit = Fraction(1024 * 1024) if binary else Fraction(1, 1000)
        return format_quantity(unit * (value // unit), binary=binary)


def local_queue_for(tenant: Tenant) -> Manifest:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": metadata(DEFAULT_LOCAL_QUEUE, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        "spec": {"clusterQueue": tenant.name},
    }


def controller_configuration(config: PlatformConfig) -> dict[str, Any]:
    """The Kueue manager's ``Configuration`` (config.kueue.x-k8s.io/v1beta2), handed to the chart.

    Ref: apis/config/v1beta2/configuration_types.go and charts/kueue/values.yaml
    (managerConfig.controllerManagerConfigYaml) at v0.19.2.
    """
    settings = config.kueue
    wait = settings.wait_for_pods_ready
    requeuing: dict[str, Any] = {
        "timestamp": wait.requeuing.timestamp,
        "backoffBaseSeconds": wait.requeuing.backoff_base_seconds,
        "backoffMaxSeconds": wait.requeuing.backoff_max_seconds,
    }
    if wait.requeuing.backoff_limit_count is not None:
        requeuing["backoffLimitCount"] = wait.requeuing.backoff_limit_count
    wait_for_pods_ready: dict[str, Any] = {
        "timeout": wait.timeout,
        "blockAdmission": wait.block_admission,
        "requeuingStrategy": requeuing,
    }
    if wait.recovery_timeout is not None:
        wait_for_pods_ready["recoveryTimeout"] = wait.recovery_timeout
    out: dict[str, Any] = {
        "apiVersion": catalog.KUEUE_CONFIG_API,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        # Per-ClusterQueue quota and usage gauges (kueue_cluster_queue_resource_usage, _nominal_quota, ...) are
        # off by default; the alerts and dashboards of the monitoring concern read them.
        # Ref: apis/config/v1beta2/configuration_types.go ControllerMetrics.EnableClusterQueueResources.
        "metrics": {"bindAddress": ":8443",
                    **({"enableClusterQueueResources": True} if config.monitoring.enabled else {})},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "manageJobsWithoutQueueName": settings.manage_jobs_without_queue_name,
        # Only tenant namespaces are managed: system namespaces are never suspended.
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]},
        "waitForPodsReady": wait_for_pods_ready,
        "integrations": {"frameworks": ["trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset", "batch/job"]},
    }
    if config.multikueue is not None and config.multikueue.role == "manager":
        # The label MultiKueue puts on every object it creates on a worker; its garbage collector deletes
        # the worker objects of this origin whose manager copy is gone. The default ("multikueue") is
        # the same for every manager: two managers sharing a worker would delete each other's jobs.
        # Ref: apis/config/v1beta2/configuration_types.go MultiKueue.Origin; pkg/controller/admissionchecks/multikueue (gc).
        out["multiKueue"] = {"origin": config.cluster.name}
    if settings.fair_sharing.enabled:
        out["fairSharing"] = {"preemptionStrategies": list(settings.fair_sharing.preemption_strategies)}
    if settings.mig_slice_budget:
        out["resources"] = {"transformations": mig_slice_transformations(config)}
    return out


def mig_slice_transformations(config: PlatformConfig) -> list[dict[str, Any]]:
    """Each MIG instance also counts as its compute slices (1g.18gb -> 1, 3g.71gb -> 3); Retain keeps the profile itself.

    Ref: apis/config/v1beta2/configuration_types.go ResourceTransformation (input, strategy, outputs) at v0.19.2;
    KEP-2937 (resource transformer) for MIG.
    """
    return [{"input": name, "strategy": "Retain", "outputs": {MIG_SLICES: str(compute_slices(name.removeprefix(MIG_PREFIX)))}}
            for name in mig_resources(config.gpu_pools)]


def mig_slice_flavor() -> Manifest:
    """The flavor of the slice budget: no node labels, since the budget is not a place."""
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": metadata(MIG_SLICE_FLAVOR), "spec": {}}


def resource_flavors(config: PlatformConfig) -> list[Manifest]:
    """Every ResourceFlavor of the stack: one per GPU and CPU pool, and the slice budget's where the budget is on.

    The one source of the flavors' ``nodeLabels``: the queueing concern renders these objects, and the
    flavor annotation policy (admission.py) matches pods against the same labels.
    """
    flavors = [resource_flavor(config, pool) for pool in config.pools]
    if config.kueue.mig_slice_budget:
        flavors.append(mig_slice_flavor())
    return flavors


def build(config: PlatformConfig) -> Concern:
    """Queueing: every cluster-scoped Kueue object of the stack, and each tenant's LocalQueue."""
    objects: list[Manifest] = []
    objects += topology(config)
    objects += resource_flavors(config)
    objects += [cohort(config, c.name) for c in config.cohorts]
    objects += workload_priority_classes(config)
    objects += [cluster_queue_for(config, tenant) for tenant in config.tenants]
    return Concern("queueing", objects=tuple(objects),
                   tenant_objects={t.name: (local_queue_for(t),) for t in config.tenants})


def _taint(key: str, value: str | None, effect: str) -> dict[str, str]:
    out = {"key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


def toleration_for(key: str, value: str | None, effect: str) -> dict[str, str]:
    if value is None:
        return {"key": key, "operator": "Exists", "effect": effect}
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def _label_safe(text: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text)[:63].strip("-_.")
    return safe or "unknown"

