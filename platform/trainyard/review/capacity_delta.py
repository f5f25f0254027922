"""Capacity before and after a change: per flavor physical GPUs against committed quota,
per tenant and flavor the nominal quota, borrowing and lending limits.

Built from the two stack configs with ``capacity.capacity_report``, so it reads in GPUs
the way ``trainyard capacity`` does, not in the CPU and memory the ClusterQueues also carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.config.model import PlatformConfig
from trainyard.review.capacity import FlavorCapacity, TenantQuota, capacity_report
from trainyard.review.values import arrow, limit_arrow, limit_text


@dataclass(frozen=True)
class QuotaDelta:
    """One tenant's quota on one flavor; None on the side where it does not exist."""

    flavor: str
    tenant: str
    old: TenantQuota | None
    new: TenantQuota | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class FlavorDelta:
    flavor: str
    old: FlavorCapacity | None
    new: FlavorCapacity | None

    @property
    def physical(self) -> tuple[int | None, int | None]:
        return (self.old.physical if self.old else None, self.new.physical if self.new else None)

    @property
    def committed(self) -> tuple[int | None, int | None]:
        return (self.old.committed if self.old else None, self.new.committed if self.new else None)

    @property
    def changed(self) -> bool:
        return self.physical[0] != self.physical[1] or self.committed[0] != self.committed[1]


@dataclass(frozen=True)
class CapacityDelta:
    flavors: tuple[FlavorDelta, ...]
    quotas: tuple[QuotaDelta, ...]

    @property
    def changed(self) -> bool:
        return any(f.changed for f in self.flavors) or any(q.changed for q in self.quotas)

    def tenants(self, side: str) -> set[str]:
        return {q.tenant for q in self.quotas if (q.old if side == "old" else q.new) is not None}


def capacity_delta(old: PlatformConfig | None, new: PlatformConfig | None) -> CapacityDelta:
    before = {f.flavor: f for f in capacity_report(old)} if old is not None else {}
    after = {f.flavor: f for f in capacity_report(new)} if new is not None else {}
    flavors = tuple(FlavorDelta(name, before.get(name), after.get(name)) for name in sorted({*before, *after}))
    quotas: list[QuotaDelta] = []
    for flavor in flavors:
        old_rows = {t.tenant: t for t in flavor.old.tenants} if flavor.old else {}
        new_rows = {t.tenant: t for t in flavor.new.tenants} if flavor.new else {}
        quotas += [QuotaDelta(flavor.flavor, tenant, old_rows.get(tenant), new_rows.get(tenant))
                   for tenant in sorted({*old_rows, *new_rows})]
    return CapacityDelta(flavors, tuple(quotas))


def _gpus(rows: list[QuotaDelta], side: str) -> str:
    parts = []
    for row in rows:
        quota = row.old if side == "old" else row.new
        if quota is not None:
            parts.append(f"{row.flavor} {quota.nominal}")
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
            lines.append(f"tenant `{tenant}` added with nominal GPU quota {_gpus(rows, 'new')}")
            continue
        if tenant not in new_tenants:
            lines.append(f"tenant `{tenant}` removed (nominal GPU quota was {_gpus(rows, 'old')})")
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
            lines.append(f"`{tenant}` {row.flavor} quota removed (nominal was {old.nominal})")
        elif old is None and new is not None:
            lines.append(f"`{tenant}` {row.flavor} quota added: nominal {new.nominal}, borrowing limit "
                         f"{limit_text(new.borrowing_limit)}, lending limit {limit_text(new.lending_limit)}")
        elif old is not None and new is not None:
            if old.nominal != new.nominal:
                lines.append(f"`{tenant}` {row.flavor} nominal quota {arrow(old.nominal, new.nominal)}")
            if old.borrowing_limit != new.borrowing_limit:
                lines.append(f"`{tenant}` {row.flavor} borrowing limit "
                             f"{limit_arrow(old.borrowing_limit, new.borrowing_limit)}")
            if old.lending_limit != new.lending_limit:
                lines.append(f"`{tenant}` {row.flavor} lending limit {limit_arrow(old.lending_limit, new.lending_limit)}")
    return lines


def _flavor_lines(flavor: FlavorDelta) -> list[str]:
    if flavor.new is None and flavor.old is not None:
        return [f"flavor `{flavor.flavor}` removed (had {flavor.old.physical} GPUs)"]
    if flavor.new is None or not flavor.changed:
        return []
    (old_physical, physical), (old_committed, committed) = flavor.physical, flavor.committed
    if flavor.old is None:
        line = f"flavor `{flavor.flavor}` added: {physical} GPUs ({flavor.new.nodes} x {flavor.new.gpus_per_node}), " \
               f"committed {committed}"
    else:
        line = f"flavor `{flavor.flavor}`: {arrow(old_physical, physical)} GPUs, committed " \
               f"{arrow(old_committed, committed)}"
    free = flavor.new.free
    line += f", free {free}" if free >= 0 else f", **overcommitted by {-free}**"
    return [line]
