"""Manifests that satisfy every rule on the prod stack, and small ways to break them.

Tests start from these and change one thing, so that a finding can only come from that change.
"""

from __future__ import annotations

import copy
from typing import Any

from trainyard import catalog
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL

TENANT_NS = "llm-research"  # a prod tenant: priority classes standard, preemptible
GOOD_IMAGE = "registry.trainyard.internal/pytorch/pytorch@sha256:" + "a" * 64
GPU = catalog.GPU_RESOURCE


def container(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "main",
        "image": GOOD_IMAGE,
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
    }
    out.update(changes)
    return out


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": TENANT_NS},
        "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                 "containers": list(containers) or [container()], **spec},
    }


def trainjob(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": catalog.TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": "sft", "namespace": TENANT_NS,
                     "labels": labels if labels is not None else {QUEUE_NAME_LABEL: "default",
                                                                  PRIORITY_CLASS_LABEL: "standard"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"image": GOOD_IMAGE, "numNodes": 2,
                             "resourcesPerNode": {"limits": {GPU: 8, "memory": "1500Gi"}}},
                 **spec},
    }


def with_change(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with the dotted ``path`` set to ``value`` (digits index lists)."""
    out = copy.deepcopy(obj)
    node: Any = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return out
