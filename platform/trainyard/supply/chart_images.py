"""The images inside each chart release, as the chart renders them with the stack's values.

The truth is the chart's own output: ``helm template`` with the stack's values, every
container image of every pod-carrying object (``RENDERER``; the chart-truth module that
renders any ``ChartRelease`` plugs in here). Until that renderer is available, the images
of the charts Trainyard installs are derived from their templates by hand, per chart
version, each with the template line it follows and the values switch that would add
more (``TEMPLATE_IMAGES``). A chart in neither place is reported as *unknown*: the bill of
materials says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import Manifest

Method = Literal["rendered", "templates", "unknown"]
# Renders one release (``helm template`` with its values) into its manifests.
ChartRenderer = Callable[[ChartRelease], Sequence[Manifest]]
RENDERER: ChartRenderer | None = None


@dataclass(frozen=True)
class ChartImages:
    """The images one release pulls, and how that was established."""

    release: str
    images: tuple[str, ...]
    method: Method
    note: str = ""


def _get(values: Mapping[str, Any], *path: str) -> Any:
    node: Any = values
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _kueue_0_19(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/kueue templates/manager/manager.yaml:60 (repository:tag); kueueviz/*-deployment.yaml
    # render only with enableKueueViz (values.yaml default false).
    image = _get(values, "controllerManager", "manager", "image")
    out = [f"{image['repository']}:{image['tag']}"]
    if _get(values, "enableKueueViz"):
        return out, "enableKueueViz adds the kueueviz backend and frontend images (not derived here)"
    return out, "kueueviz off (enableKueueViz default false)"


def _jobset_0_12(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/jobset templates/controller/deployment.yaml:45 ("{{ .Values.image.repository }}:{{ .Values.image.tag }}").
    image = values["image"]
    return [f"{image['repository']}:{image['tag']}"], "one Deployment"


def _trainer_2_3(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/kubeflow-trainer templates/_helpers.tpl "trainer.image" (registry/repository:tag, no registry
    # part for docker.io). The runtimes installer Job (templates/runtimes/installer-job.yaml) renders only with
    # a built-in runtime enabled, the data cache only with dataCache.enabled (both off in values.yaml).
    image = values["image"]
    registry = image.get("registry") or "docker.io"
    ref = f"{image['repository']}:{image['tag']}" if registry == "docker.io" else \
        f"{registry}/{image['repository']}:{image['tag']}"
    notes, images = [], [ref]
    if _get(values, "runtimes", "defaultEnabled") is not False:
        notes.append("built-in runtimes may be on: their installer and runtime images are not derived here")
    if _get(values, "dataCache", "enabled"):
        # The LWS subchart (condition dataCache.enabled,...): lws templates/manager/deployment.yaml
        # ("{{ .Values.image.manager.repository }}:{{ .Values.image.manager.tag | default .Chart.AppVersion }}").
        manager = _get(values, "lws", "image", "manager") or {}
        images.append(f"{manager.get('repository')}:{manager.get('tag')}")
        notes.append("data cache on: the LWS subchart's controller; the data-cache image is the cache runtime's")
    return images, "; ".join(notes) or "built-in runtimes and data cache off"


def _kserve_resources_0_20(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: kserve-resources v0.20.0 files/kserve/deployment-patch.yaml:51 (kube-rbac-proxy:
    # "{{ .Values.kserve.controller.rbacProxyImage }}") and :61 (manager: "{{ .Values.kserve.controller.image }}:
    # {{ .Values.kserve.controller.tag | default .Values.kserve.version }}"), the one Deployment of
    # files/kserve/resources.yaml. The storage initializer, agent and router images are not pod images of
    # the chart: the controller injects them into InferenceService pods (ClusterStorageContainer,
    # inferenceservice-config). The local-model controller and node agent render only with
    # kserve.localmodel.enabled (values.yaml default false).
    kserve = values["kserve"]
    controller = kserve["controller"]
    out = [str(controller["rbacProxyImage"]), f"{controller['image']}:{controller.get('tag') or kserve['version']}"]
    if _get(values, "kserve", "localmodel", "enabled"):
        return out, "localmodel adds the local-model controller and node agent images (not derived here)"
    return out, "localmodel off (kserve.localmodel.enabled default false)"


def _cert_manager_1_21(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: cert-manager v1.21.1 templates/_helpers.tpl "cert-manager.image": <imageRegistry>/<imageNamespace>/<image.name>
    # unless image.repository is set, then ":<tag>@<digest>", ":<tag>", "@<digest>" or ":<appVersion>" as
    # image.tag and image.digest are set; templates/deployment.yaml:89, webhook-deployment.yaml:84,
    # cainjector-deployment.yaml:79 (if cainjector.enabled, default true). startupapicheck-job.yaml is a helm
    # hook: helm.v4.Chart renders with hooks off. The acmesolver image is an argument of the controller
    # (deployment.yaml:117), pulled only for ACME HTTP-01 challenges.
    registry = values.get("imageRegistry") or "quay.io"
    namespace = values.get("imageNamespace") or "jetstack"
    app_version = "v1.21.1"  # Chart.yaml appVersion
    parts = [(None, "cert-manager-controller"), ("webhook", "cert-manager-webhook")]
    if _get(values, "cainjector", "enabled") is not False:
        parts.append(("cainjector", "cert-manager-cainjector"))
    images: list[str] = []
    overridden = False
    for key, name in parts:
        image = (values.get("image") if key is None else _get(values, key, "image")) or {}
        overridden = overridden or bool(image.get("repository") or image.get("registry"))
        tag, digest = image.get("tag"), image.get("digest")
        suffix = f":{tag}@{digest}" if tag and digest else f":{tag}" if tag else f"@{digest}" if digest else \
            f":{app_version}"
        images.append(f"{registry}/{namespace}/{name}{suffix}")
    if overridden:
        return images, "an image.repository or image.registry override is set: the images above may not be the ones rendered"
    return images, "acmesolver is an argument (HTTP-01 only), not a pod image"


def _seaweedfs_4_44(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/seaweedfs templates/shared/_helpers.tpl "seaweedfs.image": <global.imageRegistry>/
    # <global.seaweedfs.image.name>:<image.tag>; all-in-one is the only workload Trainyard enables (COSI off).
    registry = _get(values, "global", "imageRegistry") or ""
    name = _get(values, "global", "seaweedfs", "image", "name") or "chrislusf/seaweedfs"
    tag = _get(values, "image", "tag") or "4.44"
    return [f"{registry}/{name}:{tag}" if registry else f"{name}:{tag}"], "all-in-one only; COSI driver off"


def _minio_operator_7_1(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/operator templates/operator-deployment.yaml ("{{ .Values.operator.image.repository }}:{{ .tag }}").
    image = _get(values, "operator", "image")
    return [f"{image['repository']}:{image['tag']}"], \
        "one Deployment; the Tenant pods' sidecar (operator.sidecarImage) is an operand (supply/operands.py)"


def _minio_tenant_7_1(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/tenant templates/tenant.yaml spec.image ("{{ .image.repository }}:{{ .image.digest | default .image.tag }}");
    # the operator runs it in the pool's StatefulSet. KES is off (no tenant.kes).
    image = _get(values, "tenant", "image")
    return [f"{image['repository']}:{image['tag']}"], "the Tenant's server image; KES off"


def _cloudnative_pg_0_29(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/cloudnative-pg templates/deployment.yaml ("{{ .Values.image.repository }}:{{ .Values.image.tag | default
    # .Chart.AppVersion }}"). The PostgreSQL operand image is not the chart's: the Cluster names it (imageName).
    image = values["image"]
    return [f"{image['repository']}:{image['tag']}"], "operator only; the operand image is in Cluster.spec.imageName"


def _mlflow_1_11(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/mlflow templates/deployment.yaml: the server (mlflow.containerImage, repository:tag[@digest]), the
    # dbchecker, mlflow-db-migration and ini-file-initializer init containers (initImages.*), and extraContainers.
    # The server's image.digest, where set, follows the tag (templates/_helpers.tpl "mlflow.containerImage").
    server = values["image"]
    images = {f"{server['repository']}:{server['tag']}" + (f"@{server['digest']}" if server.get("digest") else "")}
    images |= {f"{i['repository']}:{i['tag']}" for i in (_get(values, "initImages") or {}).values()}
    images |= {str(c["image"]) for c in values.get("extraContainers") or []}
    return sorted(images), "oauth2Proxy off (oauth2-proxy image not used)"


def _gpu_operator_26_7(values: Mapping[str, Any]) -> tuple[list[str], str]:
    # Ref: charts/gpu-operator templates/operator.yaml ("{{ .Values.operator.repository }}/{{ .Values.operator.image }}:
    # {{ .Values.operator.version }}") and the node-feature-discovery subchart (image.repository:image.tag), which
    # renders with nfd.enabled (values.yaml default true). The operands (driver, toolkit, device plugin, DCGM,
    # mig-manager) are not pods of the chart: the operator starts them from ClusterPolicy/NVIDIADriver fields.
    operator = values["operator"]
    images = [f"{operator['repository']}/{operator['image']}:{operator['version']}"]
    if _get(values, "nfd", "enabled") is not False:
        nfd = _get(values, "node-feature-discovery", "image") or {}
        images.append(f"{nfd['repository']}:{nfd['tag']}")
    return images, "operands come from the ClusterPolicy/NVIDIADriver image fields (supply/operands.py)"


# (chart name, chart version) -> images for the given values, and a note on what the values switch off.
TEMPLATE_IMAGES: dict[tuple[str, str], Callable[[Mapping[str, Any]], tuple[list[str], str]]] = {
    ("kueue", "0.19.2"): _kueue_0_19,
    ("jobset", "0.12.0"): _jobset_0_12,
    ("kubeflow-trainer", "2.3.0"): _trainer_2_3,
    ("kserve-resources", "v0.20.0"): _kserve_resources_0_20,
    ("cert-manager", "v1.21.1"): _cert_manager_1_21,
    ("seaweedfs", "4.44.0"): _seaweedfs_4_44,
    ("operator", "7.1.1"): _minio_operator_7_1,
    ("tenant", "7.1.1"): _minio_tenant_7_1,
    ("cloudnative-pg", "0.29.0"): _cloudnative_pg_0_29,
    ("mlflow", "1.11.5"): _mlflow_1_11,
    ("gpu-operator", "v26.7.0"): _gpu_operator_26_7,  # the chart version carries the "v" (Chart.yaml)
}


# Custom resources that name the image their operator runs in a field of their own.
# Ref: minio/operator pkg/apis/minio.min.io/v2/types.go TenantSpec.Image (the pools' server image).
CR_IMAGE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {("minio.min.io/v2", "Tenant"): ("spec", "image")}


def rendered_images(objects: Sequence[Manifest]) -> list[str]:
    """Every container image of every pod-carrying object, and the image a custom resource names for
    its operator to run (the MinIO Tenant's ``spec.image``; ``CR_IMAGE_FIELDS``)."""
    from trainyard.policy.pods import containers

    images = {str(c.container["image"]) for obj in objects for c in containers(obj)
              if isinstance(c.container.get("image"), str)}
    for obj in objects:
        path = CR_IMAGE_FIELDS.get((obj.get("apiVersion"), obj.get("kind")))  # type: ignore[arg-type]
        value: Any = obj
        for key in path or ():
            value = value.get(key) if isinstance(value, dict) else None
        if path and isinstance(value, str):
            images.add(value)
    return sorted(images)


def chart_images(release: ChartRelease, renderer: ChartRenderer | None = None) -> ChartImages:
    """The images ``release`` pulls: rendered where a renderer is available, else from the template table."""
    render = renderer or RENDERER
    if render is not None:
        return ChartImages(release.name, tuple(rendered_images(render(release))), "rendered", "helm template")
    derive = TEMPLATE_IMAGES.get((release.chart_name, release.version))
    if derive is None:
        return ChartImages(release.name, (), "unknown",
                           f"{release.chart_name} {release.version}: images unknown until the chart is rendered")
    images, note = derive(release.values)
    return ChartImages(release.name, tuple(sorted(images)), "templates", note)
