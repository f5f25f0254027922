"""Node tier: the local stack's NetworkPolicies, enforced on a real node, packet by packet.

One real node (containerd + CNI bridge + kubelet) with kube-router's network policy controller
(``RealNode(..., network_policy=True)``, ``rehearsal/netpol.py``). Every pod of the matrix runs on that node, so
every packet between them crosses its filter table. The tenant namespaces and the object store's are the local
stack's, with its labels (Pod Security "restricted" on the tenants': the pods here comply), and the
NetworkPolicies are exactly what ``trainyard render local`` writes: the tenants' default deny and their exceptions
(DNS, the same namespace, the object store, MLflow, predictors' callers) and the object store's ingress fence.

Stand-ins, named as such: a pod per destination a policy names (the S3 gateway by the SeaweedFS chart's labels,
MLflow, kube-dns on TCP 53; the DNS stand-in serves TCP only, UDP is not probed), each an HTTP server answering with
its own name, and "outside" a network namespace of this machine (``outside_network``) holding a TEST-NET-1
address and the cloud metadata address 169.254.169.254, routed to from the pods (``extra_pod_routes``) as a
site's uplink would be. A probe is an HTTP request with ``nc`` from a source pod (``kubectl exec``) to a pod IP (not a
Service: kube-proxy is not part of this), and the answer names who answered.

kube-router programs a pod's chain after the pod started (it watches pods): for the first moments of a new pod's
life its egress is not yet fenced (measured below, "pod running -> its chain"). So the source pods are long-running
and probe only once kube-router has a chain for each of them; a site's CNI that fences at sandbox creation (Calico,
Cilium) has no such window. Noted in docs/rehearsal.md.

Each probe has its expected outcome, written down from the policies' intent, not computed from them. A
namespace without policies (``outsider``) proves every stand-in answers where nothing is in the way, and the same
matrix with the policies deleted is open everywhere: each refusal is the policies' doing.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.cluster.conftest import private_env, tools_problem
from tests.conftest import rendered
from tests.node.test_real_node import free_pod_network
from trainyard.manifests.meta import INFERENCE_SERVICE_POD_LABEL
from trainyard.rehearsal import images
from trainyard.rehearsal.cluster import ControlPlane, Settings
from trainyard.rehearsal.kube import Kube, wait_until
from trainyard.rehearsal.node import RealNode

pytestmark = pytest.mark.node

STACK = "local"
OUTSIDE_NETNS = "ty-outside"
OUTSIDE_HOST, OUTSIDE_PEER = "ty-out0", "ty-out1"
OUTSIDE = "192.0.2.10"  # TEST-NET-1 (RFC 5737): "the internet"
METADATA = "169.254.169.254"  # a cloud's instance metadata service
OUTSIDE_LINK = ("192.0.2.253", "192.0.2.254")  # host side, namespace side of the veth (/30 of TEST-NET-1)
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


@dataclass(frozen=True)
class Server:
    namespace: str
    name: str
    ports: tuple[int, ...]
    labels: tuple[tuple[str, str], ...] = ()
    root: bool = False  # kube-system's DNS stand-in listens on 53


# The destinations the policies name, by the labels they select; and ordinary pods.
SERVERS = (
    Server("team-a", "plain", (8080,)),
    Server("team-a", "predictor", (8080,), ((INFERENCE_SERVICE_POD_LABEL, "chat"),)),
    Server("team-b", "plain", (8080,)),
    Server("object-store", "s3", (8333, 9333), (("app.kubernetes.io/name", "seaweedfs"),
                                                ("app.kubernetes.io/component", "seaweedfs-all-in-one"))),
    Server("mlflow", "mlflow", (5000,), (("app.kubernetes.io/name", "mlflow"),)),
    Server("kube-system", "dns", (53, 8080), (("k8s-app", "kube-dns"),), root=True),
)

# source -> {target: open?}. Targets: namespace/name:port of a server above, or an outside address:80.
A, P, B, OUT = "team-a/trainer", "team-a/predictor-client", "team-b/trainer", "outsider/probe"
SOURCES = {A: (), P: ((INFERENCE_SERVICE_POD_LABEL, "chat-client"),), B: (), OUT: ()}
EXPECTED: dict[str, dict[str, bool]] = {
    A: {"team-a/plain:8080": True,             # allow-same-namespace
        "team-a/predictor:8080": True,         # allow-predictors-callers: from the namespace, port 8080
        "team-b/plain:8080": False,            # another tenant
        "object-store/s3:8333": True,          # allow-object-store, and the store's allow-s3
        "object-store/s3:9333": False,         # the store's pod, another port
        "mlflow/mlflow:5000": True,            # allow-mlflow
        "kube-system/dns:53": True,            # allow-dns (TCP 53)
        "kube-system/dns:8080": False,         # DNS pod, not DNS
        f"{OUTSIDE}:80": False,                # no egress beyond the cluster
        f"{METADATA}:80": False},              # nor to the instance metadata
    P: {"team-a/plain:8080": False,            # a predictor is not in allow-same-namespace's selection
        "object-store/s3:8333": True,          # allow-predictors-object-store
        "mlflow/mlflow:5000": False,           # predictors get no MLflow
        "kube-system/dns:53": True,
        f"{OUTSIDE}:80": False,
        f"{METADATA}:80": False},
    B: {"team-a/plain:8080": False,
        "team-a/predictor:8080": False,        # a predictor's callers are its own namespace
        "team-b/plain:8080": True,
        "object-store/s3:8333": True},
    OUT: {"team-a/plain:8080": False,            # the tenant's ingress is closed too
        "team-a/predictor:8080": False,
        "object-store/s3:8333": False,         # the store admits tenant namespaces only
        "mlflow/mlflow:5000": True,            # (no policy in the mlflow namespace here)
        "kube-system/dns:8080": True,
        f"{OUTSIDE}:80": True,                 # the stand-ins answer where nothing is in the way
        f"{METADATA}:80": True},
}


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "ip", *args], capture_output=True, text=True, check=check)


@contextmanager
def outside_network() -> Iterator[None]:
    """A network namespace of this machine for "outside": a veth to it, the TEST-NET address and the metadata
    address on its side, each answering HTTP on port 80 with its own address. Removed afterwards."""
    _ip("netns", "del", OUTSIDE_NETNS, check=False)
    _ip("link", "del", OUTSIDE_HOST, check=False)
    server: subprocess.Popen[bytes] | None = None
    try:
        _ip("netns", "add", OUTSIDE_NETNS)
        _ip("link", "add", OUTSIDE_HOST, "type", "veth", "peer", "name", OUTSIDE_PEER)
        _ip("link", "set", OUTSIDE_PEER, "netns", OUTSIDE_NETNS)
        _ip("addr", "add", f"{OUTSIDE_LINK[0]}/30", "dev", OUTSIDE_HOST)
        _ip("link", "set", OUTSIDE_HOST, "up")
        for address in (f"{OUTSIDE_LINK[1]}/30", f"{OUTSIDE}/32", f"{METADATA}/32"):
            _ip("addr", "add", address, "dev", OUTSIDE_PEER, netns=OUTSIDE_NETNS)
        _ip("link", "set", OUTSIDE_PEER, "up", netns=OUTSIDE_NETNS)
        _ip("link", "set", "lo", "up", netns=OUTSIDE_NETNS)
        _ip("route", "add", "default", "via", OUTSIDE_LINK[0], netns=OUTSIDE_NETNS)
        for address in (OUTSIDE, METADATA):
            _ip("route", "add", f"{address}/32", "via", OUTSIDE_LINK[1], "dev", OUTSIDE_HOST)
        # One HTTP server for both addresses; busybox httpd answers with the file named in the URL.
        root = subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["sh", "-c", f"echo outside > {root}/index.html"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", OUTSIDE_NETNS, "busybox", "httpd", "-f", "-p", "80",
                                   "-h", root])
        yield
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        _ip("link", "del", OUTSIDE_HOST, check=False)  # its peer goes with it
        _ip("netns", "del", OUTSIDE_NETNS, check=False)


def image() -> str:
    return f"{images.MIRROR_HOST}/{images.BUSYBOX_REPOSITORY}:{images.busybox_version(images.BUSYBOX)}"


def pod(namespace: str, name: str, node: str, command: str, labels: tuple[tuple[str, str], ...] = (),
        root: bool = False, restart: str = "Always") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image(), "command": ["sh", "-c", command],
                                 "volumeMounts": [{"name": "work", "mountPath": "/w"}]}
    spec: dict[str, Any] = {"nodeName": node, "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                            "automountServiceAccountToken": False, "containers": [container],
                            "volumes": [{"name": "work", "emptyDir": {}}]}
    if not root:
        container["securityContext"] = RESTRICTED
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name, **dict(labels)}}, "spec": spec}


def server_pod(server: Server, node: str) -> dict[str, Any]:
    listen = " & ".join(f"httpd -f -p {port} -h /w" for port in server.ports)
    return pod(server.namespace, server.name, node,
               f"echo {server.namespace}/{server.name} > /w/index.html && {listen} & wait", server.labels, server.root)


def source_pod(source: str, node: str) -> dict[str, Any]:
    namespace, name = source.split("/")
    return pod(namespace, name, node, "sleep 100000", SOURCES[source])


def probe_script(targets: dict[str, str]) -> str:
    """Per target one line ``TARGET ANSWER``: the last line of an HTTP GET with nc (the body, i.e. the server's name),
    or nc's error (refused: the policy's REJECT)."""
    lines = []
    for target, address in targets.items():
        host, port = address.rsplit(":", 1)
        lines.append(f"echo \"{target} $(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} 2>&1 | tail -1)\"")
    return "; ".join(lines)


def running_ip(kube: Kube, namespace: str, name: str) -> str | None:
    status = kube.get("pod", name, namespace).get("status") or {}
    ready = any(c.get("ready") for c in status.get("containerStatuses") or [])
    return status.get("podIP") if status.get("phase") == "Running" and ready else None


@dataclass
class Matrix:
    plane: ControlPlane
    node: RealNode
    addresses: dict[str, str]  # target -> ip:port
    policies: list[dict[str, Any]]
    timings: dict[str, float]

    def probe(self, expected: dict[str, dict[str, bool]]) -> dict[str, dict[str, tuple[bool, str]]]:
        """Every source's probes: source -> target -> (open, what came back). Open: the target's own answer."""
        kube = self.plane.kube()
        results: dict[str, dict[str, tuple[bool, str]]] = {}
        for source, targets in expected.items():
            namespace, name = source.split("/")
            out = kube.run("exec", "-n", namespace, name, "--", "sh", "-c",
                           probe_script({t: self.addresses[t] for t in targets})).stdout
            for line in out.splitlines():
                target, _, said = line.partition(" ")
                results.setdefault(source, {})[target] = (said == answer_of(target), said.strip())
        return results


def answer_of(target: str) -> str:
    """What an open target answers: the stand-in's name (outside: "outside")."""
    return "outside" if target.startswith((OUTSIDE, METADATA)) else target.split(":", maxsplit=1)[0]


