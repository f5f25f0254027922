"""NetworkPolicies: tenant namespaces are isolated by default, controllers only expose their webhooks.

In every tenant namespace:

- ``default-deny`` selects every pod for ingress and egress and allows nothing. Policies are
  additive, so each of the following opens one reviewed path and nothing else.
- ``allow-dns``: egress to the cluster DNS pods (UDP and TCP).
- ``allow-same-namespace``: ingress from and egress to pods of the same namespace, on every
  port. A training job's pods talk to each other through the JobSet headless Service: torch
  rendezvous on 29500, MPI over SSH on 2222, and NCCL, whose bootstrap and data sockets use
  ephemeral ports, so no port list would be both safe and complete.
- ``allow-object-store``, ``allow-mlflow``: egress to the services the stack names.
- ``allow-egress-proxy``, ``allow-egress-allowlist``: the only ways out of the cluster, and
  only when the stack names them. Without them tenants have no internet.

In every controller namespace (kueue-system, jobset-system, kubeflow-system), ingress is denied
except to the webhook ports, which the kube-apiserver must reach for admission (and Kueue's
visibility API port, served through an APIService), plus the metrics port from the namespaces
the stack lists. The kube-apiserver is not a pod, so it cannot be selected by labels: the
webhook rule admits the stack's ``webhook_sources`` CIDRs, or any source when none are given.
Egress of controllers is left open: they must reach the API server, whose address no pod or
namespace selector matches.

Ref: https://kubernetes.io/docs/concepts/services-networking/network-policies/
"""

from __future__ import annotations

from typing import Any

from trainyard.config.model import PlatformConfig, Tenant
from trainyard.config.security import Endpoint
from trainyard.manifests.concern import Concern
from trainyard.manifests.installs import COMPONENT_LABEL, namespaces
from trainyard.manifests.meta import INFERENCE_SERVICE_POD_LABEL, TENANT_LABEL, Manifest, metadata

API = "networking.k8s.io/v1"
DEFAULT_DENY = "default-deny"
# Set by the API server on every namespace (Kubernetes >= 1.22); the reliable way to select one.
# Ref: https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-metadata-name
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# Ports the controllers' pods serve to the kube-apiserver and to monitoring.
# Kueue: webhook 9443 (Configuration.webhook.port, see kueue.controller_configuration), the
# visibility API on 8082 (charts/kueue/templates/visibility/service.yaml, targetPort 8082).
# JobSet and Trainer: controller-runtime's webhook server default 9443 (Trainer's chart
# excludes exactly that port from Istio: charts/kubeflow-trainer/templates/manager/deployment.yaml).
# CloudNativePG: webhook.port 9443 (charts/cloudnative-pg values.yaml).
# KServe: webhook-server 9443, metrics through kube-rbac-proxy on 8443 (kserve-resources files/kserve/resources.yaml).
# cert-manager: webhook securePort 10250, controller metrics 9402 (cert-manager values.yaml, templates/deployment.yaml).
WEBHOOK_PORTS: dict[str, tuple[int, ...]] = {"kueue": (9443, 8082), "jobset": (9443,), "trainer": (9443,),
                                             "cnpg": (9443,), "kserve": (9443,), "cert-manager": (10250,)}
METRICS_PORT = 8443
METRICS_PORTS: dict[str, int] = {"cert-manager": 9402}


def _policy(name: str, namespace: str, labels: dict[str, str], spec: dict[str, Any]) -> Manifest:
    return {"apiVersion": API, "kind": "NetworkPolicy", "metadata": metadata(name, namespace=namespace, labels=labels),
            "spec": spec}


