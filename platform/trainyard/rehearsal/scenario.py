"""Scenario files: the TrainJobs a rehearsal submits, and what Kueue is expected to decide about them.

A scenario is small reviewed YAML in ``scenarios/``::

    name: priority-preemption
    description: A high-priority job preempts a standard one of the same tenant; the preempted job is requeued.
    stacks: [local]                 # stacks whose tenants, pools and runtimes it names
    timeout: 150s                   # the scenario ends when every job finished, or after this
    platform:                       # optional: overrides of the stack's trainyard:platform (rehearsal only)
      kueue: {wait_for_pods_ready: {timeout: 20s}}
    jobs:
      - name: low
        tenant: team-a
        runtime: torch-distributed
        nodes: 2
        gpus_per_node: 4
        flavor: fake-a100            # optional: a node selector on the pool's labels
        priority: standard           # optional: a WorkloadPriorityClass
        submit_after: 0s
        run_for: 60s                 # how long each pod "runs" on its fake node (kwok)
        never_ready: false           # pods stay Pending on their node (waitForPodsReady)
        submitted_by: kubectl        # or sdk: the Kubeflow SDK as a member of the tenant
    expect:
      - job: low
        preempted: true
        requeued: true
        finished: true

Every field is typed; a wrong one is reported as ``file: jobs[1].gpus_per_node: reason`` (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from trainyard import yamlio
from trainyard.config.model import Duration, Model, Name

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|ms|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}

State = Literal["admitted", "pending", "finished"]


def seconds(duration: str) -> float:
    """A Go-style duration (``1m30s``, ``90s``, ``500ms``) in seconds."""
    return sum(float(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(duration))


class Job(Model):
    """One TrainJob of the scenario."""

    name: Name = Field(description="TrainJob name (unique in the scenario).")
    tenant: Name = Field(description="Tenant that submits it, through its LocalQueue.")
    runtime: Name = Field(default="torch-distributed", description="An approved ClusterTrainingRuntime.")
    nodes: int = Field(default=1, gt=0, description="spec.trainer.numNodes: pods of the job.")
    gpus_per_node: int = Field(default=1, ge=0, description="nvidia.com/gpu each pod requests (0: a CPU-only job).")
    flavor: Name | None = Field(default=None, description="Pool (GPU or CPU) the pods must run on (node selector); unset = any.")
    priority: Name | None = Field(default=None, description="WorkloadPriorityClass (kueue.x-k8s.io/priority-class).")
    submit_after: Duration = Field(default="0s", description="Delay from the scenario's start.")
    run_for: Duration = Field(default="10s", description="How long each pod runs once Ready (kwok pod-complete delay).")
    never_ready: bool = Field(default=False, description="Pods never become Ready (for waitForPodsReady).")
    dataset: str | None = Field(default=None, pattern=r"^s3://[a-z0-9][a-z0-9.-]*/.+",
                                description="s3:// URI of the dataset (spec.initializer.dataset.storageUri; no key).")
    model: str | None = Field(default=None, pattern=r"^s3://[a-z0-9][a-z0-9.-]*/.+",
                              description="s3:// URI of the base model (spec.initializer.model.storageUri; no key).")
    submitted_by: Literal["kubectl", "sdk"] = Field(
        default="kubectl", description="kubectl: the rehearsal's TrainJob, as admin. sdk: the Kubeflow SDK run as a "
        "member of the tenant (its own certificate, the tenant's RBAC), no queue label (Kueue defaults it).")


class Expectation(Model):
    """What must be true of one job when the scenario ends. Unset fields are not checked."""

    job: Name = Field(description="Name of a job of the scenario.")
    admitted: bool | None = Field(default=None, description="It was admitted at least once.")
    finished: bool | None = Field(default=None, description="It completed (TrainJob condition Complete).")
    flavor: Name | None = Field(default=None, description="The flavor of its (first) admission.")
    borrowed_gpus: int | None = Field(default=None, ge=0,
                                      description="GPUs its ClusterQueue borrowed on that flavor right after its admission.")
    preempted: bool | None = Field(default=None, description="It was evicted with reason Preempted at least once.")
    evicted: str | None = Field(default=None, description="It was evicted at least once with this reason "
                                "(e.g. PodsReadyTimeout).")
    requeued: bool | None = Field(default=None, description="After an eviction it was requeued (requeueState or readmission).")
    requeue_count_at_least: int | None = Field(default=None, ge=1, description="Kueue's requeueState.count reached this.")
    admitted_after: Name | None = Field(default=None, description="Its first admission came after the other job's finish.")
    one_domain: str | None = Field(default=None, description="All its pods ran in one domain of this topology level.")
    domains_at_least: int | None = Field(default=None, ge=1,
                                         description="Its pods spread over at least this many domains of `domain_level`.")
    domain_level: str | None = Field(default=None, description="Topology level for domains_at_least.")
    pending_reason_contains: str | None = Field(
        default=None, description="While pending, Kueue's QuotaReserved message contained this.")

    @model_validator(mode="after")
    def _level(self) -> Expectation:
        if self.domains_at_least is not None and self.domain_level is None:
            raise ValueError("domains_at_least needs domain_level")
        return self


class Scenario(Model):
    name: Name = Field(description="Scenario name.")
    description: str = Field(description="What it shows, in one or two sentences.")
    stacks: tuple[Name, ...] = Field(min_length=1, description="Stacks it is written for.")
    timeout: Duration = Field(default="120s", description="The scenario ends when every job finished, or after this.")
    platform: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the stack's trainyard:platform for this scenario (rehearsal only; lists of named "
        "items merge by name).")
    jobs: tuple[Job, ...] = Field(min_length=1, description="The TrainJobs, submitted in submit_after order.")
    expect: tuple[Expectation, ...] = Field(default=(), description="What must hold at the end.")

    @model_validator(mode="after")
    def _names(self) -> Scenario:
        names = [j.name for j in self.jobs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"jobs: names repeat: {', '.join(dupes)}")
        for i, expectation in enumerate(self.expect):
            for field in ("job", "admitted_after"):
                value = getattr(expectation, field)
                if value is not None and value not in names:
                    raise ValueError(f"expect[{i}].{field}: {value!r} is not a job of this scenario")
        return self

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)


class ScenarioError(Exception):
    """A scenario file that cannot be used: file, field path and reason for each problem."""

    def __init__(self, file: str, problems: list[str]) -> None:
        self.file = file
        self.problems = problems
        super().__init__("\n".join(f"{file}: {p}" for p in problems))


def load_scenario(path: Path) -> Scenario:
    shown = str(path)
    try:
        data = yamlio.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(shown, ["no such scenario file"]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(shown, [f"not valid YAML: {exc}"]) from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            path_text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".")
            reason = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                reason = "unknown field (check the spelling)"
            problems.append(f"{path_text or '(file)'}: {reason}")
        raise ScenarioError(shown, problems) from None


def scenario_path(name: str, root: Path) -> Path:
    """``quota-and-queueing`` means ``scenarios/quota-and-queueing.yaml``; anything with / or .yaml is a path."""
    if "/" in name or name.endswith((".yaml", ".yml")):
        return Path(name)
    return root / "scenarios" / f"{name}.yaml"