def namespaces() -> list[dict[str, Any]]:
    """The local stack's tenant and object-store Namespaces as rendered (labels and Pod Security included), and the
    others the matrix needs, plain."""
    by_name = {o["metadata"]["name"]: o for o in rendered(STACK).all_objects if o["kind"] == "Namespace"}
    wanted = [by_name[n] for n in ("team-a", "team-b", "object-store") if n in by_name]
    assert [n["metadata"]["name"] for n in wanted] == ["team-a", "team-b", "object-store"], sorted(by_name)
    return wanted + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in ("mlflow", "outsider")
                     if n not in by_name]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    problem = tools_problem("etcd", "kube-apiserver", "kubelet", "crane", "kube-router")
    if problem is not None:
        pytest.skip(problem)
    settings = Settings.from_env(private_env(tmp_path_factory.mktemp("netpol-cluster")))
    node = RealNode(settings, "node-0", 0, pod_network=free_pod_network(), network_policy=True,
                    extra_pod_routes=(f"{OUTSIDE}/32", f"{METADATA}/32"))
    missing = node.problems()
    if missing:
        pytest.skip("; ".join(missing))
    plane, timings = ControlPlane(settings), {}
    policies = [o for o in rendered(STACK).all_objects if o["kind"] == "NetworkPolicy"]
    with outside_network():
        try:
            start = time.monotonic()
            plane.up()
            node.up()
            timings["control plane and enforced node up"] = time.monotonic() - start
            kube = plane.kube()
            kube.apply(namespaces(), field_manager="trainyard-test")
            kube.apply(policies, field_manager="trainyard-test")
            start = time.monotonic()
            kube.apply([server_pod(s, node.name) for s in SERVERS] + [source_pod(s, node.name) for s in SOURCES],
                       field_manager="trainyard-test")
            pods = [(s.namespace, s.name) for s in SERVERS] + [tuple(s.split("/")) for s in SOURCES]
            ips = {f"{ns}/{name}": wait_until(f"{ns}/{name} to run", lambda ns=ns, name=name: running_ip(
                kube, ns, name), 180, interval=1) for ns, name in pods}
            timings["stand-ins and sources running"] = time.monotonic() - start
            # kube-router has a chain for every pod of its node once it has seen it (policy-selected or not): before
            # that, a new pod's egress is not fenced. Wait for all, and say how long that took.
            start = time.monotonic()
            wait_until("kube-router to have a chain for every pod", lambda: set(ips.values())
                       <= node.enforcer.enforced_pod_ips(), 60, interval=0.2)
            timings["last pod running -> kube-router's chain for it"] = time.monotonic() - start
            addresses = {f"{s.namespace}/{s.name}:{port}": f"{ips[f'{s.namespace}/{s.name}']}:{port}"
                         for s in SERVERS for port in s.ports}
            addresses |= {f"{OUTSIDE}:80": f"{OUTSIDE}:80", f"{METADATA}:80": f"{METADATA}:80"}
            yield Matrix(plane, node, addresses, policies, timings)
        finally:
            start = time.monotonic()
            node.down()
            timings["node down"] = time.monotonic() - start
            left = node.leftovers()  # kube-router's chains and ipsets, kubelet's chains, processes, mounts, bridge
            plane.down()
            print("\n".join(f"    {k}: {v:.1f}s" for k, v in timings.items()))
            assert left == [], left


