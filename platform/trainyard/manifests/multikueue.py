"""MultiKueue on a manager: the AdmissionCheck, one MultiKueueConfig, a MultiKueueCluster per worker.

Each MultiKueueCluster reads its worker's kubeconfig from a Secret (key ``kubeconfig``) in the
namespace the Kueue controller runs in. The Secret's content is a deploy-time value: the render
shows a placeholder naming where it comes from (a Pulumi config secret or a file), and the
Pulumi component puts the secret value in (``trainyard.components.multikueue``). The tenants'
ClusterQueues on the manager carry the AdmissionCheck (``kueue.cluster_queue_for``); a worker
stack declares the same tenant queues and none of this.

Ref: Kueue v0.19.2 CRDs kueue.x-k8s.io_{admissionchecks,multikueueconfigs,multikueueclusters}.yaml (v1beta2);
https://kueue.sigs.k8s.io/docs/tasks/manage/setup_multikueue/
"""

from __future__ import annotations

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.config.multikueue import KubeconfigSource, MultiKueueWorker
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import Manifest, metadata

API = catalog.KUEUE_API
# Ref: AdmissionCheck v1beta2 spec.controllerName; the MultiKueue controller handles checks with this name.
CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"
KUBECONFIG_KEY = "kubeconfig"  # Ref: MultiKueueCluster spec.clusterSource.kubeConfig.location ("kubeconfig" key)
WORKER_LABEL = "trainyard.dev/multikueue-worker"


def kubeconfig_secret_name(worker: MultiKueueWorker) -> str:
    return f"multikueue-{worker.name}"


def kubeconfig_placeholder(source: KubeconfigSource) -> str:
    """What render shows instead of the kubeconfig: where the Pulumi program reads it at deploy time."""
    return f"<deploy-time: {source.describe()}>"


def kubeconfig_secret(config: PlatformConfig, worker: MultiKueueWorker) -> Manifest:
    namespace = catalog.release("kueue", config.versions.kueue).namespace
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": metadata(kubeconfig_secret_name(worker), namespace=namespace, labels={WORKER_LABEL: worker.name}),
        "type": "Opaque",
        "stringData": {KUBECONFIG_KEY: kubeconfig_placeholder(worker.kubeconfig)},
    }


def multikueue_cluster(worker: MultiKueueWorker) -> Manifest:
    return {
        "apiVersion": API, "kind": "MultiKueueCluster",
        "metadata": metadata(worker.name, labels={WORKER_LABEL: worker.name}),
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": kubeconfig_secret_name(worker)}}},
    }


def build(config: PlatformConfig) -> Concern:
    """On a manager: Secrets, MultiKueueClusters, the MultiKueueConfig and the AdmissionCheck; else nothing."""
    settings = config.multikueue
    if settings is None or settings.role != "manager":
        return Concern("multikueue")
    objects: list[Manifest] = [kubeconfig_secret(config, w) for w in settings.workers]
    objects += [multikueue_cluster(w) for w in settings.workers]
    objects.append({"apiVersion": API, "kind": "MultiKueueConfig", "metadata": metadata(settings.admission_check),
                    "spec": {"clusters": [w.name for w in settings.workers]}})
    objects.append({"apiVersion": API, "kind": "AdmissionCheck", "metadata": metadata(settings.admission_check),
                    "spec": {"controllerName": CONTROLLER_NAME,
                             "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                            "name": settings.admission_check}}})
    return Concern("multikueue", objects=tuple(objects))
