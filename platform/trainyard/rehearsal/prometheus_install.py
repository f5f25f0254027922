"""The site's Prometheus, installed in the rehearsal cluster: prometheus-operator from upstream's bundle, one Prometheus.

Trainyard does not run Prometheus (docs/architecture.md, "The rehearsal runs a Prometheus; a site brings its own"):
its monitoring concern declares ServiceMonitors, a PrometheusRule and scrape RBAC for the prometheus-operator
Prometheus a site runs in ``monitoring.prometheus.namespace`` as ``monitoring.prometheus.service_account``. The
rehearsal with real nodes is the site here, so where the stack turns monitoring on (``wanted``) it installs what a
site would, after ``pulumi up`` (``Rehearsal.install_monitoring``), and nothing of it is the stack's:

- **the operator** from ``bundle.yaml`` of github.com/prometheus-operator/prometheus-operator@v0.93.0
  (``tools/build.sh prometheus-operator`` copies it to ``share/``): its ClusterRole and binding, ServiceAccount,
  headless Service and Deployment in ``default``, changed only where a site must: the Deployment's image and its
  ``--prometheus-config-reloader`` argument name the factory's images under the stack's mirror by digest
  (``prometheus_images.py``), and its pod gets the stack's ``system_pods`` placement beside upstream's
  ``kubernetes.io/os: linux`` selector, as every platform pod; and **no CPU is requested** (below): the operator's
  container requests ``cpu: "0"`` (upstream: 100m; its 200m limit stays), and it runs the config reloaders with
  ``--config-reloader-cpu-request=0 --config-reloader-cpu-limit=0`` (its own flags: "0" sets none; both, since a limit
  without a request makes the API server request the limit);
- **the CRDs the stack does not declare** (Prometheus, Alertmanager, ThanosRuler, Probe, ScrapeConfig, PrometheusAgent,
  AlertmanagerConfig): the bundle's ServiceMonitor, PodMonitor and PrometheusRule CRDs are the stack's own (applied
  before ``pulumi up`` and by it, under their field managers), so they are not applied a second time under another
  manager; instead each must equal the stack's document field for field, or the install stops (a stack with
  ``monitoring.declare_crds: false`` gets all ten from the bundle);
- **one Prometheus** ``k8s`` (kube-prometheus's name; its ServiceAccount ``prometheus-k8s`` is the stack's default)
  in ``monitoring.prometheus.namespace``, running as ``monitoring.prometheus.service_account`` (the account the stack's
  ``trainyard-metrics-reader`` and ``trainyard-prometheus-discovery`` bindings name), selecting ServiceMonitors,
  PodMonitors and PrometheusRules by ``monitoring.prometheus.match_labels`` in every namespace (``{}``: what
  docs/components/monitoring.md asks of a site's Prometheus), its image the factory's Prometheus by digest, placed
  on the real node, requesting memory only; the namespace and the ServiceAccount, which a site has and the stack does
  not declare.

Why no CPU requests: the rehearsal's one real node is this machine, 2 CPUs allocatable, and the platform's charts
already request all of it (measured: Kueue, JobSet and SeaweedFS 500m each, KServe 200m, CoreDNS 2 x 100m, the operator's
upstream 100m: 2000m of 2000m), so upstream's requests left the Prometheus pod Pending ("1 Insufficient cpu"). A site
sizes its Prometheus for its nodes; on the rehearsal's node the two compete for CPU as best effort, which changes
nothing the node test proves.

Everything is applied by server-side apply under ``FIELD_MANAGER`` and labelled ``trainyard.dev/rehearsal:
monitoring``; the cluster's ``down`` removes it with the cluster. The images are pinned by the digest the factory
built and the loopback registry reported when they were pushed (they are not in the stack's lock: the stack does not
run them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from trainyard import yamlio
from trainyard.config.model import PlatformConfig
from trainyard.manifests.placement import pod_placement
from trainyard.rehearsal import site_manifests
from trainyard.rehearsal.settings import ClusterError

BUNDLE = "bundle.yaml"
FIELD_MANAGER = site_manifests.FIELD_MANAGER
PURPOSE = "monitoring"
LABEL = {site_manifests.LABEL_KEY: PURPOSE}
OPERATOR = "prometheus-operator"  # bundle.yaml's Deployment, ServiceAccount, Service and ClusterRole(Binding)
PROMETHEUS = "k8s"
RELOADER_FLAG = "--prometheus-config-reloader="
# The rehearsal node's CPU is all requested by the charts ("Why no CPU requests" above): the site's monitoring asks none.
NO_RELOADER_CPU = ("--config-reloader-cpu-request=0", "--config-reloader-cpu-limit=0")
Manifest = dict[str, Any]


# YAML 1.1 reads a bare ``=`` (an enum value of AlertmanagerConfig's ``matchType``) as the ``value`` type, which
# PyYAML's safe loader refuses; Kubernetes' YAML (sigs.k8s.io/yaml, YAML 1.2) reads it as the string "=".
_BundleLoader: type[yaml.SafeLoader] = type("_BundleLoader", (yamlio.SafeLoader,), {})


def _as_string(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_BundleLoader.add_constructor("tag:yaml.org,2002:value", _as_string)


def wanted(config: PlatformConfig, real_nodes: bool) -> bool:
    """Only a rehearsal with real nodes, of a stack that declares monitoring, runs the site's Prometheus."""
    return real_nodes and config.monitoring.enabled


