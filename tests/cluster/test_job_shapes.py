"""The TrainJob shapes matrix on the rehearsal, with the real Kueue, JobSet and Trainer (and kube-scheduler, kwok).

The local stack with a fake pool of each kind (whole GPUs, MIG slices, time-sliced replicas;
tests/fixtures/job-shapes-overrides.yaml) is deployed with the real engine, and team-a submits every shape of
tests/job_shapes.py on torch-distributed, and a few on each other approved runtime: with kubectl as a member of the
team (its own certificate, the tenant's RBAC), and with the Kubeflow SDK where the SDK can write the shape. Then,
for every TrainJob:

- what the rules refuse (``trainjob_resources.refusals``) is refused at submission by ``trainyard-trainjob-resources``;
- what is admitted creates its Jobs and one pod per node, each pod's ``node`` container has exactly the completed
  resources, it lands on a flavor whose nodes advertise what it asks for, it completes, and the quota Kueue reserved
  for the Workload is what its pods requested (no quota held by pods that do not exist, none uncounted).

The table is printed. ``TRAINYARD_SHAPES_OBSERVE=1`` prints the table without asserting (the table before the fix
was made so, on the code before it).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest
import yaml

from tests import job_shapes
from tests.cluster.conftest import BIN_DIR
from tests.conftest import ROOT
from trainyard.manifests.rehearsal import fake_nodes
from trainyard.quantity import parse_quantity
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster

OBSERVE = os.environ.get("TRAINYARD_SHAPES_OBSERVE") == "1"
TENANT = "team-a"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
POOL_LABEL = "trainyard.dev/pool"
POLICY = "trainyard-trainjob-resources"
DEADLINE = 240  # seconds for every admitted job of a wave to finish
# TrainJobs submitted at once: well under the tenant ResourceQuota's count/trainjobs (50) and its requests.cpu.
WAVE = 12


def selected_cases() -> list[tuple[job_shapes.Case, str]]:
    """Every shape on torch-distributed (kubectl; and the SDK where it can write it), two on every other runtime."""
    out = []
    for case in job_shapes.cases(runtimes=("torch-distributed",)):
        out.append((case, "kubectl"))
        if case.shape.sdk is not None:
            out.append((case, "sdk"))
    for case in job_shapes.cases(runtimes=("deepspeed-mpi", "lora-finetune", "lora-peft")):
        if case.shape.name in ("limits only", "both, unequal"):
            out.append((case, "kubectl"))
    return out


@pytest.fixture(scope="module")
def shapes_rehearsal(deployed_rehearsal: Rehearsal) -> Iterator[Rehearsal]:
    overrides = yaml.safe_load((ROOT / "tests" / "fixtures" / "job-shapes-overrides.yaml").read_text(encoding="utf-8"))
    session = deployed_rehearsal.with_overrides(overrides)
    session.controllers.up()
    nodes = fake_nodes(session.config, every_pool=True)
    added = sorted({n["metadata"]["name"] for n in nodes} - {n["metadata"]["name"]
                                                               for n in fake_nodes(deployed_rehearsal.config, every_pool=True)})
    session.control_plane.apply_nodes(nodes)
    run = session.deploy_if_changed()
    assert run is None or run.returncode == 0, run.output[-4000:] if run else ""
    session.reset_jobs()
    yield session
    session.reset_jobs()
    if added:
        session.kube.delete("nodes", *added)


@dataclass
class Outcome:
    case: job_shapes.Case
    via: str
    name: str
    refused: str | None = None
    refused_by_policy: bool = False  # the refusal names trainyard-trainjob-resources
    trainjob: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def submit(session: Rehearsal, case: job_shapes.Case, via: str, name: str) -> Outcome:
    outcome = Outcome(case, via, name)
    namespace = session.namespace_of(TENANT)
    if via == "sdk":
        resources = case.sdk_resources()
        assert resources is not None
        try:
            session.tenant_sdk(TENANT).submit_sized(case.runtime, name, case.shape.num_nodes, resources)
        except Exception as error:  # the SDK raises the API server's refusal as its own RuntimeError
            outcome.refused = str(error).split("denied request: ", 1)[-1][:400]
            outcome.refused_by_policy = POLICY in str(error)
        return outcome
    done = subprocess.run([str(BIN_DIR / "kubectl"), "--kubeconfig", str(session.tenant_kubeconfig(TENANT)),
                           "create", "-f", "-"], input=yaml.safe_dump(case.trainjob(name, namespace)),
                          capture_output=True, text=True, env=session.env, timeout=60, check=False)
    if done.returncode != 0:
        outcome.refused = done.stderr.strip().split("denied request: ", 1)[-1][:400]
        outcome.refused_by_policy = POLICY in done.stderr
    return outcome


def observe(session: Rehearsal, outcomes: list[Outcome]) -> None:
    namespace = session.namespace_of(TENANT)
    created = [o for o in outcomes if o.refused is None]

    def finished() -> bool:
        jobs = {t["metadata"]["name"]: t for t in session.trainjobs(namespace)}
        return all(any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                       for c in jobs.get(o.name, {}).get("status", {}).get("conditions", [])) for o in created)

    with contextlib.suppress(TimeoutError):  # what stands is recorded and judged below
        wait_until("every admitted shape of the wave to finish", finished, DEADLINE, interval=3)
    jobs = {t["metadata"]["name"]: t for t in session.trainjobs(namespace)}
    workloads = session.workloads(namespace)
    pods = session.kube.items("pods", namespace)
    warnings = [e for e in session.kube.items("events", namespace) if e.get("type") == "Warning"]
    for outcome in created:
        outcome.trainjob = jobs.get(outcome.name, {})
        outcome.workload = next((w for w in workloads if any(r.get("name") == outcome.name for r in
                                                             w["metadata"].get("ownerReferences", []))), {})
        outcome.pods = [p for p in pods if p["metadata"].get("labels", {}).get(JOBSET_LABEL) == outcome.name]
        outcome.events = sorted({f"{e.get('reason')}: {str(e.get('message'))[:200]}" for e in warnings
                                 if str(e.get("involvedObject", {}).get("name", "")).startswith(outcome.name)})


def quantities(values: dict[str, Any] | None) -> dict[str, Fraction]:
    return {k: parse_quantity(str(v)) for k, v in (values or {}).items() if parse_quantity(str(v)) != 0}


def node_containers(outcome: Outcome) -> list[dict[str, Any]]:
    return [c for p in outcome.pods for c in p["spec"]["containers"] if c["name"] == "node"]


def reserved(outcome: Outcome) -> dict[str, Fraction]:
    """What Kueue reserved for the Workload: the sum of its pod sets' resourceUsage."""
    total: dict[str, Fraction] = {}
    for assignment in (outcome.workload.get("status", {}).get("admission") or {}).get("podSetAssignments", []):
        for name, value in quantities(assignment.get("resourceUsage")).items():
            total[name] = total.get(name, Fraction(0)) + value
    return total


