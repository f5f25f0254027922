"""Node tier, last of tests/node/platform (conftest.ORDER): faults and `pulumi destroy`, which take the platform down.

- a controller pod that is killed is replaced and the platform admits the next jobs;
- a killed containerd is restarted and the node's pods keep running (the same pods: the shims keep their containers);
- `pulumi destroy` keeps the data: the object store's claim, volume and files, the MLflow database's Cluster and claim;
- the package's timings, one table.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.node.platform.shared import TIMINGS, pods, run_jobs, store
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.node import RealNode
from trainyard.rehearsal.session import REAL_NODE, Rehearsal

pytestmark = pytest.mark.node


def test_a_killed_controller_pod_is_replaced_and_jobs_still_run(live: Rehearsal) -> None:
    namespace = next(n for n in live.installed_namespaces() if n.startswith("kueue"))
    (old,) = [p["metadata"]["name"] for p in pods(live, namespace)]
    start = time.monotonic()
    live.kube.run("delete", "pod", "-n", namespace, old, "--grace-period=0", "--wait=false")

    def replaced() -> list[str]:
        return [p["metadata"]["name"] for p in pods(live, namespace) if p["metadata"]["name"] != old
                and all(c.get("ready") for c in p.get("status", {}).get("containerStatuses") or [{}])]

    wait_until(f"a new Kueue pod in {namespace} to be Ready", lambda: bool(replaced()), 300)
    live.wait_platform_ready(timeout=300)
    (new,) = replaced()
    TIMINGS["Kueue's pod deleted -> its replacement Ready"] = time.monotonic() - start
    run_jobs(live, "b")
    print(f"{namespace}/{old} deleted, {new} Ready; the next jobs completed")


def test_a_killed_containerd_is_restarted_and_the_pods_keep_running(live: Rehearsal) -> None:
    node = RealNode(live.settings, REAL_NODE, 0, proxy=True, dns=True)
    pid = node.processes.pid(node.containerd)
    assert pid is not None and node.processes.running(node.containerd)
    before = {p["metadata"]["uid"] for n in live.installed_namespaces() for p in pods(live, n)}
    os.kill(pid, signal.SIGKILL)
    wait_until("containerd to be gone", lambda: not node.processes.running(node.containerd), 30)
    start = time.monotonic()
    node.up()  # idempotent: starts what is not running (containerd), the rest is left as it is
    live.wait_platform_ready(timeout=300)
    TIMINGS["containerd killed -> restarted, every controller Ready"] = time.monotonic() - start
    after = {p["metadata"]["uid"] for n in live.installed_namespaces() for p in pods(live, n)}
    assert after == before  # the same pods: their containers outlived containerd (the shims keep them)
    run_jobs(live, "c")


def test_destroy_keeps_the_object_stores_claim_volume_and_data(live: Rehearsal) -> None:
    """`make down`'s first step, last in the package: the data stays where docs/architecture.md says it does (the
    object store's claim and volume, the MLflow database's Cluster and claim: retained on delete, manifests/lifecycle.py)."""
    namespace = store(live)
    volume_name = live.kube.get("persistentvolumeclaim", "seaweedfs-data", namespace)["spec"]["volumeName"]
    path = Path(live.kube.get("persistentvolume", volume_name)["spec"]["local"]["path"])
    run = live.engine("destroy", "--yes", "--skip-preview")
    assert run.returncode == 0, run.output[-4000:]
    TIMINGS["pulumi destroy"] = run.seconds
    claim = live.kube.get("persistentvolumeclaim", "seaweedfs-data", namespace)
    volume = live.kube.get("persistentvolume", volume_name)
    files = [f for f in path.rglob("*") if f.is_file()]
    print(f"after destroy: claim {namespace}/seaweedfs-data {claim['status']['phase']} -> {volume_name} "
          f"({volume['status']['phase']}, {volume['spec']['persistentVolumeReclaimPolicy']}); {len(files)} files, "
          f"{sum(f.stat().st_size for f in files)} bytes in {path}; deployments left in {namespace}: "
          f"{[d['metadata']['name'] for d in live.kube.items('deployments', namespace)]}")
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == volume_name
    assert volume["status"]["phase"] == "Bound" and volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert any(f.suffix == ".dat" for f in files), sorted(map(str, files))  # SeaweedFS's volume files: the objects
    assert not live.kube.items("deployments", namespace)  # the server is gone, its data is not
    assert live.postgres_clusters(), "the package's stack declares the MLflow database"
    for database_namespace, cluster in live.postgres_clusters():
        kept = live.kube.get("clusters.postgresql.cnpg.io", cluster, database_namespace)
        claims = live.kube.items("pvc", database_namespace, selector=f"cnpg.io/cluster={cluster}")
        print(f"after destroy: Cluster {database_namespace}/{cluster} kept ({kept['status'].get('phase')}); claims "
              + ", ".join(f"{c['metadata']['name']} {c['status']['phase']}" for c in claims))
        assert claims and all(c["status"]["phase"] == "Bound" for c in claims), claims


def test_timings(live: Rehearsal) -> None:
    print("\n| step | seconds |\n|---|---:|")
    for step, seconds in TIMINGS.items():
        print(f"| {step} | {seconds:.1f} |")
