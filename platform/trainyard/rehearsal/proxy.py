"""kube-proxy for the rehearsal's real nodes: Services' cluster IPs reach the pods behind them.

Every real node of a rehearsal shares this machine's network namespace (each has its own bridge), so one
kube-proxy serves them all (two would write the same rules). It runs in **nftables** mode (GA in Kubernetes
1.33): its rules live in its own tables (``ip kube-proxy``, ``ip6 kube-proxy``), not in the machine's iptables
chains, and ``kube-proxy --cleanup`` removes them on stop. ``--masquerade-all``: a client and a backend on the
same bridge would otherwise see each other's replies bypass the host (no br_netfilter here), and
``--conntrack-max-per-core=0`` leaves the machine's conntrack sysctls as they are.

One kube-proxy per machine (per network namespace): two rehearsal clusters on one machine would share the
``kube-proxy`` table, so the second refuses to start (``ServiceProxy.problems``).
Ref: kubernetes v1.36.3 cmd/kube-proxy/app/options.go, pkg/proxy/nftables/proxier.go.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from trainyard.rehearsal.cluster import HOST, ControlPlane, Processes, Settings, http_ok, port_in_use, write_kubeconfig
from trainyard.rehearsal.kube import wait_until

NAME = "kube-proxy"
TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))


class ServiceProxy:
    """The rehearsal's kube-proxy (nftables mode), for the real nodes in this machine's network namespace."""

    def __init__(self, settings: Settings, node_name: str, pod_network: str) -> None:
        self.settings = settings
        self.node_name = node_name
        self.pod_network = pod_network
        self.processes = Processes(settings)
        self.plane = ControlPlane(settings)

    @property
    def healthz(self) -> str:
        return f"{HOST}:{self.settings.ports.kube_proxy_healthz}"

    def tables(self) -> list[str]:
        """The kube-proxy nftables tables present on this machine (any cluster's)."""
        present = []
        for family, table in TABLES:
            listed = subprocess.run(["nft", "list", "table", family, table], capture_output=True, check=False)  # noqa: S603, S607
            if listed.returncode == 0:
                present.append(f"{family} {table}")
        return present

    def problems(self) -> list[str]:
        found = []
        if not self.settings.binary(NAME).is_file():
            found.append(f"kube-proxy: not built at {self.settings.binary(NAME)} (run `tools/build.sh kubelet`)")
        if subprocess.run(["sh", "-c", "command -v nft"], capture_output=True, check=False).returncode != 0:  # noqa: S607
            found.append("nft: not found on PATH (Debian: apt-get install nftables), kube-proxy's nftables mode runs it")
        elif not self.processes.running(NAME) and self.tables():
            found.append(f"nftables table(s) {', '.join(self.tables())} exist: another kube-proxy runs on this machine"
                         " (one per network namespace)")
        for port in (self.settings.ports.kube_proxy_healthz, self.settings.ports.kube_proxy_metrics):
            if not self.processes.running(NAME) and port_in_use(port):
                found.append(f"port {port} is in use (TRAINYARD_KUBE_PROXY_HEALTHZ_PORT / _METRICS_PORT)")
        return found

    def up(self) -> None:
        if self.processes.running(NAME):
            return
        pki = self.plane.pki
        # RBAC's bootstrap binding system:node-proxier names the user system:kube-proxy.
        pki.issue_client("kube-proxy", "system:kube-proxy", ())
        kubeconfig = self.settings.state_dir / "kube-proxy.kubeconfig"
        write_kubeconfig(kubeconfig, self.plane.server, pki, "system:kube-proxy", "kube-proxy")
        self.processes.start(NAME, [
            str(self.settings.binary(NAME)), "--kubeconfig", str(kubeconfig), "--hostname-override", self.node_name,
            "--proxy-mode", "nftables", "--cluster-cidr", self.pod_network, "--masquerade-all",
            "--conntrack-max-per-core", "0", "--healthz-bind-address", self.healthz,
            "--metrics-bind-address", f"{HOST}:{self.settings.ports.kube_proxy_metrics}", "--v=1"])
        wait_until("kube-proxy to be healthy", lambda: http_ok(f"http://{self.healthz}/healthz", "lastUpdated")
                   or not self.processes.running(NAME), 60)
        if not self.processes.running(NAME):
            raise RuntimeError(f"kube-proxy exited:\n{self.processes.log_tail(NAME, 30)}")

    def down(self) -> None:
        """Stop it, then ``kube-proxy --cleanup``: its tables go (when it ran: another cluster's are not ours)."""
        ran = self.processes.pid(NAME) is not None
        self.processes.stop(NAME)
        if ran and self.settings.binary(NAME).is_file():
            subprocess.run([str(self.settings.binary(NAME)), "--cleanup"], capture_output=True, check=False,  # noqa: S603
                           timeout=60)

    def leftovers(self) -> list[str]:
        found = [f"process {NAME} (pid {self.processes.pid(NAME)})"] if self.processes.running(NAME) else []
        return found + [f"nftables table {t}" for t in self.tables()]


def kube_proxy_log(settings: Settings) -> Path:
    return settings.logs / f"{NAME}.log"
