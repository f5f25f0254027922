"""The rehearsal's cluster DNS, without a cluster: kubeadm's CoreDNS addon at kubeadm's address, found by the stack's
DNS policy, with no forwarder; the CoreDNS build links exactly what its Corefile uses; its image is upstream's layout."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard.config.security import Dns
from trainyard.rehearsal import base_layer, dns, dns_image, images
from trainyard.rehearsal.cluster import SERVICE_CIDR, SERVICE_IP, Settings
from trainyard.rehearsal.node import CLUSTER_DNS_IP, NodeLayout, RealNode, kubelet_config
from trainyard.rehearsal.settings import REAL_NODE_LABELS

COREDNS = Settings.from_env(dict(os.environ)).binary("coredns")
BUILT = COREDNS.is_file()


def directives(corefile: str) -> list[str]:
    """The plugin names a Corefile uses: the first word of each line inside a server block, not in a plugin's block."""
    names, depth = [], 0
    for line in corefile.splitlines():
        word = line.split()[0] if line.split() else ""
        if depth == 1 and word and word != "}":
            names.append(word)
        depth += line.count("{") - line.count("}")
    return names


def test_the_dns_service_is_at_kubeadms_address_in_the_service_range() -> None:
    assert dns.dns_service_ip(SERVICE_CIDR) == CLUSTER_DNS_IP == "10.96.0.10"
    assert ipaddress.ip_address(CLUSTER_DNS_IP) in ipaddress.ip_network(SERVICE_CIDR)
    assert CLUSTER_DNS_IP != SERVICE_IP  # the kubernetes Service keeps the first address


def test_every_real_nodes_kubelet_gives_its_pods_the_cluster_dns(tmp_path: Path) -> None:
    node = NodeLayout(Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)}), "node-0", 0)
    config = kubelet_config(node, tmp_path / "ca.crt", (tmp_path / "s.crt", tmp_path / "s.key"))
    assert config["clusterDNS"] == ["10.96.0.10"] and config["clusterDomain"] == "cluster.local"
    assert config["resolvConf"] == str(node.path("resolv.conf"))  # the node's own resolvers: none


def test_the_coredns_pods_are_what_the_stacks_dns_policy_allows() -> None:
    """manifests/network.py lets tenant pods reach kube-system pods labelled k8s-app=kube-dns on 53 (UDP and TCP)."""
    policy = Dns()
    objects = {(o["kind"], o["metadata"]["name"]): o for o in dns.manifests("img", CLUSTER_DNS_IP)}
    deployment, service = objects[("Deployment", "coredns")], objects[("Service", "kube-dns")]
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == policy.namespace
    pod = deployment["spec"]["template"]
    assert policy.pod_labels.items() <= pod["metadata"]["labels"].items()
    served = {(p["containerPort"], p["protocol"]) for p in pod["spec"]["containers"][0]["ports"]}
    assert {(port, proto) for port in policy.ports for proto in ("UDP", "TCP")} <= served
    assert service["spec"]["clusterIP"] == "10.96.0.10" and service["spec"]["selector"] == {"k8s-app": "kube-dns"}


def test_the_addon_is_kubeadms_placed_on_real_nodes() -> None:
    """kubeadm v1.36.3 manifests.go: the same objects, RBAC, probes and security context; the node selector adds
    the real nodes' label (the rehearsal also has fake nodes)."""
    objects = dns.manifests("trainyard.local/rehearsal/coredns:1.15.0", CLUSTER_DNS_IP)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "coredns"), ("ClusterRole", "system:coredns"), ("ClusterRoleBinding", "system:coredns"),
        ("ConfigMap", "coredns"), ("Deployment", "coredns"), ("Service", "kube-dns")]
    role = objects[1]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
    spec = objects[4]["spec"]
    pod, container = spec["template"]["spec"], spec["template"]["spec"]["containers"][0]
    assert spec["replicas"] == 2 and pod["dnsPolicy"] == "Default" and pod["serviceAccountName"] == "coredns"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", **REAL_NODE_LABELS}
    assert container["args"] == ["-conf", "/etc/coredns/Corefile"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert "kubeconfig" not in objects[3]["data"]["Corefile"]  # in-cluster configuration: its service account


def test_the_corefile_serves_the_cluster_from_the_api_and_nothing_else_leaves_it() -> None:
    text = dns.corefile()
    assert "forward" not in text and "resolv.conf" not in text and "fallthrough" not in text
    blocks = re.findall(r"^(\S.*) \{$", text, re.M)
    assert blocks == ["cluster.local:53 in-addr.arpa:53 ip6.arpa:53", ".:53"]
    cluster, rest = text.split("\n.:53 {")
    # kubeadm's block, in its order, less forward
    assert directives(cluster) == ["errors", "health", "ready", "kubernetes", "prometheus", "cache", "loop", "reload",
                                   "loadbalance"]
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       ttl 30\n    }" in cluster
    assert "disable success cluster.local" in cluster and "disable denial cluster.local" in cluster
    assert directives(".:53 {" + rest) == ["errors", "template", "prometheus"]
    assert "template ANY ANY {\n       rcode NXDOMAIN\n    }" in rest


