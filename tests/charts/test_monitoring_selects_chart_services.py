"""Every ServiceMonitor Trainyard declares scrapes a Service that upstream creates with exactly Trainyard's values.

For each stack with monitoring on and each ServiceMonitor of any concern, the Services are the ones installed: every
release the stack installs, rendered from the upstream chart with Trainyard's values by the chart-truth renderer
(tests/charts/conftest.py), each object in its own namespace or else the release's (as Pulumi's helm.v4.Chart
installs it); plus the operands an operator creates from what its chart renders (``OPERANDS``: the GPU operator's
DCGM exporter Service, from the operator's v26.7.0 assets, in the operator's namespace). Following
prometheus-operator's endpoint discovery, each monitor must:

- select a Service in its namespaceSelector (matchNames, else its own namespace; ``any``: every namespace) whose
  labels match ``spec.selector`` (matchLabels and matchExpressions);
- find on that Service the endpoint's named ``port`` (a Service port name), or else its ``targetPort`` (a container
  port name or number), and the Service port must reach a container port of the pods the Service selects (its
  targetPort, by number or by name): exactly one scraped port per endpoint;
- scrape the port the component's metrics server listens on, where the chart says so (its manager configuration's
  ``metrics.bindAddress``, ``DCGM_EXPORTER_LISTEN``, or a container port named ``metrics``), with the path and scheme
  of upstream's own ServiceMonitor where upstream ships one (``UPSTREAM_MONITORS``: Kueue's and JobSet's charts
  behind a switch Trainyard leaves off, the GPU operator's asset), else ``/metrics`` of controller-runtime's metrics
  server, and the scheme its ``metrics.secureServing`` states.

Ref: prometheus-operator v0.93.0 pkg/prometheus/promcfg.go (generateServiceMonitorConfig: keep on
``__meta_kubernetes_service_label_*`` per matchLabels/matchExpressions, then on the endpoint port name when ``port``
is set, else on ``__meta_kubernetes_pod_container_port_{name,number}`` for ``targetPort``;
getNamespacesFromNamespaceSelector). controller-runtime pkg/metrics/server/server.go (defaultMetricsEndpoint
"/metrics").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.charts.conftest import Renderers
from tests.conftest import CRDS_DIR, STACKS, rendered, stack
from trainyard import charts
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import Manifest, object_id

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
CONTROLLER_RUNTIME_METRICS_PATH = "/metrics"

# The GPU operator's DCGM exporter operand, as the operator creates it: the Service whole, the DaemonSet trimmed to
# what this test reads (pod labels, the exporter container's listen address and ports). The operator applies them in
# its own namespace (OPERATOR_NAMESPACE) and changes only the Service's type and internalTrafficPolicy
# (TransformDCGMExporterService) and the DaemonSet's listen address only through dcgmExporter.env/args.
# Ref: NVIDIA/gpu-operator v26.7.0 (10ee5b36) assets/state-dcgm-exporter/0400_service.yaml (blob 6f9781ae),
# 0800_daemonset.yaml (blob eb0dab16), 0500_service_monitor.yaml (blob b28ad884); controllers/object_controls.go
# Service() (obj.Namespace = n.operatorNamespace), preprocessService; docker/Dockerfile (COPY assets /opt/gpu-operator/).
GPU_OPERATOR_ASSETS_VERSION = "v26.7.0"
DCGM_EXPORTER_SERVICE = """
apiVersion: v1
kind: Service
metadata:
  namespace: "FILLED BY THE OPERATOR"
  name: nvidia-dcgm-exporter
  labels:
    app: nvidia-dcgm-exporter
  annotations:
    prometheus.io/scrape: "true"
spec:
  selector:
    app: nvidia-dcgm-exporter
  ports:
  - name: gpu-metrics
    port: 9400
    targetPort: 9400
    protocol: TCP
