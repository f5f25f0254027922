"""Where pods hide in manifests: the pod specs and containers of every workload kind.

A Deployment, a JobSet and a ClusterTrainingRuntime all carry pod templates at different
depths; the rules should not care. A TrainJob carries no pod template but two things that end
up in one: ``spec.trainer`` (image, env, resources of the trainer container) and
``spec.runtimePatches`` (security contexts, volumes, env patched into the runtime's pods).
Those are *partial*: what they leave out comes from the reviewed runtime, so rules flag only
what they set, never what they omit.

Manifests come from tenants' pull requests too, so every accessor tolerates the wrong type
where a field should be (the schema check reports those; a rule must not crash on them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from trainyard.manifests.meta import Manifest

_JOB_POD = ("template", "spec", "template", "spec")
# Field paths from the object root to each pod spec; "*" walks every item of a list.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "JobSet": ("spec", "replicatedJobs", "*", *_JOB_POD),
    "ClusterTrainingRuntime": ("spec", "template", "spec", "replicatedJobs", "*", *_JOB_POD),
    "TrainingRuntime": ("spec", "template", "spec", "replicatedJobs", "*", *_JOB_POD),
    "TrainJob": ("spec", "runtimePatches", "*", "trainingRuntimeSpec", "template", "spec", "replicatedJobs", "*",
                 *_JOB_POD),
    # A serving runtime's spec is pod-like (containers, volumes); KServe merges it into the predictor pod.
    "ClusterServingRuntime": ("spec",),
    "ServingRuntime": ("spec",),
}
# An InferenceService carries a partial pod spec per component (the runtime supplies the rest), and the
# predictor's model container (``spec.predictor.model``: a Container without a list around it).
INFERENCE_SERVICE_COMPONENTS = ("predictor", "transformer", "explainer")
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def dig(obj: Any, *path: str) -> Any:
    for key in path:
        obj = as_dict(obj).get(key)
    return obj


@dataclass(frozen=True)
class PodSpec:
    path: str
    spec: dict[str, Any]
    partial: bool


@dataclass(frozen=True)
class Container:
    path: str
    container: dict[str, Any]
    pod: PodSpec

    @property
    def security_context(self) -> dict[str, Any]:
        return as_dict(self.container.get("securityContext"))

    def effective(self, field: str) -> Any:
        """A security setting as it applies to this container: its own, else the pod's."""
        own = self.security_context.get(field)
        return own if own is not None else as_dict(self.pod.spec.get("securityContext")).get(field)


def _walk(node: Any, path: tuple[str, ...], shown: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not path:
        if isinstance(node, dict):
            yield shown, node
        return
    head, rest = path[0], path[1:]
    if head == "*":
        for i, item in enumerate(as_list(node)):
            yield from _walk(item, rest, f"{shown}[{i}]")
    else:
        yield from _walk(as_dict(node).get(head), rest, f"{shown}.{head}" if shown else head)


def pod_specs(obj: Manifest) -> list[PodSpec]:
    if obj.get("kind") == "InferenceService":
        return [PodSpec(f"spec.{c}", as_dict(dig(obj, "spec", c)), partial=True)
                for c in INFERENCE_SERVICE_COMPONENTS if isinstance(dig(obj, "spec", c), dict)]
    path = POD_SPEC_PATHS.get(str(obj.get("kind")))
    if path is None:
        return []
    partial = obj.get("kind") == "TrainJob"
    return [PodSpec(shown, spec, partial) for shown, spec in _walk(obj, path, "")]


# Within ``walks_shared`` (one run of the rules over one set of objects), each object's containers are
# found once, not once per rule: by identity, with the object kept so that its id is not reused.
_WALKS: ContextVar[dict[int, tuple[Manifest, tuple[Container, ...]]] | None] = ContextVar("trainyard_walks",
                                                                                           default=None)


@contextmanager
def walks_shared() -> Iterator[None]:
    """Inside it, ``containers`` of one object is worked out once; nothing inside may edit an object."""
    token = _WALKS.set({})
    try:
        yield
    finally:
        _WALKS.reset(token)


def containers(obj: Manifest) -> tuple[Container, ...]:
    """Every container of every pod spec, plus a TrainJob's trainer (a partial container at ``spec.trainer``)."""
    memo = _WALKS.get()
    if memo is None:
        return _containers(obj)
    hit = memo.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    found = _containers(obj)
    memo[id(obj)] = (obj, found)
    return found


def _containers(obj: Manifest) -> tuple[Container, ...]:
    out = [Container(f"{pod.path}.{key}[{i}]", c, pod)
           for pod in pod_specs(obj) for key in CONTAINER_LISTS
           for i, c in enumerate(as_list(pod.spec.get(key))) if isinstance(c, dict)]
    if obj.get("kind") == "TrainJob":
        trainer = as_dict(dig(obj, "spec", "trainer"))
        pseudo = {"image": trainer.get("image"), "env": trainer.get("env"), "resources": trainer.get("resourcesPerNode")}
        out.insert(0, Container("spec.trainer", {k: v for k, v in pseudo.items() if v is not None},
                                PodSpec("spec.trainer", {}, partial=True)))
    model = dig(obj, "spec", "predictor", "model")
    if obj.get("kind") == "InferenceService" and isinstance(model, dict):
        predictor = as_dict(dig(obj, "spec", "predictor"))
        out.insert(0, Container("spec.predictor.model", model, PodSpec("spec.predictor", predictor, partial=True)))
    return tuple(out)


def env_lists(obj: Manifest) -> list[tuple[str, list[Any]]]:
    """(field path, env list) of every container, and of a TrainJob's initializers."""
    out = [(f"{c.path}.env", as_list(c.container.get("env"))) for c in containers(obj)]
    if obj.get("kind") == "TrainJob":
        for step in ("dataset", "model"):
            out.append((f"spec.initializer.{step}.env", as_list(dig(obj, "spec", "initializer", step, "env"))))
    return out
