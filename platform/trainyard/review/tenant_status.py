"""``trainyard status STACK --tenant NAME``: a tenant's own queue, its jobs' places in it and why each one waits.

It reads only what the tenant Role (``manifests/tenants.role_for``) grants in the tenant's namespace, so a
team member runs it with their own credentials: the namespace's LocalQueues (``status``: pending, reserving and
admitted counts, ``flavorsReservation`` and ``flavorsUsage``), its Workloads (conditions ``QuotaReserved``,
``Admitted``, ``Evicted``, ``Finished``, ``spec.active``, ``status.requeueState``) and, for each LocalQueue,
Kueue's visibility API:

    GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<lq>/pendingworkloads

which answers a ``PendingWorkloadsSummary`` whose items carry ``positionInLocalQueue`` and
``positionInClusterQueue`` (0 = next), as Kueue's own queue orders them.
Ref: kueue v0.19.2 apis/visibility/v1beta2/types.go (PendingWorkloadsSummary, PendingWorkload);
pkg/visibility/storage/pending_workloads_lq.go (namespace and LocalQueue filter, positions);
site/content/en/docs/tasks/manage/monitor_pending_workloads/pending_workloads_on_demand.md.

Where the visibility API is not served (the APIService is missing or unavailable) or refused, the positions are
estimated from the Workloads in Kueue's queue order, and the report says so and why: higher priority first, then
the older queue timestamp (the eviction time of a workload evicted by PodsReadyTimeout when requeuing uses
``Eviction``, or by an admission check; else its creation). The ClusterQueue position counts the namespace's
Workloads only, which is the whole ClusterQueue on a Trainyard stack (each ClusterQueue admits one tenant's
namespace). Ref: kueue v0.19.2 pkg/cache/queue/cluster_queue.go (baseCompareFunc), pkg/workload/workload.go
(GetQueueOrderTimestamp).

Reading is one kubectl call per kind and one per LocalQueue; the report is built from those answers alone, so a
recorded snapshot gives the same report offline (``--from``).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from trainyard import catalog
from trainyard.review.status import ClusterReadError, condition, is_pending

VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta2"
KUEUE_GROUP, KUEUE_VERSION = catalog.KUEUE_API.split("/")
SNAPSHOT_KIND = "trainyard.tenant-status/v1"
VISIBILITY = "visibility API"
ESTIMATED = "estimated from the Workloads"


def pending_workloads_path(namespace: str, local_queue: str) -> str:
    return f"/apis/{VISIBILITY_API}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"


def _kubectl_json(command: list[str]) -> tuple[Any, str | None]:
    """(parsed stdout, None), or (None, what kubectl said) when it failed."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterReadError(f"{command[0]}: {exc}") from None
    if result.returncode != 0:
        return None, (result.stderr.strip() or f"exit {result.returncode}").splitlines()[-1]
    try:
        return json.loads(result.stdout), None
    except json.JSONDecodeError:
        return None, f"not JSON: {result.stdout[:200]!r}"


