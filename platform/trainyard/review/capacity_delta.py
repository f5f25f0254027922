"""Capacity before and after a change: per flavor the physical GPUs, per flavor and resource (whole GPUs,
a MIG profile, time-sliced replicas) the units against the committed quota, per tenant, flavor and
resource the nominal quota, borrowing and lending limits.

Built from the two stack configs with ``capacity.capacity_report`` and ``capacity.resource_report``, so
it reads in the units ``trainyard capacity`` does (and the highlights and the table agree, both taking
``free`` from the same rows), not in the CPU and memory the ClusterQueues also carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.review.capacity import FlavorCapacity, ResourceCapacity, TenantQuota, capacity_report, resource_report
from trainyard.review.values import arrow, limit_arrow, limit_text

GPU = catalog.GPU_RESOURCE


@dataclass(frozen=True)
class QuotaDelta:
    """One tenant's quota of one resource on one flavor; None on the side where it does not exist."""

    flavor: str
    tenant: str
    old: TenantQuota | None
    new: TenantQuota | None
    resource: str = GPU

    @property
    def changed(self) -> bool:
        return self.old != self.new

    @property
    def label(self) -> str:
        """``h100`` for whole GPUs, ``h200-mig nvidia.com/mig-1g.18gb`` for any other resource."""
        return self.flavor if self.resource == GPU else f"{self.flavor} {self.resource}"


@dataclass(frozen=True)
class ResourceDelta:
    """One resource of one flavor before and after; None on the side where the pool does not advertise it."""

    flavor: str
    resource: str
    old: ResourceCapacity | None
    new: ResourceCapacity | None

    def _pair(self, attr: str) -> tuple[int | None, int | None]:
        return (getattr(self.old, attr) if self.old else None, getattr(self.new, attr) if self.new else None)

    @property
    def physical_gpus(self) -> tuple[int | None, int | None]:
        return self._pair("physical_gpus")

    @property
    def units(self) -> tuple[int | None, int | None]:
        return self._pair("units")

    @property
    def committed(self) -> tuple[int | None, int | None]:
        return self._pair("committed")

    @property
    def free(self) -> tuple[int | None, int | None]:
        return self._pair("free")

    @property
    def changed(self) -> bool:
        return any(a != b for a, b in (self.physical_gpus, self.units, self.committed))


@dataclass(frozen=True)
class FlavorDelta:
    flavor: str
    old: FlavorCapacity | None
    new: FlavorCapacity | None
    resources: tuple[ResourceDelta, ...] = ()

    @property
    def physical(self) -> tuple[int | None, int | None]:
        return (self.old.physical if self.old else None, self.new.physical if self.new else None)

    @property
    def committed(self) -> tuple[int | None, int | None]:
        """Whole GPUs promised (a MIG profile's or replicas' quota is in ``resources``)."""
        return (self.old.committed if self.old else None, self.new.committed if self.new else None)

    @property
    def changed(self) -> bool:
        return self.physical[0] != self.physical[1] or any(r.changed for r in self.resources)


@dataclass(frozen=True)
class CapacityDelta:
    flavors: tuple[FlavorDelta, ...]
    quotas: tuple[QuotaDelta, ...]

    @property
    def changed(self) -> bool:
        return any(f.changed for f in self.flavors) or any(q.changed for q in self.quotas)

    @property
    def resources(self) -> tuple[ResourceDelta, ...]:
        return tuple(r for f in self.flavors for r in f.resources)

    def tenants(self, side: str) -> set[str]:
        return {q.tenant for q in self.quotas if (q.old if side == "old" else q.new) is not None}


def capacity_delta(old: PlatformConfig | None, new: PlatformConfig | None) -> CapacityDelta:
    before = {f.flavor: f for f in capacity_report(old)} if old is not None else {}
    after = {f.flavor: f for f in capacity_report(new)} if new is not None else {}
    old_resources = {(r.flavor, r.resource): r for r in resource_report(old)} if old is not None else {}
    new_resources = {(r.flavor, r.resource): r for r in resource_report(new)} if new is not None else {}
    flavors: list[FlavorDelta] = []
    quotas: list[QuotaDelta] = []
    for name in sorted({*before, *after}):
        # Resources in the pool's order (whole GPUs first), those only the base has after them.
        keys = [k for k in new_resources if k[0] == name] + [k for k in old_resources if k[0] == name and
                                                               k not in new_resources]
        resources = tuple(ResourceDelta(name, resource, old_resources.get((name, resource)),
                                        new_resources.get((name, resource))) for _, resource in keys)
        flavors.append(FlavorDelta(name, before.get(name), after.get(name), resources))
        for r in resources:
            old_rows = {t.tenant: t for t in r.old.tenants} if r.old else {}
            new_rows = {t.tenant: t for t in r.new.tenants} if r.new else {}
            quotas += [QuotaDelta(name, tenant, old_rows.get(tenant), new_rows.get(tenant), r.resource)
                       for tenant in sorted({*old_rows, *new_rows})]
    return CapacityDelta(tuple(flavors), tuple(quotas))