"""
DCGM_EXPORTER_DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  labels:
    app: nvidia-dcgm-exporter
  name: nvidia-dcgm-exporter
  namespace: "FILLED BY THE OPERATOR"
spec:
  selector:
    matchLabels:
      app: nvidia-dcgm-exporter
  template:
    metadata:
      labels:
        app: nvidia-dcgm-exporter
    spec:
      containers:
      - name: nvidia-dcgm-exporter
        env:
        - name: DCGM_EXPORTER_LISTEN
          value: ":9400"
        ports:
        - name: "metrics"
          containerPort: 9400
"""
DCGM_EXPORTER_MONITOR = """
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: nvidia-dcgm-exporter
  namespace: "FILLED BY THE OPERATOR"
  labels:
    app: nvidia-dcgm-exporter
spec:
  endpoints:
  - port: gpu-metrics
    path: "/metrics"
  jobLabel: app
  namespaceSelector:
    matchNames:
    - "FILLED BY THE OPERATOR"
  selector:
    matchLabels:
     app: nvidia-dcgm-exporter
"""


@dataclass(frozen=True)
class Installed:
    """One object as installed: the release whose chart (or whose operator) creates it, and its namespace."""

    release: ChartRelease
    namespace: str
    obj: Manifest
    operand: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.obj['kind']}/{self.obj['metadata']['name']}"

    @property
    def origin(self) -> str:
        how = "its operator, from" if self.operand else "chart"
        return f"{self.key} ({how} {self.release.chart_name} {self.release.version}, release {self.release.name})"


@dataclass(frozen=True)
class Target:
    """What one endpoint of a ServiceMonitor scrapes: a Service port and the container port it reaches."""

    service: Installed
    port: Manifest
    workload: Installed
    container: Manifest
    container_port: Manifest


# ---------------------------------------------------------------------------------------- what is installed


