"""Approved ClusterTrainingRuntimes, read from the reviewed YAML in ``runtimes/``.

A runtime file is the reviewed source; the builder only adds what the stack decides:
the approval label, the Kueue topology annotation on the trainer pods when the stack asks
for topology-aware placement, and the data-plane wiring (``data_plane_wiring``): every
container reads the tenant's fixed-name Secrets with ``envFrom``, knows its TrainJob's
name and its checkpoint location, and the initializer steps get the S3 settings Trainer's
initializers read. Images must come from an approved registry and be pinned by digest, so
what was reviewed is what runs: a runtime file names an image by tag and the image lock
(``trainyard.supply.lock``) supplies the digest the mirror serves, rendered as
``<name>:<tag>@<digest>``; a file may also pin a digest itself.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from trainyard import catalog, yamlio
from trainyard.config.model import PlatformConfig
from trainyard.manifests import object_store
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import (
    APPROVED_RUNTIME_LABEL,
    KUEUE_FLAVOR_ANNOTATION,
    MANAGED_BY,
    MLFLOW_SECRET,
    OBJECT_STORE_SECRET,
    QUEUE_NAME_LABEL,
    TENANT_LABEL,
    Manifest,
    metadata,
)
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef, ReferenceError

DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# Ref: https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/#user-facing-apis
TOPOLOGY_ANNOTATIONS = {
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
    "required": "kueue.x-k8s.io/podset-required-topology",
}
# Trainer marks the replicated job that runs the training code with this label.
# Ref: kubeflow/trainer charts/kubeflow-trainer/files/runtimes/torch-distributed.yaml
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZER_STEPS = frozenset({"dataset-initializer", "model-initializer"})
# JobSet labels every pod with its JobSet's name, which Trainer sets to the TrainJob's name; upstream's
# cache runtime reads TRAIN_JOB_NAME the same way.
# Ref: kubeflow/trainer charts/kubeflow-trainer/files/runtimes/torch-distributed-with-cache.yaml (v2.3.0)
JOBSET_NAME_FIELD = "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
# Per-tenant ConfigMap naming the tenant's buckets, read with envFrom like the Secrets.
BUCKETS_CONFIGMAP = "trainyard-buckets"
CHECKPOINTS_BUCKET_KEY = "TRAINYARD_CHECKPOINTS_BUCKET"
MODELS_BUCKET_KEY = "TRAINYARD_MODELS_BUCKET"
CHECKPOINT_KEEP_KEY = "TRAINYARD_CHECKPOINT_KEEP"
# Kueue sets these on the pod template of a job it admits (kueue.x-k8s.io/workload while the job runs,
# the queue label as given); a pod reads them through the downward API, empty where absent.
# Ref: kubernetes-sigs/kueue apis/kueue/v1alpha1 (WorkloadAnnotation), site/.../labels-and-annotations.md
KUEUE_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
# What Trainer v2.3's S3 initializers read (upper-cased fields of S3DatasetInitializer / S3ModelInitializer),
# and the key of the object-store Secret each one comes from.
# Ref: kubeflow/trainer pkg/initializers/types/types.py (v2.3.0)
INITIALIZER_S3_ENV = (("ENDPOINT", "AWS_ENDPOINT_URL"), ("ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
                      ("SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"), ("REGION", "AWS_DEFAULT_REGION"))


class RuntimeFileError(Exception):
    """A runtime file that cannot be approved: names the file, the field and the reason."""

    def __init__(self, file: str, path: str, reason: str) -> None:
        super().__init__(f"{file}: {path}: {reason}")
        self.file, self.path, self.reason = file, path, reason


def image_allowed(image: str, registries: tuple[str, ...]) -> bool:
    return any(image.startswith(prefix) for prefix in registries)


def containers_of(runtime: Manifest) -> list[tuple[str, dict[str, Any]]]:
    """(field path, container) for every container and init container of every replicated job."""
    out = []
    jobs = runtime.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", []) or []
    for i, job in enumerate(jobs):
        pod = job.get("template", {}).get("spec", {}).get("template", {}).get("spec", {}) or {}
        for key in ("initContainers", "containers"):
            for j, container in enumerate(pod.get(key, []) or []):
                out.append((f"spec.template.spec.replicatedJobs[{i}].template.spec.template.spec.{key}[{j}]", container))
    return out


def read_runtime_file(path: Path, directory: str = "runtimes") -> Any:
    """The parsed YAML of a reviewed runtime file; RuntimeFileError if it is missing or not YAML."""
    try:
        return yamlio.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RuntimeFileError(str(path), "(file)", f"approved runtime has no file in the {directory} directory") from None
    except yaml.YAMLError as exc:
        raise RuntimeFileError(str(path), "(yaml)", f"not valid YAML: {exc}") from None


def load_runtime(path: Path, config: PlatformConfig, lock: ImageLock | None = None) -> Manifest:
    """The runtime in ``path``, checked, with every image pinned by the lock's digest."""
    pins = lock if lock is not None else ImageLock()
    shown = str(path)
    doc = read_runtime_file(path)
    if not isinstance(doc, dict) or doc.get("kind") != "ClusterTrainingRuntime":
        raise RuntimeFileError(shown, "kind", "must be ClusterTrainingRuntime")
    if doc.get("apiVersion") != catalog.TRAINER_API:
        raise RuntimeFileError(shown, "apiVersion", f"must be {catalog.TRAINER_API}")
    name = (doc.get("metadata") or {}).get("name")
    if name != path.stem:
        raise RuntimeFileError(shown, "metadata.name", f"must equal the file name {path.stem!r}")
    containers = containers_of(doc)
    if not containers:
        raise RuntimeFileError(shown, "spec.template.spec.replicatedJobs", "defines no containers")
    pin_images(shown, containers, config, pins)
    return doc


