"""The GPU stack per pool: the NVIDIA GPU operator's settings, MIG and time-slicing, and what they advertise.

Every GPU pool's nodes run the same operator (one ClusterPolicy per cluster); what differs per
pool is chosen by node labels that Trainyard states for each pool (``pool_node_labels``):

- ``nvidia.com/device-plugin.config=<pool>`` picks the pool's named device-plugin config
  (MIG strategy, time-slicing replicas). Ref: k8s-device-plugin v0.20.0 README, "Multiple Config Files".
- ``nvidia.com/mig.config=trainyard-<pool>`` picks the pool's MIG layout from the mig-parted
  ConfigMap Trainyard declares. Ref: gpu-operator docs, gpu-operator-mig.html.
- ``nvidia.com/gpu.deploy.driver=false`` on pools whose driver is pre-installed on the host.

This module also computes what a pool *advertises* to Kueue (``advertised_resources``): the
extended resources the device plugin registers on its nodes, in the units tenants request.
It is pure config: the builders in ``manifests/gpu_operator.py`` and ``manifests/kueue.py`` and the
capacity report read it, so the three never disagree.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from trainyard import catalog
from trainyard.config.model import Model, Name

if TYPE_CHECKING:
    from trainyard.config.model import GpuPool

GPU = catalog.GPU_RESOURCE
# With renameByDefault the device plugin advertises time-sliced replicas as <resource>.shared.
# Ref: k8s-device-plugin v0.20.0 api/config/v1/replicas.go (DefaultSharedResourceNameSuffix).
SHARED_GPU = f"{GPU}.shared"
MIG_PREFIX = "nvidia.com/mig-"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
# A GPU has 7 compute slices and 8 memory slices (NVIDIA MIG user guide, "Supported MIG Profiles").
COMPUTE_SLICES = 7
MEMORY_SLICES = 8
_PROFILE = re.compile(r"^([1-7])g\.([0-9]+)gb$")

# MIG profiles per GPU model: profile -> memory slices it takes. Ref: NVIDIA MIG user guide,
# "Supported MIG Profiles" (A100, H100, H200), and gpu-operator assets/state-mig-manager/0400_configmap.yaml.
MIG_PROFILES: dict[str, dict[str, int]] = {
    "H200": {"1g.18gb": 1, "1g.35gb": 2, "2g.35gb": 2, "3g.71gb": 4, "4g.71gb": 4, "7g.141gb": 8},
    "H100-80GB": {"1g.10gb": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8},
    "A100-80GB": {"1g.10gb": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8},
    "A100-40GB": {"1g.5gb": 1, "1g.10gb": 2, "2g.10gb": 2, "3g.20gb": 4, "4g.20gb": 4, "7g.40gb": 8},
}
# GPU feature discovery's nvidia.com/gpu.product values that map to each table above.
_PRODUCT_FAMILY = (("H200", "H200"), ("H100-80GB", "H100-80GB"), ("H100-SXM5-80GB", "H100-80GB"),
                   ("A100-SXM4-80GB", "A100-80GB"), ("A100-80GB", "A100-80GB"), ("A100-SXM4-40GB", "A100-40GB"),
                   ("A100-PCIE-40GB", "A100-40GB"))


def mig_family(gpu_product: str) -> str | None:
    """The MIG profile table of a GPU product, or None when it has none (not MIG-capable, or unknown)."""
    return next((family for marker, family in _PRODUCT_FAMILY if marker in gpu_product), None)


def compute_slices(profile: str) -> int:
    """Compute slices (the ``<n>g`` part) of a MIG profile: 1g.18gb -> 1."""
    match = _PROFILE.match(profile)
    if match is None:
        raise ValueError(f"{profile!r} is not a MIG profile name (<n>g.<m>gb)")
    return int(match.group(1))


class MigDevices(Model):
    """The MIG layout of some GPUs of every node (a mig-parted ``mig-configs`` entry)."""

    devices: Literal["all"] | tuple[int, ...] = Field(
        default="all", description="GPU indices on each node this layout applies to, or 'all'.")
    slices: dict[str, int] = Field(
        default_factory=dict,
        description="MIG profile -> instances per GPU (e.g. {'1g.18gb': 7}); empty = MIG disabled on these GPUs.")

    @field_validator("slices")
    @classmethod
    def _profiles(cls, value: dict[str, int]) -> dict[str, int]:
        for profile, count in value.items():
            compute_slices(profile)
            if count < 1:
                raise ValueError(f"{profile}: at least 1 instance (leave the profile out instead)")
        return value


class Mig(Model):
    """MIG on a pool: the device-plugin strategy and the layout mig-manager applies to its nodes.

    Ref: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html
    """

    strategy: Literal["single", "mixed"] = Field(
        default="mixed",
        description="mixed: each profile is its own resource nvidia.com/mig-<profile>; single: every GPU has the same "
        "layout and its instances are advertised as nvidia.com/gpu.")
    layout: tuple[MigDevices, ...] = Field(
        min_length=1, description="MIG layout per group of GPUs on each node; Trainyard writes it as the mig-parted "
        "config trainyard-<pool>.")


class TimeSlicing(Model):
    """Time-slicing on a pool: each GPU is offered as several replicas that share it in time.

    Ref: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html
    """

    replicas: int = Field(ge=2, le=64, description="Replicas advertised per physical GPU.")
    rename_by_default: bool = Field(
        default=True,
        description="Advertise replicas as nvidia.com/gpu.shared (true) instead of nvidia.com/gpu, so a quota or a "
        "request can never mistake a shared GPU for a whole one.")
    fail_requests_greater_than_one: bool = Field(
        default=True,
        description="Refuse pods that request more than one replica (two replicas may be the same GPU).")


class DriverUpgrade(Model):
    """How the operator rolls a new driver over a pool's nodes (NVIDIADriver spec.upgradePolicy)."""

    max_parallel_upgrades: int = Field(default=1, ge=0, description="Nodes upgraded at once; 0 = no limit.")
    max_unavailable: str = Field(default="25%", description="Nodes (count or percent) that may be unavailable at once.")
    drain: bool = Field(default=True, description="Drain each node before its driver is replaced.")
    drain_timeout_seconds: int = Field(default=600, ge=0, description="How long a drain may take.")


