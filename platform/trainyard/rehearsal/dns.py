"""Cluster DNS for the pods of the rehearsal's real nodes: CoreDNS as kubeadm deploys it, with no way out.

The platform's services find each other by Service names (MLflow its PostgreSQL, the jobs the object store,
KServe its predictors), and the stack's NetworkPolicies allow DNS to ``kube-system`` pods labelled
``k8s-app: kube-dns`` on port 53 (``config.security.Dns``, ``manifests/network.py``). So the rehearsal runs what
``kubeadm init`` runs: the objects of kubeadm's CoreDNS addon (k8s.io/kubernetes v1.36.3
``cmd/kubeadm/app/phases/addons/dns/manifests.go``: ServiceAccount ``coredns``, ClusterRole and
ClusterRoleBinding ``system:coredns``, ConfigMap ``coredns``, Deployment ``coredns``, Service ``kube-dns``), at
kubeadm's address (``constants.GetDNSIP``: the tenth address of the service range, 10.96.0.10), and every real
node's kubelet points its pods there (``clusterDNS``, ``clusterDomain``; ``node.kubelet_config``).

What differs from kubeadm, and why:

- **No forwarder.** kubeadm's Corefile sends every name outside the cluster to ``forward . /etc/resolv.conf``
  (the node's resolvers: the internet, on most machines). An air-gapped site has nowhere to send them, and the
  rehearsal must not try. The cluster zones keep kubeadm's server block (without ``forward`` and without the
  ``fallthrough in-addr.arpa ip6.arpa`` that only fed it: the kubernetes plugin then answers NXDOMAIN itself for
  an address it does not know); a second server block for ``.`` answers NXDOMAIN at once for every other name
  (the ``template`` plugin; Ref: coredns v1.15.0 plugin/template/README.md "Resolve everything to NXDOMAIN").
  A program that tries the internet fails fast with "name not known", not after resolver timeouts. Two blocks,
  because the plugins of one block run in the build's fixed order, where ``template`` comes before
  ``kubernetes`` (core/dnsserver/zdirectives.go) and would answer for the cluster's names too.
- **The image** is built here (``dns_image.build_coredns``, from ``tools/build.sh coredns``: CoreDNS v1.15.0 with the
  plugins this Corefile uses) under ``trainyard.local/rehearsal/coredns``, pulled from the node's loopback registry.
- **Placement**: the rehearsal also runs fake (kwok) nodes, so the pods get the real nodes' label as node selector
  besides kubeadm's ``kubernetes.io/os: linux``.

CoreDNS reaches the API server with the in-cluster configuration (its service account, ``KUBERNETES_SERVICE_HOST``):
the ``kubernetes`` Service, which needs kube-proxy on the machine (``--proxy`` on one real node) and an endpoint
that pods can reach.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from trainyard.rehearsal.kube import Kube, KubeError, Manifest, wait_until
from trainyard.rehearsal.settings import REAL_NODE_LABELS

COREDNS_VERSION = "v1.15.0"  # tools/build.sh COREDNS_VERSION (a unit test keeps them equal)
CLUSTER_DOMAIN = "cluster.local"
NAMESPACE = "kube-system"
NAME = "coredns"  # ServiceAccount, ConfigMap and Deployment (kubeadm constants.CoreDNSDeploymentName)
SERVICE = "kube-dns"
LABELS = {"k8s-app": "kube-dns"}  # what the stack's allow-dns policies select (config.security.Dns.pod_labels)
CLUSTER_ROLE = "system:coredns"
FIELD_MANAGER = "trainyard-rehearsal"
COREDNS_REPLICAS = 2  # kubeadm phases/addons/dns/dns.go coreDNSReplicas
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"  # kubeadm constants.LabelNodeRoleControlPlane


def dns_service_ip(service_cidr: str) -> str:
    """kubeadm's choice: the tenth address of the service range (cmd/kubeadm/app/constants/constants.go GetDNSIP)."""
    return str(ipaddress.ip_network(service_cidr)[10])


def corefile(domain: str = CLUSTER_DOMAIN) -> str:
    """kubeadm's Corefile for the cluster zones (manifests.go ``CoreDNSConfigMap``), less its forwarder, and a
    ``.`` block that answers NXDOMAIN for everything else."""
    return f"""{domain}:53 in-addr.arpa:53 ip6.arpa:53 {{
    errors
    health {{
       lameduck 5s
    }}
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {{
       pods insecure
       ttl 30
    }}
    prometheus :9153
    cache 30 {{
       disable success {domain}
       disable denial {domain}
    }}
    loop
    reload
    loadbalance
}}
.:53 {{
    errors
    template ANY ANY {{
       rcode NXDOMAIN
    }}
    prometheus :9153
}}
"""