def requested(outcome: Outcome) -> dict[str, Fraction]:
    """What the job's pods request (every container; init containers as the scheduler counts them: the max)."""
    total: dict[str, Fraction] = {}
    for pod in outcome.pods:
        pod_total: dict[str, Fraction] = {}
        for container in pod["spec"]["containers"]:
            for name, value in quantities(container.get("resources", {}).get("requests")).items():
                pod_total[name] = pod_total.get(name, Fraction(0)) + value
        for container in pod["spec"].get("initContainers", []):
            for name, value in quantities(container.get("resources", {}).get("requests")).items():
                pod_total[name] = max(pod_total.get(name, Fraction(0)), value)
        for name, value in pod_total.items():
            total[name] = total.get(name, Fraction(0)) + value
    return total


def flavors(outcome: Outcome) -> str:
    assignments = (outcome.workload.get("status", {}).get("admission") or {}).get("podSetAssignments", [])
    return ",".join(sorted({f for a in assignments for f in (a.get("flavors") or {}).values()})) or "-"


def shown(values: dict[str, Fraction]) -> str:
    def one(v: Fraction) -> str:
        if v.denominator == 1:
            return str(v.numerator)
        return f"{float(v):g}"
    short = {k.removeprefix("nvidia.com/"): v for k, v in values.items() if k not in ("pods",)}
    return " ".join(f"{k}={one(v) if k != 'memory' else f'{float(v) / 2**30:g}Gi'}" for k, v in sorted(short.items()))