def bundle_path(tools_dir: Path) -> Path:
    return site_manifests.share_path(tools_dir, OPERATOR, BUNDLE)


def upstream_objects(tools_dir: Path) -> list[Manifest]:
    """Upstream's bundle, parsed (refused with the command that provides it where absent)."""
    return site_manifests.documents(tools_dir, OPERATOR, BUNDLE, loader=_BundleLoader)


def crds_to_apply(objects: Sequence[Manifest], declared: Mapping[str, Manifest]) -> list[Manifest]:
    """The bundle's CRDs the stack does not declare; a CRD both declare must be the same document."""
    out = []
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        name = crd["metadata"]["name"]
        if name not in declared:
            out.append(crd)
        elif declared[name] != crd:
            raise ClusterError(f"CRD {name}: the stack declares another document than the operator's bundle.yaml "
                               f"(operator.prometheus.io/version {_version(declared[name])!r} vs {_version(crd)!r}): "
                               "versions.prometheus_operator must be the operator built (tools/build.sh prometheus-operator)")
    return out


def _version(crd: Manifest) -> object:
    return crd["metadata"].get("annotations", {}).get("operator.prometheus.io/version")


def _labelled(obj: Manifest) -> Manifest:
    return site_manifests.labelled(obj, PURPOSE)


def operator_objects(config: PlatformConfig, objects: Sequence[Manifest], operator_image: str,
                     reloader_image: str) -> list[Manifest]:
    """The bundle's objects but its CRDs, with the mirror's images and the stack's placement."""
    out = []
    for original in objects:
        if original["kind"] == "CustomResourceDefinition":
            continue
        obj = _labelled(copy.deepcopy(original))
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == OPERATOR:
            pod = obj["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            container["image"] = operator_image
            flags = [a for a in container["args"] if a.startswith(RELOADER_FLAG)]
            if len(flags) != 1:
                raise ClusterError(f"{BUNDLE}: the operator's Deployment has {len(flags)} {RELOADER_FLAG} arguments, "
                                   "expected one")
            container["args"] = [*(RELOADER_FLAG + reloader_image if a in flags else a for a in container["args"]),
                                 *NO_RELOADER_CPU]
            requests = container.setdefault("resources", {}).setdefault("requests", {})
            requests["cpu"] = "0"
            site_manifests.place(pod, config)
        out.append(obj)
    if not any(o["kind"] == "Deployment" and o["metadata"]["name"] == OPERATOR for o in out):
        raise ClusterError(f"{BUNDLE}: no Deployment {OPERATOR}")
    return out


def operator_namespace(objects: Sequence[Manifest]) -> str:
    return str(next(o for o in objects if o["kind"] == "Deployment")["metadata"]["namespace"])


def prometheus_objects(config: PlatformConfig, prometheus_image: str) -> list[Manifest]:
    """The site's namespace, ServiceAccount and Prometheus, as docs/components/monitoring.md asks a site to set them."""
    site = config.monitoring.prometheus
    selector: Manifest = {"matchLabels": dict(site.match_labels)} if site.match_labels else {}
    spec: Manifest = {
        "image": prometheus_image,
        "replicas": 1,
        "serviceAccountName": site.service_account,
        "serviceMonitorSelector": selector, "serviceMonitorNamespaceSelector": {},
        "podMonitorSelector": copy.deepcopy(selector), "podMonitorNamespaceSelector": {},
        "ruleSelector": copy.deepcopy(selector), "ruleNamespaceSelector": {},
        "scrapeInterval": config.monitoring.scrape_interval,
        "evaluationInterval": config.monitoring.scrape_interval,
        # The image's user (busybox's nobody); fsGroup makes the TSDB volume writable for it.
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "fsGroup": 65534,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "resources": {"requests": {"memory": "200Mi"}},  # no CPU: see the module docstring
        **pod_placement(config),
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": site.namespace, "labels": dict(LABEL)}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": site.service_account, "namespace": site.namespace, "labels": dict(LABEL)}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": PROMETHEUS, "namespace": site.namespace, "labels": dict(LABEL)}, "spec": spec},
    ]


def condition(obj: Manifest, kind: str) -> Manifest | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == kind), None)


def prometheus_problems(prometheus: Manifest | None) -> list[str]:
    """Why the Prometheus is not Available (empty once its operator says it is)."""
    if prometheus is None:
        return ["Prometheus not found"]
    available = condition(prometheus, "Available")
    if available is None or available.get("status") != "True":
        said = f"{available.get('reason')}: {available.get('message')}" if available else "no Available condition yet"
        return [f"Prometheus {prometheus['metadata']['namespace']}/{prometheus['metadata']['name']}: {said}"]
    return []
