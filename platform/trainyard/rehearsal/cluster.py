"""The rehearsal's control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback.

Every binary comes from ``tools/build.sh`` (``$TRAINYARD_TOOLS_DIR/bin``). What the control plane is
made of lives beside it: where the cluster's state and ports are (``settings.py``), its processes
(``processes.py``), its certificates and kubeconfigs (``pki.py``) and the health probes
(``health.py``); the names other modules used from here are re-exported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from trainyard.rehearsal.health import http_ok, https_ok
from trainyard.rehearsal.kube import Kube, Manifest, wait_until
from trainyard.rehearsal.pki import Pki, write_kubeconfig
from trainyard.rehearsal.processes import Processes, port_in_use
from trainyard.rehearsal.settings import CONTEXT, HOST, ClusterError, Ports, Settings

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR
# No kubelets report here, so the node lifecycle controller would mark every applied Node
# NotReady/unreachable after 40s (kwok's heartbeats keep them Ready, but only for nodes it manages).
KCM_CONTROLLERS = "*,-node-lifecycle-controller"
REHEARSAL_STORAGE_CLASS = "rehearsal-hostpath"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NO_PROXY = f"{HOST},.svc,{SERVICE_CIDR}"


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler of one rehearsal cluster."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.processes = Processes(settings)
        self.pki = Pki(settings.pki, SERVICE_IP)

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.settings.ports.apiserver}"

    def kube(self) -> Kube:
        return self.settings.kube()

    # health
    def etcd_healthy(self) -> bool:
        return http_ok(f"http://{HOST}:{self.settings.ports.etcd}/health", '"health":"true"')

    def api_ready(self) -> bool:
        return self.pki.path("admin.crt").exists() and https_ok(f"{self.server}/readyz", self.pki, "admin")

    def kcm_healthy(self) -> bool:
        return https_ok(f"https://{HOST}:{self.settings.ports.kcm}/healthz")

    def scheduler_healthy(self) -> bool:
        return https_ok(f"https://{HOST}:{self.settings.ports.scheduler}/healthz")

    def healthy(self) -> bool:
        return (all(self.processes.running(n) for n in CONTROL_PLANE) and self.api_ready()
                and self.kcm_healthy() and self.scheduler_healthy())

    def up(self) -> None:
        """Start what is not running; idempotent."""
        missing = [b for b in CONTROL_PLANE if not self.settings.binary(b).exists()]
        if missing:
            raise ClusterError(f"{', '.join(missing)} not built in {self.settings.tools_dir / 'bin'}: run `make tools`")
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        self.pki.ensure()
        ports, bin_ = self.settings.ports, self.settings.binary
        self._start("etcd", ports.etcd, [
            str(bin_("etcd")), "--name", "trainyard", "--data-dir", str(self.settings.state_dir / "etcd"),
            "--listen-client-urls", f"http://{HOST}:{ports.etcd}", "--advertise-client-urls", f"http://{HOST}:{ports.etcd}",
            "--listen-peer-urls", f"http://{HOST}:{ports.etcd_peer}",
            "--initial-advertise-peer-urls", f"http://{HOST}:{ports.etcd_peer}",
            "--initial-cluster", f"trainyard=http://{HOST}:{ports.etcd_peer}", "--initial-cluster-state", "new",
            "--unsafe-no-fsync", "--log-level", "warn"], self.etcd_healthy, 30)
        pki = self.pki.path
        self._start("kube-apiserver", ports.apiserver, [
            str(bin_("kube-apiserver")), "--etcd-servers", f"http://{HOST}:{ports.etcd}",
            "--bind-address", HOST, "--advertise-address", HOST, "--secure-port", str(ports.apiserver),
            "--tls-cert-file", str(pki("apiserver.crt")), "--tls-private-key-file", str(pki("apiserver.key")),
            "--client-ca-file", str(pki("ca.crt")),
            # The aggregation layer, as kubeadm configures it (pki.py: front-proxy CA and client): without it the API
            # server proxies to an APIService anonymously and Kueue's visibility API answers 403 (FailedDiscoveryCheck).
            "--requestheader-client-ca-file", str(pki("front-proxy-ca.crt")),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User", "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", str(pki("front-proxy-client.crt")),
            "--proxy-client-key-file", str(pki("front-proxy-client.key")),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki("sa.pub")), "--service-account-signing-key-file", str(pki("sa.key")),
            "--service-cluster-ip-range", SERVICE_CIDR, "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NamespaceLifecycle,ServiceAccount,NodeRestriction,ValidatingAdmissionPolicy,"
            "ValidatingAdmissionWebhook,MutatingAdmissionWebhook,ResourceQuota,LimitRanger",
            "--allow-privileged=true", "--endpoint-reconciler-type", "none", "--profiling=false", "--v=1",
            # Real nodes (rehearsal/node.py): reach a kubelet at its InternalIP (its Hostname, the node name, is
            # in no DNS here) with a client certificate the kubelet accepts.
            "--kubelet-preferred-address-types", "InternalIP",
            "--kubelet-client-certificate", str(pki("apiserver-kubelet-client.crt")),
            "--kubelet-client-key", str(pki("apiserver-kubelet-client.key")),
            # A webhook's or APIService's `service` reference is dialled at one of the Service's ready endpoints (a
            # pod IP on a real node's bridge, routed on this machine) instead of its cluster IP, which only
            # kube-proxy's output chain would turn into a pod (and without it would leave by the default route).
            # Ref: kubernetes v1.36.3 cmd/kube-apiserver/app/server.go buildServiceResolver,
            # k8s.io/apiserver@v0.36.3 pkg/util/proxy/proxy.go ResolveEndpoint; docs/rehearsal.md "Real nodes".
            "--enable-aggregator-routing=true"],
            self.api_ready, self.settings.ready_timeout,
            # Webhook calls go to 127.0.0.1 or to a Service (`<name>.<namespace>.svc`, the host name of every
            # service-referenced webhook call: k8s.io/apiserver@v0.36.3 pkg/util/webhook/client.go) directly,
            # never through a proxy a developer's shell may set.
            env={"NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY})
        write_kubeconfig(self.settings.kubeconfig, self.server, self.pki, "trainyard-admin", "admin")
        kcm_kubeconfig = self.settings.state_dir / "kcm.kubeconfig"
        write_kubeconfig(kcm_kubeconfig, self.server, self.pki, "system:kube-controller-manager", "kcm")
        self._start("kube-controller-manager", ports.kcm, [
            str(bin_("kube-controller-manager")), "--kubeconfig", str(kcm_kubeconfig),
            "--authentication-kubeconfig", str(kcm_kubeconfig), "--authorization-kubeconfig", str(kcm_kubeconfig),
            "--bind-address", HOST, "--secure-port", str(ports.kcm), "--leader-elect=false",
            "--controllers", KCM_CONTROLLERS, "--resource-quota-sync-period", self.settings.quota_sync_period,
            "--use-service-account-credentials=true", "--service-account-private-key-file", str(pki("sa.key")),
            "--root-ca-file", str(pki("ca.crt")), "--cluster-signing-cert-file", str(pki("ca.crt")),
            "--cluster-signing-key-file", str(pki("ca.key")), "--service-cluster-ip-range", SERVICE_CIDR,
            # PVCs (a runtime's volumeClaimPolicies, e.g. lora-finetune's initializer volume) are bound by
            # kube's own hostPath provisioner for the rehearsal StorageClass (apply_storage_class): a
            # directory on this machine that no container ever writes (Ref: kubernetes
            # cmd/kube-controller-manager/app/options "--enable-hostpath-provisioner", for testing only).
            "--enable-hostpath-provisioner",
            "--profiling=false", "--v=1"], self.kcm_healthy, 60)
        # kwok never binds pods; kube-scheduler does, as kwokctl runs it
        # (Ref: kwok pkg/kwokctl/components/kube_scheduler.go).
        scheduler_kubeconfig = self.settings.state_dir / "scheduler.kubeconfig"
        write_kubeconfig(scheduler_kubeconfig, self.server, self.pki, "system:kube-scheduler", "scheduler")
        self._start("kube-scheduler", ports.scheduler, [
            str(bin_("kube-scheduler")), "--kubeconfig", str(scheduler_kubeconfig),
            "--authentication-kubeconfig", str(scheduler_kubeconfig),
            "--authorization-kubeconfig", str(scheduler_kubeconfig), "--leader-elect=false",
            "--bind-address", HOST, "--secure-port", str(ports.scheduler), "--profiling=false", "--v=1"],
            self.scheduler_healthy, 60)

    def user_kubeconfig(self, user: str, groups: tuple[str, ...], path: Path) -> Path:
        """A kubeconfig that authenticates as ``user`` in ``groups`` (a client certificate of the cluster CA),
        the way an identity provider's user reaches a real cluster: RBAC alone decides what it may do."""
        name = f"user-{user}-" + hashlib.sha256("\n".join(groups).encode()).hexdigest()[:8]
        self.pki.issue_client(name, user, groups)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(path, self.server, self.pki, user, name)
        return path

    def _start(self, name: str, port: int, args: list[str], ready: object, timeout: float,
               env: Mapping[str, str] | None = None) -> None:
        if not self.processes.running(name):
            if port_in_use(port):
                raise ClusterError(f"port {HOST}:{port} is in use by another process (set the TRAINYARD_*_PORT "
                                   f"variable of {name}; `trainyard cluster env` lists them)")
            self.processes.start(name, args, env)
        check = ready if callable(ready) else (lambda: False)
        try:
            wait_until(f"{name} to become ready", lambda: check() or (self._exited(name)), timeout)
        except TimeoutError as exc:
            raise ClusterError(f"{exc}; see {self.settings.logs / (name + '.log')}") from None
        if not self.processes.running(name):
            raise ClusterError(f"{name} exited; last lines of {self.settings.logs / (name + '.log')}:\n"
                               f"{self.processes.log_tail(name)}")

    def _exited(self, name: str) -> bool:
        return not self.processes.running(name)

    def down(self) -> None:
        for name in reversed(CONTROL_PLANE):
            self.processes.stop(name)

    def apply_storage_class(self, real_nodes: bool = False) -> None:
        """The default StorageClass of the rehearsal: kube-controller-manager's hostPath provisioner, or with real nodes
        the rehearsal's local provisioner (``local_provisioner.py`` says why). A class's provisioner cannot change, so
        a class of the other kind (the cluster was up the other way before) is replaced; its volumes are not touched."""
        from trainyard.rehearsal.local_provisioner import storage_class

        kube = self.kube()
        wanted = storage_class(REHEARSAL_STORAGE_CLASS, real_nodes)
        if kube.exists("storageclass", REHEARSAL_STORAGE_CLASS) and \
                kube.get("storageclass", REHEARSAL_STORAGE_CLASS).get("provisioner") != wanted["provisioner"]:
            kube.delete("storageclass", REHEARSAL_STORAGE_CLASS, wait=True)
        kube.apply([wanted], field_manager="trainyard-cluster")

    def apply_nodes(self, nodes: list[Manifest]) -> None:
        apply_nodes(self.kube(), nodes)


def apply_nodes(kube: Kube, nodes: list[Manifest]) -> None:
    """Create Nodes, then write their status through the status subresource (create drops it): three kubectl
    calls whatever the number of nodes (a 2,000-node stack is rehearsed too)."""
    kube.apply(nodes, field_manager="trainyard-cluster")
    with_status = [n for n in nodes if n.get("status")]
    kube.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n["metadata"]["name"]}, "status": n["status"]}
                for n in with_status], field_manager="trainyard-cluster", subresource="status")
    ready = [n["metadata"]["name"] for n in with_status
             if any(c.get("type") == "Ready" and c.get("status") == "True" for c in n["status"].get("conditions", []))]
    if ready:
        # The TaintNodesByCondition admission plugin puts not-ready:NoSchedule on every new Node;
        # no node lifecycle controller runs here to lift it once the (fake) Ready condition is set.
        kube.run("taint", "node", *ready, "node.kubernetes.io/not-ready:NoSchedule-", check=False)


__all__ = ["CONTEXT", "CONTROL_PLANE", "HOST", "ClusterError", "ControlPlane", "Pki", "Ports", "Processes", "Settings",
           "apply_nodes", "http_ok", "https_ok", "port_in_use", "write_kubeconfig"]