class GpuOperator(Model):
    """The NVIDIA GPU operator (one install per cluster; per-pool settings live on each GPU pool).

    Ref: deployments/gpu-operator/values.yaml at v26.7.0.
    """

    version: str = Field(default=catalog.DEFAULT_VERSIONS["gpu_operator"], description="GPU operator release.")
    namespace: Name = Field(
        default="gpu-operator",
        description="The operator's namespace: the one reviewed exception to Pod Security 'restricted' (its operands "
        "load kernel modules and mount host paths).")
    driver_version: str = Field(
        default=catalog.GPU_OPERATOR_OPERANDS["driver"].tag,
        description="Driver version for pools whose driver the operator manages (a pool may override it).")
    driver_upgrade: DriverUpgrade = Field(default=DriverUpgrade(), description="Rolling driver upgrades.")
    node_feature_discovery: bool = Field(
        default=True, description="Install the bundled NFD (false when the cluster already runs NFD).")
    mig_reboot: bool = Field(
        default=False, description="Let mig-manager reboot a node to apply a layout (needed on some cloud VMs: "
        "WITH_REBOOT=true).")
    dcgm_pod_labels: bool = Field(
        default=False, description="Copy pod labels onto DCGM metrics (enablePodLabels); the pod, namespace and "
        "container of the workload holding each GPU are attached in any case.")

    @model_validator(mode="after")
    def _known(self) -> GpuOperator:
        if ("gpu_operator", self.version) not in catalog.RELEASES:
            raise ValueError(f"gpu_operator {self.version} is not in the catalog "
                             f"(known: {', '.join(catalog.known_versions('gpu_operator'))})")
        return self


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


def _per_node(pool: GpuPool) -> dict[str, int]:
    """Extended resources the device plugin advertises on one node of ``pool``."""
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


def advertised_resources(pool: GpuPool) -> dict[str, int]:
    """Every extended resource ``pool`` advertises, summed over its nodes, GPU first then by name.

    8 nodes x 8 H200 in the layout ``{'1g.18gb': 7}`` advertise nvidia.com/mig-1g.18gb: 448.
    """
    per_node = _per_node(pool)
    order = sorted(per_node, key=lambda name: (name != GPU, name))
    return {name: per_node[name] * pool.nodes for name in order}


def advertised_per_node(pool: GpuPool) -> dict[str, int]:
    """The extended resources one node of ``pool`` advertises (``advertised_resources`` per node)."""
    return dict(_per_node(pool))


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
