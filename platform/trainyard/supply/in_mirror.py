"""The mirror check: every image a stack pulls is in its registry, asked before anything is declared.

Why: on an air-gapped site an image that was never synced into the mirror shows up only as pods in
ImagePullBackOff, while Pulumi waits for the Deployment until its await timeout (ten minutes in
pulumi-kubernetes) and leaves a half-applied stack. The lock gate (``gate.py``) proves every image is pinned by
a digest a registry reported once; this check asks, now, whether the registry serves it.

What is asked: the gate's ``rendered_references`` (every rendered object, chart value and chart pod image of the
stack), each pinned by the lock as the builders pin it: by digest where there is one, else by tag. First one
``GET /v2/`` per registry host, so that a host that does not answer is named once with the number of images it
leaves unchecked (not once per image, after a timeout each); then one ``HEAD`` per image on a small thread pool
(``registry.RegistryClient.has_manifest``). Nothing is cached between runs: a mirror can lose an image any day.

A missing image is named with the reference, the URL asked (``TRAINYARD_REGISTRY_ENDPOINTS`` applied:
``endpoints.py``), where the stack pulls it, and the entry and ``skopeo sync`` line of ``trainyard bom STACK
--format sync`` that put it into the mirror (or why that list has none). Where the digest is missing but the
tag is there, the mirror holds other content under the tag (synced without ``--preserve-digests``, or the tag
moved): the message gives the digest it serves instead.

Where it runs: the Pulumi program (``refuse_missing_in_mirror``, on by default where ``lifecycle.protect_data``
is: ``images.verify_in_mirror``) and ``trainyard images verify STACK --in-mirror``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, image_lock
from trainyard.project import Stack
from trainyard.supply.bom import Bom, BomImage, build_bom, sync_groups, sync_lines
from trainyard.supply.chart_images import ChartRenderer
from trainyard.supply.endpoints import ENDPOINTS_ENV, EndpointError, registry_client
from trainyard.supply.gate import rendered_references
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef, ReferenceError
from trainyard.supply.registry import RegistryClient, RegistryError, RegistryUnreachable

# Concurrent requests: prod pulls ~40 images, nearly all from one host; eight keep a mirror busy, not flooded.
WORKERS = 8


def verify_in_mirror_enabled(config: PlatformConfig) -> bool:
    """``images.verify_in_mirror``; unset: on exactly where the stack protects data (the stacks whose lock gate
    refuses placeholders, deployed from where their mirror answers)."""
    setting = config.images.verify_in_mirror
    return config.lifecycle.protect_data if setting is None else setting


@dataclass(frozen=True)
class PulledImage:
    """One image the stack pulls, as pulled, with where and how it gets into the mirror."""

    ref: ImageRef  # with the lock's digest where there is one
    where: tuple[str, ...]
    bom: BomImage | None
    sync: tuple[str, str] | None  # (the sync list's entry, its skopeo line), see bom.sync_lines
    placeholder: bool  # the digest asked for is the lock's placeholder: no registry ever served it

    @property
    def asked_as(self) -> str:
        return self.ref.digest or str(self.ref.tag)


@dataclass(frozen=True)
class MissingImage:
    image: PulledImage
    url: str
    tag_digest: str | None = None  # what the tag serves, where the digest is missing but the tag is there


@dataclass(frozen=True)
class UncheckedHost:
    """A registry host that could not be asked: no answer, or an endpoint this client may not use."""

    host: str
    endpoint: str
    reason: str
    images: int
    unreachable: bool


@dataclass
class MirrorReport:
    stack: str
    stack_file: str
    images: list[PulledImage]
    missing: list[MissingImage] = field(default_factory=list)
    unchecked: list[UncheckedHost] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unchecked or self.errors)

    @property
    def registries(self) -> list[str]:
        return sorted({image.ref.registry for image in self.images})

    def summary(self) -> str:
        checked = len(self.images) - sum(h.images for h in self.unchecked)
        hosts = len(self.registries)
        return (f"{self.stack}: {checked} of {len(self.images)} images asked at {hosts} "
                f"{'registry' if hosts == 1 else 'registries'} in {self.seconds:.2f} s, {len(self.missing)} missing")

    @property
    def message(self) -> str:
        lines = []
        if self.missing:
            lines.append(f"stack {self.stack!r}: {len(self.missing)} of {len(self.images)} images it pulls are not in "
                         "their registry; pods would wait in ImagePullBackOff until a Deployment timed out "
                         "(images.verify_in_mirror):")
            lines += [line for missing in self.missing for line in _missing_lines(missing)]
        if self.unchecked or self.errors:
            lines.append(f"stack {self.stack!r}: cannot check that the images it pulls are in their registry "
                         "(images.verify_in_mirror):")
            lines += [f"  registry {h.host}, asked at {h.endpoint}/v2/: "
                      f"{'cannot be reached' if h.unreachable else 'not asked'} ({h.reason}); {h.images} images not checked"
                      for h in self.unchecked]
            lines += [f"  {error}" for error in self.errors]
        if any(m.image.sync is not None for m in self.missing):
            lines.append(f"fill the mirror: trainyard bom {self.stack} --format sync --out DIR, then sh DIR/sync.sh "
                         "(or only the skopeo lines above, run in DIR)")
        if any(m.tag_digest is not None or m.image.placeholder for m in self.missing):
            lines.append(f"then take the digests the mirror serves into the lock: trainyard images lock {self.stack} "
                         "(and review the lock diff)")
        if self.unchecked:
            host = self.unchecked[0].host
            lines.append(f"hint: run this where the registry answers, or map the host to an address that does: "
                         f"{ENDPOINTS_ENV}=\"{host}=https://HOST:PORT\" (plain http only to a loopback address; "
                         f"docs/supply-chain.md); to deploy without this check, set images.verify_in_mirror: false "
                         f"in {self.stack_file}")
        return "\n".join(lines)


def _missing_lines(missing: MissingImage) -> list[str]:
    image = missing.image
    shown = image.where[0] + (f" (and {len(image.where) - 1} more)" if len(image.where) > 1 else "")
    lines = [f"  {image.ref}",
             f"    asked:  {missing.url}: HTTP 404",
             f"    pulled: {shown}"]
    if missing.tag_digest is not None:
        lines.append(f"    the tag {image.ref.tag} is there, with {missing.tag_digest}: the mirror holds other content "
                     "under it than the lock (synced without --preserve-digests, or the tag moved)")
    elif image.placeholder:
        lines.append("    the digest is the lock's placeholder, which no registry serves")
    if image.sync is not None:
        entry, command = image.sync
        lines += [f"    sync:   {entry}", f"            {command}"]
    elif image.bom is not None:
        lines.append(f"    sync:   none: no upstream (an image the platform builds; BOM {', '.join(image.bom.sources)}): "
                     f"push it to {image.ref.registry}")
    else:
        lines.append("    sync:   none: not in the bill of materials (rule images-in-bom: the catalog first)")
    return lines


def pulled_images(rendered: RenderedPlatform, bom: Bom, lock: ImageLock,
                  renderer: ChartRenderer | None = None) -> list[PulledImage]:
    """Every image the stack pulls (``gate.rendered_references``), pinned by the lock as the builders pin it."""
    places: dict[ImageRef, set[str]] = {}
    for found in rendered_references(rendered, bom, renderer):
        try:
            ref = ImageRef.parse(found.reference)
        except ReferenceError:
            continue  # the check rules report references that do not parse
        places.setdefault(lock.pin(ref), set()).add(found.where)
    listed = {image.reference: image for image in bom.images}
    groups = sync_groups(bom)
    out = []
    for ref in sorted(places):
        bom_image = listed.get(ref.tagged if ref.tag else str(ref))
        entry = lock.entry(ref) if ref.tag else None
        placeholder = entry is not None and entry.source == "placeholder" and entry.digest == ref.digest
        sync = sync_lines(bom, bom_image, groups) if bom_image is not None else None
        out.append(PulledImage(ref, tuple(sorted(places[ref])), bom_image, sync, placeholder))
    return out


@dataclass(frozen=True)
class _Answer:
    image: PulledImage
    missing: MissingImage | None = None
    unreachable: str | None = None
    error: str | None = None


def _ask(client: RegistryClient, image: PulledImage) -> _Answer:
    ref = image.ref
    try:
        if client.has_manifest(ref, image.asked_as):
            return _Answer(image)
        tag_digest = None
        if ref.digest is not None and ref.tag is not None:
            try:
                served = client.digest(ref.with_digest(None))
                tag_digest = served if served != ref.digest else None
            except RegistryError:
                tag_digest = None  # the tag is not there either: never synced
        return _Answer(image, MissingImage(image, client.manifest_url(ref, image.asked_as), tag_digest))
    except RegistryUnreachable as exc:
        return _Answer(image, unreachable=exc.reason)
    except RegistryError as exc:
        return _Answer(image, error=str(exc))


def _ping(client: RegistryClient, host: str) -> UncheckedHost | None:
    try:
        client.ping(host)
        return None
    except RegistryUnreachable as exc:
        return UncheckedHost(host, _endpoint(client, host), exc.reason, 0, unreachable=True)
    except RegistryError as exc:
        return UncheckedHost(host, _endpoint(client, host), str(exc), 0, unreachable=False)


def _endpoint(client: RegistryClient, host: str) -> str:
    try:
        return client.base_url(host)
    except RegistryError:
        return str(client.endpoints.get(host, f"https://{host}")).rstrip("/")


def check_in_mirror(stack: str, stack_file: str, images: list[PulledImage], client: RegistryClient,
                    workers: int = WORKERS) -> MirrorReport:
    """Ask each image's registry for it: one ``GET /v2/`` per host, then one ``HEAD`` per image, concurrently."""
    start = time.monotonic()
    report = MirrorReport(stack, stack_file, images)
    hosts = sorted({image.ref.registry for image in images})
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(images)))) as pool:
        down = {h.host: h for h in pool.map(lambda host: _ping(client, host), hosts) if h is not None}
        answers = list(pool.map(lambda image: _ask(client, image), [i for i in images if i.ref.registry not in down]))
    counts: dict[str, int] = {}
    for image in images:
        counts[image.ref.registry] = counts.get(image.ref.registry, 0) + (image.ref.registry in down)
    late: dict[str, list[str]] = {}  # hosts that stopped answering during the run: reason per image
    for answer in answers:
        if answer.missing is not None:
            report.missing.append(answer.missing)
        elif answer.unreachable is not None:
            late.setdefault(answer.image.ref.registry, []).append(answer.unreachable)
        elif answer.error is not None:
            report.errors.append(answer.error)
    report.unchecked = [UncheckedHost(h.host, h.endpoint, h.reason, counts[h.host], h.unreachable)
                        for h in down.values()]
    report.unchecked += [UncheckedHost(host, _endpoint(client, host), reasons[0], len(reasons), True)
                         for host, reasons in sorted(late.items())]
    report.seconds = time.monotonic() - start
    return report