def test_the_coredns_build_links_every_plugin_the_corefile_uses() -> None:
    main = (ROOT / "tools" / "coredns" / "main.go").read_text()
    linked = set(re.findall(r'"([a-z_]+)"', main.split("var plugins = []string{")[1].split("}")[0]))
    assert set(directives(dns.corefile())) <= linked
    imported = set(re.findall(r'_ "github.com/coredns/coredns/plugin/([a-z_]+)"', main))
    assert imported == (linked - {"prometheus"}) | {"metrics"}  # plugin.cfg: prometheus:metrics


def test_the_coredns_version_is_the_one_built() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    assert f"COREDNS_VERSION={dns.COREDNS_VERSION} " in script
    assert f"require github.com/coredns/coredns {dns.COREDNS_VERSION}\n" in (ROOT / "tools" / "coredns" / "go.mod").read_text()


def test_the_file_capability_is_what_setcap_writes(tmp_path: Path) -> None:
    """The Dockerfile's `setcap cap_net_bind_service=+ep /coredns`: nonroot, it still binds port 53."""
    assert dns_image.file_capability(dns_image.CAP_NET_BIND_SERVICE).hex() == "0100000200040000000000000000000000000000"
    if not Path("/usr/sbin/setcap").exists() or os.geteuid() != 0:
        return
    target = tmp_path / "f"
    target.write_text("x")
    subprocess.run(["/usr/sbin/setcap", "cap_net_bind_service=+ep", str(target)], check=True)
    assert os.getxattr(target, "security.capability") == dns_image.file_capability(dns_image.CAP_NET_BIND_SERVICE)


@pytest.mark.skipif(not BUILT, reason=f"{COREDNS} not built (tools/build.sh coredns)")
def test_the_built_coredns_has_only_the_plugins_it_needs() -> None:
    listed = subprocess.run([str(COREDNS), "-plugins"], capture_output=True, text=True, check=True, timeout=30).stdout
    plugins = set(listed.split())  # every plugin registered; a Corefile may use only those of main.go's directives
    assert set(directives(dns.corefile())) <= plugins
    assert not plugins & {"route53", "azure", "clouddns", "etcd", "nomad"}
    print(f"CoreDNS {dns_image.coredns_version(COREDNS)}: {sorted(plugins)}")


@pytest.mark.skipif(not BUILT, reason=f"{COREDNS} not built (tools/build.sh coredns)")
def test_the_coredns_image_is_upstreams_layout_and_reproducible(tmp_path: Path) -> None:
    """coredns@v1.15.0:Dockerfile: distroless static:nonroot (the controller images' base layer), then /coredns with
    cap_net_bind_service=+ep; USER 65532:65532, WORKDIR /, EXPOSE 53 53/udp, ENTRYPOINT /coredns."""
    one, two = dns_image.build_coredns(COREDNS, tmp_path / "a"), dns_image.build_coredns(COREDNS, tmp_path / "b")
    assert one.digest == two.digest and one.reference == f"trainyard.local/rehearsal/coredns:{dns.COREDNS_VERSION[1:]}"
    blobs = one.layout / "blobs" / "sha256"
    manifest = json.loads((blobs / one.digest.removeprefix("sha256:")).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].removeprefix("sha256:")).read_text())["config"]
    assert {k: config[k] for k in ("Entrypoint", "User", "WorkingDir", "ExposedPorts", "Env")} == {
        "Entrypoint": ["/coredns"], "User": "65532:65532", "WorkingDir": "/",
        "ExposedPorts": {"53/tcp": {}, "53/udp": {}}, "Env": list(base_layer.ENV)}
    base, binary = (blobs / layer["digest"].removeprefix("sha256:") for layer in manifest["layers"])
    assert manifest["layers"][0]["digest"] == "sha256:" + hashlib.sha256(
        images.layer_tar(base_layer.base_layer().entries)).hexdigest()  # the controller images' base, as is
    with tarfile.open(fileobj=BytesIO(binary.read_bytes())) as tar:
        (member,) = tar.getmembers()
        assert member.name == "coredns" and (member.uid, member.gid, member.mode) == (0, 0, 0o755)
        capability = member.pax_headers["SCHILY.xattr.security.capability"].encode()
        assert capability == dns_image.file_capability(dns_image.CAP_NET_BIND_SERVICE)
    print(f"{one.reference} {one.digest} (base {base.stat().st_size // 1024} KiB, coredns {binary.stat().st_size // 1024} KiB)")


def test_a_machine_without_the_base_layers_packages_is_told_which(tmp_path: Path) -> None:
    (tmp_path / "var" / "lib" / "dpkg" / "info").mkdir(parents=True)
    (tmp_path / "var" / "lib" / "dpkg" / "status").write_text("")
    missing = dns_image.missing_packages(tmp_path)
    assert [m.split(":")[0] for m in missing] == [f"the Debian package {p} is not installed"
                                                  for p in ("ca-certificates", "libc-bin", "tzdata")]
    assert all("apt-get install" in m for m in missing)


def test_dns_needs_kube_proxy_and_the_coredns_binary(tmp_path: Path) -> None:
    settings = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path / "c"), "TRAINYARD_TOOLS_DIR": str(tmp_path)})
    node = RealNode(settings, dns=True)
    assert node.required_binaries()["coredns"] == tmp_path / "bin" / "coredns"
    assert any("cluster DNS" in p and "--proxy" in p for p in node.problems())
    assert not any("cluster DNS" in p for p in RealNode(settings, dns=True, proxy=True).problems())
    assert "coredns" not in RealNode(settings).required_binaries()
