"""Where the platform's controller pods run, and what they reserve there: ``system_pods`` as each chart's own values.

Each chart names a pod's ``nodeSelector`` and ``tolerations`` under its own keys; this table says which
keys, so that one stack setting places every controller. Only the charts listed here are placed; a chart
that is not listed keeps the scheduler's choice (docs/stack-config.md says which are covered).

Refs (the chart values of the pinned versions, ../shared/charts):
- kueue 0.19.2 ``values.yaml`` ``controllerManager.nodeSelector``/``tolerations`` (templates/manager/manager.yaml)
- jobset 0.12.0 ``values.yaml`` ``controller.nodeSelector``/``tolerations``
- kubeflow-trainer 2.3.0 ``values.yaml`` ``manager.nodeSelector``/``tolerations``
- cert-manager v1.21.1 ``values.yaml`` ``global.nodeSelector`` (merged into every component's) and each
  component's ``tolerations`` (top level for the controller, ``webhook``, ``cainjector``, ``startupapicheck``)
- kserve-resources v0.20.0 ``values.yaml`` ``kserve.controller.nodeSelector``/``tolerations``
- cloudnative-pg 0.29.0 ``values.yaml`` ``nodeSelector``/``tolerations`` (templates/deployment.yaml); the PostgreSQL
  instances themselves through the Cluster's ``spec.affinity`` (``manifests/mlflow.py``)
- mlflow 1.11.5 (community chart) ``values.yaml`` ``nodeSelector``/``tolerations`` (templates/deployment.yaml:695-706:
  the server's pod)
- seaweedfs 4.44.0 ``values.yaml`` ``allInOne.nodeSelector``/``tolerations``: strings, which
  templates/all-in-one/all-in-one-deployment.yaml renders with ``tpl`` (so they are written here as YAML text)

Pods Trainyard declares itself (the object store's provisioning Job) take ``pod_placement``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from trainyard.config.model import PlatformConfig

# chart component -> (paths whose value is a nodeSelector map, paths whose value is a toleration list)
SELECTOR_PATHS: dict[str, tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]] = {
    "kueue": ((("controllerManager", "nodeSelector"),), (("controllerManager", "tolerations"),)),
    "jobset": ((("controller", "nodeSelector"),), (("controller", "tolerations"),)),
    "trainer": ((("manager", "nodeSelector"),), (("manager", "tolerations"),)),
    "cert-manager": ((("global", "nodeSelector"),),
                     (("tolerations",), ("webhook", "tolerations"), ("cainjector", "tolerations"),
                      ("startupapicheck", "tolerations"))),
    "kserve": ((("kserve", "controller", "nodeSelector"),), (("kserve", "controller", "tolerations"),)),
    "cnpg": ((("nodeSelector",),), (("tolerations",),)),
    "mlflow": ((("nodeSelector",),), (("tolerations",),)),
    "seaweedfs": ((("allInOne", "nodeSelector"),), (("allInOne", "tolerations"),)),
}
# chart component -> paths whose value is its controller containers' resources (``system_pods.resources``):
# kueue ``controllerManager.manager.resources`` (templates/manager/manager.yaml), jobset ``controller.resources``,
# kubeflow-trainer ``manager.resources``, cert-manager ``resources``/``webhook.resources``/``cainjector.resources``,
# kserve-resources ``kserve.controller.resources`` (files/kserve/deployment-patch.yaml), cloudnative-pg ``resources``,
# seaweedfs ``allInOne.resources`` (a map here: the all-in-one Deployment renders it with toYaml, not tpl).
RESOURCE_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "kueue": (("controllerManager", "manager", "resources"),),
    "jobset": (("controller", "resources"),),
    "trainer": (("manager", "resources"),),
    "cert-manager": (("resources",), ("webhook", "resources"), ("cainjector", "resources")),
    "kserve": (("kserve", "controller", "resources"),),
    "cnpg": (("resources",),),
    "seaweedfs": (("allInOne", "resources"),),
}
# Charts that take these values as a string and render it with `tpl`: the value is YAML text.
TEMPLATED = frozenset({"seaweedfs"})


def tolerations(config: PlatformConfig) -> list[dict[str, str]]:
    """The system pods' tolerations as a pod spec writes them (a taint without a value: any value)."""
    out = []
    for taint in config.system_pods.tolerations:
        toleration = {"key": taint.key, "operator": "Equal" if taint.value is not None else "Exists"}
        if taint.value is not None:
            toleration["value"] = taint.value
        out.append({**toleration, "effect": taint.effect})
    return out


def _put(values: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    node = values
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def chart_values(config: PlatformConfig, component: str) -> dict[str, Any]:
    """The values that place ``component``'s controller pods on the system nodes; empty where nothing is set
    (so a stack without ``system_pods`` renders exactly as before)."""
    selector_paths, toleration_paths = SELECTOR_PATHS.get(component, ((), ()))
    written: Callable[[object], object] = _yaml_text if component in TEMPLATED else (lambda value: value)
    values: dict[str, Any] = {}
    if config.system_pods.node_selector:
        for path in selector_paths:
            _put(values, path, written(dict(sorted(config.system_pods.node_selector.items()))))
    if config.system_pods.tolerations:
        for path in toleration_paths:
            _put(values, path, written(tolerations(config)))
    resources = next((r for name, r in config.system_pods.resources.items() if name == component), None)
    if resources is not None:
        figures = {kind: {name: str(value) for name, value in sorted(getattr(resources, kind).items())}
                   for kind in ("requests", "limits") if getattr(resources, kind)}
        for path in RESOURCE_PATHS[component]:
            _put(values, path, figures)
    return values


def _yaml_text(value: object) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False)


def pod_placement(config: PlatformConfig) -> dict[str, Any]:
    """``nodeSelector`` and ``tolerations`` of a platform pod Trainyard declares itself (empty where unset)."""
    placement: dict[str, Any] = {}
    if config.system_pods.node_selector:
        placement["nodeSelector"] = dict(sorted(config.system_pods.node_selector.items()))
    if config.system_pods.tolerations:
        placement["tolerations"] = tolerations(config)
    return placement


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def placed(config: PlatformConfig, component: str, values: dict[str, Any]) -> dict[str, Any]:
    """A chart's values with its controller pods placed on the system nodes (``values`` itself where unset)."""
    extra = chart_values(config, component)
    return _merge(values, extra) if extra else values