def read_namespace(kubectl: list[str], namespace: str) -> dict[str, Any]:
    """The snapshot a tenant's report is built from, read with ``kubectl`` (the tenant's own credentials)."""
    snapshot: dict[str, Any] = {"kind": SNAPSHOT_KIND, "namespace": namespace,
                                "readAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    for plural in ("localqueues", "workloads"):
        resource = f"{plural}.{KUEUE_VERSION}.{KUEUE_GROUP}"
        listed, error = _kubectl_json([*kubectl, "get", resource, "-n", namespace, "-o", "json"])
        if error is not None:
            raise ClusterReadError(f"kubectl get {resource} -n {namespace} failed: {error}")
        snapshot[plural] = list(listed.get("items", []))
    pending: dict[str, Any] = {}
    for queue in snapshot["localqueues"]:
        name = queue["metadata"]["name"]
        summary, error = _kubectl_json([*kubectl, "get", "--raw", pending_workloads_path(namespace, name)])
        pending[name] = {"error": error} if error is not None else summary
    snapshot["pendingWorkloads"] = pending
    return snapshot


@dataclass(frozen=True)
class FlavorUse:
    flavor: str
    resource: str
    reserved: str
    in_use: str


@dataclass(frozen=True)
class LocalQueueStatus:
    name: str
    cluster_queue: str
    pending: int
    reserving: int
    admitted: int
    usage: tuple[FlavorUse, ...]
    positions: str  # VISIBILITY or ESTIMATED
    visibility_error: str | None  # what the API server said when the visibility API did not answer


@dataclass(frozen=True)
class WorkloadStatus:
    name: str
    job: str  # Kind/name of the job that owns the Workload
    local_queue: str
    state: str  # pending, quota reserved, admitted, finished, deactivated
    priority: int
    created: str
    position_in_local_queue: int | None  # 0 = next; None when not pending (or not queued yet)
    position_in_cluster_queue: int | None
    positions: str | None  # VISIBILITY, ESTIMATED, or None
    reason: str  # Kueue's reason (QuotaReserved=False, Admitted, Evicted, Finished)
    message: str
    evicted: str | None  # reason: message of a True Evicted condition
    requeue: str | None  # status.requeueState: how often requeued, and when it is queued again


@dataclass(frozen=True)
class TenantStatus:
    namespace: str
    context: str
    queues: tuple[LocalQueueStatus, ...]
    workloads: tuple[WorkloadStatus, ...]


def _usage(queue: dict[str, Any]) -> tuple[FlavorUse, ...]:
    status = queue.get("status") or {}

    def totals(field: str) -> dict[tuple[str, str], str]:
        return {(f.get("name", ""), r.get("name", "")): str(r.get("total", 0))
                for f in status.get(field) or [] for r in f.get("resources") or []}

    reserved, used = totals("flavorsReservation"), totals("flavorsUsage")
    return tuple(FlavorUse(flavor, resource, reserved.get((flavor, resource), "0"), used.get((flavor, resource), "0"))
                 for flavor, resource in sorted(set(reserved) | set(used)))


def queue_order_timestamp(workload: dict[str, Any], requeuing_timestamp: str) -> str:
    """The time Kueue orders a pending Workload by (Ref: kueue v0.19.2 pkg/workload/workload.go GetQueueOrderTimestamp)."""
    evicted = condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        reason = evicted.get("reason")
        if (reason == "PodsReadyTimeout" and requeuing_timestamp == "Eviction") or reason == "AdmissionCheck":
            return str(evicted.get("lastTransitionTime", ""))
    return str(workload["metadata"].get("creationTimestamp", ""))


def _waiting_for_backoff(workload: dict[str, Any], read_at: str) -> bool:
    requeue_at = ((workload.get("status") or {}).get("requeueState") or {}).get("requeueAt")
    return bool(requeue_at) and str(requeue_at) > read_at


def estimated_positions(workloads: list[dict[str, Any]], cluster_queue_of: dict[str, str], requeuing_timestamp: str,
                        read_at: str) -> dict[str, tuple[int, int]]:
    """Workload name -> (position in its LocalQueue, in its ClusterQueue), in Kueue's order: higher priority first,
    then the older queue timestamp, then the UID (Ref: kueue v0.19.2 pkg/cache/queue/cluster_queue.go
    baseCompareFunc). A Workload waiting out a requeue backoff is not in the queue yet and has no position."""
    queued = [w for w in workloads if is_pending(w) and not _waiting_for_backoff(w, read_at)]
    queued.sort(key=lambda w: (-int((w.get("spec") or {}).get("priority") or 0),
                               queue_order_timestamp(w, requeuing_timestamp), str(w["metadata"].get("uid", ""))))
    out: dict[str, tuple[int, int]] = {}
    in_local: dict[str, int] = {}
    in_cluster: dict[str, int] = {}
    for w in queued:
        local = str((w.get("spec") or {}).get("queueName", ""))
        cluster = cluster_queue_of.get(local, "")
        out[w["metadata"]["name"]] = (in_local.get(local, 0), in_cluster.get(cluster, 0))
        in_local[local] = in_local.get(local, 0) + 1
        in_cluster[cluster] = in_cluster.get(cluster, 0) + 1
    return out


def _job_of(workload: dict[str, Any]) -> str:
    owners = [o for o in workload["metadata"].get("ownerReferences") or [] if o.get("controller")] or \
        list(workload["metadata"].get("ownerReferences") or [])
    return f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else "-"


def _true(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    found = condition(workload, kind)
    return found if found is not None and found.get("status") == "True" else None


def _state_and_why(workload: dict[str, Any]) -> tuple[str, str, str]:
    """(state, Kueue's reason, Kueue's message) for one Workload."""
    finished, admitted, evicted = (_true(workload, kind) for kind in ("Finished", "Admitted", "Evicted"))
    reserved = condition(workload, "QuotaReserved")
    state, why = "pending", reserved
    if finished is not None:
        state, why = "finished", finished
    elif (workload.get("spec") or {}).get("active") is False:
        state, why = "deactivated", evicted or reserved or {"reason": "Deactivated", "message": "spec.active is false"}
    elif admitted is not None:
        state, why = "admitted", admitted
    elif reserved is not None and reserved.get("status") == "True":
        # Quota is held; admission waits for the admission checks (MultiKueue, provisioning).
        state, why = "quota reserved", condition(workload, "Admitted") or reserved
    elif reserved is None and evicted is not None:
        why = {"reason": f"Evicted/{evicted.get('reason', '')}", "message": evicted.get("message", "")}
    if why is None:
        return state, "NotConsidered", "Kueue has not tried to admit it yet (no QuotaReserved condition)"
    return state, str(why.get("reason", "")), str(why.get("message", ""))


def _requeue(workload: dict[str, Any]) -> str | None:
    state = (workload.get("status") or {}).get("requeueState") or {}
    if not state:
        return None
    count, at = state.get("count"), state.get("requeueAt")
    parts = [f"requeued {count} time{'s' if count != 1 else ''}"] if count is not None else []
    parts += [f"queued again at {at}"] if at else []
    return ", ".join(parts) or None


def tenant_report(snapshot: dict[str, Any], context: str, requeuing_timestamp: str) -> TenantStatus:
    """The tenant's report from a snapshot (``read_namespace``): pure, so a recording gives the same report."""
    namespace = str(snapshot.get("namespace", ""))
    local_queues = list(snapshot.get("localqueues") or [])
    workloads = list(snapshot.get("workloads") or [])
    answers = snapshot.get("pendingWorkloads") or {}
    cluster_queue_of = {q["metadata"]["name"]: str((q.get("spec") or {}).get("clusterQueue", "")) for q in local_queues}
    estimated = estimated_positions(workloads, cluster_queue_of, requeuing_timestamp, str(snapshot.get("readAt", "")))
    served: dict[str, tuple[int, int]] = {}
    queues = []
    for queue in sorted(local_queues, key=lambda q: q["metadata"]["name"]):
        name, status = queue["metadata"]["name"], queue.get("status") or {}
        answer = answers.get(name) or {"error": "not read"}
        error = answer.get("error") if "error" in answer else None
        if error is None:
            for item in answer.get("items") or []:
                served[item["metadata"]["name"]] = (int(item.get("positionInLocalQueue", 0)),
                                                    int(item.get("positionInClusterQueue", 0)))
        queues.append(LocalQueueStatus(
            name, cluster_queue_of[name], int(status.get("pendingWorkloads", 0)), int(status.get("reservingWorkloads", 0)),
            int(status.get("admittedWorkloads", 0)), _usage(queue), ESTIMATED if error else VISIBILITY,
            str(error) if error else None))
    by_queue = {q.name: q for q in queues}
    out = []
    for workload in workloads:
        meta, spec = workload["metadata"], workload.get("spec") or {}
        local = str(spec.get("queueName", ""))
        state, reason, message = _state_and_why(workload)
        queue = by_queue.get(local)
        source = queue.positions if queue is not None else ESTIMATED
        position = (served if source == VISIBILITY else estimated).get(meta["name"]) if state == "pending" else None
        evicted = condition(workload, "Evicted")
        out.append(WorkloadStatus(
            meta["name"], _job_of(workload), local, state, int(spec.get("priority") or 0),
            str(meta.get("creationTimestamp", "")), position[0] if position else None,
            position[1] if position else None, source if position else None, reason, message,
            f"{evicted.get('reason', '')}: {evicted.get('message', '')}"
            if evicted is not None and evicted.get("status") == "True" else None, _requeue(workload)))
    order = {"pending": 0, "quota reserved": 1, "admitted": 2, "deactivated": 3, "finished": 4}
    out.sort(key=lambda w: (order.get(w.state, 5), w.position_in_local_queue if w.position_in_local_queue is not None
                            else 1 << 30, w.created, w.name))
    return TenantStatus(namespace, context, tuple(queues), tuple(out))


def to_json(status: TenantStatus) -> str:
    return json.dumps(asdict(status), indent=2, sort_keys=True) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _position(value: int | None) -> str:
    return "-" if value is None else str(value)


def to_markdown(status: TenantStatus, accelerators_only: bool = True) -> str:
    lines = [f"# Kueue status of namespace {status.namespace}: {status.context}", ""]
    if not status.queues:
        lines.append(f"Namespace {status.namespace} has no LocalQueue: its jobs are queued nowhere (every Trainyard "
                     "tenant namespace has one named default).")
    for queue in status.queues:
        if queue.visibility_error is None:
            lines.append(f"Positions in LocalQueue {queue.name}: from Kueue's visibility API "
                         f"(GET {pending_workloads_path(status.namespace, queue.name)}).")
        else:
            lines.append(f"Positions in LocalQueue {queue.name}: {ESTIMATED} in Kueue's order (priority, then queue "
                         f"time); the visibility API did not answer: {queue.visibility_error}")
    lines += ["", "## LocalQueues", "",
              "| LocalQueue | ClusterQueue | pending | reserving | admitted | flavor | resource | reserved | in use |",
              "|---|---|---:|---:|---:|---|---|---:|---:|"]
    for queue in status.queues:
        rows: list[FlavorUse | None] = [u for u in queue.usage
                                        if not accelerators_only or u.resource.startswith("nvidia.com/")]
        for use in rows or [None]:
            cells = [use.flavor, use.resource, use.reserved, use.in_use] if use else ["-", "-", "-", "-"]
            lines.append(f"| {queue.name} | {queue.cluster_queue} | {queue.pending} | {queue.reserving} | "
                         f"{queue.admitted} | " + " | ".join(cells) + " |")
    lines += ["", "## Workloads (pending first, in queue order; position 0 is next)", ""]
    if not status.workloads:
        lines.append("No Workload in this namespace.")
    else:
        lines += ["| job | Workload | LocalQueue | state | priority | position in LocalQueue | position in ClusterQueue "
                  "| why (Kueue's reason: message) | evicted | requeued |",
                  "|---|---|---|---|---:|---:|---:|---|---|---|"]
        for w in status.workloads:
            estimate = " (estimated)" if w.positions == ESTIMATED else ""
            lines.append(f"| {w.job} | {w.name} | {w.local_queue} | {w.state} | {w.priority} | "
                         f"{_position(w.position_in_local_queue)}{estimate if w.position_in_local_queue is not None else ''}"
                         f" | {_position(w.position_in_cluster_queue)} | {_cell(w.reason)}: {_cell(w.message)} | "
                         f"{_cell(w.evicted or '-')} | {_cell(w.requeue or '-')} |")
    return "\n".join(lines) + "\n"
