"""Node tier: the platform's training controllers installed by `pulumi up` from their real charts, running as pods on a
real node, from images built here and pulled from the rehearsal's loopback mirror by digest (issue #22).

`trainyard cluster up local --real-nodes` as a test: the control plane, one real node (containerd, kubelet, kube-proxy,
CoreDNS) beside the local stack's fake GPU nodes; the image factory builds Kueue's, JobSet's and Trainer's images
from the binaries `tools/build.sh` built, pushes them and the three charts to the node's loopback registry and locks
their digests; then the real engine deploys the local stack with those three controllers no longer external
(`stack.InCluster`). What is proven, each by the live cluster:

- every Deployment of the three charts is Available, its pods Ready on the real node (never on a fake GPU node), and
  each runs the very digest the factory built and the rehearsal's lock holds;
- the platform works through those pods: their webhooks (the API server dials the pods) admit and default a
  TrainJob of each tenant, Kueue admits it on its flavor, Trainer makes the JobSet, JobSet the Jobs, and the job
  completes on its fake GPU pool;
- all of it with the stack's NetworkPolicies enforced on that node (kube-router's firewall, as in
  tests/node/test_network_policy.py): the controllers' namespaces are default-deny for ingress but their webhooks;
- a second `pulumi up` changes nothing;
- a controller pod that is killed is replaced and the platform admits the next job; a killed containerd is
  restarted and the node's pods keep running.

Needs root, the cluster and node tools (`tools/build.sh cluster kubelet coredns`), Debian's containerd, runc, CNI
plugins and nftables; skips saying which is missing elsewhere (`make test-node`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import private_env, tools_problem
from tests.conftest import ROOT
from tests.node.test_real_node import free_pod_network
from trainyard.project import open_stack
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.node import RealNode
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.rehearsal.settings import Settings
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.node
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    if os.geteuid() != 0:
        pytest.skip("a real node needs root (containerd, kubelet, network namespaces)")
    problem = tools_problem("cluster", "kubelet", "coredns", "kube-router")
    if problem is not None:
        pytest.skip(problem)
    base = tmp_path_factory.mktemp("live")
    env = {**private_env(base / "cluster"), "TRAINYARD_POD_NETWORK": free_pod_network(),
           "TRAINYARD_STATE_DIR": str(base / "state"), "TRAINYARD_RUN_DIR": str(base / "run"),
           "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home")}
    os.environ["TRAINYARD_POD_NETWORK"] = env["TRAINYARD_POD_NETWORK"]  # RealNode reads it from the process
    session = Rehearsal(open_stack("local", ROOT), Settings.from_env(env), env=env, real_nodes=True)
    try:
        start = time.monotonic()
        session.up()
        TIMINGS["cluster up (control plane, real node, mirror filled)"] = time.monotonic() - start
        run = session.deploy()
        assert run.returncode == 0, run.output[-6000:]
        TIMINGS["first pulumi up"] = run.seconds
        start = time.monotonic()
        print(session.wait_platform_ready())
        TIMINGS["then every controller Ready"] = time.monotonic() - start
        yield session
    finally:
        start = time.monotonic()
        session.down(purge=True)
        print(f"down in {time.monotonic() - start:.1f}s")
        os.environ.pop("TRAINYARD_POD_NETWORK", None)
        left = RealNode(session.settings, REAL_NODE, 0, proxy=True).leftovers()
        assert left == [], left


def _pods(session: Rehearsal, namespace: str) -> list[dict]:  # type: ignore[type-arg]
    return session.kube.items("pods", namespace)


def test_the_controllers_run_from_the_mirror_by_the_built_digest_on_the_real_node(live: Rehearsal) -> None:
    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    seen = []
    for namespace in live.installed_namespaces():
        for pod in _pods(live, namespace):
            assert pod["spec"]["nodeName"] == REAL_NODE, pod["metadata"]["name"]
            assert all(c["ready"] for c in pod["status"]["containerStatuses"]), pod["status"]
            for container, status in zip(pod["spec"]["containers"], pod["status"]["containerStatuses"], strict=True):
                image = container["image"]
                assert image.startswith("trainyard.local/mirror/") and "@sha256:" in image, image
                tagged, digest = image.split("@")
                entry = lock.entries[tagged]
                assert entry.source == "registry" and entry.digest == digest, (tagged, entry)
                assert status["imageID"].endswith(digest), status["imageID"]  # what containerd ran
                seen.append(f"{namespace}/{pod['metadata']['name']}: {image}")
    print("\n".join(seen))
    assert len(seen) == 3, seen  # Kueue, JobSet, Trainer


def _run_jobs(live: Rehearsal, suffix: str) -> None:
    jobs = [Job(name=f"live-{tenant.name}-{suffix}", tenant=tenant.name, gpus_per_node=1, run_for="2s")
            for tenant in live.config.tenants]
    for job in jobs:
        live.submit(job)
    for job in jobs:
        live.wait_finished([job.name], live.namespace_of(job.tenant), timeout=180)
    print(live.where_jobs_stand([j.name for j in jobs if j.tenant == jobs[0].tenant], live.namespace_of(jobs[0].tenant)))


def test_trainjobs_go_through_the_controllers_running_as_pods(live: Rehearsal) -> None:
    policies = live.kube.items("networkpolicies", "*")
    chains = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True).stdout
    enforced = sorted({p["metadata"]["namespace"] for p in policies})
    print(f"{len(policies)} NetworkPolicies in {', '.join(enforced)}; kube-router's chains: "
          f"{chains.count(':KUBE-NWPLCY-')} policy, {chains.count(':KUBE-POD-FW-')} pod firewall")
    assert {"kueue-system", "jobset-system", "kubeflow-system", "team-a", "team-b"} <= set(enforced)
    assert ":KUBE-NWPLCY-" in chains and ":KUBE-POD-FW-" in chains  # enforced on the node the controllers run on
    start = time.monotonic()
    _run_jobs(live, "a")
    TIMINGS["one TrainJob per tenant, submitted -> completed"] = time.monotonic() - start
    workloads = live.workloads("*")
    assert workloads and all(any(c["type"] == "Finished" and c["status"] == "True"
                                 for c in w["status"].get("conditions", [])) for w in workloads), workloads


def test_a_second_up_changes_nothing(live: Rehearsal) -> None:
    run = live.deploy()
    assert run.returncode == 0, run.output[-4000:]
    TIMINGS["no-op pulumi up"] = run.seconds
    resources = [line for line in run.output.splitlines() if "unchanged" in line or "updated" in line
                 or "created" in line or "replaced" in line or "deleted" in line]
    print("\n".join(resources))
    assert any("unchanged" in line for line in resources), run.output[-3000:]
    assert not any(word in line for line in resources for word in ("updated", "created", "replaced", "deleted")), \
        resources


def test_a_killed_controller_pod_is_replaced_and_jobs_still_run(live: Rehearsal) -> None:
    namespace = next(n for n in live.installed_namespaces() if n.startswith("kueue"))
    (old,) = [p["metadata"]["name"] for p in _pods(live, namespace)]
    start = time.monotonic()
    live.kube.run("delete", "pod", "-n", namespace, old, "--grace-period=0", "--wait=false")

    def replaced() -> list[str]:
        return [p["metadata"]["name"] for p in _pods(live, namespace) if p["metadata"]["name"] != old
                and all(c.get("ready") for c in p.get("status", {}).get("containerStatuses") or [{}])]

    wait_until(f"a new Kueue pod in {namespace} to be Ready", lambda: bool(replaced()), 300)
    live.wait_platform_ready(timeout=300)
    (new,) = replaced()
    TIMINGS["Kueue's pod deleted -> its replacement Ready"] = time.monotonic() - start
    _run_jobs(live, "b")
    print(f"{namespace}/{old} deleted, {new} Ready; the next jobs completed")


def test_a_killed_containerd_is_restarted_and_the_pods_keep_running(live: Rehearsal) -> None:
    node = RealNode(live.settings, REAL_NODE, 0, proxy=True, dns=True)
    pid = node.processes.pid(node.containerd)
    assert pid is not None and node.processes.running(node.containerd)
    before = {p["metadata"]["uid"] for n in live.installed_namespaces() for p in _pods(live, n)}
    os.kill(pid, signal.SIGKILL)
    wait_until("containerd to be gone", lambda: not node.processes.running(node.containerd), 30)
    start = time.monotonic()
    node.up()  # idempotent: starts what is not running (containerd), the rest is left as it is
    live.wait_platform_ready(timeout=300)
    TIMINGS["containerd killed -> restarted, every controller Ready"] = time.monotonic() - start
    after = {p["metadata"]["uid"] for n in live.installed_namespaces() for p in _pods(live, n)}
    assert after == before  # the same pods: their containers outlived containerd (the shims keep them)
    _run_jobs(live, "c")


def test_timings(live: Rehearsal) -> None:
    print("\n| step | seconds |\n|---|---:|")
    for step, seconds in TIMINGS.items():
        print(f"| {step} | {seconds:.1f} |")
