"""Helm chart releases of the upstream controllers, with Trainyard's values.

``ChartRelease`` itself lives in ``manifests/chart_release.py``, below every builder.

CRDs never come from a chart: Trainyard declares them itself (verified, protected,
applied first), so every chart is installed with its CRDs off.
"""

from __future__ import annotations

from typing import Any

import yaml

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import data_cache, kueue, placement
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import Manifest, metadata
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef, mirrored


def pinned_chart(config: PlatformConfig, pinned: catalog.Release, name: str, values: dict[str, Any]) -> ChartRelease:
    """The chart of a pinned upstream release, installed as ``name``; external where the rehearsal says so."""
    chart, namespace, _ = pinned.installed()
    return ChartRelease(
        name=name,
        component=name,
        chart=chart.chart,
        repo=chart.repo,
        version=chart.version or pinned.version,
        namespace=namespace,
        values=placement.placed(config, name, values),
        external=name in config.rehearsal.external_controllers,
    )


def _release(config: PlatformConfig, component: str, values: dict[str, Any]) -> ChartRelease:
    return pinned_chart(config, catalog.release(component, getattr(config.versions, component)), component, values)


COMPONENT_LABEL = "trainyard.dev/component"


def system_namespace(name: str, component: str) -> Manifest:
    """A controller's namespace: labelled with its component, Pod Security restricted."""
    from trainyard.manifests.tenants import PSA_LABELS

    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": metadata(name, labels={COMPONENT_LABEL: component, **PSA_LABELS})}


def namespaces(config: PlatformConfig) -> list[Manifest]:
    """The system namespace of every controller that is installed (not external)."""
    return [system_namespace(r.namespace, r.component) for r in releases(config) if not r.external]


def component_version(config: PlatformConfig, component: str) -> str:
    """The stack's version of a catalog component (the MinIO tenant chart follows the operator's release)."""
    return config.versions.minio if component == "minio-tenant" else str(getattr(config.versions, component))


def upstream_image(config: PlatformConfig, component: str) -> ImageRef:
    """The controller image of ``component`` at the stack's version, as upstream publishes it."""
    _, _, image = catalog.release(component, component_version(config, component)).installed()
    return ImageRef(image.registry, image.repository, image.tag)


def mirrored_parts(config: PlatformConfig, image: catalog.Image) -> tuple[str, str, str]:
    """(registry, repository, tag) of an upstream image as the stack pulls it: under the mirror where it has one."""
    ref = mirrored(ImageRef(image.registry, image.repository, image.tag), config.images.registry_mirror)
    return ref.registry, ref.repository, str(ref.tag)


def controller_image(config: PlatformConfig, component: str, lock: ImageLock) -> ImageRef:
    """The controller image the cluster pulls: under the mirror where the stack has one, pinned by the lock."""
    return lock.pin(mirrored(upstream_image(config, component), config.images.registry_mirror))


def pinned_image(config: PlatformConfig, image: catalog.Image, lock: ImageLock) -> ImageRef:
    """Any catalog image as the cluster pulls it: under the mirror where the stack has one, pinned by the lock
    (``<name>:<tag>@<digest>``; by tag alone where the lock has no entry, which ``images verify`` reports)."""
    return lock.pin(mirrored(ImageRef(image.registry, image.repository, image.tag), config.images.registry_mirror))


def _tag(image: ImageRef) -> str:
    # The charts compose "<repository>:<tag>"; a tag of "<tag>@<digest>" gives "<repository>:<tag>@<digest>",
    # which pulls by digest (the tag is kept for readers).
    return image.tag_with_digest


def releases(config: PlatformConfig, lock: ImageLock | None = None) -> list[ChartRelease]:
    pins = lock if lock is not None else ImageLock()
    kueue_config = yaml.safe_dump(kueue.controller_configuration(config), sort_keys=False)
    jobset_image, kueue_image, trainer_image = (controller_image(config, c, pins) for c in ("jobset", "kueue", "trainer"))
    # Tags are pinned explicitly: the Kueue chart's own default is "main" with pullPolicy Always.
    # Ref: the image lines of each chart's manager template: jobset templates/controller/deployment.yaml
    # ("{{ .Values.image.repository }}:{{ .Values.image.tag }}", no registry value), kueue
    # templates/manager/manager.yaml (controllerManager.manager.image.repository:tag), trainer
    # templates/_helpers.tpl "trainer.image" (image.registry/image.repository:image.tag).
    return [
        # The JobSet chart has no image.registry: the repository carries the registry host (Ref above).
        _release(config, "jobset", {
            "image": {"repository": jobset_image.name, "tag": _tag(jobset_image), "pullPolicy": "IfNotPresent"},
        }),
        _release(config, "kueue", {
            "controllerManager": {"manager": {"image": {
                "repository": kueue_image.name, "tag": _tag(kueue_image), "pullPolicy": "IfNotPresent"}}},
            "managerConfig": {"controllerManagerConfigYaml": kueue_config},
        }),
        _release(config, "trainer", {
            "image": {"registry": trainer_image.registry, "repository": trainer_image.repository,
                      "tag": _tag(trainer_image), "pullPolicy": "IfNotPresent"},
            # JobSet is installed on its own above; Trainer must not bundle a second one.
            "jobset": {"install": False},
            # Only the runtimes reviewed in runtimes/ are installed.
            "runtimes": {"defaultEnabled": False},
            "crds": {"enabled": False},
            # With the data cache on: dataCache.enabled and the LWS subchart's image.
            **data_cache.trainer_values(config, pins),
        }),
    ]


TRAINER_PUBLIC = "kubeflow-trainer-public"


def trainer_public(config: PlatformConfig) -> list[Manifest]:
    """The ConfigMap the Kubeflow SDK reads Trainer's version from, and the Role that lets every user read it.

    The Trainer chart renders exactly these three objects in its namespace (Ref: kubeflow-trainer chart 2.3.0
    templates/manager/public-configmap.yaml, templates/rbac/public_configmap_role{,_binding}.yaml; the
    version is ``printf "v%s" .Chart.Version``). The SDK's ``TrainerClient()`` reads
    ``kubeflow_trainer_version`` from it in ``$KUBEFLOW_SYSTEM_NAMESPACE`` (default ``kubeflow-system``) and
    logs a warning when it cannot (Ref: kubeflow sdk 0.5.0 kubeflow/trainer/backends/kubernetes/backend.py,
    ``verify_backend``). Where Trainer is not installed from the chart (the rehearsal runs it as a process),
    whoever installs Trainer applies these instead: one source, and the chart-truth test checks that it
    equals the chart's objects (name, namespace, data, rules, subjects).
    """
    namespace = catalog.release("trainer", config.versions.trainer).namespace
    labels = {COMPONENT_LABEL: "trainer"}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(TRAINER_PUBLIC, namespace=namespace, labels=labels),
         "data": {"kubeflow_trainer_version": f"v{config.versions.trainer}"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": metadata(TRAINER_PUBLIC, namespace=namespace, labels=labels),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [TRAINER_PUBLIC],
                    "verbs": ["get", "list", "watch"]}]},
        # Every authenticated user: it carries a version string and nothing else.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": metadata(TRAINER_PUBLIC, namespace=namespace, labels=labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TRAINER_PUBLIC},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]},
    ]


def build(config: PlatformConfig, lock: ImageLock | None = None) -> Concern:
    """The controllers concern: the system namespaces of installed controllers and their chart releases."""
    return Concern("controllers", objects=tuple(namespaces(config)), releases=tuple(releases(config, lock)))

