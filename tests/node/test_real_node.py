"""Node tier: the rehearsal's control plane and two real nodes (containerd + CNI bridge + kubelet) on this machine.

The nodes pull their images (the pause image built from Kubernetes' pause.c, busybox from Debian's busybox-static)
from a loopback registry only; a pod whose container prints a line runs and the API server serves its log; a pod
on one node reaches a pod on the other, and nothing outside the pod network; a pod whose image the mirror lacks and
one that keeps exiting say why (``kube.pod_not_ready``). Then the nodes are stopped and
nothing of them is left: processes, mounts, bridges, cgroups.

Needs root, the tools of ``tools/build.sh node`` (control plane, kubelet, crane) and Debian's containerd, runc,
CNI plugins, busybox-static and gcc: every test skips, saying which is missing, elsewhere (``make test-node``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.conftest import private_env, tools_problem
from trainyard.rehearsal import images, prerequisites
from trainyard.rehearsal.cluster import ControlPlane, Settings
from trainyard.rehearsal.kube import pod_not_ready, wait_until
from trainyard.rehearsal.node import RealNode

pytestmark = pytest.mark.node


def free_pod_network() -> str:
    """A /16 in 10.200-10.249 that no interface of this machine uses (a person's node keeps 10.244)."""
    used = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    networks = [ipaddress.IPv4Interface(f"{a['local']}/{a['prefixlen']}").network
                for link in json.loads(used) for a in link.get("addr_info", [])]
    for second in range(200 + os.getpid() % 50, 250):
        candidate = ipaddress.IPv4Network(f"10.{second}.0.0/16")
        if not any(candidate.overlaps(n) for n in networks):
            return str(candidate)
    raise AssertionError("no free 10.x.0.0/16 for the pod network")


@dataclass(frozen=True)
class Running:
    plane: ControlPlane
    node: RealNode
    other: RealNode  # a second real node of the same cluster
    timings: dict[str, float]


@pytest.fixture(scope="module")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    problem = tools_problem("etcd", "kube-apiserver", "kubelet", "crane")
    if problem is not None:
        pytest.skip(problem)
    settings, network = Settings.from_env(private_env(tmp_path_factory.mktemp("node-cluster"))), free_pod_network()
    node = RealNode(settings, "node-0", 0, pod_network=network, proxy=True)
    other = RealNode(settings, "node-1", 1, pod_network=network)
    missing = node.problems()
    if missing:
        pytest.skip("; ".join(missing))
    plane, timings = ControlPlane(settings), {}
    try:
        start = time.monotonic()
        plane.up()
        timings["control plane up"] = time.monotonic() - start
        start = time.monotonic()
        node.up()
        timings["node-0 up (registry, images, containerd, kubelet, Ready)"] = time.monotonic() - start
        start = time.monotonic()
        other.up()
        timings["node-1 up"] = time.monotonic() - start
        yield Running(plane, node, other, timings)
    finally:
        start = time.monotonic()
        for each in (other, node):
            each.down()
        timings["nodes down (fixture)"] = time.monotonic() - start
        plane.down()
        print("\n".join(f"    {k}: {v:.1f}s" for k, v in timings.items()))


def test_the_real_node_registers_and_is_ready(real_node: Running) -> None:
    kube = real_node.plane.kube()
    node = kube.get("node", real_node.node.name)
    print(kube.run("get", "nodes", "-o", "wide").stdout)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert {"type": "InternalIP", "address": real_node.node.layout.address} in node["status"]["addresses"]
    assert not any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])


