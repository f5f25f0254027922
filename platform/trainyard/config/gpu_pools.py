"""A GPU pool, and what its GPU stack makes it advertise to Kueue.

A GPU pool is a node pool (``config/node_pools.py``: one Kueue ResourceFlavor) with GPUs. This module also computes what
a pool *advertises* (``advertised_resources``): the extended resources the device plugin registers
on its nodes with the pool's MIG or time-slicing settings (``config/gpu_operator.py``), in the units
tenants request. It is pure config: the builders in ``manifests/gpu_operator.py`` and
``manifests/kueue.py``, the validation and the capacity report read it, so they never disagree.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from pydantic import Field, model_validator

from trainyard.config.base import INT32_MAX, LabelValue
from trainyard.config.gpu_operator import (
    COMPUTE_SLICES,
    GPU,
    MEMORY_SLICES,
    MIG_PREFIX,
    MIG_PROFILES,
    SHARED_GPU,
    Mig,
    TimeSlicing,
    compute_slices,
    mig_family,
)
from trainyard.config.node_pools import NodePool
from trainyard.quantity import parse_quantity


class GpuPool(NodePool):
    """A set of identical GPU nodes. Each pool becomes one Kueue ResourceFlavor."""

    gpu_product: LabelValue = Field(min_length=1, description="GPU product, as the GPU feature discovery label reports it.")
    gpus_per_node: int = Field(gt=0, le=INT32_MAX, description="Allocatable nvidia.com/gpu per node.")
    driver: Literal["operator", "preinstalled"] = Field(
        default="operator",
        description="operator: the GPU operator installs the driver (one NVIDIADriver per pool); preinstalled: the "
        "host image carries it and the nodes are labelled nvidia.com/gpu.deploy.driver=false.")
    driver_version: str | None = Field(
        default=None, description="Driver version for this pool; unset = gpu_operator.driver_version.")
    mig: Mig | None = Field(default=None, description="MIG strategy and layout; unset = MIG off (whole GPUs).")
    time_slicing: TimeSlicing | None = Field(default=None, description="Time-slicing replicas; unset = no sharing.")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @model_validator(mode="after")
    def _gpu_settings(self) -> GpuPool:
        if self.driver == "preinstalled" and self.driver_version is not None:
            raise ValueError("driver_version only applies to driver: operator")
        validate_pool_sharing(self)
        return self


def gpu_share(pool: GpuPool, gpus: int | Fraction, per_node: int | str) -> Fraction:
    """The part of a per-node resource that ``gpus`` GPUs of ``pool`` stand for."""
    return parse_quantity(per_node) * gpus / pool.gpus_per_node


def mig_config_name(pool: GpuPool) -> str:
    return f"trainyard-{pool.name}"


def validate_pool_sharing(pool: GpuPool) -> None:
    """The pool's MIG layout fits its GPUs; ValueError says which part does not."""
    if pool.mig is None:
        return
    if pool.time_slicing is not None:
        raise ValueError("mig and time_slicing together are not supported; choose one per pool")
    family = mig_family(pool.gpu_product)
    if family is None:
        known = ", ".join(sorted(MIG_PROFILES))
        raise ValueError(f"gpu_product {pool.gpu_product!r} has no MIG profile table here (known: {known})")
    covered: set[int] = set()
    for group in pool.mig.layout:
        indices = set(range(pool.gpus_per_node)) if group.devices == "all" else set(group.devices)
        bad = sorted(i for i in indices if i >= pool.gpus_per_node)
        if bad:
            raise ValueError(f"mig.layout: GPU indices {bad} do not exist (the nodes have {pool.gpus_per_node} GPUs)")
        if indices & covered:
            raise ValueError(f"mig.layout: GPUs {sorted(indices & covered)} are in two layout groups")
        covered |= indices
        for profile in group.slices:
            if profile not in MIG_PROFILES[family]:
                raise ValueError(f"mig.layout: {profile} is not a MIG profile of {family} "
                                 f"(profiles: {', '.join(MIG_PROFILES[family])})")
        compute = sum(compute_slices(p) * n for p, n in group.slices.items())
        memory = sum(MIG_PROFILES[family][p] * n for p, n in group.slices.items())
        # Necessary, not sufficient: mig-parted checks the exact placement on the node.
        if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
            raise ValueError(f"mig.layout: {dict(group.slices)} needs {compute}/{COMPUTE_SLICES} compute and "
                             f"{memory}/{MEMORY_SLICES} memory slices of one {family}; it does not fit")
    if covered != set(range(pool.gpus_per_node)):
        missing = sorted(set(range(pool.gpus_per_node)) - covered)
        raise ValueError(f"mig.layout: GPUs {missing} have no layout (list them with slices: {{}} to keep MIG off)")
    if pool.mig.strategy == "single":
        layouts = {tuple(sorted(g.slices.items())) for g in pool.mig.layout}
        if len(layouts) != 1 or len(next(iter(layouts))) != 1:
            raise ValueError("mig.strategy single needs one profile on every GPU (use mixed for other layouts)")


