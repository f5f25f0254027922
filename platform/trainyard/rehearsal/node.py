"""A real node beside the rehearsal's control plane: containerd, a CNI bridge and the kubelet, so pods really run.

The fake nodes (kwok) only move pods through their phases; a real node runs their containers. One node is:

- **containerd** (Debian's, with Debian's runc) with its own root, state, socket and CRI settings under the node's
  directory ``$TRAINYARD_CLUSTER_DIR/nodes/<name>`` (``containerd.toml``): sandbox image from the loopback
  registry, ``registry.config_path`` mapping ``trainyard.local`` (and the ``registry_hosts`` it is given: a site's
  own registry) to that registry (``hosts.toml``), network
  namespaces under its state directory (``netns_mounts_under_state_dir``), streaming on a free port.
- **CNI**: the ``bridge`` plugin on a bridge of its own (``ty<hash>``, made here with the node's address) with
  ``host-local`` addresses from the node's /24 (leases in the node's directory). Pods get routes to the pod
  network and the service range only, no default route and no masquerade: they reach this machine's bridge
  address, each other (across real nodes through this machine: forwarding on the pods' bridges only) and
  nothing else (air-gapped by construction).
- **kubelet** (``tools/build.sh kubelet``, the API server's release) with a client certificate of the rehearsal CA
  (``system:node:<name>`` in ``system:nodes``: the Node authorizer and NodeRestriction apply), a serving
  certificate for the node's address, webhook authentication and authorization, the cgroupfs driver under a
  cgroup root of its own, and every directory (root, pod logs, certificates) under the node's directory.
- **kube-proxy** (``proxy=True`` on one node: ``rehearsal/proxy.py``), for every real node of this machine.
- **the API server for pods** (``rehearsal/in_cluster_api.py``): an address pods route to, a forwarder to the API
  server on loopback and the ``default/kubernetes`` Service's endpoints, from the cluster's first real node to its
  last one's ``down``.
- **NetworkPolicy enforcement** (``network_policy=True`` on one node: ``rehearsal/netpol.py``): kube-router's
  network policy controller, for the pods of that node.
- **Cluster DNS** (``dns=True`` on a node: ``rehearsal/dns.py``): CoreDNS as kubeadm deploys it, the ``kube-dns``
  Service at 10.96.0.10; every node's kubelet gives its pods that nameserver (``clusterDNS``).

``RealNode.up`` first checks the machine (``prerequisites``) and starts nothing when something is missing.
``RealNode.down`` deletes the node's pods through the API (so the kubelet stops them and tears their network
down), stops the kubelet, kills what is left through containerd, stops containerd and its shims, unmounts
what is still mounted under the node's directory, deletes the bridge and the cgroups: ``leftovers()`` is then
empty, and the tests check that it is.

The kubelet's version skew policy allows a kubelet no newer than the API server; both come from the same
``k8s.io/kubernetes`` release here. containerd 1.6 does not implement the CRI ``RuntimeConfig`` call, so the
kubelet uses the cgroup driver of its own configuration (a fallback Kubernetes 1.36 keeps and 1.37 drops:
kubernetes#136846; docs/rehearsal.md "Real nodes").
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainyard.rehearsal import dns, dns_image, images, iptables, prerequisites
from trainyard.rehearsal.cluster import (
    HOST,
    SERVICE_CIDR,
    ClusterError,
    ControlPlane,
    Processes,
    Settings,
    port_in_use,
    write_kubeconfig,
)
from trainyard.rehearsal.in_cluster_api import InClusterApi
from trainyard.rehearsal.kube import KubeError, Manifest, wait_until
from trainyard.rehearsal.netpol import NetworkPolicyEnforcer
from trainyard.rehearsal.proxy import ServiceProxy
from trainyard.rehearsal.settings import REAL_NODE_LABELS

DEFAULT_POD_NETWORK = "10.244.0.0/16"  # node i gets its i-th /24
CLUSTER_DNS_IP = dns.dns_service_ip(SERVICE_CIDR)  # 10.96.0.10, the kube-dns Service (kubeadm's address)
DEFAULT_CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CAP_SYS_RESOURCE = 24  # linux/capability.h


class NodeError(ClusterError):
    """A real node could not be started, reached or stopped; says what to look at."""


@dataclass(frozen=True)
class NodeLayout:
    """Names, addresses and directories of one real node of a rehearsal cluster."""

    settings: Settings
    name: str
    index: int
    pod_network: str = DEFAULT_POD_NETWORK
    cni_bin_dir: Path = DEFAULT_CNI_BIN_DIR
    # More destinations the pods get a route to (through the node's bridge address), besides the pod network and
    # the service range: none by default (air-gapped). The NetworkPolicy tier routes stand-ins of "outside" here.
    extra_pod_routes: tuple[str, ...] = ()

    @property
    def directory(self) -> Path:
        return self.settings.state_dir / "nodes" / self.name

    @property
    def tag(self) -> str:
        """Short and unique per cluster and node: the bridge's name and the cgroup root (interface names: 15 bytes)."""
        return "ty" + hashlib.sha256(f"{self.settings.state_dir.resolve()}/{self.name}".encode()).hexdigest()[:8]

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        network = ipaddress.IPv4Network(self.pod_network)
        return list(network.subnets(new_prefix=24))[self.index]

    @property
    def address(self) -> str:
        """The node's InternalIP: the bridge's (gateway) address, on this machine."""
        return str(self.subnet.network_address + 1)

    @property
    def containerd_socket(self) -> Path:
        return self.directory / "containerd" / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/{self.tag}"

    # Every node's kubelet listens on its own address (its bridge's), so all nodes share the two port numbers.
    @property
    def kubelet_port(self) -> int:
        return self.settings.ports.kubelet

    @property
    def healthz_port(self) -> int:
        return self.settings.ports.kubelet_healthz

    def path(self, *parts: str) -> Path:
        return self.directory.joinpath(*parts)


