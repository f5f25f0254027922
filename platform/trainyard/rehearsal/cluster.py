"""The rehearsal's control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback.

Every binary comes from ``tools/build.sh`` (``$TRAINYARD_TOOLS_DIR/bin``). State (certificates,
etcd data, logs, pid files, kubeconfig, controller configs) lives in ``$TRAINYARD_CLUSTER_DIR``
(default ``~/.cache/trainyard/cluster``); every port comes from a ``TRAINYARD_*_PORT`` variable
(``Ports``), so several clusters (a person's ``make up``, a test session, another engineer) can
run side by side. Processes run in their own session (a Ctrl-C in the calling shell does not stop
them) and are tracked by pid file; ``stop`` ends exactly those pids.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from trainyard.rehearsal.kube import Kube, Manifest, wait_until

HOST = "127.0.0.1"
CONTEXT = "trainyard-local"


class ClusterError(Exception):
    """The control plane could not be started or reached; says what to look at."""


@dataclass(frozen=True)
class Ports:
    """Every loopback port of one rehearsal cluster (``TRAINYARD_<FIELD>_PORT`` overrides each)."""

    etcd: int = 23791
    etcd_peer: int = 23801
    apiserver: int = 26443
    kcm: int = 26257
    scheduler: int = 26259
    kwok: int = 26247
    kueue_webhook: int = 29443
    kueue_health: int = 28081
    kueue_metrics: int = 28443
    jobset_webhook: int = 29444
    jobset_health: int = 28091
    trainer_webhook: int = 29445
    trainer_health: int = 28101
    # Real nodes (rehearsal/node.py): their loopback image registry, the kubelets' ports (each on its node's
    # address) and kube-proxy's (rehearsal/proxy.py).
    registry: int = 25000
    kubelet: int = 26250
    kubelet_healthz: int = 26248
    kube_proxy_healthz: int = 26256
    kube_proxy_metrics: int = 26249

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Ports:
        values = {}
        for f in fields(cls):
            variable = f"TRAINYARD_{f.name.upper()}_PORT"
            raw = env.get(variable, "")
            if raw:
                if not raw.isdigit() or not 0 < int(raw) < 65536:
                    raise ClusterError(f"{variable}={raw!r} is not a port number")
                values[f.name] = int(raw)
        return cls(**values)

    @staticmethod
    def variable(name: str) -> str:
        return f"TRAINYARD_{name.upper()}_PORT"


@dataclass(frozen=True)
class Settings:
    """Where one rehearsal cluster lives and how it is reached."""

    tools_dir: Path
    state_dir: Path
    ports: Ports
    # kube-controller-manager --resource-quota-sync-period (kube's default). See docs/rehearsal.md:
    # the rehearsal makes sure the quota controller knows TrainJobs before any tenant quota exists.
    quota_sync_period: str = "5m0s"
    ready_timeout: float = 120

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path.home() / ".cache" / "trainyard"
        return cls(
            tools_dir=Path(env.get("TRAINYARD_TOOLS_DIR") or home / "tools"),
            state_dir=Path(env.get("TRAINYARD_CLUSTER_DIR") or home / "cluster"),
            ports=Ports.from_env(env),
            quota_sync_period=env.get("TRAINYARD_QUOTA_SYNC_PERIOD") or "5m0s",
            ready_timeout=float(env.get("TRAINYARD_READY_TIMEOUT") or 120),
        )

    def binary(self, name: str) -> Path:
        return self.tools_dir / "bin" / name

    def share(self, tool: str) -> Path:
        """Manifests tools/build.sh copied from a controller's module (webhooks, CRDs, kwok stages)."""
        return self.tools_dir / "share" / tool

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    def kube(self) -> Kube:
        return Kube(self.binary("kubectl"), self.kubeconfig)

    def env(self) -> dict[str, str]:
        """The variables that reach this cluster (what ``trainyard cluster env`` prints)."""
        out = {"KUBECONFIG": str(self.kubeconfig), "TRAINYARD_CLUSTER_DIR": str(self.state_dir),
               "TRAINYARD_TOOLS_DIR": str(self.tools_dir)}
        out.update({Ports.variable(f.name): str(getattr(self.ports, f.name)) for f in fields(Ports)})
        return out


# ------------------------------------------------------------------------------------ processes