def _per_node(pool: NodePool) -> dict[str, int]:
    """Extended resources the device plugin advertises on one node of ``pool`` (none on a CPU pool)."""
    if not isinstance(pool, GpuPool):
        return {}
    if pool.time_slicing is not None:
        name = SHARED_GPU if pool.time_slicing.rename_by_default else GPU
        return {name: pool.gpus_per_node * pool.time_slicing.replicas}
    if pool.mig is None:
        return {GPU: pool.gpus_per_node}
    out: dict[str, int] = {}
    for group in pool.mig.layout:
        gpus = pool.gpus_per_node if group.devices == "all" else len(group.devices)
        if not group.slices:
            out[GPU] = out.get(GPU, 0) + gpus
        for profile, count in group.slices.items():
            name = GPU if pool.mig.strategy == "single" else f"{MIG_PREFIX}{profile}"
            out[name] = out.get(name, 0) + gpus * count
    return out


def advertised_per_node(pool: NodePool) -> dict[str, int]:
    """The extended resources one node of ``pool`` advertises (``advertised_resources`` per node)."""
    return dict(_per_node(pool))


def advertised_resources(pool: NodePool) -> dict[str, int]:
    """Every extended resource ``pool`` advertises, summed over its nodes, GPU first then by name.

    8 nodes x 8 H200 in the layout ``{'1g.18gb': 7}`` advertise nvidia.com/mig-1g.18gb: 448; a CPU pool, nothing.
    """
    per_node = _per_node(pool)
    order = sorted(per_node, key=lambda name: (name != GPU, name))
    return {name: per_node[name] * pool.nodes for name in order}


def gpus_carrying(pool: GpuPool) -> dict[str, int]:
    """Physical GPUs of ``pool`` (all nodes) that each advertised resource lives on, in ``advertised_resources`` order.

    Profiles partitioned on the same GPUs share them: H100 GPUs 0-3 of 2 nodes split into 1g.10gb and
    3g.40gb carry 8 GPUs of each, the whole GPUs 4-7 another 8; time-sliced replicas live on every GPU.
    """
    if pool.mig is None:
        return {name: pool.gpus for name in advertised_resources(pool)}
    per_node: dict[str, int] = {}
    for group in pool.mig.layout:
        gpus = pool.gpus_per_node if group.devices == "all" else len(group.devices)
        names = [GPU] if not group.slices or pool.mig.strategy == "single" else \
            [f"{MIG_PREFIX}{profile}" for profile in group.slices]
        for name in names:
            per_node[name] = per_node.get(name, 0) + gpus
    return {name: per_node.get(name, 0) * pool.nodes for name in advertised_resources(pool)}


def mig_gpus(pool: GpuPool) -> int:
    """Physical GPUs of ``pool`` that are MIG-partitioned (in mixed strategy, the ones the slice budget counts)."""
    if pool.mig is None or pool.mig.strategy != "mixed":
        return 0
    per_node = sum(pool.gpus_per_node if g.devices == "all" else len(g.devices) for g in pool.mig.layout if g.slices)
    return per_node * pool.nodes


def mig_resources(pools: tuple[GpuPool, ...]) -> list[str]:
    """Every nvidia.com/mig-<profile> resource the pools advertise, sorted."""
    return sorted({name for pool in pools for name in advertised_resources(pool) if name.startswith(MIG_PREFIX)})


def gpu_equivalent(pool: GpuPool, resource: str) -> Fraction:
    """How much of a physical GPU one unit of ``resource`` on ``pool`` is (for CPU/memory shares and reports)."""
    if pool.time_slicing is not None:
        return Fraction(1, pool.time_slicing.replicas)
    if pool.mig is not None and (resource.startswith(MIG_PREFIX) or pool.mig.strategy == "single"):
        if resource.startswith(MIG_PREFIX):
            return Fraction(compute_slices(resource.removeprefix(MIG_PREFIX)), COMPUTE_SLICES)
        profiles = {p for g in pool.mig.layout for p in g.slices}
        if profiles:
            return Fraction(compute_slices(next(iter(profiles))), COMPUTE_SLICES)
    return Fraction(1)


def sharing_of(pool: GpuPool) -> str:
    """One word for reports: whole, mig-mixed, mig-single, time-sliced."""
    if pool.time_slicing is not None:
        return f"time-sliced x{pool.time_slicing.replicas}"
    if pool.mig is not None:
        return f"mig-{pool.mig.strategy}"
    return "whole"
