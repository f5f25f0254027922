"""Approved ClusterTrainingRuntimes, read from the reviewed YAML in ``runtimes/``.

A runtime file is the reviewed source; the builder only adds what the stack decides:
the approval label, and the Kueue topology annotation on the trainer pods when the
stack asks for topology-aware placement. Images must come from an approved registry
and be pinned by digest, so what was reviewed is what runs: a runtime file names an image
by tag and the image lock (``trainyard.supply.lock``) supplies the digest the mirror serves,
rendered as ``<name>:<tag>@<digest>``; a file may also pin a digest itself.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import APPROVED_RUNTIME_LABEL, MANAGED_BY, Manifest
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


def load_runtime(path: Path, config: PlatformConfig, lock: ImageLock | None = None) -> Manifest:
    """The runtime in ``path``, checked, with every image pinned by the lock's digest."""
    pins = lock if lock is not None else ImageLock()
    shown = str(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RuntimeFileError(shown, "(file)", "approved runtime has no file in the runtimes directory") from None
    except yaml.YAMLError as exc:
        raise RuntimeFileError(shown, "(yaml)", f"not valid YAML: {exc}") from None
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
    for field, container in containers:
        image = container.get("image", "")
        if not image_allowed(image, config.runtimes.approved_registries):
            raise RuntimeFileError(shown, f"{field}.image", f"{image!r} is not from an approved registry "
                                f"({', '.join(config.runtimes.approved_registries)})")
        try:
            pinned = pins.pin(ImageRef.parse(image))
        except ReferenceError as exc:
            raise RuntimeFileError(shown, f"{field}.image", str(exc)) from None
        if pinned.digest is None:
            raise RuntimeFileError(shown, f"{field}.image", f"{image!r} is not pinned by digest: no @sha256: in the "
                                   f"file and no entry in the image lock (`trainyard images lock STACK`)")
        container["image"] = str(pinned)
    return doc


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
    return runtime


def build(config: PlatformConfig, root: Path, lock: ImageLock | None = None) -> Concern:
    """Runtimes: the approved ClusterTrainingRuntimes, loaded from the reviewed files."""
    directory = root / config.runtimes.directory
    return Concern("runtimes", objects=tuple(
        approved_runtime(config, load_runtime(directory / f"{name}.yaml", config, lock))
        for name in config.runtimes.approved))