def table(results: dict[str, dict[str, tuple[bool, str]]], expected: dict[str, dict[str, bool]]) -> tuple[str, list[str]]:
    lines, wrong = ["| from | to | expected | seen | answer |", "|---|---|---|---|---|"], []
    for source, targets in expected.items():
        for target, want in targets.items():
            seen, said = results.get(source, {}).get(target, (None, "no result"))
            lines.append(f"| {source} | {target} | {'open' if want else 'closed'} | "
                         f"{'open' if seen else 'closed' if seen is not None else '?'} | {said[:60]} |")
            if seen != want:
                wrong.append(f"{source} -> {target}: expected {'open' if want else 'closed'}, seen "
                             f"{'open' if seen else 'closed'} ({said[:80]})")
    return "\n".join(lines), wrong


def test_the_stacks_network_policies_hold_packet_by_packet(matrix: Matrix) -> None:
    start = time.monotonic()
    results = matrix.probe(EXPECTED)
    matrix.timings[f"matrix probed ({sum(map(len, EXPECTED.values()))} probes, enforced)"] = time.monotonic() - start
    shown, wrong = table(results, EXPECTED)
    print("\n" + shown)
    assert not wrong, "\n".join(wrong)
    # A refusal is the policy's REJECT (an ICMP port unreachable: "Connection refused"), not a timeout or a crash.
    refusals = {said for targets in results.values() for seen, said in targets.values() if not seen}
    assert refusals and all("Connection refused" in said for said in refusals), refusals


def test_without_the_policies_every_probe_is_open(matrix: Matrix) -> None:
    """The control: the same pods and probes with every NetworkPolicy deleted. Each refusal above was theirs."""
    kube = matrix.plane.kube()
    for policy in matrix.policies:
        kube.run("delete", "networkpolicy", policy["metadata"]["name"], "-n", policy["metadata"]["namespace"])
    everything_open = {source: dict.fromkeys(targets, True) for source, targets in EXPECTED.items()}
    start = time.monotonic()

    def all_open() -> dict[str, dict[str, tuple[bool, str]]] | None:
        results = matrix.probe(everything_open)
        return results if not table(results, everything_open)[1] else None

    try:
        results = wait_until("every probe to be open", all_open, 60, interval=1)
    except TimeoutError:
        results = matrix.probe(everything_open)
    matrix.timings["policies deleted -> every probe open"] = time.monotonic() - start
    shown, wrong = table(results, everything_open)
    print("\n" + shown)
    assert not wrong, "\n".join(wrong)