def node_pools(session: Rehearsal, outcome: Outcome, training_only: bool = False) -> set[str]:
    """The pools the job's pods ran on; ``training_only``: only pods with a ``node`` container (not initializers)."""
    nodes = {n["metadata"]["name"]: n for n in session.kube.items("nodes", None)}
    return {nodes.get(p["spec"].get("nodeName") or "", {}).get("metadata", {}).get("labels", {}).get(POOL_LABEL, "-")
            for p in outcome.pods
            if not training_only or any(c["name"] == "node" for c in p["spec"]["containers"])}


def state(outcome: Outcome) -> str:
    if outcome.refused is not None:
        return "refused at submit"
    conditions = {c["type"]: c for c in outcome.trainjob.get("status", {}).get("conditions", []) if c["status"] == "True"}
    if "Complete" in conditions:
        return "completed"
    if "Failed" in conditions:
        return "failed: " + str(conditions["Failed"].get("message", ""))[:120]
    if not outcome.workload.get("status", {}).get("admission"):
        return "not admitted"
    if not outcome.pods:
        return "ADMITTED, NO PODS" + (f" ({outcome.events[0][:160]})" if outcome.events else "")
    return f"admitted, {len(outcome.pods)} pods, not finished"


def expectation(case: job_shapes.Case, session: Rehearsal) -> tuple[Any, list[str]]:
    """The completed resources (the runtime's where the job gives none) and the refusals, from the live runtimes."""
    from trainyard.manifests import trainjob_resources as tr

    runtimes = session.kube.items("clustertrainingruntimes.trainer.kubeflow.org", None)
    flavors = tr.tenant_flavors(session.config)[session.namespace_of(TENANT)]
    completed, _, refused = job_shapes.expected(case, runtimes, flavors)
    return (completed if completed is not None else tr.runtime_shapes(runtimes)[case.runtime].resources), refused


def training_pods(session: Rehearsal, case: job_shapes.Case) -> int:
    """Pods with a ``node`` container for numNodes: one per node; with MPI's runLauncherAsNode, the launcher and
    max(numNodes - 1, 1) node pods. Ref: kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/mpi/mpi.go."""
    runtime = session.kube.get("clustertrainingruntimes.trainer.kubeflow.org", case.runtime)
    if ((runtime["spec"].get("mlPolicy") or {}).get("mpi") or {}).get("runLauncherAsNode"):
        return max(case.shape.num_nodes - 1, 1) + 1
    return case.shape.num_nodes


