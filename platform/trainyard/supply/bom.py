"""The bill of materials of one stack: every image, chart and CRD file it pulls, and how to mirror them.

Images come from these sources, each named on every entry:

- ``controller:<component>``: the catalog's controller image at the stack's version, under the
  stack's mirror (``images.registry_mirror``);
- ``runtime:<name>``: the images of the approved ClusterTrainingRuntimes (``runtimes/``);
- ``chart:<release>``: the images inside each installed chart, as it renders with the stack's
  values (``chart_images``; a chart whose images are not known yet is listed as such);
- ``operand:<component>:<field>``: what an operator pulls for the objects it manages (GPU operator
  operands, the PostgreSQL image, the MinIO sidecar, KServe's storage initializer...), read from the
  rendered field the operator reads (``operands``), so the BOM cannot drift from the render;
- ``controller:<component>:<role>``: a further catalog image no rendered value names (cert-manager's
  acmesolver, an argument the chart composes).

Every image carries its digest from the image lock and the lock's status (locked, placeholder,
missing). Charts carry their reference and version, CRD files their URL at the pinned tag and
the git blob SHA they are verified against.

The sync list is skopeo's ``sync --src yaml`` format. skopeo puts each image at
``<destination>/<last path part of the repository>`` (unless ``--scoped``), so the images are
grouped by the directory of their mirror repository: one YAML file and one ``skopeo sync``
command per group keeps Trainyard's layout ``<mirror><upstream repository>``. ``--all
--preserve-digests`` copies whole image indexes unchanged, so the mirror serves the upstream
digests. Ref: containers/skopeo docs/skopeo-sync.1.md ("YAML file content", ``--scoped``),
cmd/skopeo/sync.go (destination = ``path.Join(destination, path.Base(ref))``).
"""

from __future__ import annotations

import json
import posixpath
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, crd_components, data_cache, image_lock
from trainyard.manifests.installs import upstream_image
from trainyard.policy.pods import containers
from trainyard.project import Stack
from trainyard.supply import chart_images as charts_module
from trainyard.supply.image_scan import FoundImage, bom_key
from trainyard.supply.lock import Status
from trainyard.supply.operands import operand_images, upstream_of
from trainyard.supply.reference import ImageRef, ReferenceError, mirrored

BomStatus = Status | str  # "locked", "placeholder", "missing", or "pinned in file"
PINNED_IN_FILE = "pinned in file"


@dataclass(frozen=True)
class BomImage:
    reference: str
    upstream: str | None
    digest: str | None
    status: BomStatus
    sources: tuple[str, ...]


@dataclass(frozen=True)
class BomChart:
    release: str
    chart: str
    version: str
    repo: str | None
    digest: str | None
    external: bool
    images: tuple[str, ...]
    images_from: str
    note: str
    # The upstream chart a chart from the stack's OCI chart mirror is a copy of (``charts.mirror``).
    upstream: str | None = None


@dataclass(frozen=True)
class BomCrd:
    component: str
    version: str
    file: str
    url: str
    blob_sha: str


@dataclass(frozen=True)
class Bom:
    stack: str
    environment: str
    mirror: str | None
    protect_data: bool
    images: tuple[BomImage, ...]
    charts: tuple[BomChart, ...]
    crds: tuple[BomCrd, ...]
    unknown_charts: tuple[str, ...] = field(default=())

    def image_references(self) -> set[str]:
        """Every reference the BOM accounts for, without digests."""
        return {image.reference for image in self.images}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def controller_images(config: PlatformConfig, rendered: RenderedPlatform) -> dict[str, tuple[ImageRef, ImageRef]]:
    """Installed controller -> (upstream image, reference pulled), for every chart release with a catalog entry."""
    out = {}
    for release in rendered.releases:
        if release.external:
            continue
        if (release.component, release.version) in catalog.RELEASES:
            upstream = upstream_image(config, release.component)
        else:
            # A chart versioned apart from its component (KServe's and cert-manager's charts are v-prefixed).
            component = release.component.replace("-", "_")
            pinned = catalog.RELEASES.get((component, getattr(config.versions, component, "")))
            if pinned is None or pinned.image is None:
                continue
            upstream = ImageRef(pinned.image.registry, pinned.image.repository, pinned.image.tag)
        out[release.component] = (upstream, mirrored(upstream, config.images.registry_mirror))
    return out


