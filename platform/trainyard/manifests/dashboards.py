"""Grafana dashboards as ConfigMaps for Grafana's dashboard sidecar.

Two dashboards: queues (quota, usage and borrowing per ClusterQueue and cohort, pending
workloads, admission wait) and GPUs (utilisation and allocated GPUs per tenant namespace, XID
errors). Queries use only metrics of ``trainyard.manifests.metrics``. The JSON is Grafana's
dashboard model (schemaVersion 39), written with sorted keys so a render is byte-stable.

Ref: https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/ and the
Grafana chart's sidecar.dashboards.label / labelValue settings.
"""

from __future__ import annotations

import json
from typing import Any

from trainyard.config.model import PlatformConfig
from trainyard.manifests.alerts import DCGM_JOB, KUEUE
from trainyard.manifests.installs import COMPONENT_LABEL
from trainyard.manifests.meta import Manifest, metadata

SCHEMA_VERSION = 39
GPU_RESOURCES = 'resource=~"nvidia.com/.*"'


def _panel(panel_id: int, title: str, targets: list[tuple[str, str]], datasource: dict[str, str], *,
           x: int, y: int, kind: str = "timeseries", unit: str = "short") -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": datasource,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": datasource}
                    for i, (expr, legend) in enumerate(targets)],
    }


def _dashboard(uid: str, title: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["trainyard"],
        "editable": False,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "templating": {"list": variables},
        "panels": panels,
    }


def _variable(name: str, query: str, datasource: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "type": "query", "datasource": datasource, "query": query, "refresh": 2,
            "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"}}


def queues_dashboard(config: PlatformConfig) -> dict[str, Any]:
    ds = {"type": "prometheus", "uid": config.monitoring.dashboards.datasource_uid}
    cq = f'{KUEUE},cluster_queue=~"$cluster_queue"'
    usage = f"kueue_cluster_queue_resource_usage{{{cq},{GPU_RESOURCES}}}"
    quota = f"kueue_cluster_queue_nominal_quota{{{cq},{GPU_RESOURCES}}}"
    panels = [
        _panel(1, "GPU quota and usage per ClusterQueue", [
            (f"max by (cluster_queue, flavor, resource) ({usage})", "{{cluster_queue}} {{flavor}} {{resource}} used"),
            (f"max by (cluster_queue, flavor, resource) ({quota})", "{{cluster_queue}} {{flavor}} {{resource}} nominal"),
        ], ds, x=0, y=0),
        _panel(2, "Borrowed above nominal per ClusterQueue", [
            (f"clamp_min(max by (cluster_queue, flavor, resource) ({usage}) - "
             f"max by (cluster_queue, flavor, resource) ({quota}), 0)", "{{cluster_queue}} {{flavor}} {{resource}}"),
        ], ds, x=12, y=0),
        _panel(3, "GPU quota and usage per cohort", [
            (f"sum by (cohort, flavor, resource) (max by (cohort, cluster_queue, flavor, resource) "
             f"(kueue_cluster_queue_resource_usage{{{KUEUE},{GPU_RESOURCES}}}))", "{{cohort}} {{flavor}} {{resource}} used"),
            (f"sum by (cohort, flavor, resource) (max by (cohort, cluster_queue, flavor, resource) "
             f"(kueue_cluster_queue_nominal_quota{{{KUEUE},{GPU_RESOURCES}}}))",
             "{{cohort}} {{flavor}} {{resource}} nominal"),
        ], ds, x=0, y=8),
        _panel(4, "Pending workloads per ClusterQueue", [
            (f"sum by (cluster_queue, status) (kueue_pending_workloads{{{cq}}})", "{{cluster_queue}} {{status}}"),
        ], ds, x=12, y=8),
        _panel(5, "Admission wait p95 per ClusterQueue", [
            (f"histogram_quantile(0.95, sum by (cluster_queue, le) "
             f"(rate(kueue_admission_wait_time_seconds_bucket{{{cq}}}[1h])))", "{{cluster_queue}}"),
        ], ds, x=0, y=16, unit="s"),
        _panel(6, "Admitted workloads running per ClusterQueue", [
            (f"max by (cluster_queue) (kueue_admitted_active_workloads{{{cq}}})", "{{cluster_queue}}"),
        ], ds, x=12, y=16),
    ]
    variables = [_variable("cluster_queue", "label_values(kueue_pending_workloads, cluster_queue)", ds)]
    return _dashboard("trainyard-queues", "Trainyard: queues and quota", panels, variables)


def gpus_dashboard(config: PlatformConfig) -> dict[str, Any]:
    ds = {"type": "prometheus", "uid": config.monitoring.dashboards.datasource_uid}
    allocated = f'job="{DCGM_JOB}",pod!="",namespace=~"$namespace"'
    panels = [
        _panel(1, "GPU utilisation per tenant namespace", [
            (f"avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{{{allocated}}})", "{{namespace}}"),
        ], ds, x=0, y=0, unit="percent"),
        _panel(2, "Allocated GPUs per tenant namespace", [
            (f"count by (namespace) (DCGM_FI_DEV_GPU_UTIL{{{allocated}}})", "{{namespace}}"),
        ], ds, x=12, y=0),
        _panel(3, "GPU memory used per tenant namespace", [
            (f"sum by (namespace) (DCGM_FI_DEV_FB_USED{{{allocated}}})", "{{namespace}}"),
        ], ds, x=0, y=8, unit="decmbytes"),
        _panel(4, "GPUs with an XID error", [
            (f'count(DCGM_FI_DEV_XID_ERRORS{{job="{DCGM_JOB}"}} > 0)', "GPUs"),
        ], ds, x=12, y=8, kind="stat"),
    ]
    variables = [_variable("namespace", f'label_values(DCGM_FI_DEV_GPU_UTIL{{job="{DCGM_JOB}"}}, namespace)', ds)]
    return _dashboard("trainyard-gpus", "Trainyard: GPUs per tenant", panels, variables)


def dashboards(config: PlatformConfig) -> dict[str, dict[str, Any]]:
    """Dashboard name -> dashboard model."""
    out = {"trainyard-queues": queues_dashboard(config)}
    if config.gpu_operator is not None:
        out["trainyard-gpus"] = gpus_dashboard(config)
    return out


def config_maps(config: PlatformConfig) -> list[Manifest]:
    settings = config.monitoring.dashboards
    if not settings.enabled:
        return []
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": metadata(f"{name}-dashboard", namespace=config.monitoring.namespace,
                              labels={COMPONENT_LABEL: "monitoring", settings.sidecar_label: settings.sidecar_label_value}),
         "data": {f"{name}.json": json.dumps(model, indent=2, sort_keys=True) + "\n"}}
        for name, model in dashboards(config).items()
    ]