def judged(session: Rehearsal, outcome: Outcome, what: str, note: str) -> list[str]:
    """What is wrong with one outcome against the rules (``trainjob_resources``): empty where it is right."""
    case, wrong = outcome.case, []
    completed, refused = expectation(case, session)
    label = f"{case.id} ({outcome.via})"
    if refused:
        if not outcome.refused_by_policy:
            wrong.append(f"{label}: expected refused ({refused[0]}), got {what} {note}")
        return wrong
    if outcome.refused is not None:
        wrong.append(f"{label}: refused ({outcome.refused})")
        return wrong
    if what != "completed":
        wrong.append(f"{label}: {what}")
    containers = node_containers(outcome)
    if len(containers) != training_pods(session, case):
        wrong.append(f"{label}: {len(containers)} node pods for numNodes {case.shape.num_nodes}")
    for container in containers:
        got = container.get("resources", {})
        if (quantities(got.get("requests")), quantities(got.get("limits"))) != (
                quantities(completed.requests), quantities(completed.limits)):
            wrong.append(f"{label}: node container resources {got}, expected {completed.as_manifest()}")
    if reserved(outcome) != requested(outcome):
        wrong.append(f"{label}: Kueue reserved {shown(reserved(outcome))}, the pods request "
                     f"{shown(requested(outcome))}")
    accelerators = {k for k in quantities(completed.requests) if "/" in k}
    advertised = {n["metadata"]["labels"].get(POOL_LABEL): set(n["status"]["allocatable"])
                  for n in session.kube.items("nodes", None) if POOL_LABEL in n["metadata"].get("labels", {})}
    for pool in node_pools(session, outcome, training_only=True):
        if not accelerators <= advertised.get(pool, set()):
            wrong.append(f"{label}: pods on pool {pool}, which does not advertise {sorted(accelerators)}")
    return wrong


