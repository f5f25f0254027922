"""Fake GPU nodes for the local rehearsal cluster.

They carry each pool's node labels, taints, a value for every topology label and
``nvidia.com/gpu`` capacity, so that Kueue flavors, TAS levels and quotas can be
exercised without GPUs. Only pools marked ``fake`` get nodes, unless the caller rehearses a
stack whose pools are real (``every_pool``: ``trainyard rehearse prod`` makes 56 fake nodes
shaped like prod's).

kwok (the rehearsal's fake kubelet) manages exactly the nodes annotated ``KWOK_NODE_ANNOTATION``:
it keeps their lease and Ready condition fresh and runs their pods' lifecycle.
"""

from __future__ import annotations

from typing import Any

from trainyard.config.gpu_pools import advertised_per_node
from trainyard.config.model import HOSTNAME_LABEL, PlatformConfig
from trainyard.manifests.meta import MANAGED_BY, Manifest

NODES_PER_RACK = 2
RACKS_PER_BLOCK = 2
# Ref: kwok docs "Manage nodes": --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


def fake_nodes(config: PlatformConfig, every_pool: bool = False) -> list[Manifest]:
    nodes: list[Manifest] = []
    for pool in config.gpu_pools:
        if not (pool.fake or every_pool):
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
