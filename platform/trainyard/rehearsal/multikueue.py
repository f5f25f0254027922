"""MultiKueue on the rehearsal: a manager cluster and its worker clusters, each a full rehearsal cluster.

Each cluster is an ordinary ``Rehearsal`` (own state directory and ports, the real Kueue, JobSet and
Trainer, kwok and the stack's fake GPU nodes). What joins them is only what a real deployment has:

- the manager's stack is deployed with each worker's kubeconfig as the Pulumi config secret its
  ``multikueue.workers[i].kubeconfig.pulumi_secret`` names (``Rehearsal.config_secrets``:
  ``pulumi config set --secret`` from the worker's kubeconfig file, never plaintext in a stack file,
  the render or the state), so the rendered ``Secret multikueue-<worker>`` carries it and the
  manager's Kueue builds its worker client from it;
- the manager's ``multikueue.workers[i].stack`` points at the worker's rehearsal stack file (the
  cross-stack check reads it; the rehearsal overlays live in each cluster's state directory).

``dispatch`` submits a TrainJob to the manager and records, with timestamps, what the two Kueues and
Trainers did with it: the AdmissionCheck's state on the manager's Workload, the copy on the worker,
its pods on the worker's fake nodes, and the status mirrored back. See docs/components/multikueue.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard.config.model import PlatformConfig
from trainyard.project import Stack
from trainyard.rehearsal.kube import Kube, KubeError, Manifest, wait_until
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.session import EngineRun, Rehearsal
from trainyard.rehearsal.settings import ClusterError, Settings

WORKLOADS = "workloads.kueue.x-k8s.io"
TRAINJOBS = "trainjobs.trainer.kubeflow.org"
# Ref: kueue v0.19.2 apis/kueue/v1beta2 MultiKueueControllerName; Kueue's TrainJob webhook sets it on the
# manager when the job's ClusterQueue carries a MultiKueue AdmissionCheck (pkg/controller/jobframework/defaults.go).
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
# What the manager puts on the worker's copy (Ref: kueue v0.19.2 pkg/controller/jobframework/utils.go SetMultiKueueMeta).
PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN = "kueue.x-k8s.io/multikueue-origin"


def manager_overrides(manager: PlatformConfig, workers: Mapping[str, Rehearsal]) -> dict[str, Any]:
    """The manager's ``multikueue.workers[i].stack`` -> the worker's rehearsal stack file (absolute)."""
    if manager.multikueue is None or manager.multikueue.role != "manager":
        raise ClusterError("the MultiKueue rehearsal needs a stack with multikueue.role: manager")
    missing = sorted({w.name for w in manager.multikueue.workers} - set(workers))
    if missing:
        raise ClusterError(f"the manager's workers {', '.join(missing)} have no rehearsal cluster")
    return {"multikueue": {"workers": [{"name": w.name, "stack": str(workers[w.name].stack_file)}
                                       for w in manager.multikueue.workers]}}


def kubeconfig_secrets(manager: PlatformConfig, workers: Mapping[str, Rehearsal]) -> dict[str, Path]:
    """Pulumi config secret key -> the worker cluster's kubeconfig file, for every worker of the manager."""
    assert manager.multikueue is not None  # manager_overrides checked it
    out = {}
    for worker in manager.multikueue.workers:
        key = worker.kubeconfig.pulumi_secret
        if key is None:
            raise ClusterError(f"multikueue.workers[{worker.name}]: the rehearsal delivers worker kubeconfigs as "
                               "Pulumi config secrets; set kubeconfig.pulumi_secret")
        out[key] = workers[worker.name].settings.kubeconfig
    return out


@dataclass
class Event:
    """One observed step of a dispatch: when (seconds after submit), on which cluster, what."""

    at: float
    cluster: str
    what: str


@dataclass
class Dispatch:
    """What ``MultiKueueRehearsal.dispatch`` saw, step by step (first time each was true)."""

    job: str
    namespace: str
    events: list[Event] = field(default_factory=list)
    manager_workload: Manifest = field(default_factory=dict)
    worker_workload: Manifest = field(default_factory=dict)
    manager_trainjob: Manifest = field(default_factory=dict)
    worker_trainjob: Manifest = field(default_factory=dict)
    worker_pod_nodes: dict[str, str] = field(default_factory=dict)  # every worker pod seen bound -> its node
    manager_pods: list[Manifest] = field(default_factory=list)

    def seen(self, what: str) -> Event | None:
        return next((e for e in self.events if e.what.startswith(what)), None)

    def transcript(self) -> str:
        lines = [f"MultiKueue dispatch of TrainJob {self.namespace}/{self.job}"]
        lines += [f"  +{e.at:6.1f}s  {e.cluster:<8} {e.what}" for e in self.events]
        return "\n".join(lines)


