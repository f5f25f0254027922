"""The API server for pods on the real nodes: the ``default/kubernetes`` Service gets an endpoint pods can reach.

A pod with in-cluster config (client-go's ``rest.InClusterConfig``: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the
projected service-account token and ``ca.crt``) talks to ``https://10.96.0.1:443``, the ``kubernetes`` Service,
which kube-proxy (``--proxy`` on one real node, ``proxy.py``) sends to that Service's endpoints. The rehearsal's
API server binds 127.0.0.1 only and runs with ``--endpoint-reconciler-type none``, so it writes no endpoints, and
a loopback address could not be one anyway (``ValidateEndpointIP``: "may not be in the loopback range",
kubernetes v1.36.3 pkg/apis/core/validation/validation.go). So, while real nodes run:

- **an address**: the pod network's last host address (``api_address``, 10.244.255.254 by default), a /32 on a
  portless bridge of its own (``ty<hash>``; this kernel has no ``dummy`` driver, a bridge is what the nodes already
  need). Pods route the whole pod network through their node's bridge, so they reach it; nothing outside this
  machine does, and the machine's own settings are untouched (no ``route_localnet``, no binding on every address).
- **a forwarder** (``forwarder.py``) on that address and the API server's port, relaying to ``127.0.0.1``: TLS stays
  end to end, and every host client keeps using ``https://127.0.0.1:<port>``.
- **the endpoints the API server's reconciler would write** (``endpoint_manifests``): an Endpoints with the
  ``skip-mirror`` label (so kube-controller-manager's mirroring controller leaves it) and an EndpointSlice named
  ``kubernetes`` with ``kubernetes.io/service-name``, one ready IPv4 endpoint and the port ``https`` (Ref:
  kubernetes v1.36.3 pkg/controlplane/reconcilers/endpointsadapter.go ``endpointSliceFromEndpoints``, lease.go
  ``doReconcile``, controller/kubernetesservice/controller.go ``createEndpointPortSpec``), plus
  ``endpointslice.kubernetes.io/managed-by`` naming the rehearsal (upstream's adapter sets none).

The first real node of a cluster sets this up, the last one's ``down`` removes it (the endpoints, the forwarder,
the device); ``leftovers()`` lists what is still there.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from trainyard.rehearsal.cluster import HOST, ControlPlane, Processes, Settings
from trainyard.rehearsal.kube import KubeError, Manifest, wait_until
from trainyard.rehearsal.settings import ClusterError

FORWARDER = "apiserver-forwarder"  # its pid file and log, beside the control plane's
SERVICE = "kubernetes"
NAMESPACE = "default"
PORT_NAME = "https"  # the kubernetes Service's port name (kubernetesservice controller)
MANAGED_BY = "rehearsal.trainyard.dev"  # endpointslice.kubernetes.io/managed-by: who wrote the slice
OWNED = {"trainyard.dev/rehearsal": "in-cluster-api"}  # on both objects: what down() deletes
FIELD_MANAGER = "trainyard-rehearsal"
MAX_PREFIX = 23  # a /24 pod network is all node-0's: no address is left outside every node's subnet
# The forwarder runs this package's module with the interpreter running now, whatever put the package on its path.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def api_address(pod_network: str) -> str:
    """Where pods reach the API server: the pod network's last host address. Node i gets the network's i-th /24
    (``node.NodeLayout``), so this one is in a node's subnet only for the last /24's node, whose subnet check then
    finds it on this device and refuses to start."""
    network = ipaddress.IPv4Network(pod_network)
    return str(network.broadcast_address - 1)


def device_name(settings: Settings) -> str:
    """The portless bridge holding the address: ``ty`` + a hash of the cluster (15-byte interface names)."""
    return "ty" + hashlib.sha256(f"{settings.state_dir.resolve()}/in-cluster-api".encode()).hexdigest()[:8]


def endpoint_manifests(address: str, port: int) -> list[Manifest]:
    """The Endpoints and EndpointSlice of ``default/kubernetes``, as the API server's reconciler writes them."""
    endpoint_port = {"name": PORT_NAME, "port": port, "protocol": "TCP"}
    return [
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                      "labels": {"endpointslice.kubernetes.io/skip-mirror": "true", **OWNED}},
         "subsets": [{"addresses": [{"ip": address}], "ports": [endpoint_port]}]},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                      "labels": {"kubernetes.io/service-name": SERVICE,
                                 "endpointslice.kubernetes.io/managed-by": MANAGED_BY, **OWNED}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
         "ports": [endpoint_port]},
    ]