class Processes:
    """Background processes of one cluster, by name: pid file in run/, log in logs/."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _pid_file(self, name: str) -> Path:
        return self.settings.run_dir / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        try:
            return int(self._pid_file(name).read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self, name: str) -> bool:
        pid = self.pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        # A zombie (exited, not yet reaped by us) is not running.
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                return False
        return True

    def start(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> None:
        if self.running(name):
            return
        self.settings.logs.mkdir(parents=True, exist_ok=True)
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        log = (self.settings.logs / f"{name}.log").open("ab")
        with log:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603 - our built binaries
                                       env={**os.environ, **(env or {})}, start_new_session=True)
        self._pid_file(name).write_text(f"{process.pid}\n")
        print(f"    started {name} (pid {process.pid}, log {self.settings.logs / (name + '.log')})", flush=True)

    def stop(self, name: str, grace: float = 10) -> None:
        pid = self.pid(name)
        if pid is not None and self.running(name):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.running(name) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.1)
            if self.running(name):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            _reap(pid)
            print(f"    stopped {name} (pid {pid})", flush=True)
        self._pid_file(name).unlink(missing_ok=True)

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.settings.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


# ---------------------------------------------------------------------------------- certificates


class Pki:
    """The cluster CA and every certificate issued from it (openssl, 10 years, loopback names only)."""

    def __init__(self, directory: Path, service_ip: str) -> None:
        self.directory = directory
        self.service_ip = service_ip

    def path(self, name: str) -> Path:
        return self.directory / name

    def ensure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        if not self.path("ca.crt").exists():
            self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                          "-days", "3650", "-subj", "/CN=trainyard-local-ca")
        apiserver_names = (f"IP:{HOST},IP:{self.service_ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                           "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")
        self._issue("apiserver", "/CN=kube-apiserver", server=apiserver_names)
        self._issue("admin", "/O=system:masters/CN=trainyard-admin")
        self._issue("kcm", "/CN=system:kube-controller-manager")
        self._issue("scheduler", "/CN=system:kube-scheduler")
        # What the API server shows a kubelet (logs, exec): the kubelet authorizes it by webhook, and
        # system:masters may do anything. Ref: kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/
        self._issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
        # The controllers' webhook servers: one serving certificate for 127.0.0.1, as envtest does.
        self._issue("webhook", "/CN=trainyard-rehearsal-webhooks", server=f"IP:{HOST},DNS:localhost")
        if not self.path("sa.key").exists():
            self._openssl("genrsa", "-out", "sa.key", "2048")
            self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        for key in self.directory.glob("*.key"):
            key.chmod(0o600)

    def issue_client(self, name: str, user: str, groups: tuple[str, ...]) -> None:
        """A client certificate for ``user`` in ``groups``: the API server's x509 authenticator reads the
        user from CN and the groups from O (Ref: https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates).
        """
        for value in (user, *groups):
            if not value or any(c in value for c in "/=+,\\\n"):
                raise ClusterError(f"{value!r} cannot be put in a certificate subject")
        self._issue(name, "".join(f"/O={g}" for g in groups) + f"/CN={user}")
        self.path(f"{name}.key").chmod(0o600)

    def issue_server(self, name: str, subject: str, names: str) -> None:
        """A serving certificate for ``names`` (``IP:...,DNS:...``), e.g. a real node's kubelet."""
        self._issue(name, subject, server=names)
        self.path(f"{name}.key").chmod(0o600)

    def _issue(self, name: str, subject: str, server: str | None = None) -> None:
        if self.path(f"{name}.crt").exists():
            return
        ext = self.path(f"{name}.ext")
        usage = "serverAuth" if server else "clientAuth"
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                       f"extendedKeyUsage={usage}\n" + (f"subjectAltName={server}\n" if server else ""))
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                      "-subj", subject)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                      "-out", f"{name}.crt", "-days", "3650", "-extfile", ext.name)
        self.path(f"{name}.csr").unlink()

    def _openssl(self, *args: str) -> None:
        try:
            result = subprocess.run(["openssl", *args], cwd=self.directory, capture_output=True,  # noqa: S603, S607
                                    text=True, check=False)
        except FileNotFoundError:
            raise ClusterError("openssl is required to make the rehearsal's certificates") from None
        if result.returncode != 0:
            raise ClusterError(f"openssl {args[0]} failed: {result.stderr.strip()}")

    def ca_bundle(self) -> str:
        return base64.b64encode(self.path("ca.crt").read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, pki: Pki, user: str, cert: str) -> None:
    def b64(name: str) -> str:
        return base64.b64encode(pki.path(name).read_bytes()).decode()

    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: {server}
    certificate-authority-data: {b64("ca.crt")}
users:
- name: {user}
  user:
    client-certificate-data: {b64(cert + ".crt")}
    client-key-data: {b64(cert + ".key")}
contexts:
- name: {CONTEXT}
  context:
    cluster: {CONTEXT}
    user: {user}
current-context: {CONTEXT}
""")
    path.chmod(0o600)


# ------------------------------------------------------------------------------------ health


def https_ok(url: str, pki: Pki | None = None, client: str | None = None, body: str = "ok") -> bool:
    """GET ``url`` over TLS (verified against the cluster CA when ``pki`` is given); True iff it answers ``body``."""
    context = ssl.create_default_context(cafile=str(pki.path("ca.crt"))) if pki else ssl._create_unverified_context()  # noqa: S323 - loopback health port with a self-signed serving cert
    if pki and client:
        context.load_cert_chain(str(pki.path(f"{client}.crt")), str(pki.path(f"{client}.key")))
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as response:  # noqa: S310 - loopback URL we built
            return bool(response.status == 200 and response.read().decode().strip() == body)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def http_ok(url: str, contains: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 - loopback URL we built
            return contains in response.read().decode()
    except (urllib.error.URLError, OSError):
        return False


# ------------------------------------------------------------------------------ control plane

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR
# No kubelets report here, so the node lifecycle controller would mark every applied Node
# NotReady/unreachable after 40s (kwok's heartbeats keep them Ready, but only for nodes it manages).
KCM_CONTROLLERS = "*,-node-lifecycle-controller"
REHEARSAL_STORAGE_CLASS = "rehearsal-hostpath"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


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
            "--kubelet-client-key", str(pki("apiserver-kubelet-client.key"))],
            self.api_ready, self.settings.ready_timeout,
            # Webhook calls go to 127.0.0.1 directly, never through a proxy a developer's shell may set.
            env={"NO_PROXY": HOST, "no_proxy": HOST})
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

    def apply_storage_class(self) -> None:
        """The default StorageClass of the rehearsal: kube-controller-manager's hostPath provisioner."""
        self.kube().apply([{
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": REHEARSAL_STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate"}], field_manager="trainyard-cluster")

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
