"""GPU capacity per flavor: what physically exists against what tenants were promised.

Nominal quotas are guarantees; borrowing limits say how far a tenant can grow into idle
capacity of its cohort; lending limits say how much of its guarantee others may use.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.config.model import PlatformConfig


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

    @property
    def physical(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def committed(self) -> int:
        return sum(t.nominal for t in self.tenants)

    @property
    def free(self) -> int:
        return self.physical - self.committed


def capacity_report(config: PlatformConfig) -> list[FlavorCapacity]:
    out = []
    for pool in config.gpu_pools:
        rows = tuple(
            TenantQuota(t.name, t.cohort, q.gpus, q.borrowing_limit, q.lending_limit)
            for t in config.tenants for q in t.quotas if q.flavor == pool.name
        )
        out.append(FlavorCapacity(pool.name, pool.gpu_product, pool.nodes, pool.gpus_per_node, rows))
    return out


def _limit(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def format_capacity(config: PlatformConfig) -> str:
    lines = [f"# GPU capacity: {config.environment} ({config.cluster.name})", ""]
    lines.append("| flavor | GPU | nodes x GPUs | physical | committed (nominal) | free | use |")
    lines.append("|---|---|---|---:|---:|---:|---:|")
    report = capacity_report(config)
    for f in report:
        use = f"{100 * f.committed / f.physical:.0f}%" if f.physical else "-"
        lines.append(f"| {f.flavor} | {f.gpu_product} | {f.nodes} x {f.gpus_per_node} | {f.physical} | "
                     f"{f.committed} | {f.free} | {use} |")
    lines.append("")
    lines.append("| flavor | tenant | cohort | nominal | borrowing limit | lending limit | ceiling |")
    lines.append("|---|---|---|---:|---:|---:|---:|")
    for f in report:
        for t in f.tenants:
            ceiling = t.ceiling if t.ceiling is not None else f"{f.physical} (pool)"
            lines.append(f"| {f.flavor} | {t.tenant} | {t.cohort or '-'} | {t.nominal} | "
                         f"{_limit(t.borrowing_limit) if t.cohort else 'no cohort'} | "
                         f"{_limit(t.lending_limit)} | {ceiling} |")
    return "\n".join(lines) + "\n"
