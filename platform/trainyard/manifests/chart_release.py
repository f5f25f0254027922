"""A Helm chart release: which chart at which version, into which namespace, with which values.

Plain data that every layer passes around: the builders make them (``manifests/installs.py`` for the
controllers, each concern for its own charts), ``Concern.releases`` carries them, the components
install them, ``charts`` renders them with helm and ``review`` compares them. It depends on nothing
but the catalog, so each of those imports it without importing a builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from trainyard import catalog


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
    # Pulled from the stack's OCI chart mirror (``charts.mirror``): the upstream chart it is a copy of
    # (``<repo>/<chart>`` or the upstream ``oci://`` reference), and how helm reaches the mirror.
    upstream: str | None = None
    plain_http: bool = False
    ca_file: str | None = None

    @property
    def chart_name(self) -> str:
        """The chart's own name (``Chart.yaml`` ``name``), from an OCI reference or a repo chart name."""
        return catalog.chart_name(self.chart)

    @property
    def mirror_dir(self) -> str:
        """Where a chart mirror (../shared/charts) keeps this chart: ``<mirror_dir>/<version>/``."""
        return catalog.chart_mirror_dir(self.chart_name)

    def as_document(self) -> dict[str, Any]:
        """What ``trainyard render`` writes for a chart (it is not a Kubernetes object)."""
        doc: dict[str, Any] = {"chart": self.chart, "version": self.version, "namespace": self.namespace,
                               "release": self.name}
        if self.repo:
            doc["repo"] = self.repo
        if self.upstream:
            doc["upstream"] = self.upstream
        if self.plain_http:
            doc["plainHttp"] = True
        if self.ca_file:
            doc["caFile"] = self.ca_file
        doc["external"] = self.external
        doc["values"] = self.values
        return doc


def upstream_reference(release: ChartRelease) -> str:
    """Where upstream publishes the chart: its ``oci://`` reference, or ``<repository URL>/<chart>``."""
    if release.upstream:
        return release.upstream
    return f"{release.repo.rstrip('/')}/{release.chart}" if release.repo else release.chart


def from_chart_mirror(release: ChartRelease, mirror: str | None, plain_http: bool = False,
                      ca_file: str | None = None) -> ChartRelease:
    """``release`` pulled from the OCI chart mirror ``mirror`` as ``<mirror>/<chart name>`` (no repository);
    unchanged where the stack names no mirror.

    ``<chart name>`` is the chart's own name because ``helm push`` (strict mode, the default) refuses any
    other repository basename: helm pkg/registry/client.go ``Push`` ("ref basename and tag must match the
    chart name and version"), so a mirror filled with ``helm push`` has exactly this layout.
    """
    if mirror is None:
        return release
    return replace(release, chart=f"{mirror}/{release.chart_name}", repo=None, upstream=upstream_reference(release),
                   plain_http=plain_http, ca_file=ca_file)
