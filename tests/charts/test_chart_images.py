"""The images the bill of materials derives from chart templates are the images helm renders.

``supply.chart_images.TEMPLATE_IMAGES`` reads each chart's image lines by hand; here every
release of every stack is rendered with helm and Trainyard's values, and both lists must agree.
With the renderer plugged in, the BOM takes the chart images from the rendering itself.
"""

from __future__ import annotations

import pytest

from tests.charts.conftest import Renderers
from tests.conftest import ROOT, STACKS, rendered, stack
from trainyard.supply.bom import build_bom
from trainyard.supply.chart_images import chart_images, rendered_images

DATA_CACHE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")


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
