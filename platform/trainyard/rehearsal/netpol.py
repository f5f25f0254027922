"""NetworkPolicy enforcement on the rehearsal's real nodes: kube-router's network policy controller, and nothing else of it.

kube-router (``tools/build.sh kube-router``) runs with only its firewall (``--run-firewall=true --run-router=false
--run-service-proxy=false``, as upstream's ``daemonset/kube-router-firewall-daemonset.yaml``): it watches pods,
namespaces and NetworkPolicies and writes, in the iptables filter table, a chain per pod (``KUBE-POD-FW-*``) and
per policy (``KUBE-NWPLCY-*``) behind jumps from INPUT, FORWARD and OUTPUT (``KUBE-ROUTER-*``), with ipsets of
the selected pods (``KUBE-SRC-*``, ``KUBE-DST-*``). Ingress and egress are both enforced; a refused packet gets
an ICMP port unreachable (``REJECT``). Pods on one node's bridge are switched, not routed: their packets pass
iptables only with ``br_netfilter`` and ``net.bridge.bridge-nf-call-iptables=1``.

Why not sigs.k8s.io/kube-network-policies (what kind uses): it hands packets to userspace with the nftables
``queue`` expression, which needs ``CONFIG_NFT_QUEUE``; many kernels (this one) lack it (docs/architecture.md).

Scope, as kube-router defines it: it enforces for the pods of *its* node (``status.hostIP`` is the node's
address). All real nodes of a rehearsal share this machine's network namespace and so its filter table; two
kube-routers would each delete the other's chains as stale. So one runs per machine, for one node: pods that
must be isolated run there (``RealNode(..., network_policy=True)``; a second one is refused, as for kube-proxy).

Stop: kube-router leaves its rules in place when it exits (a restarted one resumes them), and its
``--cleanup-config`` also flushes every IPVS service of the machine and undoes its router's setup. So ``down``
removes exactly what the network policy controller writes, as its ``Cleanup`` does (chains with its prefixes,
the jumps to them, its ipsets), and ``leftovers()`` is then empty.
Ref: kube-router v2.10.0 pkg/controllers/netpol/network_policy_controller.go (chain and ipset names,
ensureTopLevelChains, Cleanup), pkg/controllers/netpol/pod.go, docs/user-guide.md (flags).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from trainyard.rehearsal import iptables, prerequisites
from trainyard.rehearsal.cluster import (
    HOST,
    SERVICE_CIDR,
    ClusterError,
    ControlPlane,
    Processes,
    Settings,
    http_ok,
    port_in_use,
    write_kubeconfig,
)
from trainyard.rehearsal.kube import Manifest, wait_until

NAME = "kube-router"
USER = "trainyard:kube-router"  # the client certificate's user, bound to the ClusterRole below
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-", "kube-router-local-pods")  # IPv4 names; IPv6 ones start "inet6:"
BRIDGE_NF_CALL_IPTABLES = "net/bridge/bridge-nf-call-iptables"


class EnforcerError(ClusterError):
    """kube-router could not be started or stopped cleanly; says what to look at."""


def cluster_role() -> list[Manifest]:
    """kube-router's ClusterRole and a binding to the rehearsal's user. Ref: kube-router v2.10.0
    daemonset/generic-kuberouter-only-advertise-routes.yaml (ClusterRole kube-router), the rules the network
    policy controller's informers need (pods, namespaces, nodes, networkpolicies; it starts the service and
    EndpointSlice informers too)."""
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "trainyard:kube-router"},
         "rules": [{"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes", "endpoints"], "verbs": read},
                   {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "trainyard:kube-router"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "trainyard:kube-router"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]},
    ]


def arguments(binary: Path, kubeconfig: Path, node_name: str, health_port: int) -> list[str]:
    """kube-router's command line: the firewall only, for one node. Ref: kube-router v2.10.0 docs/user-guide.md."""
    return [str(binary), "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
            "--kubeconfig", str(kubeconfig), "--hostname-override", node_name,
            "--service-cluster-ip-range", SERVICE_CIDR, "--enable-ipv4=true", "--enable-ipv6=false",
            # Standard NetworkPolicy semantics: a pod no policy selects is not isolated (--netpol-default-deny off).
            "--netpol-default-deny=false",
            "--health-addr", HOST, "--health-port", str(health_port), "--metrics-port", "0", "--v=1"]