def further_images(config: PlatformConfig, rendered: RenderedPlatform) -> list[tuple[str, ImageRef, ImageRef]]:
    """(source, upstream image, reference pulled) of the catalog's further images of each installed release
    (``Release.images``: cert-manager's webhook, cainjector and acmesolver; MLflow's busybox; the
    operands of other charts). ``build_bom`` keeps only those no rendered value names: a rendered one
    is listed from its field, the value the cluster reads."""
    out = []
    for release in rendered.releases:
        component = release.component.replace("-", "_")
        pinned = catalog.RELEASES.get((component, getattr(config.versions, component, "")))
        if release.external or pinned is None:
            continue
        for role, image in pinned.images:
            upstream = ImageRef(image.registry, image.repository, image.tag)
            out.append((f"controller:{release.component}:{role}", upstream,
                        mirrored(upstream, config.images.registry_mirror)))
    return out


def runtime_images(rendered: RenderedPlatform) -> list[tuple[str, ImageRef]]:
    """(runtime name, image) of every container of every approved ClusterTrainingRuntime and
    ClusterServingRuntime the stack installs."""
    out = []
    for obj in [*rendered.by_kind("ClusterTrainingRuntime"), *rendered.by_kind("ClusterServingRuntime")]:
        for container in containers(obj):
            image = container.container.get("image")
            if isinstance(image, str):
                out.append((obj["metadata"]["name"], ImageRef.parse(image)))
        # Images a runtime passes on in its environment (the cache runtime's CACHE_IMAGE).
        out += [(obj["metadata"]["name"], ImageRef.parse(image)) for image in data_cache.runtime_image_env(obj)]
    return out


def _charts(platform: RenderedPlatform, renderer: charts_module.ChartRenderer | None,
            add: Callable[[ImageRef, str], None]) -> tuple[list[BomChart], list[str]]:
    """The BOM's chart rows, adding each installed chart's images; and the charts whose images are unknown."""
    bom_charts, unknown = [], []
    for release in platform.releases:
        found_images = charts_module.chart_images(release, renderer) if not release.external else \
            charts_module.ChartImages(release.name, (), "unknown", "external: installed outside this stack")
        if not release.external:
            for text in found_images.images:
                try:
                    chart_ref = ImageRef.parse(text)
                except ReferenceError:
                    continue  # the check rule reports references that do not parse
                add(chart_ref if chart_ref.tag is None else chart_ref.with_digest(None), f"chart:{release.name}")
            if found_images.method == "unknown":
                unknown.append(release.name)
        bom_charts.append(BomChart(release.name, release.chart, release.version, release.repo, None, release.external,
                                   found_images.images, found_images.method, found_images.note, release.upstream))
    return bom_charts, unknown


