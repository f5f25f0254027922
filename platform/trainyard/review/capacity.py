"""GPU capacity per flavor: what physically exists against what tenants were promised.

Nominal quotas are guarantees; borrowing limits say how far a tenant can grow into idle
capacity of its cohort; lending limits say how much of its guarantee others may use.
Pools that share GPUs (MIG, time-slicing) are counted a second time in the units their device
plugin advertises (slices, replicas), next to the whole GPUs: per resource, the physical GPUs it
lives on, its units, and the tenants' quotas of it (``resource_report``, which ``trainyard diff``
reads too, so the review and this report give the same figures). CPU pools (no GPUs) get their own
table: their CPU and memory against the tenants' quotas of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainyard import catalog
from trainyard.config.gpu_operator import COMPUTE_SLICES
from trainyard.config.gpu_pools import advertised_resources, gpu_equivalent, gpus_carrying, mig_gpus, sharing_of
from trainyard.config.model import PlatformConfig
from trainyard.manifests.kueue import MIG_SLICES
from trainyard.quantity import format_quantity, parse_quantity


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
class ResourceCapacity:
    """One resource of a pool (whole GPUs, a MIG profile, time-sliced replicas): its units against the tenants' quotas."""

    flavor: str
    sharing: str
    resource: str
    physical_gpus: int  # the GPUs it lives on (a MIG profile: the GPUs partitioned with it), not the whole pool
    units: int
    gpu_per_unit: Fraction
    tenants: tuple[TenantQuota, ...]

    @property
    def committed(self) -> int:
        return committed(self.tenants)

    @property
    def free(self) -> int:
        return self.units - self.committed


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


def resource_report(config: PlatformConfig) -> list[ResourceCapacity]:
    """Every resource of every pool, with the tenants' quotas of it. Whole GPUs are a row where the pool advertises
    them or a tenant was promised some; on a fully partitioned pool the tenants' ``gpus: 0`` is no resource."""
    out = []
    for pool in config.gpu_pools:
        advertised, carrying = advertised_resources(pool), gpus_carrying(pool)
        quotas = [(tenant, q) for tenant in config.tenants for q in tenant.quotas if q.flavor == pool.name]
        names = list(advertised)
        if catalog.GPU_RESOURCE not in advertised and any(q.gpus for _, q in quotas):
            names.insert(0, catalog.GPU_RESOURCE)
        names += sorted({s.resource for _, q in quotas for s in q.shared} - set(names))
        for resource in names:
            rows = []
            for tenant, quota in quotas:
                if resource == catalog.GPU_RESOURCE:
                    rows.append(TenantQuota(tenant.name, tenant.cohort, quota.gpus, quota.borrowing_limit,
                                            quota.lending_limit))
                rows += [TenantQuota(tenant.name, tenant.cohort, s.nominal, s.borrowing_limit, s.lending_limit)
                         for s in quota.shared if s.resource == resource]
            out.append(ResourceCapacity(pool.name, sharing_of(pool), resource, carrying.get(resource, 0),
                                        advertised.get(resource, 0), gpu_equivalent(pool, resource), tuple(rows)))
    return out


@dataclass(frozen=True)
class CpuQuota:
    tenant: str
    cohort: str | None
    cpu: Fraction
    memory: Fraction


@dataclass(frozen=True)
class CpuCapacity:
    """A CPU pool (no GPUs): its CPU and memory against the tenants' nominal quotas of them."""

    flavor: str
    nodes: int
    cpu_per_node: Fraction
    memory_per_node: Fraction
    tenants: tuple[CpuQuota, ...]

    @property
    def cpu(self) -> Fraction:
        return self.nodes * self.cpu_per_node

    @property
    def memory(self) -> Fraction:
        return self.nodes * self.memory_per_node

    @property
    def committed_cpu(self) -> Fraction:
        return sum((t.cpu for t in self.tenants), Fraction(0))

    @property
    def committed_memory(self) -> Fraction:
        return sum((t.memory for t in self.tenants), Fraction(0))


def cpu_capacity_report(config: PlatformConfig) -> list[CpuCapacity]:
    """Every CPU pool with the tenants' quotas on it (config/checks.py requires their cpu and memory)."""
    return [CpuCapacity(pool.name, pool.nodes, parse_quantity(pool.cpu_per_node), parse_quantity(pool.memory_per_node),
                        tuple(CpuQuota(t.name, t.cohort, parse_quantity(q.cpu or 0), parse_quantity(q.memory or 0))
                              for t in config.tenants for q in t.quotas if q.flavor == pool.name))
            for pool in config.cpu_pools]


