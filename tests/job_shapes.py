"""The TrainJob shapes matrix: every way a tenant can size a TrainJob, on every kind of GPU pool.

Shared by the offline tier (tests/policy/test_trainjob_resources.py: the CEL of both policies, run with
cel-python, equals the Python rules), the API-server tier (tests/cluster/test_trainjob_resources_admission.py:
the real kube-apiserver admits, completes and refuses exactly as the rules say) and the rehearsal with the
real Kueue, JobSet and Trainer (tests/cluster/test_job_shapes.py: what is admitted creates its Jobs and pods
on the right flavor, and the quota Kueue reserves is what the pods request).

A shape is written once per pool kind, with ``R`` standing for the pool's accelerator resource
(``nvidia.com/gpu``, a MIG profile, or time-sliced replicas), ``N`` for what one node holds and ``HALF`` for half of it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainyard import catalog

STACK_FILE = "tests/fixtures/stacks/Pulumi.job-shapes.yaml"
TENANT_NAMESPACE = "team-a"

# The pool kinds of the job-shapes stack: flavor, its accelerator resource, and how many one node has.
POOLS = {
    "whole": ("fake-a100", catalog.GPU_RESOURCE, 4),
    "mig": ("fake-a100-mig", "nvidia.com/mig-1g.10gb", 14),
    "time-sliced": ("fake-l4-shared", "nvidia.com/gpu.shared", 8),
}


@dataclass(frozen=True)
class Shape:
    """One way of writing resourcesPerNode (``R``, ``N``, ``N+1`` and ``HALF`` are filled in per pool)."""

    name: str
    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None
    num_nodes: int = 1
    num_proc_per_node: int | None = None
    # Where the SDK's resources_per_node can write the same (requests = limits = the dict).
    sdk: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


SHAPES = (
    Shape("no resourcesPerNode"),
    Shape("limits only", limits={"R": "HALF"}, sdk=None),
    Shape("limits only, 2 nodes", limits={"R": "HALF"}, num_nodes=2),
    # The TrainJob of the report: a whole node's accelerators as a limit alone, on two nodes.
    Shape("a node's worth as a limit, 2 nodes", limits={"R": "N"}, num_nodes=2),
    Shape("requests only", requests={"R": "HALF"}),
    Shape("both, equal", requests={"R": "HALF"}, limits={"R": "HALF"}, sdk={"R": "HALF"}),
    Shape("both, unequal", requests={"R": 1}, limits={"R": "HALF"}),
    Shape("with cpu and memory", limits={"R": "HALF", "cpu": "8", "memory": "64Gi"},
          sdk={"R": "HALF", "cpu": "8", "memory": "64Gi"}),
    Shape("cpu request above the runtime's limit", requests={"R": "HALF", "cpu": "8"}),
    Shape("cpu request above its own limit", requests={"R": "HALF", "cpu": "8"}, limits={"R": "HALF", "cpu": "2"}),
    Shape("cpu and memory only", limits={"cpu": "2", "memory": "8Gi"}, sdk={"cpu": "2", "memory": "8Gi"}),
    Shape("more than one node holds", limits={"R": "N+1"}),
    Shape("whole GPUs on this pool", limits={catalog.GPU_RESOURCE: 1}),
    Shape("more processes than GPUs", limits={"R": "HALF"}, num_proc_per_node=16),
    Shape("one process per GPU", limits={"R": "HALF"}, num_proc_per_node=2),
)

RUNTIMES = ("torch-distributed", "deepspeed-mpi", "lora-finetune", "lora-peft")


def fill(values: dict[str, Any] | None, resource: str, per_node: int) -> dict[str, Any] | None:
    if values is None:
        return None
    amounts = {"HALF": str(max(1, per_node // 2)), "N": str(per_node), "N+1": str(per_node + 1)}
    return {(resource if k == "R" else k): amounts.get(v, v) if isinstance(v, str) else v for k, v in values.items()}


@dataclass(frozen=True)
class Case:
    pool: str
    shape: Shape
    runtime: str
    resource: str
    per_node: int

    @property
    def id(self) -> str:
        return f"{self.pool}/{self.runtime}/{self.shape.name}"

    @property
    def flavor(self) -> str:
        return POOLS[self.pool][0]

    def resources_per_node(self) -> dict[str, Any] | None:
        out = {}
        for kind in ("requests", "limits"):
            values = fill(getattr(self.shape, kind), self.resource, self.per_node)
            if values is not None:
                out[kind] = values
        return out or None

    def sdk_resources(self) -> dict[str, Any] | None:
        """``resources_per_node`` for the Kubeflow SDK, in its own spelling (``gpu``, ``mig-1g.10gb``), or None."""
        values = fill(self.shape.sdk, self.resource, self.per_node)
        if values is None:
            return None
        def spelling(name: str) -> str:
            return "gpu" if name == catalog.GPU_RESOURCE else name.removeprefix("nvidia.com/") \
                if name.startswith("nvidia.com/mig-") else name
        return {spelling(name): value for name, value in values.items()}

    def trainjob(self, name: str, namespace: str = TENANT_NAMESPACE) -> dict[str, Any]:
        trainer: dict[str, Any] = {"numNodes": self.shape.num_nodes}
        if self.shape.num_proc_per_node is not None:
            trainer["numProcPerNode"] = self.shape.num_proc_per_node
        resources = self.resources_per_node()
        if resources is not None:
            trainer["resourcesPerNode"] = copy.deepcopy(resources)
        return {"apiVersion": catalog.TRAINER_API, "kind": "TrainJob",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"kueue.x-k8s.io/queue-name": "default",
                                        "kueue.x-k8s.io/priority-class": "standard"}},
                "spec": {"runtimeRef": {"name": self.runtime}, "trainer": trainer}}


def cases(runtimes: tuple[str, ...] = RUNTIMES, pools: tuple[str, ...] = tuple(POOLS)) -> Iterator[Case]:
    for pool in pools:
        _, resource, per_node = POOLS[pool]
        for runtime in runtimes:
            for shape in SHAPES:
                yield Case(pool, shape, runtime, resource, per_node)


def expected(case: Case, runtimes: list[dict[str, Any]], flavors: list[Any]) -> tuple[Any, int | None, list[str]]:
    """What the rules (``trainjob_resources``) say of ``case``: the completed resourcesPerNode (None without one),
    the numProcPerNode the mutating policy leaves, and the refusals, for the rendered ``runtimes`` and the
    namespace's ``flavors``."""
    from trainyard.manifests import trainjob_resources as tr

    shape = tr.runtime_shapes(runtimes)[case.runtime]
    given = case.resources_per_node()
    completed = None if given is None else tr.complete(
        shape.resources, tr.NodeResources(given.get("requests", {}), given.get("limits", {})))
    num_proc = case.shape.num_proc_per_node
    if given is not None and num_proc is None and shape.torch:
        mig = sorted(k for k in {*given.get("requests", {}), *given.get("limits", {})} if k.startswith("nvidia.com/mig-"))
        if len(mig) == 1:
            num_proc = int(given.get("requests", {}).get(mig[0]) or given["limits"][mig[0]])
    return completed, num_proc, list(tr.refusals(completed or shape.resources, flavors, shape.torch, num_proc))
