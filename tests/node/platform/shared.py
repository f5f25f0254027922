"""What the modules of ``tests/node/platform`` share: the one deployment's overrides and tools, its timings table, and
the helpers that run pods and jobs on it (the fixture itself is ``conftest.live``)."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from tests.mlflow_overrides import MLFLOW_WITH_BACKUPS
from trainyard.config.model import MLFLOW_PORT
from trainyard.manifests import mlflow
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.rehearsal.stack import merge

# Everything the modules prove, on one platform: the MLflow database with backups (CloudNativePG and the barman-cloud
# plugin; tests/mlflow_overrides.py) and the site's Prometheus scraping the controllers through their policies.
MONITORING: dict[str, Any] = {"monitoring": {"enabled": True},
                              "security": {"network": {"metrics_from": ["monitoring"]}}}
OVERRIDES: dict[str, Any] = merge(MLFLOW_WITH_BACKUPS, MONITORING)
TOOLS = ("cluster", "kubelet", "coredns", "kube-router", "kserve", "kube-rbac-proxy", "cnpg", "barman-cloud",
         "prometheus-operator", "prometheus", "promtool")
# Every module's steps, printed as one table by the last module (test_faults_and_destroy.test_timings).
TIMINGS: dict[str, float] = {}
# HTTP to this rehearsal's own addresses (a pod's, a port-forward's): never through a proxy the environment names.
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def pods(session: Rehearsal, namespace: str) -> list[dict[str, Any]]:
    return session.kube.items("pods", namespace)


def run_jobs(live: Rehearsal, suffix: str) -> None:
    """One short TrainJob per tenant on its fake GPU pool, each waited for until it completed."""
    jobs = [Job(name=f"live-{tenant.name}-{suffix}", tenant=tenant.name, gpus_per_node=1, run_for="2s")
            for tenant in live.config.tenants]
    for job in jobs:
        live.submit(job)
    for job in jobs:
        live.wait_finished([job.name], live.namespace_of(job.tenant), timeout=180)
    print(live.where_jobs_stand([j.name for j in jobs if j.tenant == jobs[0].tenant], live.namespace_of(jobs[0].tenant)))


def store(live: Rehearsal) -> str:
    """The object store's namespace (its server runs here)."""
    namespace = live.object_store_namespace()
    assert namespace is not None, "the object store's chart is external: SeaweedFS does not run here"
    return namespace


def provisioner_image(live: Rehearsal) -> str:
    """The object store's provisioning Job's image (Python and boto3: what the probe pods run)."""
    (job,) = live.provisioning_jobs()
    image: str = job["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def pod_finished(live: Rehearsal, namespace: str, name: str, timeout: float) -> str:
    """The phase a pod ends in (Succeeded or Failed), waited for."""
    def ended() -> str | None:
        phase = live.kube.get("pod", name, namespace).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    found: str = wait_until(f"pod {namespace}/{name} to finish", ended, timeout, interval=1)
    return found


def run_python(live: Rehearsal, namespace: str, name: str, script: str, secret: str | None,
               labels: dict[str, str] | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script`` with the provisioner image in a restricted pod of ``namespace`` (the keys of ``secret``, if any,
    as its environment) on the real node; its last output line is JSON, returned with the seconds it took."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                    "nodeSelector": {"kubernetes.io/hostname": REAL_NODE},
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "s3", "image": provisioner_image(live), "command": ["python3", "-c", script],
                                    "envFrom": [{"secretRef": {"name": secret}}] if secret else [],
                                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                  "limits": {"cpu": "500m", "memory": "256Mi"}},
                                    "securityContext": {"allowPrivilegeEscalation": False,
                                                        "readOnlyRootFilesystem": True,
                                                        "capabilities": {"drop": ["ALL"]}}}]}}
    start = time.monotonic()
    live.kube.create(pod)
    try:
        phase = pod_finished(live, namespace, name, 180)
        log = live.kube.run("logs", name, "-n", namespace).stdout
    finally:
        live.kube.delete("pod", name, namespace=namespace)
    assert phase == "Succeeded", log
    return {**json.loads(log.strip().splitlines()[-1]), "seconds": time.monotonic() - start}