def pin_images(shown: str, containers: list[tuple[str, dict[str, Any]]], config: PlatformConfig,
               lock: ImageLock) -> None:
    """Each container's image, checked and pinned in place: from an approved registry, and pinned by digest (the
    file's own ``@sha256:``, else the lock's for its tag). Training and serving runtime files share this rule."""
    for field, container in containers:
        image = container.get("image", "")
        if not image_allowed(image, config.runtimes.approved_registries):
            raise RuntimeFileError(shown, f"{field}.image", f"{image!r} is not from an approved registry "
                                f"({', '.join(config.runtimes.approved_registries)})")
        try:
            pinned = lock.pin(ImageRef.parse(image))
        except ReferenceError as exc:
            raise RuntimeFileError(shown, f"{field}.image", str(exc)) from None
        if pinned.digest is None:
            raise RuntimeFileError(shown, f"{field}.image", f"{image!r} is not pinned by digest: no @sha256: in the "
                                   f"file and no entry in the image lock (`trainyard images lock STACK`)")
        container["image"] = str(pinned)


def models_bucket(config: PlatformConfig, tenant_name: str) -> str:
    """The tenant's models bucket (where the reference program puts the adapter it registers); naming as for checkpoints."""
    return f"{tenant_name}-models"


def checkpoints_bucket(config: PlatformConfig, tenant_name: str) -> str:
    """The tenant's checkpoints bucket: the object-store concern's name for it (bucket_prefix included);
    ``<tenant>-checkpoints`` for a stack that opens a path to an object store it does not declare."""
    if config.object_store is None:
        return f"{tenant_name}-checkpoints"
    return object_store.bucket_name(config, tenant_name, "checkpoints")


def wires_object_store(config: PlatformConfig) -> bool:
    # Tenants reach an object store when the stack declares one (the allow is derived from it) or
    # opens the path to one by hand.
    return config.object_store is not None or config.security.network.object_store is not None


