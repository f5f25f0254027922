"""Monitoring: ServiceMonitors for the controllers and DCGM, scrape permissions, alert rules, dashboards.

Everything here is for a prometheus-operator Prometheus the site runs (``monitoring.prometheus``):

- a ServiceMonitor per installed controller (Kueue, JobSet, Trainer) in its namespace, and one
  for the GPU operator's DCGM exporter; each sets ``job`` to ``trainyard-<component>``, which
  the alerts select on;
- a ClusterRole to GET ``/metrics`` (Kueue and JobSet authorize every scrape with a
  SubjectAccessReview) and Roles to discover the endpoints in each scraped namespace, all bound
  to the Prometheus ServiceAccount;
- the PrometheusRule of ``manifests/alerts.py`` and the dashboards of ``manifests/dashboards.py``
  in Trainyard's monitoring namespace.

The CRDs come from ``render_platform`` (``crd_components``), so they are applied first.

Ref: prometheus-operator v0.93.0 ServiceMonitor and PrometheusRule CRDs; charts/kueue/templates/prometheus
and rbac/metrics_reader_role.yaml at v0.19.2; jobset 0.12.0 templates/prometheus; kubeflow-trainer 2.3.0
templates/manager/service.yaml (port monitoring-port, self-signed TLS, no authn filter);
gpu-operator v26.7.0 assets/state-dcgm-exporter/0400_service.yaml (Service nvidia-dcgm-exporter, port gpu-metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import alerts, dashboards
from trainyard.manifests.concern import Concern
from trainyard.manifests.installs import COMPONENT_LABEL
from trainyard.manifests.meta import Manifest, metadata
from trainyard.manifests.tenants import PSA_LABELS

API = catalog.MONITORING_API
METRICS_READER = "trainyard-metrics-reader"
DISCOVERY = "trainyard-prometheus-discovery"
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105 - a path, not a secret


@dataclass(frozen=True)
class ScrapeTarget:
    """A metrics Service of one component: where it is, how its Service is labelled, how to scrape it."""

    component: str
    namespace: str
    service_labels: dict[str, str]
    port: str
    https: bool
    bearer_token: bool
    honor_labels: bool = False


def scrape_targets(config: PlatformConfig) -> list[ScrapeTarget]:
    """The metrics Services of the installed controllers and of DCGM (labels as each chart renders them)."""
    external = config.rehearsal.external_controllers
    targets = []
    if "kueue" not in external:
        targets.append(ScrapeTarget("kueue", catalog.release("kueue", config.versions.kueue).installed()[1],
                                    {"app.kubernetes.io/name": "kueue", "app.kubernetes.io/instance": "kueue",
                                     "app.kubernetes.io/component": "metrics-service"}, "https", True, True))
    if "jobset" not in external:
        targets.append(ScrapeTarget("jobset", catalog.release("jobset", config.versions.jobset).installed()[1],
                                    {"app.kubernetes.io/name": "jobset", "app.kubernetes.io/instance": "jobset",
                                     "app.kubernetes.io/component": "controller"}, "https", True, True))
    if "trainer" not in external:
        targets.append(ScrapeTarget("trainer", catalog.release("trainer", config.versions.trainer).installed()[1],
                                    {"app.kubernetes.io/name": "kubeflow-trainer", "app.kubernetes.io/instance": "trainer",
                                     "app.kubernetes.io/component": "manager"}, "monitoring-port", True, False))
    if config.gpu_operator is not None:
        # honorLabels: DCGM's pod/namespace/container labels name the workload holding the GPU; without it
        # Prometheus renames them exported_pod, ... in favour of the exporter's own pod.
        targets.append(ScrapeTarget("dcgm", config.gpu_operator.namespace, {"app": "nvidia-dcgm-exporter"},
                                    "gpu-metrics", False, False, honor_labels=True))
    return targets


def _labels(config: PlatformConfig) -> dict[str, str]:
    return {COMPONENT_LABEL: "monitoring", **config.monitoring.prometheus.match_labels}


def service_monitor(config: PlatformConfig, target: ScrapeTarget) -> Manifest:
    endpoint: dict[str, Any] = {"port": target.port, "path": "/metrics", "interval": config.monitoring.scrape_interval,
                                "scheme": "https" if target.https else "http"}
    if target.bearer_token:
        endpoint["bearerTokenFile"] = SA_TOKEN
    if target.https:
        # The controllers serve metrics with self-signed certificates unless cert-manager issues them.
        endpoint["tlsConfig"] = {"insecureSkipVerify": True}
    if target.honor_labels:
        endpoint["honorLabels"] = True
    endpoint["relabelings"] = [{"action": "replace", "targetLabel": "job", "replacement": alerts.job_name(target.component)}]
    return {
        "apiVersion": API, "kind": "ServiceMonitor",
        "metadata": metadata(f"trainyard-{target.component}", namespace=target.namespace, labels=_labels(config)),
        "spec": {"selector": {"matchLabels": dict(sorted(target.service_labels.items()))},
                 "namespaceSelector": {"matchNames": [target.namespace]},
                 "endpoints": [endpoint]},
    }


def scrape_permissions(config: PlatformConfig, targets: list[ScrapeTarget]) -> list[Manifest]:
    prometheus = config.monitoring.prometheus

    def subject() -> Manifest:
        # A new dict per binding: a shared one would be one object in several manifests (edited together, and
        # a YAML alias wherever they are dumped together).
        return {"kind": "ServiceAccount", "name": prometheus.service_account, "namespace": prometheus.namespace}

    out: list[Manifest] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": metadata(METRICS_READER, labels={COMPONENT_LABEL: "monitoring"}),
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": metadata(METRICS_READER, labels={COMPONENT_LABEL: "monitoring"}),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER},
         "subjects": [subject()]},
    ]
    for namespace in sorted({t.namespace for t in targets}):
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": metadata(DISCOVERY, namespace=namespace, labels={COMPONENT_LABEL: "monitoring"}),
                    "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"],
                               "verbs": ["get", "list", "watch"]},
                              {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                               "verbs": ["get", "list", "watch"]}]})
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": metadata(DISCOVERY, namespace=namespace, labels={COMPONENT_LABEL: "monitoring"}),
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": DISCOVERY},
                    "subjects": [subject()]})
    return out


def prometheus_rule(config: PlatformConfig) -> Manifest:
    return {"apiVersion": API, "kind": "PrometheusRule",
            "metadata": metadata("trainyard-alerts", namespace=config.monitoring.namespace, labels=_labels(config)),
            "spec": {"groups": alerts.rule_groups(config)}}


def build(config: PlatformConfig) -> Concern:
    if not config.monitoring.enabled:
        return Concern("monitoring")
    targets = scrape_targets(config)
    objects: list[Manifest] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": metadata(config.monitoring.namespace, labels={COMPONENT_LABEL: "monitoring", **PSA_LABELS})},
    ]
    objects += [service_monitor(config, target) for target in targets]
    objects += scrape_permissions(config, targets)
    objects.append(prometheus_rule(config))
    objects += dashboards.config_maps(config)
    return Concern("monitoring", objects=tuple(objects))