def _millicores(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def node_room(live: Rehearsal) -> str:
    """node-0's allocatable CPU and what the pods bound to it request: the room a training job has beside the
    platform's own pods (the lab's sizing needs this figure)."""
    node = live.kube.get("node", REAL_NODE)
    allocatable = _millicores(node["status"]["allocatable"]["cpu"])
    requested = {}
    for pod in live.kube.items("pods", "*"):
        if pod["spec"].get("nodeName") != REAL_NODE or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        cpu = sum(_millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                  for c in pod["spec"]["containers"])
        requested[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = cpu
    listed = ", ".join(f"{name} {cpu}m" for name, cpu in sorted(requested.items(), key=lambda kv: -kv[1]))
    return (f"{REAL_NODE}: {allocatable}m CPU allocatable, {sum(requested.values())}m requested by "
            f"{len(requested)} pods ({listed})")


@contextmanager
def forwarded(live: Rehearsal, namespace: str, pod: str, port: int, local: int | None = None) -> Iterator[int]:
    """``kubectl port-forward`` to ``port`` of a pod (the kubelet's streaming, containerd in the pod's network
    namespace: the pod's own NetworkPolicies do not apply); the local port (``local``, else one the kernel picks)."""
    command = [str(live.kube.kubectl), "--kubeconfig", str(live.kube.kubeconfig), "port-forward", "-n", namespace,
               f"pod/{pod}", f"{local or ''}:{port}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Forwarding from 127.0.0.1:NNNNN -> PORT"
        assert line.startswith("Forwarding from 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
        yield int(line.split("127.0.0.1:")[1].split()[0])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def mlflow_server(live: Rehearsal) -> Iterator[Callable[..., Any]]:
    """MLflow's server pod through a port-forward: ``open(path, data=None, headers=None)`` sends a request with the
    Host its Service's name gives (the one the tenants' URI has; the server refuses others), returns the response."""
    (pod,) = live.kube.items("pods", live.config.mlflow.namespace, selector="app.kubernetes.io/name=mlflow")
    host = mlflow.allowed_hosts(live.config.mlflow)[1]
    with forwarded(live, live.config.mlflow.namespace, pod["metadata"]["name"], MLFLOW_PORT) as port:
        def open_(path: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                             headers={"Host": host, **(headers or {})})
            return NO_PROXY.open(request, timeout=30)

        yield open_


def tenant_mlflow_credentials(live: Rehearsal, namespace: str) -> tuple[str, str]:
    """The MLflow user and password of the tenant of ``namespace`` (its ``trainyard-mlflow`` Secret)."""
    from trainyard.manifests.meta import MLFLOW_SECRET

    secret = live.kube.get("secret", MLFLOW_SECRET, namespace)["data"]
    user, password = (base64.b64decode(secret[key]).decode()
                      for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"))
    return user, password


def mlflow_versions(live: Rehearsal, namespace: str, jobs: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Each TrainJob's MLflow run (in the lab's ``<namespace>/lora-peft`` experiment) and model version, asked of the
    tracking server's pod through MLflow's REST API with the tenant's own credentials (its ``trainyard-mlflow`` Secret)
    and the Host the server allows (its Service's)."""
    user, password = tenant_mlflow_credentials(live, namespace)
    authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    with mlflow_server(live) as open_:
        def api(path: str, query: dict[str, str] | None = None, body: dict[str, Any] | None = None) -> Any:
            with open_(f"/api/2.0/mlflow/{path}" + (f"?{urlencode(query)}" if query else ""),
                       json.dumps(body).encode() if body is not None else None,
                       {"Authorization": authorization, "Content-Type": "application/json"}) as response:
                return json.loads(response.read())

        experiment = api("experiments/get-by-name", {"experiment_name": f"{namespace}/lora-peft"})["experiment"]
        runs = api("runs/search", body={"experiment_ids": [experiment["experiment_id"]], "max_results": 100})["runs"]
        out = {}
        for job in jobs:
            (run,) = [r for r in runs if {"key": "trainyard.trainjob", "value": f"{namespace}/{job}"}
                      in r["data"].get("tags", [])]
            run_id = run["info"]["run_id"]
            tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
            history = api("metrics/get-history", {"run_id": run_id, "metric_key": "loss"})["metrics"]
            (version,) = api("model-versions/search", {"filter": f"run_id='{run_id}'"})["model_versions"]
            out[job] = {"experiment": experiment["name"], "run_id": run_id, "status": run["info"]["status"],
                        "attempts": tags.get("trainyard.attempts"),
                        "loss": sorted((int(m["step"]), float(m["value"])) for m in history),
                        "model": version["name"], "version": version["version"],
                        "version_status": version.get("status"), "source": version["source"]}
    return out
