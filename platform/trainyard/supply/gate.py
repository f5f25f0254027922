"""The deploy gate: a stack that protects data deploys only images pinned by digests a registry reported.

``unlocked_images`` lists every image of the stack's bill of materials whose lock entry is a
placeholder or missing, and every image that renders without a digest at all (``unpinned_images``:
a chart value, an operand field, a pod image that does not carry the lock's digest). The Pulumi
program refuses to declare anything on a stack that protects data while the list is not empty, and
``trainyard images verify`` prints it (errors on staging and prod, warnings on local).

Where an image renders is found by ``supply.image_scan`` (every rendered object and chart value,
whatever the field) and, for the pods inside charts, from the chart's templates (``chart_images``) or,
with a renderer, from helm's output itself. Each unpinned image is named with the lock line and the
bill-of-materials line that would fix it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, image_lock
from trainyard.project import Stack
from trainyard.supply.bom import Bom, build_bom, lock_references
from trainyard.supply.chart_images import ChartRenderer
from trainyard.supply.image_scan import FoundImage, objects_images, platform_images
from trainyard.supply.lock import ImageLock, LockProblem, lock_line, problems
from trainyard.supply.reference import ImageRef, ReferenceError


def rendered_references(rendered: RenderedPlatform, bom: Bom, renderer: ChartRenderer | None = None) -> list[FoundImage]:
    """Every image reference the stack renders, with where: objects and chart values (the scan), and the images
    inside each installed chart: helm's output where a renderer is given, else the pod images its templates give."""
    found = platform_images(rendered)
    for release in rendered.releases:
        if release.external:
            continue
        if renderer is not None:
            found += objects_images(renderer(release), f"chart:{release.name} ")
            continue
        chart = next(c for c in bom.charts if c.release == release.name)
        found += [FoundImage(image, f"chart:{release.name} pod image ({chart.images_from})") for image in chart.images]
    return sorted(set(found))


def unpinned_images(lock: ImageLock, found: Iterable[FoundImage], protect_data: bool, bom: Bom | None = None,
                    stack: str = "STACK") -> list[LockProblem]:
    """The references in ``found`` without a digest: one problem per image, with its first place (and how many
    more) and the line that fixes it.

    - the lock has the image: the rendered value does not carry its digest, a builder to fix (the lock
      line is named so the reader sees the digest that should be there);
    - the lock lacks it: the lock line to add (``trainyard images lock``), and the BOM line it comes from,
      or that the BOM does not list it (rule ``images-in-bom``: the catalog first).

    Errors where the stack protects data, warnings elsewhere (as placeholders).
    """
    places: dict[ImageRef, set[str]] = {}
    for image in found:
        try:
            ref = ImageRef.parse(image.reference)
        except ReferenceError:
            continue  # the check rules report references that do not parse
        if ref.digest is None and ref.tag is not None:
            places.setdefault(ref, set()).add(image.where)
    listed = {image.reference: image for image in bom.images} if bom is not None else {}
    out = []
    for ref in sorted(places):
        where = sorted(places[ref])
        shown = where[0] + (f" (and {len(where) - 1} more)" if len(where) > 1 else "")
        entry, line = lock.entry(ref), lock_line(lock, ref)
        bom_image = listed.get(ref.tagged)
        bom_text = (f"BOM line {ref.tagged} ({', '.join(bom_image.sources)})" if bom_image is not None else
                    "not in the bill of materials: list it in the catalog first (rule images-in-bom)" if bom is not None
                    else "")
        if entry is not None:
            fix = (f"{line} holds {entry.digest} ({entry.source}), but the value rendered there does not carry it: "
                   f"the builder must pin it (docs/supply-chain.md)")
        else:
            fix = f"add {line} (trainyard images lock {stack})"
        out.append(LockProblem(ref.tagged, "unpinned", protect_data, shown, f"{fix}; {bom_text}" if bom_text else fix))
    return out


def unlocked_images(stack: Stack, renderer: ChartRenderer | None = None,
                    rendered: RenderedPlatform | None = None) -> list[LockProblem]:
    """Placeholder and missing lock entries of the BOM's images, then every image that renders without a digest.

    An unpinned image whose lock entry is missing is reported once, as missing: adding the entry is its fix.
    """
    rendered = rendered if rendered is not None else stack.render()
    bom = build_bom(stack, rendered, renderer=renderer)
    lock = image_lock(stack.config, stack.root)
    protect_data = stack.config.lifecycle.protect_data
    found = problems(lock, lock_references(bom), protect_data)
    missing = {p.reference for p in found if p.status == "missing"}
    unpinned = unpinned_images(lock, rendered_references(rendered, bom, renderer), protect_data, bom, stack.name)
    return found + [p for p in unpinned if p.reference not in missing]


class UnlockedImages(Exception):
    """A stack that protects data would deploy images the registry never confirmed, or by tag alone."""


def refuse_unlocked(name: str, config: PlatformConfig, root: Path, stack_dir: Path) -> None:
    """Raise ``UnlockedImages`` (nothing declared) when a data-protecting stack has placeholder or missing digests,
    or an image that renders without a digest."""
    stack = Stack(name, stack_dir / f"Pulumi.{name}.yaml", root, config)
    errors = [p for p in unlocked_images(stack) if p.error]
    if errors:
        listed = "\n".join(f"  {p.message}" for p in errors)
        hints = []
        if any(p.status != "unpinned" for p in errors):
            hints.append(f"fill the lock from the mirror: trainyard images lock {name}")
        if any(p.status == "unpinned" for p in errors):
            hints.append("every image must render as <name>:<tag>@<digest> (docs/supply-chain.md)")
        raise UnlockedImages(
            f"stack {name!r} protects data and refuses images whose digest no registry reported or that render "
            f"without a digest:\n{listed}\n" + "\n".join(hints))


__all__ = ["UnlockedImages", "refuse_unlocked", "rendered_references", "unlocked_images", "unpinned_images"]