def registry_address(settings: Settings) -> str:
    return f"{HOST}:{settings.ports.registry}"


# ------------------------------------------------------------------------------- configurations (pure)


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for the paths and names used here


def containerd_config(layout: NodeLayout, sandbox_image: str, runc: str, restrict_oom_score_adj: bool = False) -> str:
    """containerd 1.6's configuration (version 2) for this node. Ref: containerd v1.6.20 docs/cri/config.md,
    pkg/cri/config/config.go (netns_mounts_under_state_dir, registry.config_path, restrict_oom_score_adj).

    ``restrict_oom_score_adj``: where this machine's root lacks CAP_SYS_RESOURCE (some VMs and sandboxes), a
    process may not lower its ``oom_score_adj``; the kubelet asks -998 for every sandbox, and runc's init then
    dies ("failed to update /proc/self/oom_score_adj: Permission denied", reported by the kubelet as
    "can't get final child's PID from pipe: EOF"). containerd then clamps the value to its own.
    """
    d = layout.path
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    return f"""version = 2
root = {_toml(str(d("containerd", "root")))}
state = {_toml(str(d("containerd", "state")))}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = {_toml(str(layout.containerd_socket))}

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {_toml(str(d("containerd", "opt")))}

{cri}
  sandbox_image = {_toml(sandbox_image)}
  stream_server_address = "{HOST}"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = {"true" if restrict_oom_score_adj else "false"}

{cri[:-1]}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

{cri[:-1]}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

{cri[:-1]}.containerd.runtimes.runc.options]
  BinaryName = {_toml(runc)}
  Root = {_toml(str(d("containerd", "runc")))}
  SystemdCgroup = false

{cri[:-1]}.cni]
  bin_dir = {_toml(str(layout.cni_bin_dir))}
  conf_dir = {_toml(str(d("cni", "net.d")))}
  max_conf_num = 1

{cri[:-1]}.registry]
  config_path = {_toml(str(d("containerd", "certs.d")))}
"""


