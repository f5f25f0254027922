"""The images the bill of materials derives from chart templates are the images helm renders.

``supply.chart_images.TEMPLATE_IMAGES`` reads each chart's image lines by hand; here every
release of every stack is rendered with helm and Trainyard's values, and both lists must agree.
With the renderer plugged in, the BOM takes the chart images from the rendering itself.

On the stacks that protect data, every image reference helm renders (pod images, and the image strings
in operand fields, env vars, arguments and config: ``supply.image_scan``) must carry the image lock's
digest, and the gate's check (``supply.gate.unpinned_images``) must name one whose pin is dropped.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from tests.charts.conftest import Renderers
from tests.conftest import ROOT, STACKS, rendered, stack
from trainyard.manifests import image_lock
from trainyard.manifests.chart_release import ChartRelease
from trainyard.supply.bom import build_bom, uncovered
from trainyard.supply.chart_images import chart_images, rendered_images
from trainyard.supply.gate import unpinned_images
from trainyard.supply.image_scan import FoundImage, objects_images
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef

DATA_CACHE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")
FIXTURES = sorted(str(p) for p in (ROOT / "tests" / "fixtures" / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("name", [*STACKS, DATA_CACHE], ids=[*STACKS, "data-cache"])
def test_template_derived_chart_images_equal_the_rendered_ones(name: str, renderers: Renderers) -> None:
    for release in rendered(name).releases:
        derived = chart_images(release)
        assert derived.method == "templates", release.name
        assert list(derived.images) == rendered_images(renderers(name).render(release).objects), release.name


def test_bom_takes_chart_images_from_the_rendering_when_a_renderer_is_given(renderers: Renderers) -> None:
    bom = build_bom(stack("prod"), rendered("prod"), renderer=lambda release: renderers("prod").render(release).objects)
    assert {c.release: c.images_from for c in bom.charts} == {r.name: "rendered" for r in rendered("prod").releases}
    kueue = next(i for i in bom.images if i.reference == "registry.trainyard.internal/mirror/kueue/kueue:v0.19.2")
    assert kueue.sources == ("chart:kueue", "controller:kueue")


@pytest.mark.parametrize("name", [*STACKS, *FIXTURES], ids=[*STACKS, *(Path(f).stem.removeprefix("Pulumi.") for f in FIXTURES)])
def test_every_image_helm_renders_is_in_the_bill_of_materials(name: str, renderers: Renderers) -> None:
    """Air-gap completeness on helm's output: every image any object of any installed chart names (pod images,
    the ClusterPolicy's operand triples, env vars such as the GPU operator's VALIDATOR_IMAGE, the cert-manager
    controller's acmesolver argument, KServe's inferenceservice-config) is listed by the BOM of the stack."""
    platform = rendered(name)
    bom = build_bom(stack(name), platform, renderer=lambda release: renderers(name).render(release).objects)
    found = [image for release in platform.releases if not release.external
             for image in objects_images(renderers(name).render(release).objects, f"chart:{release.name} ")]
    missing = [f"{image.reference} (at {image.where})" for image in uncovered(bom, found)]
    assert not missing, "images helm renders but the bill of materials lacks:\n  " + "\n  ".join(missing)


PROTECTING = ("prod", "staging")
PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")


def _helm_images(renderers: Renderers, name: str, release: ChartRelease) -> list[FoundImage]:
    return objects_images(renderers(name).render(release).objects, f"chart:{release.name} ")


def _not_pinned_by_the_lock(lock: ImageLock, found: list[FoundImage]) -> list[str]:
    """Each reference that is not ``...@sha256:<64 hex>`` with the lock's digest, where the lock has the image."""
    wrong = []
    for image in found:
        ref = ImageRef.parse(image.reference)
        entry = lock.entry(ref) if ref.tag else None
        if entry is None:
            if ref.digest is None:
                wrong.append(f"{image.reference} (at {image.where}): no digest and no lock entry")
        elif not PINNED.search(image.reference) or ref.digest != entry.digest:
            wrong.append(f"{image.reference} (at {image.where}): the lock has {entry.digest}")
    return wrong


@pytest.mark.parametrize("name", PROTECTING)
def test_every_image_helm_renders_on_a_data_protecting_stack_carries_the_locks_digest(name: str,
                                                                                      renderers: Renderers) -> None:
    lock = image_lock(stack(name).config, ROOT)
    releases = [r for r in rendered(name).releases if not r.external]
    found = {r.name: _helm_images(renderers, name, r) for r in releases}
    assert all(found.values()), f"a chart renders no image: {[n for n, f in found.items() if not f]}"
    everything = [image for images in found.values() for image in images]
    wrong = _not_pinned_by_the_lock(lock, everything)
    assert not wrong, "images helm renders without the lock's digest:\n  " + "\n  ".join(wrong)
    assert unpinned_images(lock, everything, protect_data=True) == []


def _without(values: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``values`` with the leaf at ``path`` replaced by ``value`` (removed where ``value`` is None)."""
    out = copy.deepcopy(values)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@pytest.mark.parametrize(("release_name", "path", "value", "image", "where"), [
    # The chart's own digest value dropped: cert-manager renders ":<tag>" alone.
    ("cert-manager", ("webhook", "image", "digest"), None, "jetstack/cert-manager-webhook:v1.21.1",
     "Deployment/cert-manager/cert-manager-webhook.spec.template.spec.containers[0].image"),
    ("mlflow", ("image", "digest"), None, "burakince/mlflow:3.15.1",
     "Deployment/mlflow.spec.template.spec.containers[0].image"),
    # "<tag>@<digest>" back to the tag: an operand the operator pulls, named only in its ClusterPolicy.
    ("gpu-operator", ("toolkit", "version"), "v1.20.0", "nvidia/k8s/container-toolkit:v1.20.0",
     "ClusterPolicy/cluster-policy.spec.toolkit"),
    # An image in a controller's config: KServe's inferenceservice-config and its ClusterStorageContainer.
    ("kserve", ("kserve", "storage", "tag"), "v0.20.0", "kserve/storage-initializer:v0.20.0",
     "ClusterStorageContainer/default.spec.container.image"),
])
def test_a_dropped_pin_in_helms_output_is_named_with_its_field(renderers: Renderers, release_name: str,
                                                               path: tuple[str, ...], value: Any, image: str,
                                                               where: str) -> None:
    lock = image_lock(stack("prod").config, ROOT)
    release = next(r for r in rendered("prod").releases if r.name == release_name)
    dropped = dataclasses.replace(release, values=_without(release.values, path, value))
    found = _helm_images(renderers, "prod", dropped)
    reference = f"registry.trainyard.internal/mirror/{image}"
    wrong = _not_pinned_by_the_lock(lock, found)
    assert wrong and all(w.startswith(f"{reference} (at chart:{release_name} ") for w in wrong), wrong
    assert f"{reference} (at chart:{release_name} {where}): the lock has {lock.entries[reference].digest}" in wrong
    problems = unpinned_images(lock, found, protect_data=True)
    assert [(p.reference, p.error) for p in problems] == [(reference, True)]
    assert f"images.lock.yaml: {reference} holds {lock.entries[reference].digest}" in problems[0].message
