"""Admission benchmark on the rehearsal cluster: TrainJobs against plain batch Jobs of the same shape, with the real Kueue.

N TrainJobs (default 1,000) across the stack's tenants, each through its tenant's LocalQueue, then N batch Jobs
of the same shape (same pods: count, resources, run time, image) through the same queues on the same cluster.
For each kind it prints create-to-admitted latency (p50, p90, p99: from the moment the create call returned to
the moment a watch saw the Workload's Admitted condition) and admissions per second (N over the span from the
first create to the last admission). Latency includes waiting for capacity: the local stack has 20 fake GPUs,
so most jobs queue behind earlier ones; the TrainJob/Job ratio is the figure that compares the two paths
(TrainJob -> Kueue -> JobSet -> Jobs against Job -> Kueue). Placement quality: the share of multi-node
TrainJobs whose pods ran inside one rack, under the load and (``--quiet-jobs``) one at a time on an idle
cluster, where capacity always allows it.

Prints figures; asserts nothing. Uses the rehearsal cluster of the environment (``TRAINYARD_CLUSTER_DIR`` and
ports; started and the stack deployed if needed): ``make bench-admission`` or
``.venv/bin/python bench/bench_admission.py [--stack local] [--jobs 1000]``. Every job it made is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
os.environ.setdefault("TRAINYARD_CRDS_DIR", str(ROOT.parent / "shared" / "crds"))

from kubernetes import client, config, watch  # noqa: E402

from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, QUEUE_NAME_LABEL  # noqa: E402
from trainyard.project import open_stack  # noqa: E402
from trainyard.rehearsal.kube import wait_until  # noqa: E402
from trainyard.rehearsal.kwok import RUN_FOR_ANNOTATION  # noqa: E402
from trainyard.rehearsal.scenario import Job  # noqa: E402
from trainyard.rehearsal.session import Rehearsal  # noqa: E402

RACK_LABEL_SUFFIX = "rack"
JOB_LABEL = "trainyard.dev/bench"


def shape(i: int) -> tuple[int, int]:
    """(nodes, GPUs per node) of job i: every other job spans two nodes."""
    return (2 if i % 2 else 1), 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class AdmissionWatch:
    """Watches every Workload; records when each owner (TrainJob or Job) was first seen admitted."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.admitted: dict[tuple[str, str, str], float] = {}  # (kind, namespace, owner) -> time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(self.custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2",
                                           "workloads", timeout_seconds=30):
                    self._see(event["object"])
                    if self.stop.is_set():
                        stream.stop()
            except Exception:
                time.sleep(0.5)

    def _see(self, workload: dict[str, Any]) -> None:
        conditions = workload.get("status", {}).get("conditions", [])
        if not any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
            return
        for owner in workload["metadata"].get("ownerReferences", []):
            key = (owner["kind"], workload["metadata"]["namespace"], owner["name"])
            self.admitted.setdefault(key, time.monotonic())


def trainjob(rehearsal: Rehearsal, name: str, tenant: str, i: int, run_for: str) -> dict[str, Any]:
    nodes, gpus = shape(i)
    obj = rehearsal.trainjob(Job(name=name, tenant=tenant, nodes=nodes, gpus_per_node=gpus, run_for=run_for))
    obj["metadata"]["labels"][JOB_LABEL] = "true"
    return obj


def batch_job(image: str, name: str, namespace: str, i: int, run_for: str) -> dict[str, Any]:
    """A plain Job with the TrainJob's pods: same count, resources, run time, image and restricted security context."""
    nodes, gpus = shape(i)
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "4Gi"}
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE, JOB_LABEL: "true"}},
            "spec": {"parallelism": nodes, "completions": nodes, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"metadata": {"annotations": {RUN_FOR_ANNOTATION: run_for}},
                                  "spec": {"restartPolicy": "Never",
                                           "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                                               "seccompProfile": {"type": "RuntimeDefault"}},
                                           "containers": [{"name": "node", "image": image, "resources": {
                                               "requests": resources, "limits": resources},
                                               "securityContext": restricted}]}}}}


