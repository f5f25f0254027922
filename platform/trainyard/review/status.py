"""``trainyard status``: quota, usage and borrowing per ClusterQueue, and why pending work waits, from the live cluster.

It reads what Kueue writes: ClusterQueue ``status.flavorsUsage`` (``total`` and ``borrowed``
per flavor and resource) next to ``spec.resourceGroups`` (nominal quota, limits), and each
Workload's conditions. A Workload is pending until its ``QuotaReserved`` condition is True;
while it waits Kueue sets that condition False with the reason (``Pending``,
``Inadmissible``) and a message (``couldn't assign flavors to pod set ...: insufficient
unused quota for nvidia.com/gpu in flavor h100, 8 more needed``). Pending workloads are listed
oldest first. A pending Workload has no ``status.admission`` yet, so its ClusterQueue comes
from its LocalQueue (``spec.queueName`` in its namespace).

Reading the cluster is one ``kubectl get -o json`` per kind (the cluster's own auth plugins
and kubeconfig apply); building the report from those lists is pure, so a recorded snapshot
gives the same report offline (``--from FILE``).

Ref: kueue v0.19.2 apis/kueue/v1beta2/clusterqueue_types.go (ClusterQueueStatus.FlavorsUsage),
workload_types.go (WorkloadQuotaReserved, WorkloadAdmitted, WorkloadEvicted, WorkloadFinished).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from trainyard import catalog

KINDS = {"clusterqueues": "ClusterQueue", "localqueues": "LocalQueue", "workloads": "Workload"}


class ClusterReadError(Exception):
    """The cluster could not be read (kubectl missing, unreachable API server, Kueue CRDs absent)."""


@dataclass(frozen=True)
class ResourceStatus:
    flavor: str
    resource: str
    nominal: str
    borrowing_limit: str | None
    lending_limit: str | None
    usage: str
    borrowed: str


@dataclass(frozen=True)
class PendingWorkload:
    namespace: str
    name: str
    local_queue: str
    cluster_queue: str | None
    created: str
    priority: int | None
    reason: str
    message: str


@dataclass(frozen=True)
class QueueStatus:
    name: str
    cohort: str | None
    pending: int
    admitted: int
    resources: tuple[ResourceStatus, ...]
    workloads: tuple[PendingWorkload, ...]


@dataclass(frozen=True)
class ClusterStatus:
    context: str
    queues: tuple[QueueStatus, ...]
    unqueued: tuple[PendingWorkload, ...]


def read_cluster(kubectl: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``{"clusterqueues": [...], "localqueues": [...], "workloads": [...]}`` as the API server returns them."""
    snapshot: dict[str, list[dict[str, Any]]] = {}
    for plural in KINDS:
        resource = f"{plural}.{catalog.KUEUE_API.split('/')[1]}.{catalog.KUEUE_API.split('/')[0]}"
        command = [*kubectl, "get", resource, "-o", "json", *([] if plural == "clusterqueues" else ["-A"])]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ClusterReadError(f"{command[0]}: {exc}") from None
        if result.returncode != 0:
            raise ClusterReadError(f"kubectl get {resource} failed: {result.stderr.strip() or result.returncode}")
        snapshot[plural] = list(json.loads(result.stdout).get("items", []))
    return snapshot


def _limits(spec_resource: dict[str, Any]) -> tuple[str, str | None, str | None]:
    def text(key: str) -> str | None:
        value = spec_resource.get(key)
        return None if value is None else str(value)
    return str(spec_resource.get("nominalQuota", 0)), text("borrowingLimit"), text("lendingLimit")


def _resources(queue: dict[str, Any]) -> tuple[ResourceStatus, ...]:
    used: dict[tuple[str, str], dict[str, Any]] = {}
    for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            used[(flavor.get("name", ""), resource.get("name", ""))] = resource
    out = []
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                key = (flavor.get("name", ""), resource.get("name", ""))
                nominal, borrowing, lending = _limits(resource)
                usage = used.get(key, {})
                out.append(ResourceStatus(key[0], key[1], nominal, borrowing, lending,
                                          str(usage.get("total", 0)), str(usage.get("borrowed", 0))))
    return tuple(out)


def condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_pending(workload: dict[str, Any]) -> bool:
    """No quota reserved yet, not finished, and not deactivated."""
    if (workload.get("spec") or {}).get("active") is False:
        return False
    finished = condition(workload, "Finished")
    reserved = condition(workload, "QuotaReserved")
    return not (finished and finished.get("status") == "True") and not (reserved and reserved.get("status") == "True")


def _why(workload: dict[str, Any]) -> tuple[str, str]:
    reserved = condition(workload, "QuotaReserved")
    if reserved is not None:
        return str(reserved.get("reason", "")), str(reserved.get("message", ""))
    evicted = condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        return f"Evicted/{evicted.get('reason', '')}", str(evicted.get("message", ""))
    return "NotConsidered", "Kueue has not tried to admit it yet (no QuotaReserved condition)"


def status_report(snapshot: dict[str, list[dict[str, Any]]], context: str) -> ClusterStatus:
    local_queues = {(lq["metadata"].get("namespace", ""), lq["metadata"]["name"]): (lq.get("spec") or {}).get("clusterQueue")
                    for lq in snapshot.get("localqueues", [])}
    pending: list[PendingWorkload] = []
    for workload in snapshot.get("workloads", []):
        if not is_pending(workload):
            continue
        meta, spec = workload["metadata"], workload.get("spec") or {}
        queue_name = str(spec.get("queueName", ""))
        reason, message = _why(workload)
        pending.append(PendingWorkload(
            meta.get("namespace", ""), meta["name"], queue_name, local_queues.get((meta.get("namespace", ""), queue_name)),
            str(meta.get("creationTimestamp", "")), spec.get("priority"), reason, message))
    # Oldest first; the name breaks ties so the order is stable.
    pending.sort(key=lambda w: (w.created, w.namespace, w.name))
    queues = []
    for queue in sorted(snapshot.get("clusterqueues", []), key=lambda q: q["metadata"]["name"]):
        name = queue["metadata"]["name"]
        status = queue.get("status") or {}
        queues.append(QueueStatus(
            name, (queue.get("spec") or {}).get("cohortName"), int(status.get("pendingWorkloads", 0)),
            int(status.get("admittedWorkloads", 0)), _resources(queue),
            tuple(w for w in pending if w.cluster_queue == name)))
    names = {q.name for q in queues}
    return ClusterStatus(context, tuple(queues), tuple(w for w in pending if w.cluster_queue not in names))


def to_json(status: ClusterStatus) -> str:
    return json.dumps(asdict(status), indent=2, sort_keys=True) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(status: ClusterStatus, accelerators_only: bool = True) -> str:
    lines = [f"# Kueue status: {status.context}", ""]
    lines += ["| ClusterQueue | cohort | flavor | resource | nominal | usage | borrowed | borrowing limit | "
              "lending limit | admitted | pending |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for queue in status.queues:
        rows = [r for r in queue.resources if not accelerators_only or r.resource.startswith("nvidia.com/")]
        for r in rows:
            lines.append(f"| {queue.name} | {queue.cohort or '-'} | {r.flavor} | {r.resource} | {r.nominal} | {r.usage} | "
                         f"{r.borrowed} | {r.borrowing_limit or 'unlimited'} | {r.lending_limit or 'all'} | "
                         f"{queue.admitted} | {queue.pending} |")
    lines += ["", "## Pending workloads, oldest first", ""]
    waiting = [w for q in status.queues for w in q.workloads] + list(status.unqueued)
    waiting.sort(key=lambda w: (w.created, w.namespace, w.name))
    if not waiting:
        lines.append("No workload is pending.")
    else:
        lines += ["| since | workload | LocalQueue | ClusterQueue | priority | reason | message |",
                  "|---|---|---|---|---:|---|---|"]
        for w in waiting:
            lines.append(f"| {w.created} | {w.namespace}/{w.name} | {w.local_queue} | "
                         f"{w.cluster_queue or '(no such LocalQueue)'} | {'-' if w.priority is None else w.priority} | "
                         f"{w.reason} | {_cell(w.message)} |")
    return "\n".join(lines) + "\n"