def build_bom(stack: Stack, rendered: RenderedPlatform | None = None,
              renderer: charts_module.ChartRenderer | None = None) -> Bom:
    config = stack.config
    platform = rendered if rendered is not None else stack.render()
    lock = image_lock(config, stack.root)
    found: dict[str, dict[str, Any]] = {}

    def add(ref: ImageRef, source: str, upstream: ImageRef | None = None) -> None:
        key = ref.tagged if ref.tag else str(ref)
        entry = found.setdefault(key, {"ref": ref, "sources": set(), "upstream": None})
        entry["sources"].add(source)
        if upstream is not None and upstream.tagged != key:
            entry["upstream"] = upstream.tagged

    mirror = config.images.registry_mirror
    for component, (upstream, pulled) in controller_images(config, platform).items():
        add(pulled, f"controller:{component}", upstream)
    for operand in operand_images(platform, mirror):
        ref = operand.reference
        add(ref if ref.tag is None else ref.with_digest(None), operand.source, upstream_of(ref, mirror))
    if config.object_store is not None:
        # The object store's provisioning Job: an image the platform team builds (docs/components/object-store.md).
        add(ImageRef.parse(config.object_store.provisioner_image).with_digest(None), "object-store:provisioner")
    for name, ref in runtime_images(platform):
        # A rendered runtime image carries the lock's digest; the BOM keys it by the reference the file names.
        add(ref if ref.tag is None else ref.with_digest(None), f"runtime:{name}")
    bom_charts, unknown = _charts(platform, renderer, add)
    # Last: a further catalog image only where no rendered value names its repository (one source per image).
    named = {entry["ref"].name for entry in found.values()}
    for source, upstream, pulled in further_images(config, platform):
        if pulled.name not in named:
            add(pulled, source, upstream)

    images = []
    for key in sorted(found):
        entry = found[key]
        ref = entry["ref"]
        lock_entry = lock.entry(ref) if ref.tag else None
        if ref.tag is None:
            status: BomStatus = PINNED_IN_FILE
            digest = ref.digest
        else:
            status, digest = lock.status(ref), lock_entry.digest if lock_entry else None
        upstream_text = entry["upstream"] or (lock_entry.upstream if lock_entry else None)
        images.append(BomImage(key, upstream_text, digest, status, tuple(sorted(entry["sources"]))))

    crds = []
    for component, version in crd_components(config):
        pinned = catalog.release(component, version)
        crds += [BomCrd(component, pinned.version, crd.name, pinned.crd_url(crd), crd.blob_sha) for crd in pinned.crds]
    return Bom(stack.name, config.environment, config.images.registry_mirror, config.lifecycle.protect_data,
               tuple(images), tuple(bom_charts), tuple(crds), tuple(unknown))


def uncovered(bom: Bom, found: Iterable[FoundImage]) -> list[FoundImage]:
    """The images found in rendered values that the bill of materials does not list."""
    listed = bom.image_references()
    return [image for image in found if bom_key(image.reference) not in listed]


def lock_references(bom: Bom) -> list[ImageRef]:
    """The tagged references the lock must hold for this stack."""
    return [ImageRef.parse(image.reference) for image in bom.images if image.status != PINNED_IN_FILE]


def to_json(bom: Bom) -> str:
    return json.dumps(bom.as_dict(), indent=2, sort_keys=True) + "\n"


def to_markdown(bom: Bom) -> str:
    lines = [f"# Bill of materials: `{bom.stack}` ({bom.environment})", "",
             f"Mirror: `{bom.mirror}`" if bom.mirror else "Mirror: none (images are pulled from upstream registries)", "",
             f"## Images ({len(bom.images)})", "",
             "| image (as pulled) | upstream | digest | lock | from |", "|---|---|---|---|---|"]
    for image in bom.images:
        digest = f"`{image.digest[:19]}…`" if image.digest else "—"
        lines.append(f"| `{image.reference}` | {_code(image.upstream)} | {digest} | {image.status} | "
                     f"{', '.join(image.sources)} |")
    lines += ["", f"## Charts ({len(bom.charts)})", "",
              "| release | chart | version | archive digest | images | images from |", "|---|---|---|---|---|---|"]
    for chart in bom.charts:
        images = "<br>".join(f"`{i}`" for i in chart.images) or "—"
        installed = " (external)" if chart.external else ""
        copy = f" (mirror of `{chart.upstream}`)" if chart.upstream else ""
        lines.append(f"| {chart.release}{installed} | `{chart.chart}`{copy} | {chart.version} | {chart.digest or 'unknown'} | "
                     f"{images} | {chart.images_from}: {chart.note} |")
    lines += ["", f"## CRD files ({len(bom.crds)})", "", "| component | version | file | git blob SHA |", "|---|---|---|---|"]
    lines += [f"| {c.component} | {c.version} | [{c.file}]({c.url}) | `{c.blob_sha}` |" for c in bom.crds]
    if bom.unknown_charts:
        lines += ["", f"Charts whose images are not known yet (render them to list them): {', '.join(bom.unknown_charts)}"]
    return "\n".join(lines) + "\n"


def _code(text: str | None) -> str:
    return f"`{text}`" if text else "—"


@dataclass(frozen=True)
class SyncGroup:
    """One ``skopeo sync --src yaml`` invocation: a YAML source and the destination it copies into."""

    file: str
    destination: str
    source: dict[str, Any]