def data_plane_wiring(config: PlatformConfig, runtime: Manifest) -> None:
    """Give every container of ``runtime`` the tenant's data-plane settings, without any key in the runtime.

    - ``envFrom`` the fixed-name Secrets of the tenant namespace (object store: AWS_* for boto3, s3fs,
      torch's S3 readers; MLflow: MLFLOW_TRACKING_URI/USERNAME/PASSWORD) and the bucket ConfigMap;
    - with MLflow, its client's bounds (``mlflow.client_timeout_seconds``, ``client_max_retries``), so that no
      tracking call holds a training step for MLflow's default of minutes;
    - ``TRAIN_JOB_NAME`` from the pod's JobSet label, and ``TRAINYARD_CHECKPOINT_URI`` =
      ``s3://<tenant checkpoints bucket>/<trainjob name>/`` (Kubernetes expands ``$(VAR)`` from envFrom);
    - on the dataset-initializer and model-initializer steps, ENDPOINT / ACCESS_KEY_ID / SECRET_ACCESS_KEY
      / REGION from the object-store Secret, so ``spec.initializer.dataset.storageUri: s3://...`` works
      with no key in the TrainJob (the Kubeflow SDK would otherwise write them there as plain env).
    """
    store, mlflow = wires_object_store(config), config.mlflow.enabled
    if not store and not mlflow:
        return
    sources: list[dict[str, Any]] = []
    if store:
        sources += [{"secretRef": {"name": OBJECT_STORE_SECRET}}, {"configMapRef": {"name": BUCKETS_CONFIGMAP}}]
    if mlflow:
        sources.append({"secretRef": {"name": MLFLOW_SECRET}})
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        step = ((job.get("template", {}).get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        pod = job["template"]["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            container["envFrom"] = [*sources, *(container.get("envFrom") or [])]
            env = [e for e in container.get("env") or [] if e.get("name") not in _WIRED_ENV]
            wired: list[dict[str, Any]] = [
                {"name": "TRAIN_JOB_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": JOBSET_NAME_FIELD}}}]
            if mlflow:
                wired += [{"name": "MLFLOW_HTTP_REQUEST_TIMEOUT", "value": str(config.mlflow.client_timeout_seconds)},
                          {"name": "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "value": str(config.mlflow.client_max_retries)}]
            if store:
                wired.append({"name": "TRAINYARD_CHECKPOINT_URI",
                              "value": f"s3://$({CHECKPOINTS_BUCKET_KEY})/$(TRAIN_JOB_NAME)/"})
                if step in INITIALIZER_STEPS and container.get("name") == job.get("name"):
                    wired += [{"name": name, "valueFrom": {"secretKeyRef": {"name": OBJECT_STORE_SECRET, "key": key}}}
                              for name, key in INITIALIZER_S3_ENV]
            container["env"] = [*wired, *env]


_WIRED_ENV = frozenset({"TRAIN_JOB_NAME", "TRAINYARD_CHECKPOINT_URI", "MLFLOW_HTTP_REQUEST_TIMEOUT",
                        "MLFLOW_HTTP_REQUEST_MAX_RETRIES", *(name for name, _ in INITIALIZER_S3_ENV)})


def buckets_configmap(config: PlatformConfig, tenant_name: str, namespace: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(BUCKETS_CONFIGMAP, namespace=namespace, labels={TENANT_LABEL: tenant_name}),
            "data": {CHECKPOINTS_BUCKET_KEY: checkpoints_bucket(config, tenant_name),
                     MODELS_BUCKET_KEY: models_bucket(config, tenant_name),
                     CHECKPOINT_KEEP_KEY: str(config.runtimes.checkpoints_keep)}}


def provenance_wiring(runtime: Manifest) -> None:
    """What a training program records about where it ran: runtime name, its pinned image, namespace, Kueue
    workload, queue and flavor.

    The image is the container's own reference as rendered (pinned by digest), so the MLflow run names
    exactly what ran; the rest comes from the pod through the downward API.
    """
    name = runtime["metadata"]["name"]
    for _, container in containers_of(runtime):
        env = [e for e in container.get("env") or [] if e.get("name") not in _PROVENANCE_ENV]
        container["env"] = [
            {"name": "TRAINYARD_RUNTIME_NAME", "value": name},
            {"name": "TRAINYARD_RUNTIME_IMAGE", "value": container["image"]},
            {"name": "TRAINYARD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
            {"name": "TRAINYARD_KUEUE_WORKLOAD", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": f"metadata.annotations['{KUEUE_WORKLOAD_ANNOTATION}']"}}},
            {"name": "TRAINYARD_KUEUE_QUEUE", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": f"metadata.labels['{QUEUE_NAME_LABEL}']"}}},
            # Written by the flavor annotation policy (admission.py) from the nodeSelector Kueue gives the pod.
            {"name": "TRAINYARD_KUEUE_FLAVOR", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": f"metadata.annotations['{KUEUE_FLAVOR_ANNOTATION}']"}}},
            *env]


_PROVENANCE_ENV = frozenset({"TRAINYARD_RUNTIME_NAME", "TRAINYARD_RUNTIME_IMAGE", "TRAINYARD_NAMESPACE",
                             "TRAINYARD_KUEUE_WORKLOAD", "TRAINYARD_KUEUE_QUEUE", "TRAINYARD_KUEUE_FLAVOR"})


def approved_runtime(config: PlatformConfig, source: Manifest) -> Manifest:
    runtime = copy.deepcopy(source)
    meta = runtime.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **MANAGED_BY, APPROVED_RUNTIME_LABEL: "true"}
    request = config.runtimes.topology
    if request is not None and config.topology is not None:
        level = next(lvl for lvl in config.topology.levels if lvl.name == request.level)
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            job_labels = (job.get("template", {}).get("metadata") or {}).get("labels") or {}
            if job_labels.get(ANCESTOR_LABEL) in INITIALIZER_STEPS:
                continue  # initializers download data; only the GPU pods need co-location
            pod_template = job["template"]["spec"]["template"]
            pod_meta = pod_template.setdefault("metadata", {})
            pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}),
                                       TOPOLOGY_ANNOTATIONS[request.mode]: level.node_label}
    data_plane_wiring(config, runtime)
    provenance_wiring(runtime)
    return runtime


def build(config: PlatformConfig, root: Path, lock: ImageLock | None = None) -> Concern:
    """Runtimes: the approved ClusterTrainingRuntimes, loaded from the reviewed files."""
    from trainyard.manifests import data_cache

    directory = root / config.runtimes.directory
    pins = lock if lock is not None else ImageLock()
    out = []
    for name in config.runtimes.approved:
        runtime = approved_runtime(config, load_runtime(directory / f"{name}.yaml", config, pins))
        data_cache.wire_runtime(config, runtime, pins)  # the cache runtime only
        out.append(runtime)
    return Concern("runtimes", objects=tuple(out))


def build_tenant_wiring(config: PlatformConfig) -> Concern:
    """What the wired runtimes read in each tenant namespace besides the Secrets: the bucket ConfigMap.

    A concern of its own, after ``tenants``, because its objects live in the tenant namespaces.
    """
    if not wires_object_store(config):
        return Concern("runtime-wiring")
    return Concern("runtime-wiring", tenant_objects={
        t.name: (buckets_configmap(config, t.name, t.namespace_name),) for t in config.tenants})
