"""Fake nodes for the local rehearsal cluster: GPU pools' and CPU pools'.

They carry each pool's node labels, taints, a value for every topology label, CPU and memory and (a GPU
pool's) ``nvidia.com/gpu`` capacity, so that Kueue flavors, TAS levels and quotas can be
exercised without GPUs. Only pools marked ``fake`` get nodes, unless the caller rehearses a
stack whose pools are real (``every_pool``: ``trainyard rehearse prod`` makes 56 fake nodes
shaped like prod's).

kwok (the rehearsal's fake kubelet) manages exactly the nodes annotated ``KWOK_NODE_ANNOTATION``:
it keeps their lease and Ready condition fresh and runs their pods' lifecycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainyard.config.gpu_pools import advertised_per_node
from trainyard.config.model import HOSTNAME_LABEL, GpuPool, NodePool, PlatformConfig
from trainyard.manifests.meta import MANAGED_BY, Manifest

NODES_PER_RACK = 2
RACKS_PER_BLOCK = 2
# Ref: kwok docs "Manage nodes": --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


def pool_node_labels(pool: NodePool, index: int) -> dict[str, str]:
    """The labels node ``index`` of ``pool`` carries: the pool's node labels, a GPU product, a value per topology level."""
    labels = dict(pool.node_labels)
    if isinstance(pool, GpuPool):
        labels["nvidia.com/gpu.product"] = pool.gpu_product.replace(" ", "-")
    for level, key in enumerate(pool.topology_labels):
        # Widest level first: block, then rack, ...
        width = NODES_PER_RACK * RACKS_PER_BLOCK ** (len(pool.topology_labels) - 1 - level)
        labels[key] = f"{pool.name}-{key.rsplit('/', 1)[-1].rsplit('-', 1)[-1]}-{index // width}"
    return labels


def fake_nodes(config: PlatformConfig, every_pool: bool = False, real: Mapping[str, int] | None = None) -> list[Manifest]:
    """Node objects for the fake pools (every pool with ``every_pool``); ``real``: pool -> how many of its first nodes
    are real nodes (the rehearsal's node-0 serves a CPU pool), which get no fake node."""
    nodes: list[Manifest] = []
    for pool in config.pools:
        if not (pool.fake or every_pool):
            continue
        for index in range((real or {}).get(pool.name, 0), pool.nodes):
            name = f"{pool.name}-{index}"
            labels = {**MANAGED_BY, **pool_node_labels(pool, index), HOSTNAME_LABEL: name}
            capacity: dict[str, Any] = {
                "cpu": str(pool.cpu_per_node),
                "memory": str(pool.memory_per_node),
                "pods": "110",
                # What the device plugin would advertise: whole GPUs, MIG slices or time-sliced replicas.
                **{name: str(count) for name, count in advertised_per_node(pool).items()},
            }
            node: Manifest = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels, "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]}},
                "spec": {"taints": [{k: v for k, v in t.model_dump().items() if v is not None} for t in pool.taints]},
                # Ready, as a kubelet would report it: Kueue's TAS only counts ready nodes.
                "status": {"capacity": capacity, "allocatable": dict(capacity),
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "fake node of the Trainyard rehearsal"}]},
            }
            nodes.append(node)
    return nodes