def cni_config(layout: NodeLayout) -> Manifest:
    """The pod network: the reference bridge plugin with host-local IPAM. Ref: containernetworking/plugins
    v1.1.1 plugins/main/bridge (isGateway, ipMasq, hairpinMode), plugins/ipam/host-local (ranges, dataDir)."""
    return {
        "cniVersion": "0.4.0", "name": f"trainyard-{layout.name}",
        "plugins": [{
            "type": "bridge", "bridge": layout.tag, "isGateway": True, "ipMasq": False, "hairpinMode": True,
            "ipam": {"type": "host-local", "dataDir": str(layout.path("cni", "ipam")),
                     "ranges": [[{"subnet": str(layout.subnet), "gateway": layout.address}]],
                     "routes": [{"dst": layout.pod_network}, {"dst": SERVICE_CIDR},
                                *({"dst": dst} for dst in layout.extra_pod_routes)]},
        }],
    }


def kubelet_config(layout: NodeLayout, ca: Path, serving: tuple[Path, Path]) -> Manifest:
    """KubeletConfiguration (kubelet.config.k8s.io/v1beta1). Ref: kubernetes v1.36.3
    staging/src/k8s.io/kubelet/config/v1beta1/types.go."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": layout.address, "port": layout.kubelet_port, "readOnlyPort": 0,
        "healthzBindAddress": layout.address, "healthzPort": layout.healthz_port,
        "tlsCertFile": str(serving[0]), "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        # containerd 1.6 cannot tell the kubelet its driver (no CRI RuntimeConfig): both say cgroupfs.
        "cgroupDriver": "cgroupfs", "cgroupRoot": layout.cgroup_root, "cgroupsPerQOS": True,
        # This machine (and many CI hosts) still runs cgroup v1; the kubelet refuses it unless told (KEP-5573).
        "failCgroupV1": False,
        "failSwapOn": False,
        "podLogsDir": str(layout.path("pod-logs")),
        # The node's own resolvers (for dnsPolicy: Default pods, CoreDNS's): none, air-gapped. ClusterFirst pods get
        # the cluster DNS, whether or not it runs yet (rehearsal/dns.py).
        "resolvConf": str(layout.path("resolv.conf")),
        "clusterDNS": [CLUSTER_DNS_IP], "clusterDomain": dns.CLUSTER_DOMAIN,
        "rotateCertificates": False, "serverTLSBootstrap": False,
        "registerNode": True,
        "maxPods": 32,
        # A rehearsal machine's disk is shared with builds and caches: evict only when it is nearly full.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%",
                         "nodefs.inodesFree": "2%", "imagefs.inodesFree": "2%"},
        "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
    }


# ------------------------------------------------------------------------------------ the registry


class LoopbackRegistry:
    """``crane registry serve`` on the cluster's registry port (in memory): where the node pulls its images."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.processes = Processes(settings)

    @property
    def address(self) -> str:
        return registry_address(self.settings)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=3) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def up(self) -> None:
        if not self.processes.running("registry"):
            if port_in_use(self.settings.ports.registry):
                raise NodeError(f"port {self.address} is in use by another process (set TRAINYARD_REGISTRY_PORT)")
            self.processes.start("registry", [str(self.settings.binary("crane")), "registry", "serve",
                                              "--address", self.address])
        wait_until("the loopback registry to answer", lambda: self.ready() or not self.processes.running("registry"), 30)
        if not self.processes.running("registry"):
            raise NodeError(f"crane registry exited:\n{self.processes.log_tail('registry')}")

    def down(self) -> None:
        self.processes.stop("registry")


# ------------------------------------------------------------------------------------------- kubelet's chains


# What kubelet itself writes into the machine's iptables and ip6tables (with iptables installed; it skips them
# without): the hint that tells kube-proxy which iptables backend is in use, a canary per table to notice a flush,
# and in IPv4's filter KUBE-FIREWALL, jumped to from INPUT and OUTPUT, which drops packets to 127/8 from elsewhere.
# Ref: kubernetes v1.36.3 pkg/kubelet/kubelet_network_linux.go (syncIPTablesRules, KubeIPTablesHintChain,
# KubeletFirewallChain, the canary chains).
KUBELET_CHAINS = {"mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"), "nat": ("KUBE-KUBELET-CANARY",),
                  "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY")}