def _sync_source(image: BomImage) -> tuple[str, ImageRef] | None:
    """(the destination directory skopeo syncs ``image`` into, its upstream), or None where nothing syncs it."""
    if image.upstream is None:
        return None
    upstream, target = ImageRef.parse(image.upstream), ImageRef.parse(image.reference)
    if posixpath.basename(target.repository) != posixpath.basename(upstream.repository):
        return None  # skopeo keeps the last path part; a renamed image needs `skopeo copy` (never the case here)
    return f"{target.registry}/{posixpath.dirname(target.repository)}".rstrip("/"), upstream


def sync_groups(bom: Bom) -> list[SyncGroup]:
    """The images to copy from upstream into the mirror, grouped by destination directory."""
    grouped: dict[str, dict[str, dict[str, list[str]]]] = {}
    for image in bom.images:
        found = _sync_source(image)
        if found is None:
            continue
        destination, upstream = found
        tags = grouped.setdefault(destination, {}).setdefault(upstream.registry, {}).setdefault(upstream.repository, [])
        if upstream.tag and upstream.tag not in tags:
            tags.append(upstream.tag)
    out = []
    for index, destination in enumerate(sorted(grouped), start=1):
        slug = destination.split("/", 1)[-1].replace("/", "-") or "root"
        source = {registry: {"images": {repo: sorted(tags) for repo, tags in sorted(repos.items())}}
                  for registry, repos in sorted(grouped[destination].items())}
        out.append(SyncGroup(f"sync-{index:02d}-{slug}.yaml", destination, source))
    return out


def sync_command(group: SyncGroup, endpoints: Mapping[str, str] | None = None) -> str:
    """The ``skopeo sync`` line of one group. A destination whose registry host is in ``endpoints`` (``--endpoint
    HOST=URL``, as for ``images lock``) is written to that address instead, e.g. ``trainyard.local/mirror/kueue`` ->
    ``127.0.0.1:25000/mirror/kueue`` for the rehearsal's loopback registry; a plain-http endpoint gets
    ``--dest-tls-verify=false`` (skopeo's switch for http and unverified TLS). Ref: containers/skopeo
    docs/skopeo-sync.1.md (``--dest-tls-verify``)."""
    host, _, path = group.destination.partition("/")
    url = (endpoints or {}).get(host)
    target, flags = group.destination, ""
    if url:
        split = urllib.parse.urlsplit(url)
        target = "/".join(part for part in (split.netloc + split.path.rstrip("/"), path) if part)
        flags = " --dest-tls-verify=false" if split.scheme == "http" else ""
    return f"skopeo sync --all --preserve-digests{flags} --src yaml --dest docker {group.file} {target}"


def sync_commands(groups: list[SyncGroup], endpoints: Mapping[str, str] | None = None) -> str:
    return "".join(f"{sync_command(g, endpoints)}\n" for g in groups)


def sync_lines(bom: Bom, image: BomImage, groups: list[SyncGroup] | None = None) -> tuple[str, str] | None:
    """Where ``trainyard bom STACK --format sync`` puts ``image``: (its entry, ``<file>: <registry> <repository>
    [<tag>]``, and the ``skopeo sync`` line of that file exactly as printed); None where the sync list does not
    carry it (no upstream: an image the platform builds and pushes itself)."""
    source = _sync_source(image)
    if source is None or source[1].tag is None:
        return None
    destination, upstream = source
    group = next(g for g in (groups if groups is not None else sync_groups(bom)) if g.destination == destination)
    return f"{group.file}: {upstream.registry} {upstream.repository} [{upstream.tag}]", sync_command(group)


def to_sync_text(bom: Bom, endpoints: Mapping[str, str] | None = None) -> str:
    """The sync list as one text: each YAML file after a ``# file:`` line, then the commands."""
    groups = sync_groups(bom)
    parts = [f"# file: {g.file} (destination {g.destination})\n" + yaml.safe_dump(g.source, sort_keys=False)
             for g in groups]
    return "\n".join(parts) + "\n# commands\n" + sync_commands(groups, endpoints)
