"""GPU capacity per flavor: what physically exists against what tenants were promised.

Nominal quotas are guarantees; borrowing limits say how far a tenant can grow into idle
capacity of its cohort; lending limits say how much of its guarantee others may use.
Pools that share GPUs (MIG, time-slicing) are counted a second time in the units their device
plugin advertises (slices, replicas), next to the whole GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from trainyard import catalog
from trainyard.config.gpu_operator import COMPUTE_SLICES
from trainyard.config.gpu_pools import advertised_resources, gpu_equivalent, mig_gpus, sharing_of
from trainyard.config.model import PlatformConfig
from trainyard.manifests.kueue import MIG_SLICES


@dataclass(frozen=True)
class TenantQuota:
    tenant: str
    cohort: str | None
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None

    @property
    def ceiling(self) -> int | None:
        """Most GPUs this tenant can hold on the flavor; None when borrowing is unlimited."""
        if self.cohort is None:
            return self.nominal
        return None if self.borrowing_limit is None else self.nominal + self.borrowing_limit


@dataclass(frozen=True)
class FlavorCapacity:
    flavor: str
    gpu_product: str
    nodes: int
    gpus_per_node: int
    tenants: tuple[TenantQuota, ...]
    whole: int | None = None
    sharing: str = "whole"

    @property
    def physical(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def allocatable(self) -> int:
        """Whole GPUs the device plugin advertises (fewer than physical where GPUs are MIG-partitioned)."""
        return self.physical if self.whole is None else self.whole

    @property
    def committed(self) -> int:
        return committed(self.tenants)

    @property
    def free(self) -> int:
        return self.allocatable - self.committed


def committed(tenants: tuple[TenantQuota, ...]) -> int:
    """What the tenants were promised: the sum of their nominal quotas."""
    return sum(t.nominal for t in tenants)


@dataclass(frozen=True)
class SharedCapacity:
    """One shared-GPU resource of a pool: the units it advertises against the tenants' quotas of it."""

    flavor: str
    sharing: str
    resource: str
    physical_gpus: int
    units: int
    gpu_per_unit: Fraction
    tenants: tuple[TenantQuota, ...]

    @property
    def free(self) -> int:
        return self.units - committed(self.tenants)


def capacity_report(config: PlatformConfig) -> list[FlavorCapacity]:
    out = []
    for pool in config.gpu_pools:
        rows = tuple(
            TenantQuota(t.name, t.cohort, q.gpus, q.borrowing_limit, q.lending_limit)
            for t in config.tenants for q in t.quotas if q.flavor == pool.name
        )
        out.append(FlavorCapacity(pool.name, pool.gpu_product, pool.nodes, pool.gpus_per_node, rows,
                                   whole=advertised_resources(pool).get(catalog.GPU_RESOURCE, 0), sharing=sharing_of(pool)))
    return out


def shared_capacity_report(config: PlatformConfig) -> list[SharedCapacity]:
    """Every resource of every sharing pool (including its remaining whole GPUs), with the tenants' quotas."""
    out = []
    for pool in config.gpu_pools:
        if pool.mig is None and pool.time_slicing is None:
            continue
        for resource, units in advertised_resources(pool).items():
            rows = []
            for tenant in config.tenants:
                for quota in (q for q in tenant.quotas if q.flavor == pool.name):
                    if resource == catalog.GPU_RESOURCE:
                        rows.append(TenantQuota(tenant.name, tenant.cohort, quota.gpus, quota.borrowing_limit,
                                                quota.lending_limit))
                    rows += [TenantQuota(tenant.name, tenant.cohort, q.nominal, q.borrowing_limit, q.lending_limit)
                             for q in quota.shared if q.resource == resource]
            out.append(SharedCapacity(pool.name, sharing_of(pool), resource, pool.gpus, units,
                                      gpu_equivalent(pool, resource), tuple(rows)))
    return out


def _limit(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def format_capacity(config: PlatformConfig) -> str:
    lines = [f"# GPU capacity: {config.environment} ({config.cluster.name})", ""]
    lines.append("| flavor | GPU | nodes x GPUs | physical | committed (nominal) | free | use | sharing |")
    lines.append("|---|---|---|---:|---:|---:|---:|---|")
    report = capacity_report(config)
    for f in report:
        use = f"{100 * f.committed / f.allocatable:.0f}%" if f.allocatable else "-"
        whole = "" if f.allocatable == f.physical else f" ({f.allocatable} whole)"
        lines.append(f"| {f.flavor} | {f.gpu_product} | {f.nodes} x {f.gpus_per_node} | {f.physical}{whole} | "
                     f"{f.committed} | {f.free} | {use} | {f.sharing} |")
    lines.append("")
    lines.append("| flavor | tenant | cohort | nominal | borrowing limit | lending limit | ceiling |")
    lines.append("|---|---|---|---:|---:|---:|---:|")
    for f in report:
        for t in f.tenants:
            lines.append(f"| {f.flavor} | {t.tenant} | {_quota_cells(t, f.allocatable)}")
    lines += _format_shared(shared_capacity_report(config))
    lines += _format_slice_budget(config)
    return "\n".join(lines) + "\n"


def _format_slice_budget(config: PlatformConfig) -> list[str]:
    """The MIG slice budget (kueue.mig_slice_budget): compute slices of the MIG GPUs against the tenants' budgets."""
    if not config.kueue.mig_slice_budget:
        return []
    total = COMPUTE_SLICES * sum(mig_gpus(pool) for pool in config.gpu_pools)
    budgets = [(t.name, t.mig_slices) for t in config.tenants if t.mig_slices is not None]
    promised = sum(n for _, n in budgets)
    lines = ["", f"## MIG slice budget ({MIG_SLICES}): {promised} of {total} compute slices committed "
             f"({total // COMPUTE_SLICES} MIG GPUs x {COMPUTE_SLICES})", "", "| tenant | slices |", "|---|---:|"]
    lines += [f"| {name} | {n} |" for name, n in budgets]
    return lines


def _format_shared(report: list[SharedCapacity]) -> list[str]:
    if not report:
        return []
    lines = ["", "## Shared GPUs: MIG slices and time-sliced replicas, in the units tenants request", "",
             "| flavor | sharing | resource | physical GPUs | units | GPU per unit | committed | free | use |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in report:
        promised = committed(r.tenants)
        use = f"{100 * promised / r.units:.0f}%" if r.units else "-"
        lines.append(f"| {r.flavor} | {r.sharing} | {r.resource} | {r.physical_gpus} | {r.units} | {r.gpu_per_unit} | "
                     f"{promised} | {r.free} | {use} |")
    lines += ["", "| flavor | resource | tenant | cohort | nominal | borrowing limit | lending limit | ceiling |",
              "|---|---|---|---|---:|---:|---:|---:|"]
    for r in report:
        for t in r.tenants:
            lines.append(f"| {r.flavor} | {r.resource} | {t.tenant} | {_quota_cells(t, r.units)}")
    return lines


def _quota_cells(t: TenantQuota, pool: int) -> str:
    """The cohort, nominal, limits and ceiling cells of one tenant's row; an unlimited ceiling is the pool's."""
    ceiling = t.ceiling if t.ceiling is not None else f"{pool} (pool)"
    return (f"{t.cohort or '-'} | {t.nominal} | {_limit(t.borrowing_limit) if t.cohort else 'no cohort'} | "
            f"{_limit(t.lending_limit)} | {ceiling} |")
