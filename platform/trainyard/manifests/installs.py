"""Helm chart releases of the upstream controllers, with Trainyard's values.

CRDs never come from a chart: Trainyard declares them itself (verified, protected,
applied first), so every chart is installed with its CRDs off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import kueue
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import Manifest, metadata


@dataclass(frozen=True)
class ChartRelease:
    """One Helm release: which chart at which version, into which namespace, with which values."""

    name: str
    component: str
    chart: str
    version: str
    namespace: str
    repo: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    external: bool = False
    # Secrets the chart fills with values it generates while rendering (randAlphaNum, genPrivateKey):
    # every render differs, so Pulumi keeps the first ones (ignoreChanges on their data).
    regenerated_secrets: tuple[str, ...] = ()

    def as_document(self) -> dict[str, Any]:
        """What ``trainyard render`` writes for a chart (it is not a Kubernetes object)."""
        doc: dict[str, Any] = {"chart": self.chart, "version": self.version, "namespace": self.namespace,
                               "release": self.name}
        if self.repo:
            doc["repo"] = self.repo
        doc["external"] = self.external
        doc["values"] = self.values
        return doc


def _release(config: PlatformConfig, component: str, values: dict[str, Any]) -> ChartRelease:
    pinned = catalog.release(component, getattr(config.versions, component))
    return ChartRelease(
        name=component,
        component=component,
        chart=pinned.chart.chart,
        repo=pinned.chart.repo,
        version=pinned.version,
        namespace=pinned.namespace,
        values=values,
        external=component in config.rehearsal.external_controllers,
    )


COMPONENT_LABEL = "trainyard.dev/component"


def namespaces(config: PlatformConfig) -> list[Manifest]:
    """The system namespace of every controller that is installed (not external)."""
    from trainyard.manifests.tenants import PSA_LABELS

    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": metadata(r.namespace, labels={COMPONENT_LABEL: r.component, **PSA_LABELS})}
        for r in releases(config) if not r.external
    ]


def controller_image(config: PlatformConfig, component: str) -> tuple[str, str, str]:
    """(registry, repository, tag) of a controller: upstream, or the same repository under the mirror."""
    return mirrored(config, catalog.release(component, getattr(config.versions, component)).image)


def mirrored(config: PlatformConfig, image: catalog.Image) -> tuple[str, str, str]:
    """(registry, repository, tag) of an upstream image as the stack pulls it: as is, or under its mirror."""
    mirror = config.images.registry_mirror
    if mirror is None:
        return image.registry, image.repository, image.tag
    host, _, path = mirror.rstrip("/").partition("/")
    return host, f"{path}/{image.repository}" if path else image.repository, image.tag


def releases(config: PlatformConfig) -> list[ChartRelease]:
    kueue_config = yaml.safe_dump(kueue.controller_configuration(config), sort_keys=False)
    jobset_registry, jobset_repository, jobset_tag = controller_image(config, "jobset")
    kueue_registry, kueue_repository, kueue_tag = controller_image(config, "kueue")
    trainer_registry, trainer_repository, trainer_tag = controller_image(config, "trainer")
    # Tags are pinned explicitly: the Kueue chart's own default is "main" with pullPolicy Always.
    # Ref: values.yaml of each chart (jobset image.*, kueue controllerManager.manager.image.*, trainer image.*).
    return [
        _release(config, "jobset", {
            "image": {"registry": jobset_registry, "repository": jobset_repository, "tag": jobset_tag,
                      "pullPolicy": "IfNotPresent"},
        }),
        _release(config, "kueue", {
            "controllerManager": {"manager": {"image": {
                "repository": f"{kueue_registry}/{kueue_repository}", "tag": kueue_tag, "pullPolicy": "IfNotPresent"}}},
            "managerConfig": {"controllerManagerConfigYaml": kueue_config},
        }),
        _release(config, "trainer", {
            "image": {"registry": trainer_registry, "repository": trainer_repository, "tag": trainer_tag,
                      "pullPolicy": "IfNotPresent"},
            # JobSet is installed on its own above; Trainer must not bundle a second one.
            "jobset": {"install": False},
            # Only the runtimes reviewed in runtimes/ are installed.
            "runtimes": {"defaultEnabled": False},
            "crds": {"enabled": False},
        }),
    ]


def build(config: PlatformConfig) -> Concern:
    """The controllers concern: the system namespaces of installed controllers and their chart releases."""
    return Concern("controllers", objects=tuple(namespaces(config)), releases=tuple(releases(config)))
