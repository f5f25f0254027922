"""Operand images: what an operator pulls for the objects it manages, read from the rendered objects and values.

A controller's own pods are in its chart; the pods it starts are not. The GPU operator runs the
driver, toolkit, device plugin, DCGM exporter, MIG manager and the rest from the image triples of
its ClusterPolicy (the chart's values) and of each NVIDIADriver; CloudNativePG runs PostgreSQL from
``Cluster.spec.imageName``; the MinIO operator adds its sidecar to every Tenant pod; KServe's
controller puts the storage initializer, agent and router into InferenceService pods. Each of
those images is read here from the value Trainyard renders, the one the operator will read, so
the bill of materials cannot list another tag than the one deployed.

``OPERAND_OBJECTS`` and ``OPERAND_VALUES`` name where the operands sit and which component pulls
them; ``supply.image_scan`` composes the reference (``repository/image:version`` and the other
spellings). The barman-cloud plugin is installed by the site, not rendered: its images come from
the catalog (``catalog.BARMAN_CLOUD_IMAGES``) for every Cluster that names the plugin.

What is not listed here is still found: the coverage test scans every rendered value
(``tests/unit/test_bom_coverage.py``) and fails on an image the bill of materials lacks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainyard import catalog
from trainyard.manifests import RenderedPlatform
from trainyard.manifests.meta import Manifest
from trainyard.supply.image_scan import find_images
from trainyard.supply.reference import ImageRef, mirrored


@dataclass(frozen=True)
class Operand:
    """One image an operator pulls: the reference rendered, who pulls it and from which rendered field."""

    reference: ImageRef
    component: str
    where: str

    @property
    def source(self) -> str:
        return f"operand:{self.component}:{self.where}"


# (apiVersion group, kind) -> the component whose controller pulls every image in the object's spec.
OPERAND_OBJECTS: dict[tuple[str, str], str] = {
    # Ref: gpu-operator api/nvidia/v1alpha1/nvidiadriver_types.go (repository/image/version; manager.*).
    ("nvidia.com", "NVIDIADriver"): "gpu-operator",
    # Ref: cloudnative-pg api/v1/cluster_types.go ClusterSpec.ImageName.
    ("postgresql.cnpg.io", "Cluster"): "cnpg",
}

# chart name -> (component, values paths whose images the chart hands to the controller for its operands).
OPERAND_VALUES: dict[str, tuple[str, tuple[tuple[str, ...], ...]]] = {
    # The ClusterPolicy's operand specs; the operator and NFD are pods of the chart itself.
    # Ref: gpu-operator deployments/gpu-operator/templates/clusterpolicy.yaml at v26.7.0.
    "gpu-operator": ("gpu-operator", tuple(
        tuple(role.split(".")) for role in catalog.GPU_OPERATOR_OPERANDS
        if role not in ("operator", "node-feature-discovery", "driver"))),
    # Ref: helm/operator templates/operator-deployment.yaml (OPERATOR_SIDECAR_IMAGE).
    "operator": ("minio", (("operator", "sidecarImage"),)),
    # Ref: kserve-resources v0.20.0 templates (inferenceservice-config: storageInitializer, agent, router;
    # ClusterStorageContainer default).
    "kserve-resources": ("kserve", (("kserve", "storage"), ("kserve", "agent"), ("kserve", "router"))),
}


def _group(obj: Manifest) -> str:
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _at(values: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = values
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _name(obj: Manifest) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


def object_operands(rendered: RenderedPlatform) -> Iterator[Operand]:
    for obj in rendered.objects:
        component = OPERAND_OBJECTS.get((_group(obj), str(obj.get("kind"))))
        if component is None:
            continue
        for found in find_images(obj.get("spec"), "spec"):
            yield Operand(found.ref, component, f"{_name(obj)}.{found.where}")


def value_operands(rendered: RenderedPlatform) -> Iterator[Operand]:
    for release in rendered.releases:
        if release.external or release.chart_name not in OPERAND_VALUES:
            continue
        component, paths = OPERAND_VALUES[release.chart_name]
        for path in paths:
            for found in find_images(_at(release.values, path), ".".join(path)):
                yield Operand(found.ref, component, f"values.{found.where}")


def uses_barman_cloud(obj: Manifest) -> bool:
    plugins = (obj.get("spec") or {}).get("plugins") or []
    return obj.get("kind") == "Cluster" and any(
        isinstance(p, dict) and p.get("name") == catalog.BARMAN_CLOUD_PLUGIN for p in plugins)


def prerequisite_operands(rendered: RenderedPlatform, mirror: str | None) -> Iterator[Operand]:
    """The barman-cloud plugin and the sidecar it injects, for each Cluster that names the plugin."""
    for obj in rendered.objects:
        if not uses_barman_cloud(obj):
            continue
        for role, image in catalog.BARMAN_CLOUD_IMAGES:
            ref = mirrored(ImageRef(image.registry, image.repository, image.tag), mirror)
            where = f"{_name(obj)}.spec.plugins[{catalog.BARMAN_CLOUD_PLUGIN}]"
            yield Operand(ref, "barman-cloud-plugin", f"{where}:{role}")


def operand_images(rendered: RenderedPlatform, mirror: str | None) -> list[Operand]:
    """Every operand image of the stack, each once per field that names it."""
    return sorted({*object_operands(rendered), *value_operands(rendered), *prerequisite_operands(rendered, mirror)},
                  key=lambda o: (str(o.reference), o.source))


def catalog_upstreams() -> dict[str, catalog.Image]:
    """Every upstream image the catalog pins, by repository (the mirror keeps the repository path)."""
    images: list[catalog.Image] = [*catalog.GPU_OPERATOR_OPERANDS.values(), *(i for _, i in catalog.BARMAN_CLOUD_IMAGES),
                                   *catalog.POSTGRESQL_OPERANDS.values()]
    for release in catalog.RELEASES.values():
        images += [i for i in (release.image, *(i for _, i in release.images)) if i is not None]
    return {image.repository: image for image in images}


def upstream_of(ref: ImageRef, mirror: str | None) -> ImageRef | None:
    """The upstream image a reference under the mirror copies, at the reference's tag; None where none is pinned.

    A stack without a mirror pulls upstream names: the reference is its own upstream.
    """
    if mirror is None:
        return ref.with_digest(None)
    host, _, path = mirror.rstrip("/").partition("/")
    prefix = f"{path}/" if path else ""
    if ref.registry != host or not ref.repository.startswith(prefix):
        return None
    pinned = catalog_upstreams().get(ref.repository.removeprefix(prefix))
    return None if pinned is None else ImageRef(pinned.registry, pinned.repository, ref.tag)
