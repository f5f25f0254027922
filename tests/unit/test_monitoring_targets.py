"""The monitoring concern's scrape targets: each ServiceMonitor selects the Service its component's chart renders,
Prometheus may discover exactly the scraped namespaces, an existing Prometheus is pointed at by its labels, and
Kueue publishes the per-ClusterQueue gauges the alerts read.

docs/components/monitoring.md is the reference. Namespaces, names and job labels come from the module (and the
catalog it reads); the Service labels and ports are inline in ``monitoring.scrape_targets``, so they are stated
here as each chart renders them (the table in the doc).
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import ROOT, rendered, stack
from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import alerts, crd_components, kueue, monitoring, render_platform
from trainyard.manifests.installs import COMPONENT_LABEL
from trainyard.manifests.meta import Manifest

# The metrics Service of each component as its chart renders it: (selector labels, port name, scheme).
# Ref: the module docstring of manifests/monitoring.py (kueue, jobset, kubeflow-trainer charts; gpu-operator assets).
CHART_SERVICES: dict[str, tuple[dict[str, str], str, str]] = {
    "kueue": ({"app.kubernetes.io/name": "kueue", "app.kubernetes.io/instance": "kueue",
               "app.kubernetes.io/component": "metrics-service"}, "https", "https"),
    "jobset": ({"app.kubernetes.io/name": "jobset", "app.kubernetes.io/instance": "jobset",
                "app.kubernetes.io/component": "controller"}, "https", "https"),
    "trainer": ({"app.kubernetes.io/name": "kubeflow-trainer", "app.kubernetes.io/instance": "trainer",
                 "app.kubernetes.io/component": "manager"}, "monitoring-port", "https"),
    "dcgm": ({"app": "nvidia-dcgm-exporter"}, "gpu-metrics", "http"),
}
DISCOVERY_GRANTS = {("", "services"), ("", "endpoints"), ("", "pods"), ("discovery.k8s.io", "endpointslices")}
READ = {"get", "list", "watch"}


def _objects(config_or_stack: str | PlatformConfig, kind: str) -> list[Manifest]:
    if isinstance(config_or_stack, str):
        concern = rendered(config_or_stack).concern("monitoring")
    else:
        concern = monitoring.build(config_or_stack)
    return [o for o in concern.objects if o["kind"] == kind]


def _namespace_of(config: PlatformConfig, component: str) -> str:
    """Where the component runs: the catalog's install namespace, or the GPU operator's namespace for DCGM."""
    if component == "dcgm":
        assert config.gpu_operator is not None
        return config.gpu_operator.namespace
    return catalog.release(component, getattr(config.versions, component)).installed()[1]


def _grants(role: Manifest) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def _with_monitoring(config: PlatformConfig, **changes: Any) -> PlatformConfig:
    prometheus = changes.pop("prometheus", {})
    settings = config.monitoring.model_copy(
        update={**changes, "prometheus": config.monitoring.prometheus.model_copy(update=prometheus)})
    return config.model_copy(update={"monitoring": settings})


# ------------------------------------------------------------------------------------------- ServiceMonitors

def test_prod_declares_one_service_monitor_per_controller_and_dcgm_in_its_namespace() -> None:
    config = stack("prod").config
    monitors = {o["metadata"]["name"]: o for o in _objects("prod", "ServiceMonitor")}
    assert sorted(monitors) == sorted(f"trainyard-{c}" for c in CHART_SERVICES)
    for component in CHART_SERVICES:
        monitor = monitors[f"trainyard-{component}"]
        namespace = _namespace_of(config, component)
        assert monitor["apiVersion"] == catalog.MONITORING_API
        assert monitor["metadata"]["namespace"] == namespace, component
        # Only the component's own namespace: a selector without matchNames would follow the Service's labels
        # into any namespace (a tenant could label a Service of its own and be scraped as the controller).
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [namespace]}, component


def test_each_service_monitor_selects_the_metrics_service_its_chart_renders_and_its_port() -> None:
    monitors = {o["metadata"]["name"]: o for o in _objects("prod", "ServiceMonitor")}
    for component, (labels, port, scheme) in CHART_SERVICES.items():
        spec = monitors[f"trainyard-{component}"]["spec"]
        assert spec["selector"] == {"matchLabels": labels}, component
        [endpoint] = spec["endpoints"]
        assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (port, "/metrics", scheme), component
        # The alerts select on job; every endpoint rewrites it to the name alerts.py expects.
        assert endpoint["relabelings"] == [
            {"action": "replace", "targetLabel": "job", "replacement": alerts.job_name(component)}], component


def test_kueue_and_jobset_scrape_with_a_bearer_token_trainer_and_dcgm_without_and_dcgm_honours_labels() -> None:
    monitors = {o["metadata"]["name"]: o["spec"]["endpoints"][0] for o in _objects("prod", "ServiceMonitor")}
    assert {name for name, e in monitors.items() if e.get("bearerTokenFile") == monitoring.SA_TOKEN} == {
        "trainyard-kueue", "trainyard-jobset"}
    assert {name for name, e in monitors.items() if "bearerTokenFile" in e} == {"trainyard-kueue", "trainyard-jobset"}
    assert {name for name, e in monitors.items() if e.get("honorLabels")} == {"trainyard-dcgm"}
    assert "tlsConfig" not in monitors["trainyard-dcgm"]


def test_the_service_monitors_follow_the_stacks_component_versions_namespaces() -> None:
    """The expected namespaces above are read from the catalog: the targets must be too, not fixed strings."""
    config = stack("prod").config
    targets = {t.component: t for t in monitoring.scrape_targets(config)}
    assert {c: t.namespace for c, t in targets.items()} == {c: _namespace_of(config, c) for c in CHART_SERVICES}
    moved = config.model_copy(update={"gpu_operator": config.gpu_operator.model_copy(update={"namespace": "gpus"})})
    [dcgm] = [o for o in _objects(moved, "ServiceMonitor") if o["metadata"]["name"] == "trainyard-dcgm"]
    assert dcgm["metadata"]["namespace"] == "gpus"
    assert dcgm["spec"]["namespaceSelector"] == {"matchNames": ["gpus"]}


# ------------------------------------------------------------------------------------------- scrape RBAC

def test_prometheus_may_discover_services_endpoints_and_pods_in_exactly_the_scraped_namespaces() -> None:
    config = stack("prod").config
    prometheus = config.monitoring.prometheus
    subject = {"kind": "ServiceAccount", "name": prometheus.service_account, "namespace": prometheus.namespace}
    scraped = {o["metadata"]["namespace"] for o in _objects("prod", "ServiceMonitor")}
    assert scraped == {_namespace_of(config, c) for c in CHART_SERVICES}

    roles = _objects("prod", "Role")
    bindings = _objects("prod", "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(scraped)
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(scraped)
    for role in roles:
        assert role["metadata"]["name"] == monitoring.DISCOVERY
        assert _grants(role) == {grant: READ for grant in DISCOVERY_GRANTS}, role["metadata"]["namespace"]
    for binding in bindings:
        assert binding["metadata"]["name"] == monitoring.DISCOVERY
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": monitoring.DISCOVERY}
        assert binding["subjects"] == [subject]


def test_prometheus_may_get_metrics_cluster_wide_and_nothing_else() -> None:
    config = stack("prod").config
    prometheus = config.monitoring.prometheus
    [role] = _objects("prod", "ClusterRole")
    [binding] = _objects("prod", "ClusterRoleBinding")
    assert role["metadata"]["name"] == binding["metadata"]["name"] == monitoring.METRICS_READER
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": monitoring.METRICS_READER}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": prometheus.service_account, "namespace": prometheus.namespace}]


def test_without_the_gpu_operator_there_is_no_dcgm_target_and_no_discovery_in_its_namespace() -> None:
    config = stack("prod").config
    assert config.gpu_operator is not None
    namespace = config.gpu_operator.namespace
    bare = config.model_copy(update={"gpu_operator": None})
    assert "trainyard-dcgm" not in {o["metadata"]["name"] for o in _objects(bare, "ServiceMonitor")}
    assert namespace not in {o["metadata"]["namespace"] for kind in ("Role", "RoleBinding") for o in _objects(bare, kind)}


# ------------------------------------------------------------------------------------------- existing Prometheus

def test_match_labels_go_on_every_service_monitor_and_the_prometheus_rule() -> None:
    config = stack("prod").config
    match = dict(config.monitoring.prometheus.match_labels)
    assert match == {"release": "kube-prometheus-stack"}
    selected = _objects("prod", "ServiceMonitor") + _objects("prod", "PrometheusRule")
    assert len(selected) == len(CHART_SERVICES) + 1
    for obj in selected:
        assert {k: obj["metadata"]["labels"].get(k) for k in match} == match, obj["metadata"]["name"]
        assert obj["metadata"]["labels"][COMPONENT_LABEL] == "monitoring"

    other = _with_monitoring(config, prometheus={"match_labels": {"prometheus": "platform"}})
    for obj in _objects(other, "ServiceMonitor") + _objects(other, "PrometheusRule"):
        labels = obj["metadata"]["labels"]
        assert labels.get("prometheus") == "platform", obj["metadata"]["name"]
        assert "release" not in labels, obj["metadata"]["name"]


def test_declare_crds_false_leaves_the_prometheus_operator_crds_to_the_sites_stack() -> None:
    config = stack("prod").config
    assert config.monitoring.declare_crds is True
    ours = {f"{plural}.monitoring.coreos.com" for plural in ("servicemonitors", "podmonitors", "prometheusrules")}
    assert ours <= {source.name for source in rendered("prod").crd_sources}
    assert ("prometheus_operator", config.versions.prometheus_operator) in crd_components(config)

    existing = _with_monitoring(config, declare_crds=False)
    assert "prometheus_operator" not in {component for component, _ in crd_components(existing)}
    platform = render_platform(existing, ROOT)
    assert not [s.name for s in platform.crd_sources if s.name.endswith(".monitoring.coreos.com")]
    # The ServiceMonitors and the PrometheusRule are still declared, for the site's CRDs.
    kinds = [o["kind"] for o in platform.concern("monitoring").objects]
    assert kinds.count("ServiceMonitor") == len(CHART_SERVICES) and kinds.count("PrometheusRule") == 1


def test_with_monitoring_off_nothing_is_declared_and_no_crds() -> None:
    off = _with_monitoring(stack("prod").config, enabled=False)
    assert monitoring.build(off).objects == ()
    assert "prometheus_operator" not in {component for component, _ in crd_components(off)}


# ------------------------------------------------------------------------------------------- Kueue's gauges

def test_kueue_enables_the_cluster_queue_resource_gauges_when_monitoring_is_on() -> None:
    config = stack("prod").config
    assert config.monitoring.enabled
    assert kueue.controller_configuration(config)["metrics"] == {"bindAddress": ":8443",
                                                                 "enableClusterQueueResources": True}
    # And the chart gets it: the Configuration the Kueue release hands to the manager.
    [release] = [r for r in rendered("prod").releases if r.component == "kueue"]
    handed = yaml.safe_load(release.values["managerConfig"]["controllerManagerConfigYaml"])
    assert handed["metrics"]["enableClusterQueueResources"] is True

    off = _with_monitoring(config, enabled=False)
    assert kueue.controller_configuration(off)["metrics"] == {"bindAddress": ":8443"}


def test_no_two_rbac_objects_share_a_subject_dict() -> None:
    """Each binding gets its own subject: a shared dict would change every binding when one is edited."""
    objects = [o for o in rendered("prod").objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    subjects = [id(s) for o in objects for s in o.get("subjects", [])]
    assert len(subjects) == len(set(subjects))
