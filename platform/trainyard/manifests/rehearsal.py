"""Fake GPU nodes for the local rehearsal cluster.

They carry each pool's node labels, taints, a value for every topology label and
``nvidia.com/gpu`` capacity, so that Kueue flavors, TAS levels and quotas can be
exercised without GPUs. Only pools marked ``fake`` get nodes.
"""

from __future__ import annotations

from typing import Any

from trainyard import catalog
from trainyard.config.model import HOSTNAME_LABEL, PlatformConfig
from trainyard.manifests.meta import MANAGED_BY, Manifest

NODES_PER_RACK = 2
RACKS_PER_BLOCK = 2


def fake_nodes(config: PlatformConfig) -> list[Manifest]:
    nodes: list[Manifest] = []
    for pool in config.gpu_pools:
        if not pool.fake:
            continue
        for index in range(pool.nodes):
            name = f"{pool.name}-{index}"
            labels = {**MANAGED_BY, **pool.node_labels, HOSTNAME_LABEL: name,
                      "nvidia.com/gpu.product": pool.gpu_product.replace(" ", "-")}
            for level, key in enumerate(pool.topology_labels):
                # Widest level first: block, then rack, ...
                width = NODES_PER_RACK * RACKS_PER_BLOCK ** (len(pool.topology_labels) - 1 - level)
                labels[key] = f"{pool.name}-{key.rsplit('/', 1)[-1].rsplit('-', 1)[-1]}-{index // width}"
            capacity: dict[str, Any] = {
                "cpu": str(pool.cpu_per_node),
                "memory": str(pool.memory_per_node),
                "pods": "110",
                catalog.GPU_RESOURCE: str(pool.gpus_per_node),
            }
            node: Manifest = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": [{k: v for k, v in t.model_dump().items() if v is not None} for t in pool.taints]},
                # Ready, as a kubelet would report it: Kueue's TAS only counts ready nodes.
                "status": {"capacity": capacity, "allocatable": dict(capacity),
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "fake node of the Trainyard rehearsal"}]},
            }
            nodes.append(node)
    return nodes