def test_every_shape_is_refused_at_submit_or_runs_as_kueue_counted_it(shapes_rehearsal: Rehearsal,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    session = shapes_rehearsal
    start = time.monotonic()
    selected = selected_cases()
    outcomes: list[Outcome] = []
    for first in range(0, len(selected), WAVE):
        wave = [submit(session, case, via, f"shape-{first + i}") for i, (case, via) in enumerate(selected[first:first + WAVE])]
        observe(session, wave)
        outcomes += wave
        session.reset_jobs(timeout=300)
    rows, wrong = [], []
    for outcome in outcomes:
        case = outcome.case
        pools = ",".join(sorted(node_pools(session, outcome))) if outcome.pods else "-"
        what = state(outcome)
        note = outcome.refused or ""
        rows.append(f"| {case.pool} | {case.runtime} | {case.shape.name} | {outcome.via} | {what} | "
                    f"{shown(reserved(outcome)) or '-'} | {len(outcome.pods)}: {shown(requested(outcome)) or '-'} | "
                    f"{flavors(outcome)} / {pools} | {note[:150]} |")
        if not OBSERVE:
            wrong += judged(session, outcome, what, note)
    queue = session.kube.get("clusterqueues.kueue.x-k8s.io", TENANT)
    held = {f["name"]: {r["name"]: r["total"] for r in f["resources"] if str(r["total"]) not in ("0",)}
            for f in queue.get("status", {}).get("flavorsReservation", [])}
    with capsys.disabled():
        print(f"\n{len(outcomes)} TrainJobs of team-a ({time.monotonic() - start:.0f}s):\n"
              "| pool | runtime | shape | via | outcome | Kueue reserved | pods: they request | flavor / node pool "
              "| refusal |\n|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
        print(f"ClusterQueue {TENANT} reservation afterwards: {json.dumps({k: v for k, v in held.items() if v})}")
        print("\n".join(f"WRONG: {w}" for w in wrong))
    assert wrong == []


def own_runtime_with_a_default_gpu(session: Rehearsal, namespace: str) -> dict[str, Any]:
    """A tenant's own TrainingRuntime: the approved torch-distributed as installed, with a default GPU on its node
    container (what the approved runtimes no longer carry), which the policies cannot read."""
    runtime = session.kube.get("clustertrainingruntimes.trainer.kubeflow.org", "torch-distributed")
    spec = runtime["spec"]
    for job in spec["template"]["spec"]["replicatedJobs"]:
        for container in job["template"]["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "node":
                container["resources"] = {"requests": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "2Gi"},
                                          "limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "2Gi"}}
    return {"apiVersion": runtime["apiVersion"], "kind": "TrainingRuntime",
            "metadata": {"name": "own-gpu-default", "namespace": namespace,
                         "labels": {"trainer.kubeflow.org/framework": "torch"}}, "spec": spec}


def test_a_job_that_slips_through_is_evicted_and_its_quota_released(shapes_rehearsal: Rehearsal,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A MIG TrainJob on a tenant runtime that requests a whole GPU by default: Kueue counts the MIG slice (it
    replaces the container's resources), Trainer's pods ask for the slice *and* the GPU, no node has both. It is
    evicted within waitForPodsReady (60 s here), its quota is released, and `trainyard status` says why (Evicted, or
    Pending again after the requeue backoff, with Kueue's "Exceeded the PodsReady timeout")."""
    session = shapes_rehearsal
    namespace = session.namespace_of(TENANT)
    session.kube.apply([own_runtime_with_a_default_gpu(session, namespace)], "trainyard-test")
    job = job_shapes.Case("mig", job_shapes.Shape("own runtime", limits={"nvidia.com/mig-1g.10gb": 1}),
                          "own-gpu-default", "nvidia.com/mig-1g.10gb", 14).trainjob("slipped", namespace)
    job["spec"]["runtimeRef"] = {"name": "own-gpu-default", "kind": "TrainingRuntime"}
    start = time.monotonic()
    session.kube.create(job)
    slices = "nvidia.com/mig-1g.10gb"

    def workload() -> dict[str, Any]:
        return next((w for w in session.workloads(namespace) if any(
            r.get("name") == "slipped" for r in w["metadata"].get("ownerReferences", []))), {})

    def conditions(obj: dict[str, Any]) -> dict[str, str]:
        return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}

    def reserved_slices() -> int:
        queue = session.kube.get("clusterqueues.kueue.x-k8s.io", TENANT)
        return sum(int(str(r["total"])) for f in queue.get("status", {}).get("flavorsReservation", [])
                   for r in f["resources"] if r["name"] == slices)

    def holding() -> bool:
        return conditions(workload()).get("QuotaReserved") == "True" and reserved_slices() > 0

    def pods() -> list[str]:
        return [p["status"].get("phase") for p in session.kube.items("pods", namespace)
                if p["metadata"].get("labels", {}).get(JOBSET_LABEL) == "slipped"]

    wait_until("the slipped job to be admitted, holding its slice", holding, 120, interval=1)
    admitted_after = time.monotonic() - start
    held = reserved_slices()
    wait_until("the slipped job's pods to be created", lambda: bool(pods()), 60, interval=1)
    pending = pods()

    def evicted_and_released() -> bool:
        now = conditions(workload())
        return now.get("Evicted") == "True" and now.get("QuotaReserved") != "True" and reserved_slices() == 0

    wait_until("the slipped job to be evicted and its quota released", evicted_and_released, 180, interval=1)
    evicted_after = time.monotonic() - start
    reason = next(c for c in workload()["status"]["conditions"] if c["type"] == "Evicted")
    status = subprocess.run([str(ROOT / ".venv" / "bin" / "trainyard"), "status", str(session.stack_file),
                             "--kubeconfig", str(session.settings.kubeconfig), "--kubectl", str(BIN_DIR / "kubectl")],
                            capture_output=True, text=True, cwd=ROOT, env=session.env, timeout=120, check=False)
    line = next((row for row in status.stdout.splitlines() if "slipped" in row), "")
    with capsys.disabled():
        print(f"\nslipped TrainJob: admitted after {admitted_after:.0f}s holding {held} {slices}; its pods: {pending}; "
              f"evicted ({reason['reason']}: {reason['message'][:160]}) and released after {evicted_after:.0f}s\n"
              f"trainyard status: {line.strip()}")
    session.kube.delete("trainjobs.trainer.kubeflow.org", "slipped", namespace=namespace)
    session.kube.delete("trainingruntimes.trainer.kubeflow.org", "own-gpu-default", namespace=namespace)
    assert held == 1 and pending and "Running" not in pending
    assert reason["reason"] == "PodsReadyTimeout"
    assert status.returncode == 0, status.stderr
    # By then Kueue may have requeued it (Pending again, after its backoff): the line says why either way.
    assert "PodsReady" in line, line