def run_phase(label: str, kind: str, jobs: list[tuple[str, str, dict[str, Any]]], create: Callable[[str, dict[str, Any]], None],
              admissions: AdmissionWatch, timeout: float) -> dict[str, float]:
    created: dict[tuple[str, str, str], float] = {}
    start = time.monotonic()
    for namespace, name, obj in jobs:
        create(namespace, obj)
        created[(kind, namespace, name)] = time.monotonic()
    submitted = time.monotonic() - start
    deadline = time.monotonic() + timeout
    while not set(created) <= set(admissions.admitted) and time.monotonic() < deadline:
        time.sleep(1)
    seen = {k: admissions.admitted[k] - t for k, t in created.items() if k in admissions.admitted}
    latencies = list(seen.values())
    last = max((admissions.admitted[k] for k in seen), default=start)
    figures = {"jobs": len(jobs), "admitted": len(latencies), "submit_s": submitted,
               "p50": percentile(latencies, 0.5) if latencies else float("nan"),
               "p90": percentile(latencies, 0.9) if latencies else float("nan"),
               "p99": percentile(latencies, 0.99) if latencies else float("nan"),
               "mean": statistics.fmean(latencies) if latencies else float("nan"),
               "per_s": len(latencies) / (last - start) if latencies else float("nan")}
    print(f"  {label}: {figures['admitted']}/{figures['jobs']} admitted; created in {submitted:.1f}s; "
          f"create-to-admitted p50 {figures['p50']:.2f}s p90 {figures['p90']:.2f}s p99 {figures['p99']:.2f}s; "
          f"{figures['per_s']:.2f} admissions/s", flush=True)
    return figures


def one_rack_share(rehearsal: Rehearsal, names: set[tuple[str, str]]) -> tuple[int, int]:
    """(multi-node TrainJobs whose pods all ran in one rack, multi-node TrainJobs placed) among ``names``."""
    racks = {}
    for node in rehearsal.kube.items("nodes", None):
        labels = node["metadata"].get("labels", {})
        rack = next((v for k, v in labels.items() if k.endswith("/" + RACK_LABEL_SUFFIX)), None)
        racks[node["metadata"]["name"]] = rack
    by_job: dict[tuple[str, str], set[str | None]] = {}
    for pod in rehearsal.kube.items("pods", "*", selector="jobset.sigs.k8s.io/replicatedjob-name=node"):
        job = pod["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name")
        node = pod.get("spec", {}).get("nodeName")
        if job and node and (pod["metadata"]["namespace"], job) in names:
            by_job.setdefault((pod["metadata"]["namespace"], job), set()).add(racks.get(node))
    return sum(1 for r in by_job.values() if len(r) == 1), len(by_job)


def delete_all(rehearsal: Rehearsal) -> None:
    for tenant in rehearsal.config.tenants:
        rehearsal.kube.delete("jobs.batch", namespace=tenant.namespace_name, selector=f"{JOB_LABEL}=true")
    rehearsal.reset_jobs(timeout=900)

    def gone() -> bool:
        return not rehearsal.kube.items("jobs.batch", "*", selector=f"{JOB_LABEL}=true")

    wait_until("the benchmark's Jobs to be gone", gone, 600, interval=2)