class NetworkPolicyEnforcer:
    """kube-router's network policy controller for one real node of this machine."""

    def __init__(self, settings: Settings, node_name: str, host: prerequisites.Host | None = None) -> None:
        self.settings = settings
        self.node_name = node_name
        self.host = host or prerequisites.Host()
        self.processes = Processes(settings)
        self.plane = ControlPlane(settings)

    @property
    def directory(self) -> Path:
        return self.settings.state_dir / NAME

    @property
    def health_port(self) -> int:
        return self.settings.ports.kube_router_health

    # ------------------------------------------------------------------ checks
    def problems(self) -> list[str]:
        """What this machine lacks for the enforcer, or another enforcer in the way (empty: it can start)."""
        found = []
        binary = self.settings.binary(NAME)
        if not binary.is_file():
            found.append(f"kube-router: not built at {binary} (run `tools/build.sh kube-router`)")
        found += prerequisites.enforcer_problems(self.host)
        if not found and not self.processes.running(NAME) and self.chains():
            found.append(f"iptables chains {', '.join(self.chains()[:3])} exist: another kube-router (or what one left)"
                         " owns this machine's filter table (one enforcer per network namespace)")
        if not self.processes.running(NAME) and port_in_use(self.health_port):
            found.append(f"port {self.health_port} is in use (TRAINYARD_KUBE_ROUTER_HEALTH_PORT)")
        return found

    # ------------------------------------------------------------------ up
    def up(self, timeout: float = 60) -> None:
        """Start kube-router for the node (which must be registered) and wait until its controller has synced once."""
        if self.processes.running(NAME):
            return
        problems = self.problems()
        if problems:
            raise prerequisites.PrerequisiteError(problems)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "node").write_text(f"{self.node_name}\n")
        self._bridge_netfilter_on()
        pki = self.plane.pki
        pki.issue_client(NAME, USER, ())
        kubeconfig = self.directory / "kubeconfig"
        write_kubeconfig(kubeconfig, self.plane.server, pki, USER, NAME)
        self.plane.kube().apply(cluster_role(), field_manager="trainyard-rehearsal")
        self.processes.start(NAME, arguments(self.settings.binary(NAME), kubeconfig, self.node_name, self.health_port))

        def synced() -> bool:
            if not self.processes.running(NAME):
                raise EnforcerError(f"kube-router exited; last lines of its log:\n{self.processes.log_tail(NAME, 30)}")
            return http_ok(f"http://{HOST}:{self.health_port}/healthz", "OK") and "KUBE-ROUTER-FORWARD" in self.chains()

        try:
            wait_until("kube-router's network policy controller to sync", synced, timeout, interval=0.5)
        except (TimeoutError, EnforcerError) as exc:
            self.down()  # nothing of it stays: no process, no chain, no ipset
            raise EnforcerError(f"{exc}; see {self.settings.logs / (NAME + '.log')}") from None

    def _bridge_netfilter_on(self) -> None:
        """Bridged pod traffic passes iptables only with bridge-nf-call-iptables=1. A machine-wide setting: set only
        when it is 0, said so, and put back by ``down``. Ref: kernel Documentation/networking/bridge.rst (br_netfilter)."""
        path = self.host.proc / "sys" / BRIDGE_NF_CALL_IPTABLES
        if path.read_text().strip() == "1":
            return
        path.write_text("1\n")
        (self.directory / "bridge-nf-call-iptables.was").write_text("0\n")
        print("    set net.bridge.bridge-nf-call-iptables=1 (machine-wide; it was 0: bridged pod traffic must pass"
              " iptables for NetworkPolicy); `down` puts 0 back", flush=True)

    # ------------------------------------------------------------------ state
    def running(self) -> bool:
        return self.processes.running(NAME)

    def served_node(self) -> str | None:
        """The node the enforcer of this cluster was started for (None: never started, or stopped)."""
        try:
            return (self.directory / "node").read_text().strip() or None
        except OSError:
            return None

    def _filter_table(self) -> str:
        return iptables.save("filter")

    def chains(self) -> list[str]:
        """kube-router's network policy chains in this machine's filter table (any cluster's)."""
        return sorted(c for c in iptables.declared_chains(self._filter_table()) if c.startswith(CHAIN_PREFIXES))

    def ipsets(self) -> list[str]:
        listed = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False)  # noqa: S607
        return sorted(n for n in listed.stdout.split() if n.removeprefix("inet6:").startswith(IPSET_PREFIXES))

    def enforced_pod_ips(self) -> set[str]:
        """Pod addresses kube-router has a firewall chain for (a NetworkPolicy selects them), from its FORWARD jumps."""
        found = set()
        for line in self._filter_table().splitlines():
            if line.startswith("-A KUBE-ROUTER-FORWARD") and "-j KUBE-POD-FW-" in line:
                match = re.search(r" -[sd] (\d+\.\d+\.\d+\.\d+)(?:/32)? ", line)
                if match:
                    found.add(match.group(1))
        return found

    def leftovers(self) -> list[str]:
        found = [f"process {NAME} (pid {self.processes.pid(NAME)})"] if self.processes.running(NAME) else []
        found += [f"iptables chain {c}" for c in self.chains()]
        return found + [f"ipset {s}" for s in self.ipsets()]

    # ------------------------------------------------------------------ down
    def down(self) -> None:
        """Stop kube-router, then remove its chains, the jumps to them and its ipsets (when it ran for this cluster).
        What could not be removed shows in ``leftovers()``."""
        ran = self.processes.pid(NAME) is not None or self.served_node() is not None
        self.processes.stop(NAME)
        if not ran:
            return
        self._remove_rules()
        for name in self.ipsets():
            subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)  # noqa: S603, S607
        was = self.directory / "bridge-nf-call-iptables.was"
        if was.exists():
            (self.host.proc / "sys" / BRIDGE_NF_CALL_IPTABLES).write_text(was.read_text())
            was.unlink()
            print("    net.bridge.bridge-nf-call-iptables put back to 0", flush=True)
        (self.directory / "node").unlink(missing_ok=True)

    def _remove_rules(self) -> None:
        """The jumps from INPUT/FORWARD/OUTPUT first, then every chain with kube-router's prefixes (flushed, deleted)."""
        iptables.remove_chains("filter", self.chains())
