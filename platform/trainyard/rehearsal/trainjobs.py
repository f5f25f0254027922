"""A scenario's job as the rehearsal submits it: the TrainJob, and the input pins the stack approves.

``Rehearsal.submit`` (``session.py``) applies ``trainjob_for``; a tenant submitting with the Kubeflow
SDK (``sdk.py``) writes its own TrainJob but takes the same pins (``input_pins``), so both go through
``trainyard-trainjob-inputs`` alike. Both callers import this module; it imports neither.
"""

from __future__ import annotations

from typing import Any

from trainyard import catalog
from trainyard.config.model import NodePool, PlatformConfig
from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, TENANT_LABEL
from trainyard.rehearsal.kube import Manifest
from trainyard.rehearsal.kwok import NEVER_READY_ANNOTATION, RUN_FOR_ANNOTATION
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.settings import ClusterError

# The runtimePatches manager the rehearsal's own pod settings go under (Kueue writes kueue.x-k8s.io/manager).
PATCH_MANAGER = "trainyard.dev/rehearsal"


def input_pins(config: PlatformConfig, job: Job) -> dict[str, str]:
    """The trainer env pinning the job's dataset and base model to the stack's approved entries (lineage), as
    ``trainyard-trainjob-inputs`` requires; a ClusterError if the stack does not approve them for the tenant."""
    try:
        return config.lineage.pins(job.tenant, job.dataset, job.model)
    except ValueError as e:
        raise ClusterError(f"job {job.name}: {e}") from None


def job_pool(config: PlatformConfig, job: Job) -> NodePool | None:
    """The pool a scenario job pins itself to (``flavor``), None where it names none; a ClusterError if the stack has
    no such pool."""
    if not job.flavor:
        return None
    pool = next((p for p in config.pools if p.name == job.flavor), None)
    if pool is None:
        raise ClusterError(f"job {job.name}: flavor {job.flavor!r} is not a pool of the stack")
    return pool


def trainjob_for(config: PlatformConfig, job: Job) -> Manifest:
    """A tenant's TrainJob as the rehearsal submits it: through the tenant's LocalQueue, resources per node,
    and the rehearsal's pod settings (kwok run time, never-ready, flavor pinning) as a runtime patch."""
    tenant = next((t for t in config.tenants if t.name == job.tenant), None)
    if tenant is None:
        raise ClusterError(f"job {job.name}: tenant {job.tenant!r} is not in the stack")
    pool = job_pool(config, job)
    labels = {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE, TENANT_LABEL: tenant.name}
    if job.priority:
        labels[PRIORITY_CLASS_LABEL] = job.priority
    # Tenant namespaces' ResourceQuota limits requests.cpu/memory: every pod must request them.
    resources = {**({catalog.GPU_RESOURCE: str(job.gpus_per_node)} if job.gpus_per_node else {}), "cpu": "1", "memory": "4Gi"}
    annotations = {RUN_FOR_ANNOTATION: job.run_for}
    if job.never_ready:
        annotations[NEVER_READY_ANNOTATION] = "true"
    pod_spec: dict[str, Any] = {}
    if pool is not None:
        pod_spec["nodeSelector"] = dict(pool.node_labels)
    pod_template: dict[str, Any] = {"metadata": {"annotations": annotations}}
    if pod_spec:
        pod_template["spec"] = pod_spec
    initializer = {key: {"storageUri": uri} for key, uri in (("dataset", job.dataset), ("model", job.model)) if uri}
    trainer: dict[str, Any] = {"numNodes": job.nodes, "resourcesPerNode": {"requests": resources, "limits": resources}}
    pins = input_pins(config, job)
    if pins:
        trainer["env"] = [{"name": k, "value": v} for k, v in pins.items()]
    return {
        "apiVersion": catalog.TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": job.name, "namespace": tenant.namespace_name, "labels": labels},
        "spec": {
            **({"initializer": initializer} if initializer else {}),
            "runtimeRef": {"name": job.runtime},
            "trainer": trainer,
            # Ref: trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go (RuntimePatch)
            "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod_template}}}]}}}}],
        },
    }