class KubeletChains:
    """kubelet's own iptables chains on this machine: removed when the last kubelet of the machine stops, unless they
    were there before the rehearsal's first node started (a real kubelet of the machine owns them then)."""

    def __init__(self, settings: Settings) -> None:
        self.marker = settings.state_dir / "kubelet-iptables.owned"

    def present(self) -> list[str]:
        found = []
        for family in iptables.FAMILIES:
            for table, chains in KUBELET_CHAINS.items():
                declared = set(iptables.declared_chains(iptables.save(table, family)))
                found += [f"{family} chain {table}/{c}" for c in chains if c in declared]
        return found

    def before_first_kubelet(self) -> None:
        """Called before a kubelet starts: when no kubelet of the machine runs and none of its chains exist, the chains
        the kubelet is about to write are the rehearsal's to remove."""
        if not self.marker.exists() and not kubelets_running() and not self.present():
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text("kubelet's iptables chains were absent before the rehearsal's first node\n")

    def leftovers(self) -> list[str]:
        return self.present() if self.marker.exists() and not kubelets_running() else []

    def after_last_kubelet(self) -> None:
        """Called after a kubelet stopped: when it was the machine's last, remove the chains it wrote (if ours)."""
        if not self.marker.exists() or kubelets_running():
            return
        for family in iptables.FAMILIES:
            for table, chains in KUBELET_CHAINS.items():
                iptables.remove_chains(table, chains, family)  # the jumps to them first (INPUT/OUTPUT -j KUBE-FIREWALL)
        self.marker.unlink(missing_ok=True)


