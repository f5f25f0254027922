"""MultiKueue: one manager cluster dispatches tenants' jobs to worker clusters.

A stack is either a ``manager`` (its ClusterQueues carry the MultiKueue AdmissionCheck, and it
declares a MultiKueueCluster per worker and one MultiKueueConfig) or a ``worker`` (a plain Kueue
cluster with the same tenant queues, no dispatching). The manager names each worker's stack
file, and the configs must agree: every tenant of the manager exists on every worker with the
same namespace (so the dispatched job finds its namespace, LocalQueue and ClusterQueue) and
the same priority classes. That cross-stack check reads the worker stack files
(``check_workers``); the model here only checks one stack.

A worker's kubeconfig is a deploy-time secret: the stack names a Pulumi config secret key or a
file path read at deploy time, never the kubeconfig itself.

Ref: https://kueue.sigs.k8s.io/docs/concepts/multikueue/ and
https://kueue.sigs.k8s.io/docs/tasks/manage/setup_multikueue/ ("the worker cluster configuration
mirrors the one of the manager cluster in terms of namespaces and LocalQueues").
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from trainyard.config.model import Model, Name

if TYPE_CHECKING:
    from trainyard.config.load import Problem
    from trainyard.config.model import PlatformConfig

# A Pulumi config key in the trainyard namespace (`pulumi config set --secret trainyard:<key>`).
_CONFIG_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class KubeconfigSource(Model):
    """Where the Pulumi program finds a worker's kubeconfig at deploy time (exactly one of the two)."""

    pulumi_secret: str | None = Field(
        default=None,
        description="Pulumi config key in the 'trainyard' namespace that holds the kubeconfig as a secret "
        "(`pulumi config set --secret trainyard:<key> < worker.kubeconfig`).")
    file: str | None = Field(
        default=None,
        description="Path of a kubeconfig file read at deploy time (never committed); relative to the project.")

    @model_validator(mode="after")
    def _exactly_one(self) -> KubeconfigSource:
        if (self.pulumi_secret is None) == (self.file is None):
            raise ValueError("set exactly one of pulumi_secret and file")
        if self.pulumi_secret is not None and not _CONFIG_KEY.match(self.pulumi_secret):
            raise ValueError(f"pulumi_secret {self.pulumi_secret!r} is not a config key (letters, digits, '-', '_'; "
                             "the namespace 'trainyard:' is implied)")
        return self

    def describe(self) -> str:
        return f"pulumi config secret trainyard:{self.pulumi_secret}" if self.pulumi_secret else f"file {self.file}"


class MultiKueueWorker(Model):
    """One worker cluster of a manager: a MultiKueueCluster and the kubeconfig Secret it reads."""

    name: Name = Field(description="MultiKueueCluster name (also names its kubeconfig Secret).")
    stack: str = Field(description="The worker's stack file, relative to this stack file; its tenants must match.")
    kubeconfig: KubeconfigSource = Field(description="Where the worker's kubeconfig comes from at deploy time.")


class MultiKueue(Model):
    """This stack's MultiKueue role. Ref: Kueue v1beta2 MultiKueueConfig, MultiKueueCluster, AdmissionCheck."""

    role: Literal["manager", "worker"] = Field(
        description="manager: dispatch every tenant's workloads to the workers; worker: run what the manager sends.")
    workers: tuple[MultiKueueWorker, ...] = Field(
        default=(), description="Manager only: the worker clusters, most preferred first (dispatch order).")
    admission_check: Name = Field(default="multikueue", description="Name of the AdmissionCheck and MultiKueueConfig.")

    @model_validator(mode="after")
    def _role(self) -> MultiKueue:
        if self.role == "manager" and not self.workers:
            raise ValueError("a manager needs at least one worker")
        if self.role == "worker" and self.workers:
            raise ValueError("a worker lists no workers (only the manager dispatches)")
        names = [w.name for w in self.workers]
        dupes = sorted(n for n, c in Counter(names).items() if c > 1)
        if dupes:
            raise ValueError(f"workers: names must be unique; repeated: {', '.join(dupes)}")
        return self


def check_workers(manager: PlatformConfig, manager_file: Path) -> list[Problem]:
    """Problems between a manager stack and its worker stacks (empty when they match, or not a manager)."""
    from trainyard.config.load import ConfigError, Problem, load_stack

    if manager.multikueue is None or manager.multikueue.role != "manager":
        return []
    problems: list[Problem] = []
    base = "trainyard:platform.multikueue.workers"
    for i, worker in enumerate(manager.multikueue.workers):
        where = f"{base}[{i}].stack"
        path = Path(worker.stack) if Path(worker.stack).is_absolute() else manager_file.parent / worker.stack
        try:
            other = load_stack(path)
        except ConfigError as exc:
            problems.append(Problem(where, f"worker stack {worker.stack} is not valid: "
                                    + "; ".join(p.render(exc.file) for p in exc.problems)))
            continue
        if other.multikueue is None or other.multikueue.role != "worker":
            problems.append(Problem(where, f"{worker.stack} is not a MultiKueue worker (set multikueue.role: worker)"))
        theirs = {t.name: t for t in other.tenants}
        for tenant in manager.tenants:
            match = theirs.get(tenant.name)
            if match is None:
                problems.append(Problem(where, f"tenant {tenant.name!r} has no queue on worker {worker.name} "
                                        f"({worker.stack}): its dispatched jobs would find no LocalQueue there"))
                continue
            if match.namespace_name != tenant.namespace_name:
                problems.append(Problem(where, f"tenant {tenant.name!r} uses namespace {tenant.namespace_name!r} here "
                                        f"but {match.namespace_name!r} on worker {worker.name}"))
            missing = sorted(set(tenant.priority_classes) - {p.name for p in other.priority_classes})
            if missing:
                problems.append(Problem(where, f"tenant {tenant.name!r}: priority classes {', '.join(missing)} are not "
                                        f"defined on worker {worker.name}"))
        extra = sorted(set(theirs) - {t.name for t in manager.tenants})
        if extra:
            problems.append(Problem(where, f"worker {worker.name} has tenants the manager does not dispatch: "
                                    f"{', '.join(extra)}"))
    return problems
