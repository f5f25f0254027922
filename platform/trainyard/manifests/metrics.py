"""The metrics Trainyard's alerts and dashboards may query, each with where upstream defines it.

Third-party rule sets use metric names that never existed (``kueue_workload_evictions_total``);
a test holds every alert and dashboard query to this list, and this list to upstream source.
"""

from __future__ import annotations

import re

# Ref: kubernetes-sigs/kueue v0.19.2 pkg/metrics/metrics.go (subsystem "kueue"); the cluster_queue_resource_*
# and nominal_quota gauges need metrics.enableClusterQueueResources (manifests/kueue.py turns it on).
KUEUE_METRICS = frozenset({
    "kueue_pending_workloads",
    "kueue_admitted_workloads_total",
    "kueue_admitted_active_workloads",
    "kueue_admission_wait_time_seconds_bucket",
    "kueue_evicted_workloads_total",
    "kueue_preempted_workloads_total",
    "kueue_cluster_queue_resource_usage",
    "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_borrowing_limit",
})
# Ref: NVIDIA/dcgm-exporter etc/dcp-metrics-included.csv (the default CSV of the operator's exporter).
DCGM_METRICS = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_USED"})
# Prometheus' own per-target series. Ref: prometheus docs, "Jobs and instances" (automatically generated labels and series).
PROMETHEUS_METRICS = frozenset({"up"})

KNOWN_METRICS = KUEUE_METRICS | DCGM_METRICS | PROMETHEUS_METRICS

# PromQL words that look like metric names. Ref: prometheus docs, querying/operators and querying/functions.
_PROMQL_WORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "rate", "irate", "increase", "delta", "histogram_quantile", "clamp_min", "clamp_max", "absent", "changes",
    "max_over_time", "min_over_time", "avg_over_time", "label_values", "vector", "time", "inf", "nan",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
# Grafana's templating query label_values(<selector>, <label>): the second argument is a label name.
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)", re.DOTALL)
_IDENTIFIER = re.compile(r"(?<![A-Za-z0-9_:.$])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a small reader for the expressions Trainyard writes)."""
    text = _LABEL_VALUES.sub(r"\1", expr)
    text = _STRING.sub('""', text)
    text = _MATCHERS.sub("", text)
    text = _GROUPING.sub("", text)
    text = _RANGE.sub("", text)
    names = set(_IDENTIFIER.findall(text)) - _PROMQL_WORDS
    return {n for n in names if not re.fullmatch(r"[0-9.e]+", n)}