def _tcp(ports: tuple[int, ...]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _namespace_selector(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}


def peers_of(endpoint: Endpoint) -> list[dict[str, Any]]:
    """NetworkPolicy peers for an endpoint: its namespace and pods, or its CIDR blocks."""
    if endpoint.namespace is None:
        return [{"ipBlock": {"cidr": cidr}} for cidr in endpoint.cidrs]
    peer: dict[str, Any] = {"namespaceSelector": _namespace_selector(endpoint.namespace)}
    peer["podSelector"] = {"matchLabels": dict(sorted(endpoint.pod_labels.items()))} if endpoint.pod_labels else {}
    return [peer]


def _egress_to(name: str, namespace: str, labels: dict[str, str], endpoints: list[Endpoint],
               pods: dict[str, Any] | None = None) -> Manifest:
    return _policy(name, namespace, labels, {
        "podSelector": pods or {},
        "policyTypes": ["Egress"],
        "egress": [{"to": peers_of(e), "ports": _tcp(e.ports)} for e in endpoints],
    })


def workload_pods(config: PlatformConfig) -> dict[str, Any]:
    """The pods the general allows apply to: all of them, or, with serving, all but predictor pods.

    Predictor pods get their own, narrower paths (``manifests/serving.py``): the object store out,
    the stack's callers in. NetworkPolicies only add up, so the general ones must not select them.
    """
    if config.serving is None:
        return {}
    return {"matchExpressions": [{"key": INFERENCE_SERVICE_POD_LABEL, "operator": "DoesNotExist"}]}


def object_store_allow(config: PlatformConfig) -> Endpoint | None:
    """What ``allow-object-store`` opens: the in-cluster server as the backend defines it, else the stack's endpoint."""
    server = config.object_store.server_endpoint() if config.object_store is not None else None
    return server if server is not None else config.security.network.object_store


def tenant_policies(config: PlatformConfig, tenant: Tenant) -> list[Manifest]:
    ns, labels = tenant.namespace_name, {TENANT_LABEL: tenant.name}
    net = config.security.network
    workloads = workload_pods(config)
    dns_peer = {"namespaceSelector": _namespace_selector(net.dns.namespace),
                "podSelector": {"matchLabels": dict(sorted(net.dns.pod_labels.items()))}}
    policies = [
        _policy(DEFAULT_DENY, ns, labels, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy("allow-dns", ns, labels, {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [dns_peer],
                        "ports": [{"protocol": proto, "port": p} for p in net.dns.ports for proto in ("UDP", "TCP")]}],
        }),
        _policy("allow-same-namespace", ns, labels, {
            "podSelector": workloads,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": [{"to": [{"podSelector": {}}]}],
        }),
    ]
    for name, endpoint in (("allow-object-store", object_store_allow(config)), ("allow-mlflow", net.mlflow),
                           ("allow-egress-proxy", net.egress_proxy)):
        if endpoint is not None:
            policies.append(_egress_to(name, ns, labels, [endpoint], workloads))
    if net.egress_allowlist:
        policies.append(_egress_to("allow-egress-allowlist", ns, labels, list(net.egress_allowlist), workloads))
    return policies


def controller_policies(config: PlatformConfig, namespace: str, component: str) -> list[Manifest]:
    net = config.security.network
    labels = {COMPONENT_LABEL: component}
    webhook_rule: dict[str, Any] = {"ports": _tcp(WEBHOOK_PORTS[component])}
    if net.webhook_sources:
        webhook_rule["from"] = [{"ipBlock": {"cidr": cidr}} for cidr in net.webhook_sources]
    ingress = [webhook_rule]
    if net.metrics_from:
        ingress.append({"from": [{"namespaceSelector": _namespace_selector(n)} for n in net.metrics_from],
                        "ports": _tcp((METRICS_PORTS.get(component, METRICS_PORT),))})
    return [
        _policy("default-deny-ingress", namespace, labels, {"podSelector": {}, "policyTypes": ["Ingress"]}),
        _policy("allow-webhooks", namespace, labels, {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress}),
    ]


# What other concerns' builders use to write their own NetworkPolicies the same way.
network_policy, egress_to, tcp_ports, namespace_selector = _policy, _egress_to, _tcp, _namespace_selector


def build(config: PlatformConfig) -> Concern:
    """Network isolation: the controller namespaces' policies, and each tenant's."""
    objects: list[Manifest] = []
    for ns in namespaces(config):
        meta = ns["metadata"]
        objects += controller_policies(config, meta["name"], meta["labels"][COMPONENT_LABEL])
    return Concern("network", objects=tuple(objects),
                   tenant_objects={t.name: tuple(tenant_policies(config, t)) for t in config.tenants})
