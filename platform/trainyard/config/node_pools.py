"""Node pools: a set of identical nodes that is one Kueue ResourceFlavor.

``NodePool`` holds what every pool has (nodes, their CPU and memory, the labels that select them, taints,
topology labels); ``GpuPool`` (``config/gpu_pools.py``) adds GPUs, and ``CpuPool`` is a pool without them:
where CPU-only TrainJobs run (data preparation, evaluation, the CPU rehearsal of the lab,
docs/components/kueue.md "CPU pools"). A tenant's quota on a CPU pool names its CPU and memory; on a GPU
pool, its GPUs (CPU and memory follow the GPU share of a node).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from trainyard.config.base import HOSTNAME_LABEL, INT32_MAX, FieldError, LabelKey, Labels, LabelValue, Model, Name, Quantity

MAX_FAKE_NODES = 10_000


class Taint(Model):
    key: LabelKey = Field(description="Taint key carried by the pool's nodes.")
    value: LabelValue | None = Field(default=None, description="Taint value; unset tolerates any value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(description="Taint effect.")


class NodePool(Model):
    """A set of identical nodes. Each pool becomes one Kueue ResourceFlavor."""

    name: Name = Field(description="Pool name; also the ResourceFlavor name.")
    nodes: int = Field(gt=0, le=INT32_MAX, description="Number of nodes.")
    cpu_per_node: Quantity = Field(description="Allocatable CPU per node.")
    memory_per_node: Quantity = Field(description="Allocatable memory per node.")
    # Ref: ResourceFlavor CRD spec.nodeLabels maxProperties 8, spec.tolerations maxItems 8.
    node_labels: Labels = Field(max_length=8, description="Labels that select exactly this pool's nodes.")
    taints: tuple[Taint, ...] = Field(
        default=(), max_length=8, description="Taints of the pool's nodes; the flavor tolerates them for admitted pods.")
    topology_labels: tuple[LabelKey, ...] = Field(
        default=(),
        description=f"Topology label keys the pool's nodes carry (e.g. block, rack); {HOSTNAME_LABEL} is implied.",
    )
    fake: bool = Field(default=False, description="Rehearsal only: the nodes are fake Node objects (kwok).")

    @model_validator(mode="after")
    def _selects_nodes(self) -> NodePool:
        if not self.node_labels:
            raise ValueError("node_labels must select the pool's nodes (at least one label)")
        if self.fake:
            # Fake nodes are named <pool>-<index>, and that name is their hostname label value (at most 63).
            # Their topology labels are <pool>-<key suffix>-<domain index> (manifests/rehearsal.py).
            values = [f"{self.name}-{self.nodes - 1}"] + [
                f"{self.name}-{key.rsplit('/', 1)[-1].rsplit('-', 1)[-1]}-{self.nodes - 1}" for key in self.topology_labels]
            longest = max(values, key=len)
            if self.nodes > MAX_FAKE_NODES or len(longest) > 63:
                raise FieldError(("nodes",), f"a fake pool has at most {MAX_FAKE_NODES} nodes, whose names and "
                                             f"topology label values fit in 63 characters ({longest!r})")
        return self


class CpuPool(NodePool):
    """A set of identical nodes without GPUs (one ResourceFlavor): where CPU-only TrainJobs run.

    Tenants' quotas on it name ``cpu`` and ``memory``; a tenant's ClusterQueue lists its CPU flavors
    before its GPU flavors, so a CPU-only job is placed here first and a GPU job (no GPU quota here)
    goes on to a GPU flavor.
    """