def kubelets_running() -> bool:
    """Whether any kubelet process runs on this machine (any cluster's, the rehearsal's or not)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # A zombie (a stopped kubelet its parent has not reaped yet, e.g. a test's) runs nothing.
                if (entry / "comm").read_text().strip() == "kubelet" and \
                        not (entry / "stat").read_text().split(") ", 1)[1].startswith("Z"):
                    return True
            except (OSError, IndexError):
                continue
    return False


# ------------------------------------------------------------------------------------------- the node


class RealNode:
    """One real node: containerd + CNI bridge + kubelet, registered with the rehearsal's API server."""

    def __init__(self, settings: Settings, name: str = "node-0", index: int = 0,
                 pod_network: str | None = None, cni_bin_dir: Path | None = None,
                 host: prerequisites.Host | None = None, proxy: bool = False, network_policy: bool = False,
                 extra_pod_routes: tuple[str, ...] = (), dns: bool = False,
                 registry_hosts: tuple[str, ...] = ()) -> None:
        """``registry_hosts``: registry hosts besides ``trainyard.local`` whose images containerd pulls from the loopback
        registry (a site's own registry, e.g. ``registry.trainyard.internal`` for Trainyard's own images)."""
        env = os.environ
        self.layout = NodeLayout(settings, name, index,
                                 pod_network or env.get("TRAINYARD_POD_NETWORK") or DEFAULT_POD_NETWORK,
                                 cni_bin_dir or Path(env.get("TRAINYARD_CNI_BIN_DIR") or DEFAULT_CNI_BIN_DIR),
                                 extra_pod_routes)
        self.settings = settings
        self.plane = ControlPlane(settings)
        self.processes = Processes(settings)
        self.registry = LoopbackRegistry(settings)
        self.host = host or prerequisites.Host()
        # kube-proxy serves every real node of this machine's network namespace: one node runs it.
        self.proxy = ServiceProxy(settings, name, self.layout.pod_network) if proxy else None
        # kube-router's network policy controller writes this machine's filter table: one node runs it.
        self.enforcer = NetworkPolicyEnforcer(settings, name, self.host)
        self.network_policy = network_policy
        self.dns = dns
        self.registry_hosts = (images.MIRROR_HOST, *(h for h in registry_hosts if h != images.MIRROR_HOST))
        self.kubelet_chains = KubeletChains(settings)
        # Shared by the cluster's real nodes: the first one's up makes it, the last one's down removes it.
        self.api = InClusterApi(settings, self.layout.pod_network)

    @property
    def name(self) -> str:
        return self.layout.name

    @property
    def containerd(self) -> str:
        return f"containerd-{self.name}"

    @property
    def kubelet(self) -> str:
        return f"kubelet-{self.name}"

    # ------------------------------------------------------------------ prerequisites
    def required_binaries(self) -> dict[str, Path | None]:
        bin_ = self.settings.binary
        return {"kubelet": bin_("kubelet"), "crane": bin_("crane"), "kubectl": bin_("kubectl"),
                **({"coredns": bin_("coredns")} if self.dns else {}),
                **dict.fromkeys(("containerd", "containerd-shim-runc-v2", "ctr", "runc", "ip", "mount", "umount",
                                 "gcc", "strip"))}

    def problems(self) -> list[str]:
        """What this machine lacks for the node, and address or port clashes (empty: it can start)."""
        found = prerequisites.missing(self.required_binaries(), self.layout.cni_bin_dir, self.host)
        if not images.BUSYBOX.is_file():
            found.append(f"{images.BUSYBOX}: not found (Debian: apt-get install busybox-static), the test image's binary")
        if self.proxy is not None:
            found += self.proxy.problems()
        if self.network_policy:
            found += self.enforcer.problems()
        if self.dns:
            found += dns_image.missing_packages()
            if self.proxy is None and not self.processes.running("kube-proxy"):
                found.append("cluster DNS: its Service address needs kube-proxy on this machine (start this node or one "
                             "before it with --proxy)")
        if self.host.find("ip") is not None:
            clash = self._subnet_clash()
            if clash:
                found.append(clash)
            found += self.api.problems()
        return found

    def _subnet_clash(self) -> str | None:
        result = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=False)  # noqa: S607
        if result.returncode != 0:
            return None
        for link in json.loads(result.stdout or "[]"):
            for info in link.get("addr_info", []):
                network = ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}").network
                if link.get("ifname") != self.layout.tag and network.overlaps(self.layout.subnet):
                    return (f"pod subnet {self.layout.subnet} overlaps {network} on {link.get('ifname')}"
                            " (set TRAINYARD_POD_NETWORK to a free /16)")
        return None

    def check(self) -> None:
        problems = self.problems()
        if problems:
            raise prerequisites.PrerequisiteError(problems)

    # ------------------------------------------------------------------ up
    def up(self, ready_timeout: float = 180) -> None:
        """Start the node (registry, images, bridge, containerd, kubelet) and wait until it is Ready; idempotent."""
        self.check()
        if not self.plane.api_ready():
            raise NodeError("the rehearsal's API server is not running: start the control plane first")
        layout = self.layout
        for sub in ("containerd/certs.d", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "images"):
            layout.path(sub).mkdir(parents=True, exist_ok=True)
        self.registry.up()
        built = images.build_node_images(self.settings.share("kubelet") / "pause", layout.path("images"),
                                         self.settings.binary("kubectl"))
        if self.dns:
            built.append(dns_image.build_coredns(self.settings.binary("coredns"), layout.path("images")))
        for image in built:
            images.push(image, self.registry.address)
        for host in self.registry_hosts:  # containerd reads certs.d/<host>/hosts.toml at each pull
            mirror = layout.path("containerd", "certs.d", host)
            mirror.mkdir(parents=True, exist_ok=True)
            (mirror / "hosts.toml").write_text(images.mirror_hosts_toml(self.registry.address))
        self._bridge_up()
        self.api.up()  # before the kubelet: its pods find the kubernetes Service served from their first moment
        self._cgroup_root_up()
        runc = self.host.find("runc") or "runc"
        layout.path("containerd.toml").write_text(containerd_config(
            layout, built[0].reference, runc, restrict_oom_score_adj=not self.host.has_capability(CAP_SYS_RESOURCE)))
        (layout.path("cni", "net.d") / "10-trainyard.conflist").write_text(json.dumps(cni_config(layout), indent=2))
        layout.path("resolv.conf").write_text("# an air-gapped rehearsal node: no DNS\n")
        self.processes.start(self.containerd, ["containerd", "--config", str(layout.path("containerd.toml"))])
        try:
            wait_until("containerd to answer", lambda: self._ctr("version").returncode == 0
                       or not self.processes.running(self.containerd), 60)
        except TimeoutError as exc:
            raise NodeError(f"{exc}; see {self.settings.logs / (self.containerd + '.log')}") from None
        if not self.processes.running(self.containerd):
            raise NodeError(f"containerd exited:\n{self.processes.log_tail(self.containerd)}")
        self.kubelet_chains.before_first_kubelet()
        self._start_kubelet()
        self.wait_ready(ready_timeout)
        if self.proxy is not None:
            self.proxy.up()
        if self.network_policy:
            try:
                self.enforcer.up()
            except (ClusterError, prerequisites.PrerequisiteError):
                self.down()  # an enforcer that cannot start leaves no node running without it
                raise
        if self.dns:
            try:
                self.cluster_dns().up(built[-1].reference)
            except KubeError as exc:
                self.down()  # as for the enforcer: no node left running without what was asked of it
                raise NodeError(f"cluster DNS: {exc}") from None

    def cluster_dns(self) -> dns.ClusterDns:
        return dns.ClusterDns(self.plane.kube(), CLUSTER_DNS_IP)

    def _start_kubelet(self) -> None:
        layout, pki = self.layout, self.plane.pki
        user = f"system:node:{self.name}"
        pki.issue_client(f"kubelet-{self.name}", user, ("system:nodes",))
        pki.issue_server(f"kubelet-{self.name}-serving", f"/CN={self.name}", f"IP:{layout.address},DNS:{self.name}")
        kubeconfig = layout.path("kubelet.kubeconfig")
        write_kubeconfig(kubeconfig, self.plane.server, pki, user, f"kubelet-{self.name}")
        config = kubelet_config(layout, pki.path("ca.crt"), (pki.path(f"kubelet-{self.name}-serving.crt"),
                                                              pki.path(f"kubelet-{self.name}-serving.key")))
        layout.path("kubelet.yaml").write_text(json.dumps(config, indent=2))
        self.processes.start(self.kubelet, [
            str(self.settings.binary("kubelet")), "--config", str(layout.path("kubelet.yaml")),
            "--kubeconfig", str(kubeconfig), "--root-dir", str(layout.path("kubelet")),
            "--cert-dir", str(layout.path("kubelet", "pki")), "--hostname-override", self.name,
            "--node-ip", layout.address, "--node-labels", ",".join(f"{k}={v}" for k, v in REAL_NODE_LABELS.items()), "--v=1"])

    def wait_ready(self, timeout: float = 180) -> None:
        """Wait for the Node to be Ready, then lift the not-ready taint (no node lifecycle controller runs here)."""
        kube = self.plane.kube()

        def ready() -> bool | None:
            if not self.processes.running(self.kubelet):
                raise NodeError(f"the kubelet exited; last lines of its log:\n{self.processes.log_tail(self.kubelet, 30)}")
            if not kube.exists("node", self.name):
                return None
            conditions = (kube.get("node", self.name).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) or None

        try:
            wait_until(f"node {self.name} to be Ready", ready, timeout, interval=1)
        except TimeoutError as exc:
            raise NodeError(f"{exc}; see {self.settings.logs / (self.kubelet + '.log')}") from None
        # TaintNodesByCondition put node.kubernetes.io/not-ready on the new Node; the node lifecycle controller
        # would lift it, but the rehearsal runs kube-controller-manager without it (cluster.KCM_CONTROLLERS).
        kube.run("taint", "node", self.name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", str(self.layout.containerd_socket), *args],  # noqa: S603, S607 - Debian's ctr
                              capture_output=True, text=True, check=False, timeout=60)

    def _ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)  # noqa: S603, S607 - iproute2
        if check and result.returncode != 0:
            raise NodeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def _bridge_up(self) -> None:
        """The pod bridge with the node's address (the CNI bridge plugin reuses it): the kubelet listens there."""
        tag = self.layout.tag
        if self._ip("link", "show", tag, check=False).returncode != 0:
            self._ip("link", "add", tag, "type", "bridge")
        addresses = self._ip("-j", "addr", "show", tag).stdout
        if f'"{self.layout.address}"' not in addresses:
            self._ip("addr", "add", f"{self.layout.address}/{self.layout.subnet.prefixlen}", "dev", tag)
        self._ip("link", "set", tag, "up")
        # Pods of different real nodes reach each other through this machine: forwarding for packets that arrive
        # on the pods' bridges only (an interface setting that goes with the device; net.ipv4.ip_forward, the
        # machine's, is left alone). Ref: kernel Documentation/networking/ip-sysctl.rst, conf/interface/forwarding.
        (self.host.proc / "sys" / "net" / "ipv4" / "conf" / tag / "forwarding").write_text("1\n")

    def _cgroup_hierarchies(self) -> list[Path]:
        """Mount points of the cgroup hierarchies (v1 controllers, the v1 named ones, and v2)."""
        points = []
        for line in (self.host.proc / "self" / "mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split()[:1] in (["cgroup"], ["cgroup2"]):
                points.append(Path(left.split()[4]))
        return points

    def _cgroup_root_up(self) -> None:
        """The kubelet's cgroup root must exist in every hierarchy; a new v1 cpuset gets its parent's CPUs and memory
        nodes (v1 does not inherit them)."""
        for hierarchy in self._cgroup_hierarchies():
            cgroup = hierarchy / self.layout.tag
            cgroup.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / name).exists() and not (cgroup / name).read_text().strip():
                    (cgroup / name).write_text((hierarchy / name).read_text())

    # ------------------------------------------------------------------ status
    def running(self) -> bool:
        return self.processes.running(self.kubelet) and self.processes.running(self.containerd)

    def leftovers(self) -> list[str]:
        """What of this node still exists on the machine: processes, mounts, the bridge, cgroups (empty after down)."""
        last = not self._other_nodes_running()
        own = [self.kubelet, self.containerd] + (["registry"] if last else [])
        found = [f"process {name} (pid {self.processes.pid(name)})" for name in own if self.processes.running(name)]
        if last:
            found += self.api.leftovers()
        if self.proxy is not None:
            found += self.proxy.leftovers()
        if self.network_policy or self.enforcer.served_node() == self.name:
            found += self.enforcer.leftovers()
        found += [f"process {pid}: {cmd}" for pid, cmd in self._processes_of_node()]
        found += [f"mount {m}" for m in self._mounts()]
        if self._ip("link", "show", self.layout.tag, check=False).returncode == 0:
            found.append(f"network device {self.layout.tag}")
        found += [f"cgroup {h / self.layout.tag}" for h in self._cgroup_hierarchies() if (h / self.layout.tag).exists()]
        return found + self.kubelet_chains.leftovers()

    def _other_nodes_running(self) -> bool:
        """Whether another real node of this cluster still runs (they share the registry)."""
        return any(p.stem != self.kubelet and self.processes.running(p.stem)
                   for p in self.settings.run_dir.glob("kubelet-*.pid"))

    def _processes_of_node(self) -> Iterator[tuple[int, str]]:
        """Processes started for this node (containerd's shims name its socket; containers run under its cgroup root)."""
        marker, own = str(self.layout.containerd_socket), os.getpid()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == own:
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                cgroups = (entry / "cgroup").read_text()
            except OSError:
                continue
            if (entry / "stat").exists() and ") Z" in (entry / "stat").read_text():
                continue
            if marker in cmdline or f":/{self.layout.tag}/" in cgroups or cgroups.rstrip().endswith(f":/{self.layout.tag}"):
                yield int(entry.name), cmdline[:120]

    def _mounts(self) -> list[str]:
        root = str(self.layout.directory.resolve())
        found = []
        for line in (self.host.proc / "self" / "mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == root or point.startswith(root + "/"):
                found.append(point)
        return found

    # ------------------------------------------------------------------ down
    def down(self, grace: float = 60) -> None:
        """Stop the node; nothing of it keeps running or stays mounted, and its Node object is deleted."""
        if self.plane.api_ready() and not self._other_nodes_running():
            # The last real node takes the cluster DNS with it (its pods could run nowhere else).
            with contextlib.suppress(KubeError):
                self.cluster_dns().down()
        if self.plane.api_ready() and self.processes.running(self.kubelet):
            self._delete_pods(grace)
        if self.proxy is not None or (self.processes.pid("kube-proxy") is not None and not self._other_nodes_running()):
            (self.proxy or ServiceProxy(self.settings, self.name, self.layout.pod_network)).down()
        if self.network_policy or self.enforcer.served_node() == self.name:
            self.enforcer.down()
        self.processes.stop(self.kubelet)
        self.kubelet_chains.after_last_kubelet()
        if self.processes.running(self.containerd):
            self._kill_containers()
        self.processes.stop(self.containerd)
        for pid, _ in list(self._processes_of_node()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for point in sorted(self._mounts(), key=len, reverse=True):
            subprocess.run(["umount", point], capture_output=True, check=False)  # noqa: S603, S607
            if point in self._mounts():
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)  # noqa: S603, S607
        self._ip("link", "del", self.layout.tag, check=False)
        self._cgroup_root_down()
        if not self._other_nodes_running():
            self.api.down()
            self.registry.down()
        if self.plane.api_ready():
            with contextlib.suppress(KubeError):
                self.plane.kube().run("delete", "node", self.name, "--ignore-not-found", "--wait=false")

    def _delete_pods(self, grace: float) -> None:
        """Cordon the node, delete its pods through the API (the kubelet stops them: CRI StopPodSandbox runs CNI DEL)
        and wait for *those* pods to be gone. A Deployment's or DaemonSet's controller creates replacements at once;
        a cordoned node gets no Deployment pod, but a DaemonSet's tolerates the cordon, so waiting for the node to be
        empty would wait out the whole grace period (it did: 60 s on every ``down`` with controllers as pods).
        Whatever replacement did start is stopped through containerd next (``_kill_containers``)."""
        kube, selector = self.plane.kube(), f"spec.nodeName={self.name}"

        def uids() -> set[str]:
            return set(kube.run("get", "pods", "--all-namespaces", "--field-selector", selector,
                                "-o", "jsonpath={.items[*].metadata.uid}").stdout.split())

        try:
            kube.run("cordon", self.name, check=False)
            deleted = uids()
            kube.run("delete", "pods", "--all-namespaces", "--field-selector", selector, "--wait=false", check=False)
            wait_until(f"the pods of {self.name} to be gone", lambda: not deleted & uids(), grace, interval=1)
        except (TimeoutError, KubeError) as exc:
            print(f"    {exc}: stopping them through containerd", flush=True)

    def _kill_containers(self) -> None:
        """Whatever the kubelet left: every task killed and deleted, every container removed (namespace k8s.io)."""
        listed = self._ctr("-n", "k8s.io", "tasks", "ls", "-q")
        for task in listed.stdout.split():
            self._ctr("-n", "k8s.io", "tasks", "kill", "--all", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 15
        for task in listed.stdout.split():
            while self._ctr("-n", "k8s.io", "tasks", "delete", task).returncode != 0 and time.monotonic() < deadline:
                time.sleep(0.2)
        for container in self._ctr("-n", "k8s.io", "containers", "ls", "-q").stdout.split():
            self._ctr("-n", "k8s.io", "containers", "delete", container)

    def _cgroup_root_down(self) -> None:
        for hierarchy in self._cgroup_hierarchies():
            root = hierarchy / self.layout.tag
            if not root.exists():
                continue
            for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()


def real_node_names(settings: Settings) -> list[str]:
    """The real nodes this cluster has state for (``nodes/<name>``), started or not."""
    directory = settings.state_dir / "nodes"
    return sorted(p.name for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []


def stop_real_nodes(settings: Settings) -> None:
    """``down`` of every real node of the cluster (``trainyard cluster down`` calls it before the control plane)."""
    for name in real_node_names(settings):
        RealNode(settings, name).down()
