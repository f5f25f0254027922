"""MultiKueue: one manager cluster dispatches tenants' jobs to worker clusters.

A stack is either a ``manager`` (its ClusterQueues carry the MultiKueue AdmissionCheck, and it
declares a MultiKueueCluster per worker and one MultiKueueConfig) or a ``worker`` (a plain Kueue
cluster with the same tenant queues, no dispatching). The manager names each worker's stack
file, and the configs must agree: every tenant of the manager exists on every worker with the
same namespace (so the dispatched job finds its namespace, LocalQueue and ClusterQueue) and
the same priority classes. That cross-stack check reads the worker stack files
(``config/workers.py``: ``check_workers``); the model here only checks one stack.

A worker's kubeconfig is a deploy-time secret: the stack names a Pulumi config secret key or a
file path read at deploy time, never the kubeconfig itself.

Ref: https://kueue.sigs.k8s.io/docs/concepts/multikueue/ and
https://kueue.sigs.k8s.io/docs/tasks/manage/setup_multikueue/ ("the worker cluster configuration
mirrors the one of the manager cluster in terms of namespaces and LocalQueues").
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from pydantic import Field, model_validator

from trainyard.config.base import Model, Name

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