def test_a_pod_from_the_locally_built_image_runs_and_its_log_is_served(real_node: Running) -> None:
    kube, image = real_node.plane.kube(), f"{images.MIRROR_HOST}/{images.BUSYBOX_REPOSITORY}"
    tag = images.busybox_version(images.BUSYBOX)
    start = time.monotonic()
    kube.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello", "namespace": "default"},
                 "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "hello", "image": f"{image}:{tag}", "imagePullPolicy": "Always",
                                          "command": ["sh", "-c", "echo hello from $(hostname) at $(ip -4 -o addr show eth0 "
                                                      "| awk '{print $4}'); cat /proc/1/cgroup | head -3"]}]}}],
               field_manager="trainyard-test")

    def finished() -> str | None:
        phase: str = (kube.get("pod", "hello", "default").get("status") or {}).get("phase", "")
        return phase if phase in {"Succeeded", "Failed"} else None

    phase = wait_until("pod hello to finish", finished, 180, interval=1)
    real_node.timings["pod created -> Succeeded"] = time.monotonic() - start
    log = kube.run("logs", "hello", "-n", "default").stdout
    pod = kube.get("pod", "hello", "default")
    print(kube.run("get", "pod", "hello", "-n", "default", "-o", "wide").stdout)
    print(log)
    assert phase == "Succeeded", kube.run("describe", "pod", "hello", "-n", "default").stdout
    assert f"hello from hello at {pod['status']['podIP']}/24" in log
    # kube-scheduler picks either real node; the container runs under that node's cgroup root
    ran_on = {n.name: n for n in (real_node.node, real_node.other)}[pod["spec"]["nodeName"]]
    assert ran_on.layout.tag in log
    statuses = pod["status"]["containerStatuses"][0]
    assert statuses["imageID"].startswith(f"{image}@sha256:")


def test_a_pod_reaches_a_pod_on_the_other_real_node_and_nothing_outside(real_node: Running) -> None:
    tag = images.busybox_version(images.BUSYBOX)
    kube, image = real_node.plane.kube(), f"{images.MIRROR_HOST}/{images.BUSYBOX_REPOSITORY}:{tag}"
    kube.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server", "namespace": "default"},
                 "spec": {"nodeName": real_node.other.name, "terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "server", "image": image, "command": [
                              "sh", "-c", "while true; do echo pong from $(hostname) | nc -l -p 8080; done"]}]}}],
               field_manager="trainyard-test")
    server_ip = wait_until("the server pod to run", lambda: (kube.get("pod", "server", "default").get("status") or {})
                           .get("podIP") if _running(kube.get("pod", "server", "default")) else None, 120)
    start = time.monotonic()
    kube.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": "default"},
                 "spec": {"nodeName": real_node.node.name, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "client", "image": image, "command": [
                              "sh", "-c", f"nc -w 5 {server_ip} 8080 </dev/null; "
                              "ping -c 1 -W 2 192.0.2.1 2>&1 | tail -1; nc -w 3 1.1.1.1 80 </dev/null 2>&1 | tail -1"]}]}}],
               field_manager="trainyard-test")
    wait_until("the client pod to finish", lambda: (kube.get("pod", "client", "default").get("status") or {})
               .get("phase") in {"Succeeded", "Failed"} or None, 120, interval=1)
    real_node.timings["client pod created -> finished (across nodes)"] = time.monotonic() - start
    log = kube.run("logs", "client", "-n", "default").stdout
    print(kube.run("get", "pods", "-o", "wide", "-n", "default").stdout)
    print(log)
    assert "pong from server" in log
    assert log.count("Network is unreachable") == 2  # no route out of the pod network: air-gapped


def test_a_service_cluster_ip_reaches_its_pod_from_either_node(real_node: Running) -> None:
    """kube-proxy (nftables mode) on the real nodes: the server pod of the previous test behind a Service."""
    kube, tag = real_node.plane.kube(), images.busybox_version(images.BUSYBOX)
    kube.run("label", "pod", "server", "-n", "default", "app=echo", "--overwrite")
    kube.apply([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": "default"},
                 "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080}]}}],
               field_manager="trainyard-test")
    cluster_ip = kube.get("service", "echo", "default")["spec"]["clusterIP"]
    def endpoints() -> str:
        return kube.run("get", "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=echo",
                        "-o", "name").stdout.strip()

    wait_until("the Service's endpoints", endpoints, 60)
    image = f"{images.MIRROR_HOST}/{images.BUSYBOX_REPOSITORY}:{tag}"
    for node in (real_node.node, real_node.other):
        kube.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"via-service-{node.name}", "namespace": "default"},
                     "spec": {"nodeName": node.name, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                              "containers": [{"name": "client", "image": image,
                                              "command": ["sh", "-c", f"nc -w 5 {cluster_ip} 80 </dev/null"]}]}}],
                   field_manager="trainyard-test")
    for node in (real_node.node, real_node.other):
        name = f"via-service-{node.name}"
        wait_until(f"pod {name} to finish", lambda n=name: (kube.get("pod", n, "default").get("status") or {})
                   .get("phase") in {"Succeeded", "Failed"} or None, 120, interval=1)
        log = kube.run("logs", name, "-n", "default").stdout
        print(f"{name} -> {cluster_ip}:80: {log.strip()}")
        assert "pong from server" in log