def _operator_namespace(release: ChartRelease, objects: list[Installed]) -> str:
    """Where the GPU operator creates its operands: the namespace of its Deployment (OPERATOR_NAMESPACE)."""
    for item in objects:
        if item.obj["kind"] != "Deployment":
            continue
        for container in item.obj["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container.get("env", [])}
            if "OPERATOR_NAMESPACE" in env:
                assert env["OPERATOR_NAMESPACE"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                    "metadata.namespace", f"{item.origin}: OPERATOR_NAMESPACE is not the operator's own namespace"
                return item.namespace
    raise AssertionError(f"release {release.name}: no Deployment sets OPERATOR_NAMESPACE; where do the operands go?")


def _gpu_operator_operands(release: ChartRelease, objects: list[Installed]) -> list[Installed]:
    assert release.version == GPU_OPERATOR_ASSETS_VERSION, (
        f"gpu-operator {release.version}: the DCGM exporter assets here are {GPU_OPERATOR_ASSETS_VERSION}'s; "
        "update them from the new tag's assets/state-dcgm-exporter")
    (policy,) = [i.obj for i in objects if i.obj["kind"] == "ClusterPolicy"]
    exporter = policy["spec"].get("dcgmExporter") or {}
    if not exporter.get("enabled", True):
        return []
    overrides = [e["name"] for e in exporter.get("env") or [] if e.get("name") == "DCGM_EXPORTER_LISTEN"]
    assert not overrides and not exporter.get("args"), \
        "the ClusterPolicy changes the DCGM exporter's listen address (env DCGM_EXPORTER_LISTEN or args): update the assets"
    namespace = _operator_namespace(release, objects)
    out = []
    for text in (DCGM_EXPORTER_SERVICE, DCGM_EXPORTER_DAEMONSET):
        obj = yaml.safe_load(text)
        obj["metadata"]["namespace"] = namespace
        out.append(Installed(release, namespace, obj, operand=True))
    return out


# Per chart name: the objects its operator creates from what the chart renders (as the operator would, in its namespace).
OPERANDS: dict[str, Callable[[ChartRelease, list[Installed]], list[Installed]]] = {
    "gpu-operator": _gpu_operator_operands,
}

_installed: dict[str, list[Installed]] = {}


def installed(renderers: Renderers, stack_name: str) -> list[Installed]:
    """Every object the stack's installed releases create (charts with Trainyard's values, and their operands)."""
    if stack_name not in _installed:
        out: list[Installed] = []
        for release in rendered(stack_name).releases:
            if release.external:
                continue
            chart = renderers(stack_name).render(release)
            objects = [Installed(release, o["metadata"].get("namespace") or release.namespace, o) for o in chart.objects]
            out += objects
            if release.chart_name in OPERANDS:
                out += OPERANDS[release.chart_name](release, objects)
        _installed[stack_name] = out
    return _installed[stack_name]


# ------------------------------------------------------------------------ prometheus-operator's discovery


def labels_match(selector: Manifest, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector against a label map, as prometheus-operator turns it into keep/drop relabelings."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        ok = {"In": present and labels.get(key) in values, "NotIn": not (present and labels.get(key) in values),
              "Exists": present, "DoesNotExist": not present}.get(operator)
        if ok is None:
            raise AssertionError(f"matchExpressions operator {operator!r} is not one of In, NotIn, Exists, DoesNotExist")
        if not ok:
            return False
    return True


def monitored_namespaces(monitor: Manifest) -> set[str] | None:
    """The namespaces a ServiceMonitor discovers in (None: every namespace)."""
    selector = monitor["spec"].get("namespaceSelector") or {}
    if selector.get("any"):
        return None
    return set(selector.get("matchNames") or [monitor["metadata"]["namespace"]])


def selected_services(monitor: Manifest, objects: list[Installed]) -> list[Installed]:
    namespaces = monitored_namespaces(monitor)
    return [i for i in objects if i.obj["kind"] == "Service" and (namespaces is None or i.namespace in namespaces)
            and labels_match(monitor["spec"].get("selector") or {}, i.obj["metadata"].get("labels") or {})]


def backends(service: Installed, port: Manifest, objects: list[Installed]) -> Iterator[tuple[Installed, Manifest, Manifest]]:
    """(workload, container, container port) the Service port reaches: pods it selects declaring its targetPort."""
    selector = service.obj["spec"].get("selector") or {}
    target = port.get("targetPort", port["port"])
    for item in objects:
        if item.obj["kind"] not in WORKLOAD_KINDS or item.namespace != service.namespace or not selector:
            continue
        template = item.obj["spec"]["template"]
        pod_labels = template["metadata"].get("labels") or {}
        if any(pod_labels.get(k) != v for k, v in selector.items()):
            continue
        for container in template["spec"]["containers"]:
            for container_port in container.get("ports") or []:
                key = container_port.get("name") if isinstance(target, str) else container_port["containerPort"]
                if key == target:
                    yield item, container, container_port


def scraped(monitor: Manifest, endpoint: Manifest, objects: list[Installed]) -> list[Target]:
    """What the endpoint scrapes: ``port`` by Service port name, else ``targetPort`` by container port, else every port."""
    out = []
    for service in selected_services(monitor, objects):
        for port in service.obj["spec"].get("ports") or []:
            if "port" in endpoint and port.get("name") != endpoint["port"]:
                continue
            for workload, container, container_port in backends(service, port, objects):
                wanted = endpoint.get("targetPort") if "port" not in endpoint else None
                if wanted is not None and wanted not in (container_port.get("name"), container_port["containerPort"]):
                    continue
                out.append(Target(service, port, workload, container, container_port))
    return out


def diagnose(monitor: Manifest, endpoint: Manifest, objects: list[Installed]) -> str:
    """Why an endpoint scrapes nothing, naming the installed Services it could have meant."""
    name, namespaces = object_id(monitor), monitored_namespaces(monitor)
    services = selected_services(monitor, objects)
    if not services:
        near = {i.origin: i.obj["metadata"].get("labels") for i in objects if i.obj["kind"] == "Service"
                and (namespaces is None or i.namespace in namespaces)}
        return (f"{name} selects no installed Service: selector {monitor['spec'].get('selector')} in namespaces "
                f"{sorted(namespaces) if namespaces is not None else 'any'}; the Services there and their labels: {near}")
    ports = {s.origin: [p.get("name") for p in s.obj["spec"].get("ports") or []] for s in services}
    if "port" in endpoint and not any(endpoint["port"] in names for names in ports.values()):
        return f"{name} selects {sorted(ports)}, none with a port named {endpoint['port']!r}; their Service ports: {ports}"
    want = f"port {endpoint['port']!r}" if "port" in endpoint else f"targetPort {endpoint.get('targetPort')!r}"
    return (f"{name} selects {sorted(ports)} but its endpoint's {want} reaches no container port of the pods they "
            f"select; their Service ports: {ports}")


# --------------------------------------------------------------------- where the chart says metrics are served


def stated_metrics_server(target: Target, objects: list[Installed]) -> tuple[int | None, bool | None]:
    """The port (and TLS) the chart configures the container's metrics server on; None where it says nothing.

    Read from the manager configuration a mounted ConfigMap holds (controller-runtime ``metrics.bindAddress`` and
    ``metrics.secureServing``) or the DCGM exporter's ``DCGM_EXPORTER_LISTEN``.
    """
    env = {e["name"]: e.get("value") for e in target.container.get("env") or []}
    if isinstance(env.get("DCGM_EXPORTER_LISTEN"), str):
        return int(env["DCGM_EXPORTER_LISTEN"].rsplit(":", 1)[-1]), None
    pod = target.workload.obj["spec"]["template"]["spec"]
    mounted = {v["configMap"]["name"] for v in pod.get("volumes") or [] if "configMap" in v}
    for item in objects:
        if item.obj["kind"] != "ConfigMap" or item.namespace != target.workload.namespace or \
                item.obj["metadata"]["name"] not in mounted:
            continue
        for text in (item.obj.get("data") or {}).values():
            try:
                config = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            metrics = config.get("metrics") if isinstance(config, dict) else None
            if isinstance(metrics, dict) and isinstance(metrics.get("bindAddress"), str):
                secure = metrics.get("secureServing")
                return int(metrics["bindAddress"].rsplit(":", 1)[-1]), secure if isinstance(secure, bool) else None
    return None, None


def _chart_monitor(switch: dict[str, Any]) -> Callable[[Renderers, str, Target], list[Installed]]:
    """Upstream's own ServiceMonitors: the chart rendered with ``switch`` on top of Trainyard's values."""

    def render(renderers: Renderers, stack_name: str, target: Target) -> list[Installed]:
        release = target.service.release
        renderer = renderers(stack_name)
        values = charts.merge_values(copy.deepcopy(release.values), switch)
        switched = [Installed(release, o["metadata"].get("namespace") or release.namespace, o)
                    for o in renderer.render(release, values).objects]
        # The switch must not change the Services: upstream's monitor has to be about the Service Trainyard scrapes.
        services = {i.key: i.obj for i in switched if i.obj["kind"] == "Service"}
        assert services == {i.key: i.obj for i in installed(renderers, stack_name)
                            if i.obj["kind"] == "Service" and i.release == release and not i.operand}, \
            f"{release.chart_name}: switching on its own ServiceMonitor ({switch}) changes its Services"
        return [i for i in switched if i.obj["kind"] == "ServiceMonitor"]

    return render


def _gpu_operator_monitor(renderers: Renderers, stack_name: str, target: Target) -> list[Installed]:
    monitor = yaml.safe_load(DCGM_EXPORTER_MONITOR)
    monitor["metadata"]["namespace"] = target.service.namespace
    monitor["spec"]["namespaceSelector"]["matchNames"] = [target.service.namespace]
    return [Installed(target.service.release, target.service.namespace, monitor, operand=True)]


# Per chart name: upstream's own ServiceMonitors for the chart's Services (Trainyard leaves them off and declares its
# own). Ref: kueue 0.19.2 templates/prometheus/monitor.yaml (enablePrometheus); jobset 0.12.0
# templates/prometheus/monitor.yaml (prometheus.enable); gpu-operator v26.7.0 assets/state-dcgm-exporter/
# 0500_service_monitor.yaml. Trainer 2.3.0 ships none.
UPSTREAM_MONITORS: dict[str, Callable[[Renderers, str, Target], list[Installed]]] = {
    "kueue": _chart_monitor({"enablePrometheus": True}),
    "jobset": _chart_monitor({"prometheus": {"enable": True}}),
    "gpu-operator": _gpu_operator_monitor,
}


# ------------------------------------------------------------------------------------------------ the cases


def monitoring_stacks() -> list[str]:
    return [name for name in STACKS if stack(name).config.monitoring.enabled]


def _cases() -> list[Any]:
    if CRDS_DIR is None:
        return [pytest.param("-", "-", marks=pytest.mark.skip(reason="upstream CRD mirror not found: set TRAINYARD_CRDS_DIR"))]
    return [pytest.param(name, o["metadata"]["name"], id=f"{name}-{o['metadata']['name']}")
            for name in monitoring_stacks() for o in rendered(name).objects if o["kind"] == "ServiceMonitor"]


CASES = _cases()


def monitor_of(stack_name: str, name: str) -> Manifest:
    (monitor,) = [o for o in rendered(stack_name).objects if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == name]
    return monitor


def the_target(renderers: Renderers, stack_name: str, monitor: Manifest, endpoint: Manifest) -> Target:
    objects = installed(renderers, stack_name)
    found = scraped(monitor, endpoint, objects)
    assert found, diagnose(monitor, endpoint, objects)
    assert len(found) == 1, (f"{object_id(monitor)} endpoint {endpoint.get('port') or endpoint.get('targetPort')} "
                             f"scrapes {len(found)} ports, want one: "
                             f"{[(t.service.origin, t.port.get('name'), t.workload.key) for t in found]}")
    return found[0]


def test_the_stacks_with_monitoring_declare_service_monitors_and_no_other_monitor_kind() -> None:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR")
    assert monitoring_stacks(), "no stack in stacks/ turns monitoring on: nothing here would be checked"
    for name in monitoring_stacks():
        kinds = [o["kind"] for o in rendered(name).objects if o.get("apiVersion", "").startswith("monitoring.coreos.com/")]
        assert "ServiceMonitor" in kinds, name
        # A PodMonitor or Probe would need its own discovery rules here.
        assert set(kinds) <= {"ServiceMonitor", "PrometheusRule"}, (name, sorted(set(kinds)))


@pytest.mark.parametrize(("stack_name", "monitor_name"), CASES)
def test_the_monitor_selects_an_installed_service_port_that_reaches_a_container_port(
    renderers: Renderers, stack_name: str, monitor_name: str
) -> None:
    monitor = monitor_of(stack_name, monitor_name)
    assert monitor["spec"]["endpoints"], f"{object_id(monitor)} has no endpoints"
    for endpoint in monitor["spec"]["endpoints"]:
        assert "port" in endpoint or "targetPort" in endpoint, f"{object_id(monitor)}: an endpoint names no port"
        target = the_target(renderers, stack_name, monitor, endpoint)
        assert target.service.namespace in (monitored_namespaces(monitor) or {target.service.namespace})
        print(f"\n{stack_name} {object_id(monitor)} -> {target.service.origin} port {target.port.get('name')} -> "
              f"{target.workload.key} {target.container['name']}:{target.container_port['containerPort']}")


@pytest.mark.parametrize(("stack_name", "monitor_name"), CASES)
def test_the_scraped_port_is_the_metrics_server_with_upstreams_path_and_scheme(
    renderers: Renderers, stack_name: str, monitor_name: str
) -> None:
    monitor = monitor_of(stack_name, monitor_name)
    objects = installed(renderers, stack_name)
    for endpoint in monitor["spec"]["endpoints"]:
        target = the_target(renderers, stack_name, monitor, endpoint)
        where = f"{object_id(monitor)} -> {target.workload.key} container {target.container['name']}"
        port, secure = stated_metrics_server(target, objects)
        number = target.container_port["containerPort"]
        assert port is not None or target.container_port.get("name") == "metrics", \
            f"{where}: the chart does not say that port {number} serves metrics"
        assert port in (None, number), f"{where}: scrapes port {number}, the metrics server listens on {port}"
        scheme = endpoint.get("scheme", "http")
        if secure is not None:
            assert scheme == ("https" if secure else "http"), f"{where}: metrics.secureServing is {secure}, scheme {scheme}"
        own = UPSTREAM_MONITORS.get(target.service.release.chart_name)
        if own is None:
            assert port is not None, f"{where}: no upstream ServiceMonitor and no configured metrics server to check the path by"
            assert endpoint.get("path", "/metrics") == CONTROLLER_RUNTIME_METRICS_PATH, where
            continue
        monitors = own(renderers, stack_name, target)
        upstream = [e for m in monitors for e in m.obj["spec"]["endpoints"]
                    if target in scraped(m.obj, e, objects)]
        assert upstream, f"{where}: upstream's own ServiceMonitor ({[m.key for m in monitors]}) does not scrape this port"
        for theirs in upstream:
            assert theirs.get("path", "/metrics") == endpoint.get("path", "/metrics"), (where, theirs)
            assert theirs.get("scheme", "http") == scheme, (where, theirs)


# ----------------------------------------------------------------------------------- the checks can fail


def test_a_selector_label_the_service_lacks_selects_nothing_and_says_what_is_there(renderers: Renderers) -> None:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR")
    objects = installed(renderers, "prod")
    monitor = copy.deepcopy(monitor_of("prod", "trainyard-kueue"))
    endpoint = monitor["spec"]["endpoints"][0]
    assert len(scraped(monitor, endpoint, objects)) == 1
    monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "metrics"
    assert scraped(monitor, endpoint, objects) == []
    assert "kueue-controller-manager-metrics-service" in diagnose(monitor, endpoint, objects)


def test_a_too_broad_selector_a_wrong_namespace_or_port_and_match_expressions_are_caught(renderers: Renderers) -> None:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR")
    objects = installed(renderers, "prod")
    base = monitor_of("prod", "trainyard-kueue")
    endpoint = base["spec"]["endpoints"][0]

    broad = copy.deepcopy(base)  # the visibility server's Service also has a port named https
    del broad["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
    assert len(scraped(broad, endpoint, objects)) == 2
    broad["spec"]["selector"]["matchExpressions"] = [
        {"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["visibility-service"]}]
    assert len(scraped(broad, endpoint, objects)) == 1
    broad["spec"]["selector"]["matchExpressions"] = [{"key": "app.kubernetes.io/component", "operator": "DoesNotExist"}]
    assert scraped(broad, endpoint, objects) == []

    elsewhere = copy.deepcopy(base)
    elsewhere["spec"]["namespaceSelector"] = {"matchNames": ["jobset-system"]}
    assert scraped(elsewhere, endpoint, objects) == []
    elsewhere["spec"]["namespaceSelector"] = {"any": True}
    assert len(scraped(elsewhere, endpoint, objects)) == 1

    assert scraped(base, {**endpoint, "port": "metrics"}, objects) == []  # a container port name, not a Service port's
    by_target = {k: v for k, v in endpoint.items() if k != "port"}
    assert len(scraped(base, {**by_target, "targetPort": "metrics"}, objects)) == 1
    assert len(scraped(base, {**by_target, "targetPort": 8443}, objects)) == 1
    assert scraped(base, {**by_target, "targetPort": 9443}, objects) == []  # the webhook's: not behind this Service


def test_a_service_port_whose_target_port_no_container_declares_reaches_nothing(renderers: Renderers) -> None:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR")
    objects = installed(renderers, "prod")
    monitor = monitor_of("prod", "trainyard-trainer")
    endpoint = monitor["spec"]["endpoints"][0]
    broken = []
    for item in objects:
        if item.obj["kind"] == "Service" and item.obj["metadata"]["name"].endswith("trainer-controller-manager"):
            obj = copy.deepcopy(item.obj)
            for port in obj["spec"]["ports"]:
                if port["name"] == endpoint["port"]:
                    port["targetPort"] = "metricz"
            broken.append(Installed(item.release, item.namespace, obj))
        else:
            broken.append(item)
    assert len(scraped(monitor, endpoint, objects)) == 1
    assert scraped(monitor, endpoint, broken) == []
    assert "reaches no container port" in diagnose(monitor, endpoint, broken)