def mirror_report(stack: Stack, client: RegistryClient, rendered: RenderedPlatform | None = None,
                  renderer: ChartRenderer | None = None, workers: int = WORKERS) -> MirrorReport:
    rendered = rendered if rendered is not None else stack.render()
    bom = build_bom(stack, rendered, renderer=renderer)
    images = pulled_images(rendered, bom, image_lock(stack.config, stack.root), renderer)
    return check_in_mirror(stack.name, _shown_path(stack), images, client, workers)


def _shown_path(stack: Stack) -> str:
    try:
        return str(stack.path.relative_to(stack.root))
    except ValueError:
        return str(stack.path)


class MirrorCheckFailed(Exception):
    """The mirror check did not pass: images missing, a registry that could not be asked, or a bad endpoint mapping."""


def refuse_missing_in_mirror(name: str, config: PlatformConfig, root: Path, stack_dir: Path,
                             client: RegistryClient | None = None,
                             environ: Mapping[str, str] | None = None) -> MirrorReport | None:
    """The program's check (``images.verify_in_mirror``): None where it is off, the report where every image is
    there, else ``MirrorCheckFailed`` with the report's message (nothing declared)."""
    if not verify_in_mirror_enabled(config):
        return None
    if client is None:
        try:
            client = registry_client(environ=environ)
        except EndpointError as exc:
            raise MirrorCheckFailed(f"cannot check the mirror (images.verify_in_mirror): {exc}") from None
    report = mirror_report(Stack(name, stack_dir / f"Pulumi.{name}.yaml", root, config), client)
    if not report.ok:
        raise MirrorCheckFailed(report.message)
    return report


__all__ = ["MirrorCheckFailed", "MirrorReport", "MissingImage", "PulledImage", "UncheckedHost", "check_in_mirror",
           "mirror_report", "pulled_images", "refuse_missing_in_mirror", "verify_in_mirror_enabled"]
