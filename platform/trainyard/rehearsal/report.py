"""What Kueue decided about each job of a scenario: observed from the live objects, checked against the expectations.

``Observer.observe`` is called about once a second while a scenario runs. It reads, per job, the
Kueue Workload the TrainJob got (Ref: kueue v0.19.2 apis/kueue/v1beta2/workload_types.go:
``admission``, ``requeueState``, conditions QuotaReserved/Admitted/Evicted/Requeued/Finished),
the TrainJob's own conditions, the pods' nodes and their topology labels, and the ClusterQueue's
borrowed GPUs at the moment of admission. ``History`` keeps what was seen; ``table`` prints it;
``check`` compares it with the scenario's expectations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.quantity import parse_quantity
from trainyard.rehearsal.kube import Kube, Manifest
from trainyard.rehearsal.scenario import Expectation, Scenario


@dataclass
class History:
    """Everything observed about one job."""

    job: str
    tenant: str
    namespace: str
    submitted_at: float | None = None
    workload: str | None = None
    admissions: int = 0
    admitted_at: float | None = None
    flavor: str | None = None
    borrowed_gpus: int | None = None
    evictions: list[str] = field(default_factory=list)  # reasons, in order
    seen_evictions: set[str] = field(default_factory=set)  # lastTransitionTime of each Evicted=True seen
    requeue_count: int = 0
    finished_at: float | None = None
    failed: str | None = None
    pending_message: str = ""
    pending_messages: set[str] = field(default_factory=set)
    nodes: dict[str, str] = field(default_factory=dict)  # pod -> node, last admission
    currently_admitted: bool = False

    @property
    def state(self) -> str:
        if self.failed:
            return "failed"
        if self.finished_at is not None:
            return "finished"
        if self.currently_admitted:
            return "admitted"
        if self.evictions:
            return f"evicted ({self.evictions[-1]}), pending"
        return "pending" if self.submitted_at is not None else "not submitted"

    @property
    def decisions(self) -> str:
        steps = []
        if self.admissions:
            steps.append("admitted")
        steps += ["preempted" if r == "Preempted" else f"evicted:{r}" for r in self.evictions]
        if self.requeue_count:
            steps.append(f"requeued x{self.requeue_count}")
        if self.admissions > 1:
            steps.append(f"readmitted x{self.admissions - 1}")
        if self.finished_at is not None:
            steps.append("finished")
        return ", ".join(steps) or "pending"

    @property
    def waited(self) -> float | None:
        if self.submitted_at is None or self.admitted_at is None:
            return None
        return self.admitted_at - self.submitted_at


class Observer:
    def __init__(self, kube: Kube, config: PlatformConfig, scenario: Scenario) -> None:
        self.kube = kube
        self.config = config
        self.scenario = scenario
        tenants = {t.name: t for t in config.tenants}
        self.history = {j.name: History(j.name, j.tenant, tenants[j.tenant].namespace_name) for j in scenario.jobs}
        self.node_labels: dict[str, dict[str, str]] = {}

    def levels(self) -> list[tuple[str, str]]:
        """(level name, node label) of the stack's topology, widest first."""
        return [(lvl.name, lvl.node_label) for lvl in self.config.topology.levels] if self.config.topology else []

    def observe(self) -> None:
        now = time.monotonic()
        namespaces = sorted({h.namespace for h in self.history.values() if h.submitted_at is not None})
        if not self.node_labels:
            self.node_labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in self.kube.items("nodes", None)}
        for namespace in namespaces:
            workloads = {owner: w for w in self.kube.items("workloads.kueue.x-k8s.io", namespace)
                         for owner in [_owner(w, "TrainJob")] if owner}
            trainjobs = {t["metadata"]["name"]: t for t in self.kube.items("trainjobs.trainer.kubeflow.org", namespace)}
            pods = self.kube.items("pods", namespace)
            for history in self.history.values():
                if history.namespace != namespace or history.submitted_at is None:
                    continue
                self._update(history, workloads.get(history.job), trainjobs.get(history.job), pods, now)

    def _update(self, history: History, workload: Manifest | None, trainjob: Manifest | None, pods: list[Manifest],
                now: float) -> None:
        if trainjob is not None:
            for condition in trainjob.get("status", {}).get("conditions", []):
                if condition["type"] == "Complete" and condition["status"] == "True" and history.finished_at is None:
                    history.finished_at = now
                if condition["type"] == "Failed" and condition["status"] == "True":
                    history.failed = condition.get("message", "Failed")
        if workload is None:
            return
        history.workload = workload["metadata"]["name"]
        status = workload.get("status", {})
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        admitted = _admitted_at(workload) is not None
        if admitted and not history.currently_admitted:
            history.admissions += 1
            history.nodes = {}
            if history.admitted_at is None:
                history.admitted_at = now
                history.flavor, history.borrowed_gpus = self._admission(workload)
        history.currently_admitted = admitted
        evicted = conditions.get("Evicted")
        if evicted and evicted["status"] == "True" and evicted["lastTransitionTime"] not in history.seen_evictions:
            history.seen_evictions.add(evicted["lastTransitionTime"])
            history.evictions.append(evicted.get("reason", "Evicted"))
        history.requeue_count = max(history.requeue_count, (status.get("requeueState") or {}).get("count", 0))
        reserved = conditions.get("QuotaReserved", {})
        if reserved.get("status") == "False" and reserved.get("message"):
            history.pending_message = reserved["message"]
            history.pending_messages.add(reserved["message"])
        if admitted:
            for pod in pods:
                if _owner_chain_job(pod) == history.job and pod["spec"].get("nodeName"):
                    history.nodes[pod["metadata"]["name"]] = pod["spec"]["nodeName"]

    def _admission(self, workload: Manifest) -> tuple[str | None, int | None]:
        admission = workload.get("status", {}).get("admission") or {}
        # The GPUs' flavor; a CPU-only job's (no GPU assigned) is its CPU's.
        flavors = [a.get("flavors", {}) for a in admission.get("podSetAssignments", [])]
        flavor = next((f.get(catalog.GPU_RESOURCE) or f.get("cpu") for f in flavors
                       if f.get(catalog.GPU_RESOURCE) or f.get("cpu")), None)
        queue = admission.get("clusterQueue")
        if not queue or not flavor:
            return flavor, None
        # Computed from the admitted Workloads, not read from the ClusterQueue's status: Kueue writes that
        # status asynchronously, so right after an admission it may not count it yet. Only those admitted no later
        # than this one (their Admitted conditions' times, whole seconds): the observer may see an admission seconds
        # late on a loaded machine, when a job submitted after it has been admitted too (seen in a cold CI run).
        admitted_at = _admitted_at(workload)
        cq = self.kube.get("clusterqueues.kueue.x-k8s.io", queue)
        nominal = 0
        for group in cq["spec"].get("resourceGroups", []):
            for entry in group.get("flavors", []):
                if entry["name"] == flavor:
                    nominal += sum(int(parse_quantity(r["nominalQuota"])) for r in entry["resources"]
                                   if r["name"] == catalog.GPU_RESOURCE)
        used = 0
        for other in self.kube.items("workloads.kueue.x-k8s.io", workload["metadata"]["namespace"]):
            other_admission = (other.get("status") or {}).get("admission") or {}
            other_at = _admitted_at(other)
            if other_at is None or other_admission.get("clusterQueue") != queue:
                continue
            if admitted_at and other_at > admitted_at:
                continue
            for assignment in other_admission.get("podSetAssignments", []):
                if assignment.get("flavors", {}).get(catalog.GPU_RESOURCE) == flavor:
                    used += int(str(assignment.get("resourceUsage", {}).get(catalog.GPU_RESOURCE, 0)))
        return flavor, max(0, used - nominal)

    def domains(self, history: History, level: str) -> list[str]:
        label = dict(self.levels()).get(level)
        if label is None:
            return []
        return sorted({self.node_labels.get(node, {}).get(label, "?") for node in history.nodes.values()})