def shared_capacity_report(config: PlatformConfig) -> list[ResourceCapacity]:
    """Every resource of every sharing pool (including its remaining whole GPUs), with the tenants' quotas."""
    return [r for r in resource_report(config) if r.sharing != "whole"]


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
    lines += _format_cpu(cpu_capacity_report(config))
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


def _format_cpu(report: list[CpuCapacity]) -> list[str]:
    if not report:
        return []
    def cpu(value: Fraction) -> str:
        return format_quantity(value, binary=False)

    def memory(value: Fraction) -> str:
        return format_quantity(value, binary=True)

    lines = ["", "## CPU pools: CPU and memory for CPU-only jobs", "",
             "| flavor | nodes x CPU, memory | CPU | memory | committed CPU | committed memory |",
             "|---|---|---:|---:|---:|---:|"]
    for f in report:
        lines.append(f"| {f.flavor} | {f.nodes} x {cpu(f.cpu_per_node)}, {memory(f.memory_per_node)} | {cpu(f.cpu)} | "
                     f"{memory(f.memory)} | {cpu(f.committed_cpu)} | {memory(f.committed_memory)} |")
    lines += ["", "| flavor | tenant | cohort | CPU | memory |", "|---|---|---|---:|---:|"]
    for f in report:
        lines += [f"| {f.flavor} | {t.tenant} | {t.cohort or '-'} | {cpu(t.cpu)} | {memory(t.memory)} |" for t in f.tenants]
    return lines


def _format_shared(report: list[ResourceCapacity]) -> list[str]:
    if not report:
        return []
    lines = ["", "## Shared GPUs: MIG slices and time-sliced replicas, in the units tenants request", "",
             "| flavor | sharing | resource | on physical GPUs | units | GPU per unit | committed | free | use |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in report:
        use = f"{100 * r.committed / r.units:.0f}%" if r.units else "-"
        lines.append(f"| {r.flavor} | {r.sharing} | {r.resource} | {r.physical_gpus} | {r.units} | {r.gpu_per_unit} | "
                     f"{r.committed} | {r.free} | {use} |")
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


def _tenant_json(t: TenantQuota) -> dict[str, Any]:
    return {"tenant": t.tenant, "cohort": t.cohort, "nominal": t.nominal, "borrowing_limit": t.borrowing_limit,
            "lending_limit": t.lending_limit, "ceiling": t.ceiling}


def capacity_json(stack: str, config: PlatformConfig) -> dict[str, Any]:
    """``trainyard capacity --format json`` (``trainyard.capacity/v1``, docs/review.md): the same rows as the tables.

    A limit or ceiling of ``null`` is unlimited; ``gpu_per_unit`` is a fraction as text (``"1/7"``).
    """
    budget = None
    if config.kueue.mig_slice_budget:
        budget = {"resource": MIG_SLICES, "total": COMPUTE_SLICES * sum(mig_gpus(pool) for pool in config.gpu_pools),
                  "tenants": {t.name: t.mig_slices for t in config.tenants if t.mig_slices is not None}}
    return {
        "schema": "trainyard.capacity/v1",
        "stack": stack,
        "environment": config.environment,
        "cluster": config.cluster.name,
        "flavors": [{"flavor": f.flavor, "gpu_product": f.gpu_product, "nodes": f.nodes, "gpus_per_node": f.gpus_per_node,
                     "physical": f.physical, "whole": f.allocatable, "committed": f.committed, "free": f.free,
                     "sharing": f.sharing, "tenants": [_tenant_json(t) for t in f.tenants]}
                    for f in capacity_report(config)],
        "resources": [{"flavor": r.flavor, "sharing": r.sharing, "resource": r.resource, "physical_gpus": r.physical_gpus,
                       "units": r.units, "gpu_per_unit": str(r.gpu_per_unit), "committed": r.committed, "free": r.free,
                       "tenants": [_tenant_json(t) for t in r.tenants]}
                      for r in resource_report(config)],
        "mig_slice_budget": budget,
        "cpu_flavors": [{"flavor": f.flavor, "nodes": f.nodes, "cpu_per_node": format_quantity(f.cpu_per_node, binary=False),
                         "memory_per_node": format_quantity(f.memory_per_node, binary=True),
                         "committed_cpu": format_quantity(f.committed_cpu, binary=False),
                         "committed_memory": format_quantity(f.committed_memory, binary=True),
                         "tenants": [{"tenant": t.tenant, "cohort": t.cohort, "cpu": format_quantity(t.cpu, binary=False),
                                      "memory": format_quantity(t.memory, binary=True)} for t in f.tenants]}
                        for f in cpu_capacity_report(config)],
    }