def _conditions(obj: Manifest) -> dict[str, Manifest]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _true(obj: Manifest, condition: str) -> bool:
    return _conditions(obj).get(condition, {}).get("status") == "True"


def _one(kube: Kube, resource: str, namespace: str, owner: str) -> Manifest | None:
    """The object of ``resource`` in ``namespace`` owned by (or named) ``owner``."""
    for item in kube.items(resource, namespace):
        owners = {o.get("name") for o in item["metadata"].get("ownerReferences") or []}
        if owner in owners or item["metadata"]["name"] == owner:
            return item
    return None


class MultiKueueRehearsal:
    """A manager rehearsal and one rehearsal per worker; ``up``, ``deploy``, ``dispatch``, ``down``."""

    def __init__(self, manager: Stack, workers: Mapping[str, Stack], settings: Mapping[str, Settings],
                 envs: Mapping[str, Mapping[str, str]]) -> None:
        """``settings``/``envs`` by cluster: ``"manager"`` and each worker's MultiKueueCluster name."""
        self.workers = {name: Rehearsal(stack, settings[name], env=envs[name]) for name, stack in workers.items()}
        overrides = manager_overrides(manager.config, self.workers)
        self.manager = Rehearsal(manager, settings["manager"], overrides, envs["manager"],
                                 config_secrets=kubeconfig_secrets(manager.config, self.workers))

    def clusters(self) -> dict[str, Rehearsal]:
        return {"manager": self.manager, **self.workers}

    def up(self) -> None:
        for rehearsal in self.clusters().values():
            rehearsal.up()

    def deploy(self) -> dict[str, EngineRun]:
        """Workers first (a manager must never dispatch to a worker without the tenants' queues), then the manager."""
        runs = {}
        for name, rehearsal in [*self.workers.items(), ("manager", self.manager)]:
            runs[name] = run = rehearsal.deploy()
            if run.returncode != 0:
                break
        return runs

    def down(self, purge: bool = False) -> None:
        for rehearsal in reversed(list(self.clusters().values())):
            rehearsal.down(purge=purge)

    def wait_clusters_active(self, timeout: float = 120) -> Manifest:
        """Every MultiKueueCluster Active (the manager's Kueue reached the worker); the manager's AdmissionCheck."""
        kube = self.manager.kube

        def active() -> bool:
            clusters = kube.items("multikueueclusters.kueue.x-k8s.io", None)
            return bool(clusters) and all(_true(c, "Active") for c in clusters)

        try:
            wait_until("the MultiKueueClusters to be Active", active, timeout, interval=1)
        except TimeoutError as exc:
            states = {c["metadata"]["name"]: _conditions(c).get("Active")
                      for c in kube.items("multikueueclusters.kueue.x-k8s.io", None)}
            raise ClusterError(f"{exc}: {states}") from None
        checks = kube.items("admissionchecks.kueue.x-k8s.io", None)
        return checks[0] if checks else {}

    def dispatch(self, job: Job, worker: str, timeout: float = 180) -> Dispatch:
        """Submit ``job`` to the manager; watch until its TrainJob has ended and its Workload is Finished (or ``timeout``)."""
        manager, remote = self.manager, self.workers[worker]
        namespace = manager.namespace_of(job.tenant)
        result = Dispatch(job.name, namespace)
        start = time.monotonic()

        def note(cluster: str, what: str) -> None:
            if not any(e.cluster == cluster and e.what == what for e in result.events):  # the first time only
                result.events.append(Event(time.monotonic() - start, cluster, what))

        created = manager.submit(job)
        note("manager", f"TrainJob created, spec.managedBy={created['spec'].get('managedBy')!r}")
        deadline = start + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(KubeError):  # a transient API error on a loaded machine: look again
                self._observe_manager(result, note)
                self._observe_worker(result, remote, note)
            # Done once the manager's TrainJob carries the worker's verdict *and* the manager's Kueue has
            # marked its Workload Finished: the two are written by different controllers, so one can be
            # seen a poll before the other (CI saw Complete without Finished once).
            ended = _true(result.manager_trainjob, "Complete") or _true(result.manager_trainjob, "Failed")
            if ended and _true(result.manager_workload, "Finished"):
                break
            time.sleep(0.2)
        return result

    def _observe_manager(self, result: Dispatch, note: Callable[[str, str], None]) -> None:
        manager = self.manager
        ns, name = result.namespace, result.job
        workload = _one(manager.kube, WORKLOADS, ns, name)
        if workload:
            result.manager_workload = workload
            note("manager", f"Workload {workload['metadata']['name']} created")
            if _true(workload, "QuotaReserved"):
                note("manager", "Workload QuotaReserved=True (manager quota)")
            for check in (workload.get("status") or {}).get("admissionChecks") or []:
                note("manager", f"AdmissionCheck {check['name']} state={check['state']}"
                     + (f" ({check['message']})" if check.get("message") else ""))
            if _true(workload, "Admitted"):
                cluster = (workload.get("status") or {}).get("clusterName")
                note("manager", f"Workload Admitted=True, status.clusterName={cluster!r}")
            if _true(workload, "Finished"):
                reason = _conditions(workload)["Finished"].get("reason")
                note("manager", f"Workload Finished=True (reason {reason})")
        trainjob = _one(manager.kube, TRAINJOBS, ns, name) or {}
        result.manager_trainjob = trainjob
        if trainjob.get("spec", {}).get("suspend") is False:
            note("manager", "TrainJob unsuspended (spec.suspend=false)")
        for condition in ("Complete", "Failed"):
            if _true(trainjob, condition):
                note("manager", f"TrainJob {condition}=True (mirrored from the worker)")
        jobsets = manager.kube.items("jobsets.jobset.x-k8s.io", ns)
        result.manager_pods = manager.kube.items("pods", ns)
        if jobsets or result.manager_pods:
            note("manager", f"UNEXPECTED: {len(jobsets)} JobSet(s), {len(result.manager_pods)} pod(s) on the manager")

    def _observe_worker(self, result: Dispatch, remote: Rehearsal, note: Callable[[str, str], None]) -> None:
        ns, name = result.namespace, result.job

        copy = _one(remote.kube, TRAINJOBS, ns, name)
        if copy:
            result.worker_trainjob = copy
            meta = {**(copy["metadata"].get("annotations") or {}), **(copy["metadata"].get("labels") or {})}
            note("worker", f"TrainJob {name} created by the manager (managedBy={copy['spec'].get('managedBy')!r}, "
                 f"{PREBUILT_WORKLOAD}={meta.get(PREBUILT_WORKLOAD)!r}, {ORIGIN}={meta.get(ORIGIN)!r})")
            for condition in ("Complete", "Failed"):
                if _true(copy, condition):
                    note("worker", f"TrainJob {condition}=True")
        remote_workload = _one(remote.kube, WORKLOADS, ns, name)
        if remote_workload:
            result.worker_workload = remote_workload
            if _true(remote_workload, "Admitted"):
                admission = (remote_workload.get("status") or {}).get("admission") or {}
                flavors = sorted({f for a in admission.get("podSetAssignments") or []
                                  for f in (a.get("flavors") or {}).values()})
                note("worker", f"Workload {remote_workload['metadata']['name']} Admitted=True "
                     f"(ClusterQueue {admission.get('clusterQueue')}, flavors {', '.join(flavors)})")
        if remote.kube.items("jobsets.jobset.x-k8s.io", ns):
            note("worker", "JobSet created by Trainer")
        pods = remote.kube.items("pods", ns)
        result.worker_pod_nodes.update({p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods
                                        if p["spec"].get("nodeName")})
        placed = sorted({p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")})
        if placed:
            note("worker", f"{len(pods)} pod(s) bound to fake node(s) {', '.join(placed)}")
        if pods and all(p.get("status", {}).get("phase") == "Running" for p in pods):
            note("worker", "pods Running (kwok)")
        if pods and all(p.get("status", {}).get("phase") == "Succeeded" for p in pods):
            note("worker", "pods Succeeded (kwok)")