def _admitted_at(workload: Manifest) -> str | None:
    """When a Workload's Admitted condition turned True (RFC 3339, whole seconds, so comparable as text), None if it
    is not admitted; "" for an admitted one whose condition carries no time (then it counts as admitted first)."""
    for condition in (workload.get("status") or {}).get("conditions", []):
        if condition.get("type") == "Admitted" and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime") or "")
    return None


def _owner(obj: Manifest, kind: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref["kind"] == kind:
            return str(ref["name"])
    return None


def _owner_chain_job(pod: Manifest) -> str | None:
    """The TrainJob a pod belongs to: Trainer names the JobSet after the TrainJob, and JobSet labels its pods."""
    name = pod["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name")
    return str(name) if name else None


# ---------------------------------------------------------------------------------------- table


def table(observer: Observer) -> str:
    levels = observer.levels()
    level = levels[-2][0] if len(levels) >= 2 else (levels[0][0] if levels else None)
    header = ["job", "tenant", "state", "decisions", "flavor", "borrowed GPUs", f"{level or 'topology'} of each pod",
              "wait (s)"]
    rows = [header]
    for history in observer.history.values():
        pods = ""
        if level:
            label = dict(levels)[level]
            pods = " ".join(observer.node_labels.get(n, {}).get(label, "?") for _, n in sorted(history.nodes.items()))
        rows.append([history.job, history.tenant, history.state, history.decisions, history.flavor or "-",
                     "-" if history.borrowed_gpus is None else str(history.borrowed_gpus), pods or "-",
                     "-" if history.waited is None else f"{history.waited:.0f}"])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    pending = [h for h in observer.history.values() if h.pending_message and h.admissions == 0]
    for history in pending:
        lines.append(f"\n{history.job}: {history.pending_message}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- expectations


def check(observer: Observer, expectations: tuple[Expectation, ...]) -> list[str]:
    """Every expectation that does not hold, as a sentence."""
    failures = []
    for expectation in expectations:
        history = observer.history[expectation.job]
        failures += [f"{expectation.job}: {problem}" for problem in _problems(observer, history, expectation)]
    return failures


def _problems(observer: Observer, h: History, e: Expectation) -> list[str]:  # noqa: PLR0912 - one branch per field
    out = []
    if e.admitted is not None and (h.admissions > 0) != e.admitted:
        out.append(f"expected admitted={e.admitted}, was admitted {h.admissions} times")
    if e.finished is not None and (h.finished_at is not None) != e.finished:
        out.append(f"expected finished={e.finished}, state {h.state}")
    if e.flavor is not None and h.flavor != e.flavor:
        out.append(f"expected flavor {e.flavor}, got {h.flavor}")
    if e.borrowed_gpus is not None and h.borrowed_gpus != e.borrowed_gpus:
        out.append(f"expected its ClusterQueue to borrow {e.borrowed_gpus} GPUs after admission, saw {h.borrowed_gpus}")
    if e.preempted is not None and ("Preempted" in h.evictions) != e.preempted:
        out.append(f"expected preempted={e.preempted}, evictions: {h.evictions or 'none'}")
    if e.evicted is not None and e.evicted not in h.evictions:
        out.append(f"expected an eviction with reason {e.evicted}, evictions: {h.evictions or 'none'}")
    requeued = h.requeue_count > 0 or h.admissions > 1
    if e.requeued is not None and requeued != e.requeued:
        out.append(f"expected requeued={e.requeued} (requeueState.count {h.requeue_count}, admissions {h.admissions})")
    if e.requeue_count_at_least is not None and h.requeue_count < e.requeue_count_at_least:
        out.append(f"expected requeueState.count >= {e.requeue_count_at_least}, saw {h.requeue_count}")
    if e.admitted_after is not None:
        other = observer.history[e.admitted_after]
        if h.admitted_at is None or other.finished_at is None or h.admitted_at < other.finished_at:
            out.append(f"expected its first admission after {e.admitted_after} finished")
    if e.one_domain is not None:
        domains = observer.domains(h, e.one_domain)
        if len(domains) != 1:
            out.append(f"expected all pods in one {e.one_domain}, saw {domains or 'no pods'}")
    if e.domains_at_least is not None and e.domain_level is not None:
        domains = observer.domains(h, e.domain_level)
        if len(domains) < e.domains_at_least:
            out.append(f"expected pods in at least {e.domains_at_least} {e.domain_level}s, saw {domains or 'no pods'}")
    if e.pending_reason_contains is not None and not any(e.pending_reason_contains in m for m in h.pending_messages):
        out.append(f"expected a pending message containing {e.pending_reason_contains!r}, saw {sorted(h.pending_messages)}")
    return out


def as_dict(observer: Observer) -> list[dict[str, Any]]:
    """The histories as plain data (for tests and benchmarks)."""
    return [{"job": h.job, "tenant": h.tenant, "state": h.state, "admissions": h.admissions, "flavor": h.flavor,
             "borrowed_gpus": h.borrowed_gpus, "evictions": list(h.evictions), "requeue_count": h.requeue_count,
             "nodes": dict(h.nodes), "waited": h.waited} for h in observer.history.values()]
