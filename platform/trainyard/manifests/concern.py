"""What one concern's builder hands on: its objects, chart releases and per-tenant objects.

Every concern (controllers, queueing, runtimes, admission, network, tenants, and each data
plane or serving piece added later) has one builder module in ``trainyard.manifests`` whose
``build(config, ...)`` returns one ``Concern``. ``render_platform`` collects them in apply
order, and the Pulumi components receive each concern's objects as built: nothing
downstream re-derives which concern an object belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.generated import GeneratedValue
from trainyard.manifests.meta import Manifest


@dataclass(frozen=True)
class Concern:
    """One concern's share of the platform.

    ``objects`` are platform-level: cluster-scoped, or inside the concern's own system
    namespaces (a Namespace object among them is applied before what it holds).
    ``tenant_objects`` maps a tenant name to the objects this concern puts into that
    tenant's namespace; the tenant's component declares them after the namespace.
    ``after_releases`` are platform-level objects that need the concern's charts running first (a Job
    that talks to the server a chart installs); they are declared after the releases.
    ``generated`` describes the deploy-time values its objects reference as ``${generated:<name>}``
    (length, alphabet); a referenced name not listed gets the default (a 40-character password).
    """

    name: str
    objects: tuple[Manifest, ...] = ()
    releases: tuple[ChartRelease, ...] = ()
    tenant_objects: Mapping[str, tuple[Manifest, ...]] = field(default_factory=dict)
    after_releases: tuple[Manifest, ...] = ()
    generated: tuple[GeneratedValue, ...] = ()

    @property
    def all_objects(self) -> tuple[Manifest, ...]:
        out = [*self.objects, *self.after_releases]
        for objects in self.tenant_objects.values():
            out += objects
        return tuple(out)


def per_tenant(pairs: list[tuple[str, Manifest]]) -> dict[str, tuple[Manifest, ...]]:
    """Group (tenant, object) pairs by tenant, keeping order."""
    grouped: dict[str, list[Manifest]] = {}
    for tenant, obj in pairs:
        grouped.setdefault(tenant, []).append(obj)
    return {tenant: tuple(objects) for tenant, objects in grouped.items()}
