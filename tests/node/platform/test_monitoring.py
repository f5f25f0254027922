"""Node tier, tests/node/platform after test_controllers (conftest.ORDER): the monitoring Trainyard declares, scraped
and evaluated by a real Prometheus on the real node.

Trainyard does not install Prometheus; a site runs a prometheus-operator Prometheus, and the stack's monitoring
concern declares what it needs (ServiceMonitors per controller, the PrometheusRule, scrape RBAC). The rehearsal with
real nodes plays the site (``rehearsal/prometheus_install.py``): after ``pulumi up`` of the local stack with
``monitoring.enabled``, prometheus-operator v0.93.0 from upstream's bundle and one Prometheus in
``monitoring.prometheus.namespace`` as ``monitoring.prometheus.service_account``, every image built here
(``rehearsal/prometheus_images.py``; Prometheus 3.16.0 standing in for the operator's default 3.13.1). What is proven:

- the operator's pod is Ready on the real node, by the digest the factory built; the stack's ServiceMonitor, PodMonitor
  and PrometheusRule CRDs were not applied a second time by the install (their field managers are the stack's);
- the Prometheus is Available (its operator's condition), its pod Ready on the real node with the config reloader
  beside it, both by the factory's digests;
- through Prometheus's own HTTP API (``/api/v1/targets``, asked at the pod's address on the node's bridge), every
  ServiceMonitor target Trainyard declares is discovered and ``up``: the scrape goes through the controllers'
  NetworkPolicies (``security.network.metrics_from``), their TLS, and for Kueue and JobSet their authorization of
  ``/metrics`` (a SubjectAccessReview for the ServiceAccount the stack's ClusterRoleBinding names);
- ``/api/v1/rules`` holds the stack's PrometheusRule ``trainyard-alerts``, every group and alert the stack renders,
  loaded and evaluated (health ``ok``), and its two component alerts (a controller's metrics down or absent) inactive.

Needs root and the package's tools (``shared.TOOLS``: prometheus-operator, prometheus and promtool among them).
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from tests.node.platform.shared import NO_PROXY, TIMINGS
from trainyard.manifests import alerts
from trainyard.manifests.monitoring import scrape_targets
from trainyard.rehearsal import prometheus_images, prometheus_install
from trainyard.rehearsal.image_cache import cache_root
from trainyard.rehearsal.session import REAL_NODE, Rehearsal

pytestmark = pytest.mark.node


def _built(live: Rehearsal) -> dict[str, str]:
    """The factory's references (from its cache: the same inputs give the same digest)."""
    built = prometheus_images.build(live.config, live.settings.tools_dir, cache_root())
    return {role: image.reference for role, image in built.items()}


def _ran(pod: dict[str, Any], name: str, reference: str) -> str:
    container = next(c for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]] if c["name"] == name)
    status = next(s for s in [*pod["status"].get("initContainerStatuses", []), *pod["status"]["containerStatuses"]]
                  if s["name"] == name)
    assert container["image"] == reference, (container["image"], reference)
    assert status["imageID"].endswith(reference.split("@")[1]), status["imageID"]
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']} {name}: {reference}"


def _prometheus_pod(live: Rehearsal) -> dict[str, Any]:
    (pod,) = live.kube.items("pods", live.config.monitoring.prometheus.namespace,
                             selector=f"prometheus={prometheus_install.PROMETHEUS}")
    return pod


def _api(live: Rehearsal, path: str) -> Any:
    """Prometheus's HTTP API at its pod's address (the node's bridge: an address of this rehearsal's own)."""
    address = _prometheus_pod(live)["status"]["podIP"]
    with NO_PROXY.open(f"http://{address}:9090{path}", timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]


def test_the_operator_is_ready_on_the_real_node_by_the_built_digest(live: Rehearsal) -> None:
    (pod,) = live.kube.items("pods", "*", selector="app.kubernetes.io/name=prometheus-operator")
    assert pod["spec"]["nodeName"] == REAL_NODE
    assert all(s["ready"] for s in pod["status"]["containerStatuses"]), pod["status"]
    built = _built(live)
    print(_ran(pod, "prometheus-operator", built[prometheus_images.OPERATOR]))
    (container,) = pod["spec"]["containers"]
    assert f"--prometheus-config-reloader={built[prometheus_images.RELOADER]}" in container["args"]
    # The bundle's CRDs the stack declares were left to the stack: no field of theirs is the install's.
    for plural in ("servicemonitors", "podmonitors", "prometheusrules"):
        crd = json.loads(live.kube.run("get", "crd", f"{plural}.monitoring.coreos.com", "-o", "json",
                                       "--show-managed-fields").stdout)
        managers = {m["manager"] for m in crd["metadata"]["managedFields"]}
        print(f"CRD {plural}.monitoring.coreos.com managed by {', '.join(sorted(managers))}")
        assert prometheus_install.FIELD_MANAGER not in managers
    crd = json.loads(live.kube.run("get", "crd", "prometheuses.monitoring.coreos.com", "-o", "json",
                                   "--show-managed-fields").stdout)
    assert {m["manager"] for m in crd["metadata"]["managedFields"]} >= {prometheus_install.FIELD_MANAGER}


