"""The GPU stack per pool: the NVIDIA GPU operator's settings, MIG and time-slicing, and what they advertise.

Every GPU pool's nodes run the same operator (one ClusterPolicy per cluster); what differs per
pool is chosen by node labels that Trainyard states for each pool (``pool_node_labels``):

- ``nvidia.com/device-plugin.config=<pool>`` picks the pool's named device-plugin config
  (MIG strategy, time-slicing replicas). Ref: k8s-device-plugin v0.20.0 README, "Multiple Config Files".
- ``nvidia.com/mig.config=trainyard-<pool>`` picks the pool's MIG layout from the mig-parted
  ConfigMap Trainyard declares. Ref: gpu-operator docs, gpu-operator-mig.html.
- ``nvidia.com/gpu.deploy.driver=false`` on pools whose driver is pre-installed on the host.

What a pool *advertises* with these settings (``advertised_resources``) is computed with the pool
itself, in ``config/gpu_pools.py``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from trainyard import catalog
from trainyard.config.base import Model, Name

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