def manifests(image: str, dns_ip: str, domain: str = CLUSTER_DOMAIN, replicas: int = COREDNS_REPLICAS) -> list[Manifest]:
    """kubeadm's CoreDNS addon objects (manifests.go of k8s.io/kubernetes v1.36.3), in the order to apply them."""
    meta = {"namespace": NAMESPACE}
    service_account: Manifest = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, **meta}}
    cluster_role: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": CLUSTER_ROLE},
        "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                   "verbs": ["list", "watch"]},
                  {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]}
    binding: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": CLUSTER_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]}
    config_map: Manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, **meta},
                            "data": {"Corefile": corefile(domain)}}
    return [service_account, cluster_role, binding, config_map, deployment(image, replicas),
            service(dns_ip)]


def deployment(image: str, replicas: int = COREDNS_REPLICAS) -> Manifest:
    """manifests.go ``CoreDNSDeployment``; the node selector also names the real nodes (module docstring)."""
    pod_spec: dict[str, Any] = {
        "priorityClassName": "system-cluster-critical",
        "serviceAccountName": NAME,
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [{"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                "topologyKey": "kubernetes.io/hostname"}}]}},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": CONTROL_PLANE_TAINT, "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux", **REAL_NODE_LABELS},
        "containers": [{
            "name": "coredns", "image": image, "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
            "args": ["-conf", "/etc/coredns/Corefile"],
            "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
            "ports": [{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                      {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                      {"containerPort": 9153, "name": "metrics", "protocol": "TCP"},
                      {"containerPort": 8080, "name": "liveness-probe", "protocol": "TCP"},
                      {"containerPort": 8181, "name": "readiness-probe", "protocol": "TCP"}],
            "livenessProbe": {"httpGet": {"path": "/health", "port": "liveness-probe", "scheme": "HTTP"},
                              "initialDelaySeconds": 60, "timeoutSeconds": 5, "successThreshold": 1,
                              "failureThreshold": 5},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": "readiness-probe", "scheme": "HTTP"}},
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                "readOnlyRootFilesystem": True}}],
        "dnsPolicy": "Default",
        "volumes": [{"name": "config-volume",
                     "configMap": {"name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]}}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {"replicas": replicas,
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                 "selector": {"matchLabels": dict(LABELS)},
                 "template": {"metadata": {"labels": dict(LABELS)}, "spec": pod_spec}},
    }


def service(dns_ip: str) -> Manifest:
    """manifests.go ``CoreDNSService`` (without its ``resourceVersion: "0"``, which only serves kubeadm's updates)."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                     "labels": {**LABELS, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
                     "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
        "spec": {"clusterIP": dns_ip,
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                           {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}],
                 "selector": dict(LABELS)},
    }


class ClusterDns:
    """The CoreDNS addon of one rehearsal cluster, in its API server."""

    def __init__(self, kube: Kube, dns_ip: str, domain: str = CLUSTER_DOMAIN, replicas: int = COREDNS_REPLICAS) -> None:
        self.kube, self.dns_ip, self.domain, self.replicas = kube, dns_ip, domain, replicas

    def up(self, image: str, timeout: float = 180) -> None:
        """Apply the addon (idempotent) and wait until every replica is ready: the kubernetes plugin synced with the
        API server (the ``ready`` plugin answers /ready only then)."""
        start = time.monotonic()
        self.kube.apply(manifests(image, self.dns_ip, self.domain, self.replicas), FIELD_MANAGER)

        def available() -> bool:
            status = self.kube.get("deployment", NAME, NAMESPACE).get("status") or {}
            return bool(status.get("observedGeneration")) and status.get("readyReplicas", 0) >= self.replicas

        try:
            wait_until("CoreDNS (kube-system/coredns) to be ready", available, timeout, interval=1)
        except TimeoutError as exc:
            logs = self.kube.run("logs", "-n", NAMESPACE, f"deployment/{NAME}", "--tail", "15", check=False)
            raise KubeError(f"{exc}; its pods: {self._pods_state()}; the log of one:\n"
                            f"{(logs.stdout or logs.stderr).strip()}") from None
        print(f"    CoreDNS ready ({self.replicas} replicas, kube-dns at {self.dns_ip}) in {time.monotonic() - start:.1f}s",
              flush=True)

    def _pods_state(self) -> str:
        try:
            pods = self.kube.items("pods", NAMESPACE, ",".join(f"{k}={v}" for k, v in LABELS.items()))
        except KubeError as exc:
            return str(exc)
        states = []
        for pod in pods:
            status = pod.get("status") or {}
            waiting = [c.get("state", {}).get("waiting", {}).get("reason") for c in status.get("containerStatuses") or []]
            states.append(f"{pod['metadata']['name']} {status.get('phase')} {[w for w in waiting if w]}")
        return "; ".join(states) or "none (see `kubectl -n kube-system describe deployment coredns`)"

    def down(self) -> None:
        """Delete the addon's objects (the Deployment's pods with it)."""
        self.kube.delete_objects(reversed(manifests("unused", self.dns_ip, self.domain, self.replicas)))