def test_the_prometheus_is_available_on_the_real_node(live: Rehearsal) -> None:
    namespace = live.config.monitoring.prometheus.namespace
    prometheus = live.kube.get("prometheuses.monitoring.coreos.com", prometheus_install.PROMETHEUS, namespace)
    for kind in ("Available", "Reconciled"):
        condition = prometheus_install.condition(prometheus, kind)
        print(f"Prometheus {namespace}/{prometheus_install.PROMETHEUS} {kind}: {condition}")
        assert condition is not None and condition["status"] == "True", condition
    pod = _prometheus_pod(live)
    assert pod["spec"]["nodeName"] == REAL_NODE and pod["spec"]["serviceAccountName"] == \
        live.config.monitoring.prometheus.service_account
    assert all(s["ready"] for s in pod["status"]["containerStatuses"]), pod["status"]
    built = _built(live)
    print(_ran(pod, "prometheus", built[prometheus_images.PROMETHEUS]))
    print(_ran(pod, "config-reloader", built[prometheus_images.RELOADER]))
    build = _api(live, "/api/v1/status/buildinfo")
    print(f"Prometheus says version {build['version']} ({build.get('goVersion')})")
    assert build["version"] == prometheus_images.STAND_INS["v3.13.1"].version


def _targets_table(targets: list[dict[str, Any]]) -> str:
    rows = [("scrape pool", "job", "instance", "health", "last error")]
    rows += [(t["scrapePool"], t["labels"].get("job", ""), t["labels"].get("instance", ""), t["health"],
              t.get("lastError") or "-") for t in targets]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows)


def test_every_servicemonitor_target_trainyard_declares_is_up(live: Rehearsal) -> None:
    declared = scrape_targets(live.config)
    pools = {f"serviceMonitor/{t.namespace}/trainyard-{t.component}/0": t for t in declared}
    assert pools, "the local stack on real nodes scrapes Kueue, JobSet and Trainer"
    start = time.monotonic()
    seen: list[dict[str, Any]] = []

    def settled() -> bool:
        nonlocal seen
        seen = [t for t in _api(live, "/api/v1/targets?state=active")["activeTargets"] if t["scrapePool"] in pools]
        return {t["scrapePool"] for t in seen} == set(pools) and all(t["health"] != "unknown" for t in seen) and \
            (all(t["health"] == "up" for t in seen) or time.monotonic() - start > 150)

    deadline = start + 240
    while not settled() and time.monotonic() < deadline:
        time.sleep(3)
    TIMINGS["Prometheus Ready -> every declared target scraped"] = time.monotonic() - start
    print(_targets_table(seen))
    assert {t["scrapePool"] for t in seen} == set(pools), sorted(pools)
    for target in seen:
        component = pools[target["scrapePool"]].component
        assert target["labels"]["job"] == alerts.job_name(component)
        assert target["health"] == "up", f"{component}: {target.get('lastError')}"
    up = _api(live, "/api/v1/query?query=" + urllib.request.quote('up{job=~"trainyard-.*"}'))["result"]
    print("up: " + ", ".join(f"{r['metric']['job']}={r['value'][1]}" for r in up))
    assert {r["metric"]["job"] for r in up if r["value"][1] == "1"} == {alerts.job_name(t.component) for t in declared}


def test_the_stacks_prometheusrule_is_loaded_and_evaluated(live: Rehearsal) -> None:
    wanted = {group["name"]: {rule["alert"] for rule in group["rules"]} for group in alerts.rule_groups(live.config)}
    start = time.monotonic()
    groups: list[dict[str, Any]] = []
    while time.monotonic() - start < 180:
        groups = [g for g in _api(live, "/api/v1/rules")["groups"] if "trainyard-alerts" in g["file"]]
        if {g["name"] for g in groups} == set(wanted) and all(r.get("lastEvaluation", "").startswith("2")
                                                              and not r["lastEvaluation"].startswith("0001")
                                                              for g in groups for r in g["rules"]):
            break
        time.sleep(3)
    TIMINGS["rules loaded and evaluated"] = time.monotonic() - start
    for group in groups:
        print(f"{group['file']}: group {group['name']}: " + ", ".join(
            f"{r['name']} ({r['health']}, {r['state']})" for r in group["rules"]))
    assert {g["name"]: {r["name"] for r in g["rules"]} for g in groups} == wanted
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups
    # On a healthy platform the two component alerts are inactive once a scrape preceded an evaluation (the first
    # evaluation may come before the first scrape: TrainyardComponentMetricsAbsent is then pending for one interval).
    start = time.monotonic()
    states: dict[str, str] = {}
    while time.monotonic() - start < 150:
        states = {r["name"]: r["state"] for g in _api(live, "/api/v1/rules")["groups"] if "trainyard-alerts" in g["file"]
                  for r in g["rules"] if r["name"] in ("TrainyardComponentDown", "TrainyardComponentMetricsAbsent")}
        if set(states.values()) == {"inactive"}:
            break
        time.sleep(3)
    TIMINGS["component alerts inactive"] = time.monotonic() - start
    print(f"component alerts: {states}")
    assert states == {"TrainyardComponentDown": "inactive", "TrainyardComponentMetricsAbsent": "inactive"}

