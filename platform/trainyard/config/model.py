"""The typed stack configuration: one frozen model per environment.

A stack file (``stacks/Pulumi.<env>.yaml``) carries the whole platform under the Pulumi
config key ``trainyard:platform``. Everything downstream (manifest builders, Pulumi
components, policy, review) reads only this model, never the raw YAML.

Unknown fields are forbidden everywhere so that a typo is an error, not a silently
ignored setting. Cross-field rules (a tenant's cohort exists, quotas fit the GPUs that
exist, topology labels are carried by the pools) run in ``PlatformConfig``'s validators,
so an invalid stack never reaches the builders.

The parts live one layer below, each in its own module, and are re-exported here:
``config/base.py`` (field types, ``Model``, ``FieldError``), ``config/node_pools.py`` (``NodePool``, ``CpuPool``),
``config/gpu_pools.py`` (``GpuPool``),
``config/sections.py`` (the core sections and the fields of the whole platform) and
``config/checks.py`` (the rules across sections).
"""

from __future__ import annotations

from pydantic import model_validator

from trainyard.config import checks
from trainyard.config.base import (
    HOSTNAME_LABEL,
    INT32_MAX,
    PUBLIC_REGISTRIES,
    Count,
    Duration,
    FieldError,
    Group,
    ImagePrefix,
    Int32,
    LabelKey,
    Labels,
    LabelValue,
    Model,
    Name,
    ProjectPath,
    Quantity,
    Text,
)
from trainyard.config.gpu_pools import GpuPool, gpu_share
from trainyard.config.mlflow import MLFLOW_POD_LABELS, MLFLOW_PORT
from trainyard.config.node_pools import MAX_FAKE_NODES, CpuPool, NodePool, Taint
from trainyard.config.sections import (
    BorrowWithinCohort,
    ClusterAccess,
    Cohort,
    CrdSource,
    FairSharing,
    FlavorQuota,
    Images,
    KueueSettings,
    Lifecycle,
    PlatformFields,
    Preemption,
    PriorityClass,
    Rehearsal,
    Requeuing,
    Runtimes,
    SharedQuota,
    SystemPods,
    Tenant,
    Topology,
    TopologyLevel,
    TopologyRequest,
    Versions,
    WaitForPodsReady,
)


class PlatformConfig(PlatformFields):
    """The whole platform for one environment."""

    # One validator per group of rules, in this order: the first rule a stack breaks is the one reported.
    @model_validator(mode="after")
    def _cross_field(self) -> PlatformConfig:
        checks.check_platform(self)
        return self

    @model_validator(mode="after")
    def _lineage_tenants_exist(self) -> PlatformConfig:
        checks.check_lineage_tenants(self)
        return self

    @model_validator(mode="after")
    def _mlflow_reachable(self) -> PlatformConfig:
        checks.check_mlflow_reachable(self)
        return self

    @model_validator(mode="after")
    def _data_cache(self) -> PlatformConfig:
        checks.validate_data_cache(self)
        return self


__all__ = [
    "HOSTNAME_LABEL", "INT32_MAX", "MAX_FAKE_NODES", "MLFLOW_POD_LABELS", "MLFLOW_PORT", "PUBLIC_REGISTRIES",
    "BorrowWithinCohort", "ClusterAccess", "Cohort", "Count", "CpuPool", "CrdSource", "Duration", "FairSharing", "FieldError",
    "FlavorQuota", "GpuPool", "Group", "ImagePrefix", "Images", "Int32", "KueueSettings", "LabelKey", "LabelValue",
    "Labels", "Lifecycle", "Model", "Name", "NodePool", "PlatformConfig", "PlatformFields", "Preemption", "PriorityClass",
    "ProjectPath", "Quantity", "Rehearsal", "Requeuing", "Runtimes", "SharedQuota", "SystemPods", "Taint", "Tenant", "Text",
    "Topology", "TopologyLevel", "TopologyRequest", "Versions", "WaitForPodsReady", "gpu_share",
]