def print_figures(results: dict[str, dict[str, float]], under_load: tuple[int, int], idle: tuple[int, int]) -> None:
    tj, job = results["TrainJob"], results["Job"]
    print("\n| figure | TrainJob | batch Job | ratio TrainJob/Job |\n|---|---:|---:|---:|")
    for key, label in (("p50", "create-to-admitted p50 (s)"), ("p90", "p90 (s)"), ("p99", "p99 (s)"),
                       ("mean", "mean (s)"), ("per_s", "admissions per second")):
        print(f"| {label} | {tj[key]:.2f} | {job[key]:.2f} | {tj[key] / job[key]:.2f} |")
    print(f"| admitted | {tj['admitted']:.0f}/{tj['jobs']:.0f} | {job['admitted']:.0f}/{job['jobs']:.0f} | |")
    (placed, multi), (quiet_placed, quiet_multi) = under_load, idle
    print(f"\nplacement: {placed}/{multi} two-node TrainJobs inside one rack under load"
          f" ({100 * placed / multi if multi else 0:.0f}%); {quiet_placed}/{quiet_multi} one at a time on an idle cluster"
          f" ({100 * quiet_placed / quiet_multi if quiet_multi else 0:.0f}%, the runtimes prefer one rack)")
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="local")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per kind (default 1000)")
    parser.add_argument("--run-for", default="1s", help="how long each pod runs once Ready (kwok)")
    parser.add_argument("--quiet-jobs", type=int, default=10, help="two-node TrainJobs run one at a time on an idle cluster")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for a phase's admissions")
    args = parser.parse_args()

    stack = open_stack(args.stack, ROOT)
    # Each tenant may hold max_trainjobs TrainJob objects (a ResourceQuota); the benchmark needs its share of N.
    per_tenant = -(-args.jobs // len(stack.config.tenants)) + args.quiet_jobs
    rehearsal = Rehearsal(stack, overrides={"tenants": [{"name": t.name, "max_trainjobs": max(t.max_trainjobs, per_tenant)}
                                                        for t in stack.config.tenants]})
    rehearsal.up()
    run = rehearsal.deploy_if_changed()
    if run is not None and run.returncode != 0:
        print(run.output[-3000:], file=sys.stderr)
        return 1
    delete_all(rehearsal)
    api = config.new_client_from_config(config_file=str(rehearsal.settings.kubeconfig))
    custom, batch = client.CustomObjectsApi(api), client.BatchV1Api(api)
    admissions = AdmissionWatch(api)
    tenants = [t.name for t in rehearsal.config.tenants]
    runtime = rehearsal.kube.get("clustertrainingruntimes.trainer.kubeflow.org", "torch-distributed")
    image = next(c["image"] for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node"
                 for c in j["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "node")
    gpus = sum(p.gpus_per_node * p.nodes for p in rehearsal.config.gpu_pools)
    load = os.getloadavg()
    print(f"bench_admission: stack {args.stack}, {args.jobs} jobs per kind over {len(tenants)} tenants, shapes 1x1 and "
          f"2x1 GPUs alternating, pods run {args.run_for}; {gpus} fake GPUs; load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} on {os.cpu_count()} CPUs", flush=True)

    trainjobs = []
    for i in range(args.jobs):
        tenant = tenants[i % len(tenants)]
        namespace = rehearsal.namespace_of(tenant)
        trainjobs.append((namespace, f"bench-tj-{i:04d}", trainjob(rehearsal, f"bench-tj-{i:04d}", tenant, i, args.run_for)))
    group, version = "trainer.kubeflow.org", "v1alpha1"
    results = {"TrainJob": run_phase("TrainJob", "TrainJob", trainjobs, lambda ns, obj: custom.create_namespaced_custom_object(
        group, version, ns, "trainjobs", obj), admissions, args.timeout)}
    placed, multi = one_rack_share(rehearsal, {(ns, n) for ns, n, _ in trainjobs if shape(int(n[-4:]))[0] > 1})
    delete_all(rehearsal)

    jobs = []
    for i in range(args.jobs):
        namespace = rehearsal.namespace_of(tenants[i % len(tenants)])
        jobs.append((namespace, f"bench-job-{i:04d}", batch_job(image, f"bench-job-{i:04d}", namespace, i, args.run_for)))
    results["Job"] = run_phase("batch Job", "Job", jobs, batch.create_namespaced_job, admissions, args.timeout)
    delete_all(rehearsal)

    quiet_names = set()
    for i in range(args.quiet_jobs):
        tenant = tenants[i % len(tenants)]
        name = f"bench-quiet-{i:02d}"
        custom.create_namespaced_custom_object(group, version, rehearsal.namespace_of(tenant), "trainjobs",
                                               trainjob(rehearsal, name, tenant, 1, args.run_for))
        rehearsal.wait_finished([name], rehearsal.namespace_of(tenant), timeout=300)
        quiet_names.add((rehearsal.namespace_of(tenant), name))
    quiet_placed, quiet_multi = one_rack_share(rehearsal, quiet_names)
    delete_all(rehearsal)
    admissions.stop.set()
    Rehearsal(stack).deploy_if_changed()  # the stack as it was, its TrainJob quotas back

    print_figures(results, (placed, multi), (quiet_placed, quiet_multi))
    return 0


if __name__ == "__main__":
    sys.exit(main())