def forwarder_command(python: str, address: str, port: int) -> list[str]:
    """The forwarder's command line: ``address:port`` (what the endpoints say) to the API server on loopback."""
    return [python, "-m", "trainyard.rehearsal.forwarder", "--listen", f"{address}:{port}", "--to", f"{HOST}:{port}"]


def _accepts(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((address, port)) == 0


class InClusterApi:
    """The ``kubernetes`` Service's endpoint for the real nodes of one cluster: address, forwarder, endpoints."""

    def __init__(self, settings: Settings, pod_network: str) -> None:
        self.settings = settings
        self.pod_network = pod_network
        self.processes = Processes(settings)
        self.plane = ControlPlane(settings)

    @property
    def address(self) -> str:
        return api_address(self.pod_network)

    @property
    def port(self) -> int:
        """The API server's own port number, on the pods' address: the endpoint a reconciler would advertise."""
        return self.settings.ports.apiserver

    @property
    def device(self) -> str:
        return device_name(self.settings)

    def _ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)  # noqa: S603, S607 - iproute2
        if check and result.returncode != 0:
            raise ClusterError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def _holders(self) -> list[str]:
        """The interfaces that hold the pods' API address (ours, or another's: then it cannot be used)."""
        listed = self._ip("-j", "-4", "addr", check=False)
        return [link.get("ifname", "?") for link in json.loads(listed.stdout or "[]")
                for info in link.get("addr_info", []) if info.get("local") == self.address]

    def problems(self) -> list[str]:
        if ipaddress.IPv4Network(self.pod_network).prefixlen > MAX_PREFIX:
            return [f"pod network {self.pod_network} is smaller than a /{MAX_PREFIX}: the address where pods reach the "
                    "API server (its last) would be in the first node's /24 (set TRAINYARD_POD_NETWORK to a /16)"]
        others = [name for name in self._holders() if name != self.device]
        if others:
            return [f"address {self.address} (where pods reach the API server: the pod network's last address) is on "
                    f"{', '.join(others)} (set TRAINYARD_POD_NETWORK to a free /16)"]
        return []

    def up(self) -> None:
        """The device, the forwarder and the endpoints; idempotent."""
        problems = self.problems()
        if problems:
            raise ClusterError("; ".join(problems))
        if self._ip("link", "show", self.device, check=False).returncode != 0:
            self._ip("link", "add", self.device, "type", "bridge")
        if self.device not in self._holders():
            self._ip("addr", "add", f"{self.address}/32", "dev", self.device)
        self._ip("link", "set", self.device, "up")
        python_path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.processes.start(FORWARDER, forwarder_command(sys.executable, self.address, self.port),
                             env={"PYTHONPATH": python_path})
        try:
            wait_until(f"the API server's forwarder on {self.address}:{self.port}",
                       lambda: _accepts(self.address, self.port) or not self.processes.running(FORWARDER), 30, 0.2)
        except TimeoutError as exc:
            raise ClusterError(f"{exc}; see {self.settings.logs / (FORWARDER + '.log')}") from None
        if not self.processes.running(FORWARDER):
            raise ClusterError(f"the API server's forwarder exited:\n{self.processes.log_tail(FORWARDER)}")
        self.plane.kube().apply(endpoint_manifests(self.address, self.port), field_manager=FIELD_MANAGER)

    def _owned_objects(self) -> list[str]:
        selector = ",".join(f"{k}={v}" for k, v in OWNED.items())
        listed = self.plane.kube().run("get", "endpoints,endpointslices", "-n", NAMESPACE, "-l", selector, "-o", "name",
                                       check=False)
        return listed.stdout.split() if listed.returncode == 0 else []

    def down(self) -> None:
        """The endpoints first (pods then see a Service without endpoints, as before), the forwarder, the device."""
        if self.plane.api_ready():
            with contextlib.suppress(KubeError):
                self.plane.kube().run("delete", "endpointslices,endpoints", "-n", NAMESPACE, "--ignore-not-found",
                                      "-l", ",".join(f"{k}={v}" for k, v in OWNED.items()))
        self.processes.stop(FORWARDER)
        self._ip("link", "del", self.device, check=False)

    def leftovers(self) -> list[str]:
        found = [f"process {FORWARDER} (pid {self.processes.pid(FORWARDER)})"] if self.processes.running(FORWARDER) else []
        if self._ip("link", "show", self.device, check=False).returncode == 0:
            found.append(f"network device {self.device} (the pods' API address {self.address})")
        if self.plane.api_ready():
            found += [f"{NAMESPACE}/{name} (the kubernetes Service's endpoints)" for name in self._owned_objects()]
        return found
