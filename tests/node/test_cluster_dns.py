"""Node tier: pods on a real node resolve the cluster's names through CoreDNS, and nothing else.

One real node with kube-proxy and the cluster DNS (``RealNode(..., proxy=True, dns=True)``, ``rehearsal/dns.py``):
CoreDNS (``tools/build.sh coredns``, its image built here and pulled from the loopback registry) runs as kubeadm's
Deployment behind the ``kube-dns`` Service at 10.96.0.10, and reads the API server through the ``kubernetes``
Service with its service account (in-cluster configuration). A client pod's resolver (the kubelet's ``clusterDNS``)
asks it, through kube-proxy, for:

- ``kubernetes.default.svc.cluster.local``: 10.96.0.1;
- a Service of the pod's own namespace by its short name (the search path the kubelet writes): its cluster IP;
- a name outside the cluster: NXDOMAIN at once (no forwarder: the rehearsal is air-gapped), not a timeout.

The client is busybox's ``nslookup`` applet (``busybox nslookup``, no link in the image needed): busybox's own DNS
client over UDP, which reads ``/etc/resolv.conf`` (nameserver and search) itself; glibc's resolver, which segfaults
in Debian's static busybox (``wget``, rehearsal/images.py), is not used by it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.one_node import Running, one_real_node
from trainyard.rehearsal import dns, dns_image, images
from trainyard.rehearsal.cluster import SERVICE_IP
from trainyard.rehearsal.kube import Kube, wait_until
from trainyard.rehearsal.node import CLUSTER_DNS_IP, RealNode

pytestmark = pytest.mark.node

NAMESPACE = "dns-probe"



@pytest.fixture(scope="module")
def dns_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with one_real_node(tmp_path_factory, "dns-cluster", ("etcd", "kube-apiserver", "kubelet", "crane", "coredns"),
                       "node-0 up with kube-proxy and CoreDNS ready", proxy=True, dns=True) as running:
        yield running


def coredns_processes(node: RealNode) -> list[dict[str, str]]:
    """The status lines (Uid, CapEff) of the coredns processes under the node's cgroup root, read in /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "comm").read_text().strip() != "coredns" \
                    or f"/{node.layout.tag}/" not in (entry / "cgroup").read_text():
                continue
            fields = dict(line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        found.append({k: fields[k].strip() for k in ("Uid", "CapEff")})
    return found


def nslookup(kube: Kube, name: str) -> tuple[str, float]:
    """``busybox nslookup NAME`` in the client pod: its output (stdout and stderr) and how long it took."""
    start = time.monotonic()
    result = kube.run("exec", "-n", NAMESPACE, "client", "--", "busybox", "nslookup", "-type=a", name, check=False,
                      timeout=60)
    return result.stdout + result.stderr, time.monotonic() - start


@pytest.fixture(scope="module")
def client(dns_node: Running) -> Kube:
    """A long-running busybox pod (dnsPolicy ClusterFirst, the default) and a Service of its namespace."""
    kube, tag = dns_node.plane.kube(), images.busybox_version(images.BUSYBOX)
    kube.apply([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        # No selector and no endpoints: the kubernetes plugin answers a ClusterIP Service's name with its address.
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": NAMESPACE},
         "spec": {"ports": [{"port": 80}]}}], field_manager="trainyard-test")
    # ServiceAccount admission refuses a pod until kube-controller-manager made the namespace's default account.
    wait_until("the namespace's default service account", lambda: kube.exists("serviceaccount", "default", NAMESPACE), 60)
    kube.apply([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": NAMESPACE},
         "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
             "name": "client", "image": f"{images.MIRROR_HOST}/{images.BUSYBOX_REPOSITORY}:{tag}",
             "command": ["sleep", "3600"]}]}}], field_manager="trainyard-test")
    wait_until("the client pod to run", lambda: (kube.get("pod", "client", NAMESPACE).get("status") or {})
               .get("phase") == "Running" or None, 120, interval=1)
    return kube


