"""The platform's alerts: one PrometheusRule, rule groups for queueing, GPUs and controllers.

Every expression queries metrics listed in ``trainyard.manifests.metrics``; every alert has a
``promtool test rules`` case in tests/monitoring. Kueue series carry ``replica_role`` when Kueue
runs with several replicas; ``replica_role!="follower"`` keeps only the leader's (and matches
series without the label). Gauges are aggregated with ``max`` so two scrapes of one value do not
add up; counters with ``sum`` of their increase.

Ref: Kueue v0.19.2 pkg/metrics/metrics.go and site/content/en/docs/reference/metrics.md;
dcgm-exporter etc/dcp-metrics-included.csv; prometheus docs configuration/alerting_rules.md.
"""

from __future__ import annotations

from typing import Any

from trainyard.config.model import PlatformConfig

KUEUE = 'replica_role!="follower"'
DCGM_JOB = "trainyard-dcgm"
RUNBOOK = "https://trainyard.dev/docs/components/monitoring#alerts"


def job_name(component: str) -> str:
    """The ``job`` label every ServiceMonitor of Trainyard sets on its targets (manifests/monitoring.py)."""
    return f"trainyard-{component}"


def scraped_jobs(config: PlatformConfig) -> list[str]:
    """Jobs whose targets must be up: installed controllers, and DCGM where the GPU operator runs."""
    jobs = [job_name(c) for c in ("kueue", "jobset", "trainer") if c not in config.rehearsal.external_controllers]
    if config.gpu_operator is not None:
        jobs.append(DCGM_JOB)
    return jobs


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity, "platform": "trainyard"}
    rule["annotations"] = {"summary": summary, "description": description, "runbook_url": f"{RUNBOOK}-{name.lower()}"}
    return rule


def queueing_rules(config: PlatformConfig) -> list[dict[str, Any]]:
    a = config.monitoring.alerts
    pending = f"sum by (cluster_queue) (kueue_pending_workloads{{{KUEUE}}})"
    return [
        _alert(
            "TrainyardWorkloadsPendingTooLong",
            f"{pending} > 0\nunless on (cluster_queue)\n"
            f"sum by (cluster_queue) (increase(kueue_admitted_workloads_total{{{KUEUE}}}[{a.pending_for}])) > 0",
            a.pending_for, "warning",
            "ClusterQueue {{ $labels.cluster_queue }} has had pending workloads and no admission for " + a.pending_for,
            "{{ $value }} workloads wait in {{ $labels.cluster_queue }}. `trainyard status` shows why Kueue holds "
            "them (the QuotaReserved condition of each Workload).",
        ),
        _alert(
            "TrainyardAdmissionWaitHigh",
            "histogram_quantile(0.95, sum by (cluster_queue, le) "
            f"(rate(kueue_admission_wait_time_seconds_bucket{{{KUEUE}}}[1h]))) > {a.admission_wait_p95_seconds}",
            "15m", "warning",
            "p95 admission wait of {{ $labels.cluster_queue }} is above " + f"{a.admission_wait_p95_seconds}s",
            "Workloads of {{ $labels.cluster_queue }} waited {{ $value | humanizeDuration }} (p95, last hour) "
            "from creation to admission.",
        ),
        _alert(
            "TrainyardEvictionsRising",
            f"sum by (cluster_queue, reason) (increase(kueue_evicted_workloads_total{{{KUEUE}}}[1h])) "
            f"> {a.evictions_per_hour}",
            "0m", "warning",
            "{{ $labels.cluster_queue }}: {{ $value }} evictions ({{ $labels.reason }}) in the last hour",
            "Frequent evictions waste GPU time. PodsReadyTimeout: pods do not start in time; Preempted: "
            "higher-priority work or quota reclamation.",
        ),
        _alert(
            "TrainyardPreemptionsRising",
            "sum by (preempting_cluster_queue, reason) "
            f"(increase(kueue_preempted_workloads_total{{{KUEUE}}}[1h])) > {a.preemptions_per_hour}",
            "0m", "warning",
            "{{ $labels.preempting_cluster_queue }} preempted {{ $value }} workloads ({{ $labels.reason }}) in an hour",
            "Check borrowing and lending limits of the cohort (`trainyard capacity`).",
        ),
        _alert(
            "TrainyardClusterQueueAtQuota",
            f"max by (cluster_queue, flavor, resource) (kueue_cluster_queue_resource_usage{{{KUEUE},"
            'resource=~"nvidia.com/.*"})\n'
            f">= max by (cluster_queue, flavor, resource) (kueue_cluster_queue_nominal_quota{{{KUEUE}}}) > 0\n"
            f"and on (cluster_queue) {pending} > 0",
            a.at_quota_for, "info",
            "{{ $labels.cluster_queue }} uses all its {{ $labels.resource }} quota on {{ $labels.flavor }}",
            "The tenant has used its whole nominal quota for " + a.at_quota_for + " with work still pending: "
            "a candidate for more quota.",
        ),
    ]


def gpu_rules(config: PlatformConfig) -> list[dict[str, Any]]:
    a = config.monitoring.alerts
    return [
        _alert(
            "TrainyardGpuXidError",
            f'DCGM_FI_DEV_XID_ERRORS{{job="{DCGM_JOB}"}} > 0',
            "0m", "critical",
            "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) reported XID {{ $value }}",
            "DCGM reports the last XID error of the GPU. XIDs 48, 63, 64, 74, 79, 94, 95 usually need the node "
            "drained and the GPU reset; see NVIDIA's XID catalogue.",
        ),
        _alert(
            "TrainyardGpuAllocatedIdle",
            f'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{job="{DCGM_JOB}",pod!=""}}) '
            f"< {a.idle_gpu_utilization_percent}",
            a.idle_gpu_for, "info",
            "Pod {{ $labels.namespace }}/{{ $labels.pod }} holds GPUs at {{ $value }}% utilisation",
            "The GPUs are allocated to the pod but nearly idle for " + a.idle_gpu_for + ".",
        ),
    ]


def controller_rules(config: PlatformConfig) -> list[dict[str, Any]]:
    jobs = scraped_jobs(config)
    absent = " or ".join(f'absent(up{{job="{job}"}})' for job in jobs)
    return [
        _alert(
            "TrainyardComponentDown",
            f'up{{job=~"{"|".join(jobs)}"}} == 0',
            config.monitoring.alerts.controller_down_for, "critical",
            "{{ $labels.job }} target {{ $labels.instance }} is down",
            "Prometheus cannot scrape it: the controller is not running, or its metrics endpoint refuses the scrape.",
        ),
        _alert(
            "TrainyardComponentMetricsAbsent",
            absent,
            config.monitoring.alerts.controller_down_for, "critical",
            "No {{ $labels.job }} target is scraped at all",
            "The ServiceMonitor selects no endpoint, or Prometheus does not select the ServiceMonitor "
            "(monitoring.prometheus.match_labels).",
        ),
    ]


def rule_groups(config: PlatformConfig) -> list[dict[str, Any]]:
    """The ``spec.groups`` of the PrometheusRule (also the rule file ``promtool`` checks)."""
    groups = [{"name": "trainyard.queueing", "rules": queueing_rules(config)}]
    if config.gpu_operator is not None:
        groups.append({"name": "trainyard.gpus", "rules": gpu_rules(config)})
    groups.append({"name": "trainyard.components", "rules": controller_rules(config)})
    return groups