def test_a_pod_that_cannot_start_says_why(real_node: Running) -> None:
    """``kube.pod_not_ready`` (what a failed ``pulumi up`` on real nodes prints) on the kubelet's own statuses and
    events: an image the mirror does not have, and a container that keeps exiting."""
    kube, tag = real_node.plane.kube(), images.busybox_version(images.BUSYBOX)
    absent = f"{images.MIRROR_HOST}/trainyard/not-in-the-mirror:1.0"
    spec = {"nodeName": real_node.node.name, "terminationGracePeriodSeconds": 1}
    kube.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "absent", "namespace": "default"},
                 "spec": {**spec, "containers": [{"name": "app", "image": absent}]}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crashing", "namespace": "default"},
                 "spec": {**spec, "containers": [{"name": "app", "command": ["sh", "-c", "exit 3"],
                          "image": f"{images.MIRROR_HOST}/{images.BUSYBOX_REPOSITORY}:{tag}"}]}}],
               field_manager="trainyard-test")

    last: dict[str, str] = {}

    def said() -> dict[str, str] | None:
        events = kube.items("events", "default")
        last.update({p["metadata"]["name"]: pod_not_ready(p, events) or "" for p in kube.items("pods", "default")
                     if p["metadata"]["name"] in ("absent", "crashing")})
        pulled = "ImagePullBackOff" in last.get("absent", "") or "ErrImagePull" in last.get("absent", "")
        crashed = any(f"{word} 3 (Error" in last.get("crashing", "") for word in ("exited", "last exit"))
        return dict(last) if pulled and crashed else None

    try:
        lines = wait_until("both pods to say why they are not Ready", said, 120, interval=2)
    except TimeoutError:
        pytest.fail(f"the pods said: {last}")
    finally:
        kube.run("delete", "pod", "absent", "crashing", "-n", "default", "--wait=false", check=False)
    print("\n".join(lines.values()))
    assert lines["absent"].startswith("default/absent: app waiting: ")
    assert absent in lines["absent"] and "[events: " in lines["absent"]
    assert lines["crashing"].startswith("default/crashing: app ") and "BackOff" in lines["crashing"]


def _running(pod: dict[str, object]) -> bool:
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") == "Running"


def test_stopped_nodes_leave_nothing_behind(real_node: Running) -> None:
    """Runs last in the module: the fixture's down() is idempotent, so stopping here and again there is fine."""
    for node in (real_node.other, real_node.node):
        assert node.leftovers(), "a running node shows its processes"
        start = time.monotonic()
        node.down()
        real_node.timings[f"{node.name} down (test, its pods deleted first)"] = time.monotonic() - start
        assert node.leftovers() == []
        assert not real_node.plane.kube().exists("node", node.name)
    assert real_node.node.proxy is not None and real_node.node.proxy.tables() == []  # kube-proxy --cleanup ran


def test_a_missing_binary_is_named_before_anything_starts(tmp_path: Path) -> None:
    """On this (real) machine, with containerd hidden from PATH and no kubelet built: one error, nothing started."""
    settings = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path / "c"), "TRAINYARD_TOOLS_DIR": str(tmp_path)})
    host = prerequisites.Host(which=lambda name: None if name == "containerd" else prerequisites.Host().find(name),
                              extra_path=())
    with pytest.raises(prerequisites.PrerequisiteError) as caught:
        RealNode(settings, host=host).up()
    assert "containerd: not found on PATH (Debian: apt-get install containerd)" in caught.value.problems
    assert f"kubelet: not built at {tmp_path / 'bin' / 'kubelet'} (run `tools/build.sh node`)" in caught.value.problems
    assert not (tmp_path / "c").exists()
