"""Rules on what the stack pulls: every image of an installed object or chart is in the bill of materials.

The bill of materials (``trainyard bom``) accounts for images from three sources: the catalog's
controller image of each installed component (under the stack's mirror), the approved
ClusterTrainingRuntimes, and the images inside each chart. An image that comes from none of
them would be pulled without being mirrored, locked or reviewed: a Deployment added with an
image the catalog does not list, or a chart that renders an image other than the one Trainyard
set (a values key the chart ignores, say). Objects the stack does not declare (a tenant's
manifests in a pull request) are not the platform's to mirror.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from trainyard import catalog
from trainyard.config.data_cache import LWS_FOR_TRAINER
from trainyard.manifests.meta import APPROVED_RUNTIME_LABEL, Manifest
from trainyard.policy.model import Context, stack_rule
from trainyard.policy.pods import containers, dig
from trainyard.supply.chart_images import chart_images
from trainyard.supply.reference import ImageRef, ReferenceError, mirrored


def catalog_images(ctx: Context) -> set[str]:
    """Tagged references of the catalog images the stack's components pull (as the mirror serves them)."""
    components = {(c, getattr(ctx.config.versions, c)) for c in catalog.DEFAULT_VERSIONS if hasattr(ctx.config.versions, c)}
    components |= {(r.component, r.version) for r in ctx.releases}
    if ctx.config.gpu_operator is not None:  # its release is named gpu-operator, its catalog entry gpu_operator
        components.add(("gpu_operator", ctx.config.gpu_operator.version))
    if ctx.config.data_cache.enabled:  # LWS comes as the Trainer chart's subchart, not a release of its own
        components.add(("lws", LWS_FOR_TRAINER[ctx.config.versions.trainer]))
    out = set()
    for key in components:
        release = catalog.RELEASES.get(key)
        if release is not None:
            # The component's own image and the further images it runs (init containers, operands).
            for image in (release.image, *(image for _, image in release.images)):
                if image is None:
                    continue
                upstream = ImageRef(image.registry, image.repository, image.tag)
                out.add(mirrored(upstream, ctx.config.images.registry_mirror).tagged)
    if ctx.config.object_store is not None:
        out.add(image_key(ctx.config.object_store.provisioner_image))
    return out


def image_key(image: str) -> str:
    """What the bill of materials knows an image by: its tagged reference (the digest comes from the lock)."""
    try:
        ref = ImageRef.parse(image)
    except ReferenceError:
        return image
    return ref.tagged if ref.tag else str(ref)


# The reviewed runtime files (runtimes/, serving-runtimes/): their images are pinned by digest in the file.
RUNTIME_KINDS = ("ClusterTrainingRuntime", "ClusterServingRuntime")


def _is_runtime(obj: Manifest) -> bool:
    return obj.get("kind") in RUNTIME_KINDS and dig(obj, "metadata", "labels", APPROVED_RUNTIME_LABEL) == "true"


@stack_rule("images-in-bom", "Every image of an installed object or chart is in the bill of materials.",
            "List the image in the catalog (trainyard/catalog.py) or an approved runtime, fix the chart values that "
            "render another image, then mirror and lock it (`trainyard bom STACK --format sync`, `trainyard images lock`).")
def images_in_bom(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    known = catalog_images(ctx)
    declared = [obj for obj in objects if ctx.protection(obj) is not None]
    known |= {image_key(str(c.container["image"])) for obj in declared if _is_runtime(obj)
              for c in containers(obj) if isinstance(c.container.get("image"), str)}
    for obj in declared:
        if _is_runtime(obj):
            continue
        for c in containers(obj):
            image = c.container.get("image")
            if isinstance(image, str) and image_key(image) not in known:
                yield obj, f"{c.path}.image: {image!r} is not in the bill of materials"
    for release in ctx.releases:
        if release.external:
            continue
        for image in chart_images(release).images:
            if image_key(image) not in known:
                yield None, f"chart {release.name} ({release.chart} {release.version}) renders image {image!r}, " \
                            "which is not in the bill of materials"


@stack_rule("chart-images-known", "The images inside every installed chart are known (rendered or derived).",
            "Render the chart with the stack's values (chart-truth rendering) or add its images to "
            "trainyard/supply/chart_images.py TEMPLATE_IMAGES with the template lines they follow.",
            severity="advisory")
def chart_images_unknown(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    for release in ctx.releases:
        if not release.external:
            found = chart_images(release)
            if found.method == "unknown":
                yield None, f"chart {release.name}: {found.note}"


@stack_rule("charts-from-mirror", "A stack that protects data and pulls images from a mirror pulls its charts from one too.",
            "Set charts.mirror (oci://HOST/PATH) and fill it with `trainyard bom STACK --export` on the connected side, "
            "then `trainyard bom STACK --import` (docs/supply-chain.md, \"Air gap\").",
            severity="advisory")
def charts_from_mirror(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    """Advisory, not mandatory: an image mirror does not by itself mean an air gap (sites mirror for digests and
    pull limits), and where there is one, the missing chart mirror fails `pulumi up` loudly at the first chart
    fetch rather than deploying anything wrong. A site that is air-gapped raises it to mandatory in
    ``security.policy.severity``."""
    config = ctx.config
    if not config.lifecycle.protect_data or config.images.registry_mirror is None or config.charts.mirror is not None:
        return
    upstream = sorted({r.name for r in ctx.releases if not r.external})
    if upstream:
        yield None, (f"images come from the mirror {config.images.registry_mirror!r} but charts.mirror is unset: "
                     f"{len(upstream)} charts are fetched from upstream at `pulumi up` ({', '.join(upstream)})")


RULES = (images_in_bom, chart_images_unknown, charts_from_mirror)