def test_coredns_runs_as_kubeadms_addon_behind_the_kube_dns_service(dns_node: Running) -> None:
    kube = dns_node.plane.kube()
    print(kube.run("get", "deployment,pods,service,endpointslices", "-n", dns.NAMESPACE, "-o", "wide").stdout)
    deployment = kube.get("deployment", dns.NAME, dns.NAMESPACE)
    assert deployment["status"]["readyReplicas"] == dns.COREDNS_REPLICAS
    assert kube.get("service", dns.SERVICE, dns.NAMESPACE)["spec"]["clusterIP"] == CLUSTER_DNS_IP == "10.96.0.10"
    pods = kube.items("pods", dns.NAMESPACE, "k8s-app=kube-dns")
    for pod in pods:
        assert pod["spec"]["nodeName"] == dns_node.node.name
        image_id = pod["status"]["containerStatuses"][0]["imageID"]
        assert image_id.startswith(f"{images.MIRROR_HOST}/{dns_image.COREDNS_REPOSITORY}@sha256:")
    # As upstream's image: uid 65532, and port 53 bound through the file capability alone (CapEff: NET_BIND_SERVICE).
    running = coredns_processes(dns_node.node)
    print(running)
    assert len(running) == dns.COREDNS_REPLICAS
    assert all(p["Uid"].split()[:2] == ["65532", "65532"] and int(p["CapEff"], 16) == 1 << 10 for p in running)
    log = kube.run("logs", "-n", dns.NAMESPACE, pods[0]["metadata"]["name"]).stdout
    print(log)
    assert f"CoreDNS-{dns.COREDNS_VERSION[1:]}" in log
    assert "kubeconfig" not in kube.get("configmap", dns.NAME, dns.NAMESPACE)["data"]["Corefile"]


def test_a_pods_resolver_points_at_the_cluster_dns(client: Kube) -> None:
    resolv = client.run("exec", "-n", NAMESPACE, "client", "--", "cat", "/etc/resolv.conf").stdout
    print(resolv)
    assert "nameserver 10.96.0.10" in resolv.splitlines()
    assert f"search {NAMESPACE}.svc.cluster.local svc.cluster.local cluster.local" in resolv.splitlines()


def test_the_api_servers_service_name_resolves_to_its_cluster_ip(client: Kube, dns_node: Running) -> None:
    out, took = nslookup(client, "kubernetes.default.svc.cluster.local")
    dns_node.timings["nslookup kubernetes.default.svc.cluster.local"] = took
    print(out)
    assert "Server:\t\t10.96.0.10" in out
    assert f"Address: {SERVICE_IP}" in out


def test_a_service_of_the_pods_namespace_resolves_by_its_short_name(client: Kube, dns_node: Running) -> None:
    cluster_ip = client.get("service", "echo", NAMESPACE)["spec"]["clusterIP"]
    out, took = nslookup(client, "echo")
    dns_node.timings["nslookup echo (search path)"] = took
    print(out)
    assert f"Name:\techo.{NAMESPACE}.svc.cluster.local" in out
    assert f"Address: {cluster_ip}" in out


def test_a_name_outside_the_cluster_does_not_exist_and_fails_at_once(client: Kube, dns_node: Running) -> None:
    """Air-gapped: no forwarder, so the answer is NXDOMAIN from CoreDNS itself, never a timeout towards the internet."""
    out, took = nslookup(client, "example.com")
    dns_node.timings["nslookup example.com (NXDOMAIN)"] = took
    print(out)
    assert "NXDOMAIN" in out
    assert "timed out" not in out and "Address: " not in out  # the server's own line is "Address:<tab>10.96.0.10:53"


def test_the_last_node_takes_the_cluster_dns_with_it(dns_node: Running) -> None:
    """Runs last in the module (the fixture's down() is idempotent)."""
    kube = dns_node.plane.kube()
    dns_node.node.down()
    assert dns_node.node.leftovers() == []
    assert not kube.exists("deployment", dns.NAME, dns.NAMESPACE)
    assert not kube.exists("service", dns.SERVICE, dns.NAMESPACE)
    assert not kube.exists("configmap", dns.NAME, dns.NAMESPACE)
