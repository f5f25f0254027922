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
        for r in build(config) if not r.external
    ]


def build(config: PlatformConfig) -> list[ChartRelease]:
    kueue_config = yaml.safe_dump(kueue.controller_configuration(config), sort_keys=False)
    return [
        _release(config, "jobset", {}),
        _release(config, "kueue", {"managerConfig": {"controllerManagerConfigYaml": kueue_config}}),
        _release(config, "trainer", {
            # JobSet is installed on its own above; Trainer must not bundle a second one.
            "jobset": {"install": False},
            # Only the runtimes reviewed in runtimes/ are installed.
            "runtimes": {"defaultEnabled": False},
            "crds": {"enabled": False},
        }),
    ]
