"""The images the bill of materials derives from chart templates are the images helm renders.

``supply.chart_images.TEMPLATE_IMAGES`` reads each chart's image lines by hand; here every
release of every stack is rendered with helm and Trainyard's values, and both lists must agree.
With the renderer plugged in, the BOM takes the chart images from the rendering itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.charts.conftest import Renderers
from tests.conftest import ROOT, STACKS, rendered, stack
from trainyard.supply.bom import build_bom, uncovered
from trainyard.supply.chart_images import chart_images, rendered_images
from trainyard.supply.image_scan import objects_images

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
