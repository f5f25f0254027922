"""Monitoring of a stack: which Prometheus scrapes the platform, alert thresholds, dashboards.

Trainyard does not run Prometheus or Grafana. It declares what they need to watch the
platform: the prometheus-operator CRDs (unless the site's Prometheus stack owns them), one
ServiceMonitor per controller and for the GPU operator's DCGM exporter, the permissions to
scrape them, PrometheusRules with the alerts, and Grafana dashboards as sidecar ConfigMaps.
An existing Prometheus is pointed at through ``prometheus`` (its namespace, ServiceAccount and
the labels its selectors match).
"""

from __future__ import annotations

from pydantic import Field

from trainyard.config.base import Duration, LabelKey, Labels, LabelValue, Model, Name


class Prometheus(Model):
    """The Prometheus (operator-managed) that scrapes the platform and evaluates its rules."""

    namespace: Name = Field(default="monitoring", description="Namespace Prometheus runs in.")
    service_account: Name = Field(
        default="prometheus-k8s", description="ServiceAccount Prometheus scrapes with (granted /metrics and discovery).")
    match_labels: Labels = Field(
        default_factory=dict,
        description="Labels the Prometheus selects ServiceMonitors and PrometheusRules by (e.g. release: "
        "kube-prometheus-stack); added to every one Trainyard declares.")


class Alerts(Model):
    """Thresholds of the platform alerts (docs/components/monitoring.md lists every rule)."""

    pending_for: Duration = Field(
        default="30m", description="A ClusterQueue with pending workloads and no admission for this long alerts.")
    admission_wait_p95_seconds: int = Field(
        default=1800, gt=0, description="Alert when the p95 wait from creation to admission exceeds this.")
    evictions_per_hour: int = Field(default=10, gt=0, description="Evictions per ClusterQueue per hour that alert.")
    preemptions_per_hour: int = Field(default=10, gt=0, description="Preemptions per ClusterQueue per hour that alert.")
    at_quota_for: Duration = Field(
        default="2h", description="A ClusterQueue using all its nominal quota of a resource, with work pending, this long.")
    idle_gpu_utilization_percent: int = Field(
        default=5, ge=0, le=100, description="GPUs allocated to a pod below this utilisation count as idle.")
    idle_gpu_for: Duration = Field(default="1h", description="How long an allocated GPU must be idle to alert.")
    controller_down_for: Duration = Field(default="5m", description="How long a controller's metrics may be down.")


class Dashboards(Model):
    """Grafana dashboards as ConfigMaps that Grafana's dashboard sidecar loads."""

    enabled: bool = Field(default=True, description="Declare the dashboards.")
    sidecar_label: LabelKey = Field(
        default="grafana_dashboard", description="Label key the Grafana sidecar watches (its sidecar.dashboards.label).")
    sidecar_label_value: LabelValue = Field(
        default="1", description="Value of that label (sidecar.dashboards.labelValue).")
    datasource_uid: str = Field(
        default="prometheus", description="UID of the Prometheus datasource in Grafana the panels query.")


class Monitoring(Model):
    """Metrics, alerts and dashboards for the platform."""

    enabled: bool = Field(default=False, description="Declare monitoring objects (needs a prometheus-operator Prometheus).")
    namespace: Name = Field(
        default="trainyard-monitoring",
        description="Namespace Trainyard declares for its PrometheusRules and dashboard ConfigMaps.")
    declare_crds: bool = Field(
        default=True,
        description="Declare the prometheus-operator CRDs (false when the site's Prometheus stack already owns them).")
    prometheus: Prometheus = Field(default=Prometheus(), description="The Prometheus that scrapes the platform.")
    scrape_interval: Duration = Field(default="30s", description="Scrape interval of every ServiceMonitor.")
    alerts: Alerts = Field(default=Alerts(), description="Alert thresholds.")
    dashboards: Dashboards = Field(default=Dashboards(), description="Grafana dashboards.")