def _quota_list(rows: list[QuotaDelta], side: str) -> str:
    parts = []
    for row in rows:
        quota = row.old if side == "old" else row.new
        if quota is not None:
            parts.append(f"{row.label} {quota.nominal}")
    return ", ".join(parts)


def capacity_highlights(delta: CapacityDelta) -> list[str]:
    """Sentences for the top of a review: tenants added or removed, quota moves, flavor totals."""
    lines: list[str] = []
    old_tenants, new_tenants = delta.tenants("old"), delta.tenants("new")
    by_tenant: dict[str, list[QuotaDelta]] = {}
    for row in delta.quotas:
        by_tenant.setdefault(row.tenant, []).append(row)
    for tenant in sorted(by_tenant):
        rows = by_tenant[tenant]
        if tenant not in old_tenants:
            lines.append(f"tenant `{tenant}` added with nominal GPU quota {_quota_list(rows, 'new')}")
            continue
        if tenant not in new_tenants:
            lines.append(f"tenant `{tenant}` removed (nominal GPU quota was {_quota_list(rows, 'old')})")
            continue
        lines += _tenant_lines(tenant, rows)
    for flavor in delta.flavors:
        lines += _flavor_lines(flavor)
    return lines


def _tenant_lines(tenant: str, rows: list[QuotaDelta]) -> list[str]:
    lines: list[str] = []
    cohorts = {(r.old.cohort, r.new.cohort) for r in rows if r.old and r.new and r.old.cohort != r.new.cohort}
    for old_cohort, new_cohort in sorted(cohorts, key=str):
        lines.append(f"`{tenant}` cohort {old_cohort or '(none)'} -> {new_cohort or '(none)'}")
    for row in rows:
        old, new = row.old, row.new
        if new is None and old is not None:
            lines.append(f"`{tenant}` {row.label} quota removed (nominal was {old.nominal})")
        elif old is None and new is not None:
            lines.append(f"`{tenant}` {row.label} quota added: nominal {new.nominal}, borrowing limit "
                         f"{limit_text(new.borrowing_limit)}, lending limit {limit_text(new.lending_limit)}")
        elif old is not None and new is not None:
            if old.nominal != new.nominal:
                lines.append(f"`{tenant}` {row.label} nominal quota {arrow(old.nominal, new.nominal)}")
            if old.borrowing_limit != new.borrowing_limit:
                lines.append(f"`{tenant}` {row.label} borrowing limit "
                             f"{limit_arrow(old.borrowing_limit, new.borrowing_limit)}")
            if old.lending_limit != new.lending_limit:
                lines.append(f"`{tenant}` {row.label} lending limit {limit_arrow(old.lending_limit, new.lending_limit)}")
    return lines


def _free_text(free: int) -> str:
    return f"free {free}" if free >= 0 else f"**overcommitted by {-free}**"


def _flavor_lines(flavor: FlavorDelta) -> list[str]:
    if flavor.new is None and flavor.old is not None:
        return [f"flavor `{flavor.flavor}` removed (had {flavor.old.physical} GPUs)"]
    if flavor.new is None or not flavor.changed:
        return []
    new = flavor.new
    whole = next((r for r in flavor.resources if r.resource == GPU and r.new is not None), None)
    shared = [r for r in flavor.resources if r.resource != GPU and r.new is not None and (flavor.old is None or r.changed)]
    old_physical, physical = flavor.physical
    if flavor.old is None:
        line = f"flavor `{flavor.flavor}` added: {physical} GPUs ({new.nodes} x {new.gpus_per_node}" + \
               (f", {new.sharing})" if new.sharing != "whole" else ")")
        if whole is not None and whole.new is not None:
            line += (f", committed {whole.new.committed}" if whole.new.units == physical else
                     f", {whole.new.units} whole committed {whole.new.committed}") + f", {_free_text(whole.new.free)}"
    elif old_physical == physical and (whole is None or not whole.changed):
        line = ""  # only a shared resource moved: its own line says so
    else:
        line = f"flavor `{flavor.flavor}`: {arrow(old_physical, physical)} GPUs"
        if whole is not None and whole.new is not None:
            old_units, units = whole.units
            if units != physical or old_units != old_physical:
                line += f", whole {arrow(old_units, units) if old_units is not None else units}"
            old_committed, committed = whole.committed
            line += f", committed {arrow(old_committed, committed) if old_committed is not None else committed}"
            line += f", {_free_text(whole.new.free)}"
    lines = [line] if line else []
    for r in shared:
        assert r.new is not None
        (old_gpus, gpus), (old_units, units), (old_committed, committed) = r.physical_gpus, r.units, r.committed
        if r.old is None:
            lines.append(f"flavor `{flavor.flavor}` {r.resource}: {units} on {gpus} GPUs, committed {committed}, "
                         f"{_free_text(r.new.free)}")
        else:
            lines.append(f"flavor `{flavor.flavor}` {r.resource}: {arrow(old_units, units)} on {arrow(old_gpus, gpus)} "
                         f"GPUs, committed {arrow(old_committed, committed)}, {_free_text(r.new.free)}")
    return lines
