"""Carry a stack's bill of materials across an air gap: export it to one archive, import it on the other side.

``export`` (the connected side) pulls every image of the stack's BOM from a source the operator names (the
upstream registries by default; ``source_prefix`` for a connected-side mirror laid out as
``<prefix><upstream repository>``), packages every chart the stack installs from the verified chart mirror,
takes every CRD file from wherever the stack resolves them (verified against the catalog's blob SHAs by the
render), and writes ``trainyard.supply.archive``'s layout. An image the lock already holds a registry digest
for is pulled by that digest, so the archive carries exactly what was locked (a tag that moved upstream is
an error, not a silent update). Nothing is written where any image cannot be pulled.

``import_archive`` (the air-gapped side) verifies the whole archive first (``archive.verify``) and refuses it,
pushing nothing, on any problem; checks that it holds every image, chart and CRD the stack needs; then pushes
the images under the stack's mirror names (the references its BOM lists), the charts to the stack's OCI chart
mirror as Helm OCI artifacts, and writes the CRD bundle ``crds.mirror_dir`` reads. ``images lock`` against
that registry then records the same digests the archive's manifest lists.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard import __version__, chart_mirror
from trainyard.config.sections import ChartSource
from trainyard.manifests import RenderedPlatform, RenderError
from trainyard.manifests.chart_release import ChartRelease, upstream_reference
from trainyard.manifests.crds import git_blob_sha
from trainyard.project import Stack
from trainyard.supply import archive as fmt
from trainyard.supply.bom import PINNED_IN_FILE, Bom, BomImage, build_bom
from trainyard.supply.reference import ImageRef, mirrored
from trainyard.supply.registry import FetchedManifest, RegistryClient, RegistryError, RegistryUnreachable

Progress = Callable[[str], None]


class AirgapError(Exception):
    """An export or import that did not happen: every reason, one per line."""

    def __init__(self, summary: str, problems: list[str]) -> None:
        super().__init__(summary + "".join(f"\n  {p}" for p in problems))
        self.summary = summary
        self.problems = problems


@dataclass(frozen=True)
class PlannedImage:
    """One image to export: where it is pulled from, by which reference, and the name the site pulls it by."""

    image: BomImage
    source: ImageRef
    pull: str  # the tag, or the digest (locked or pinned in a reviewed file)

    @property
    def bom_line(self) -> str:
        return f"{self.image.reference} (bom: {', '.join(self.image.sources)})"


def source_of(image: BomImage, source_prefix: str | None) -> ImageRef:
    """Where the connected side pulls ``image`` from: its upstream, or ``<prefix><upstream repository>``.

    An image with no upstream (the platform team builds it; a runtime pinned by digest) is pulled by the
    name the stack uses; with a prefix, from ``<prefix><its repository>``.
    """
    named = ImageRef.parse(image.upstream or image.reference)
    return mirrored(named, source_prefix) if source_prefix else named


def plan_images(bom: Bom, source_prefix: str | None) -> list[PlannedImage]:
    out = []
    for image in bom.images:
        source = source_of(image, source_prefix)
        locked = image.digest if image.status in ("locked", PINNED_IN_FILE) else None
        out.append(PlannedImage(image, source, locked or str(source.tag or source.digest)))
    return out


@dataclass
class ExportResult:
    path: Path
    images: int
    blobs: int
    charts: int
    crds: int
    size: int
    sha256: str
    manifest_sha256: str


def export(stack: Stack, rendered: RenderedPlatform, bom: Bom, out: Path, client: RegistryClient,
           source_prefix: str | None, charts_dir: Path | None, progress: Progress) -> ExportResult:
    """Write the archive of ``stack`` to ``out`` (all or nothing: a partial file is removed)."""
    releases = [r for r in rendered.releases if not r.external]
    if releases and charts_dir is None:
        raise AirgapError("nothing exported", [f"the stack installs {len(releases)} charts and the chart mirror is not "
                                               f"found: set {chart_mirror.CHARTS_DIR_ENV}"])
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        with partial.open("wb") as handle:
            writer = fmt.ArchiveWriter(handle)
            images = _export_images(writer, plan_images(bom, source_prefix), client, out.parent, progress)
            charts = _export_charts(writer, releases, charts_dir, progress) if releases else []
            crds = _export_crds(writer, rendered, bom, progress)
            manifest = {"format": fmt.FORMAT, "stack": stack.name, "environment": bom.environment,
                        "trainyard_version": __version__, "created": created,
                        "source": source_prefix or "upstream registries",
                        "image_mirror": bom.mirror, "chart_mirror": stack.config.charts.mirror,
                        "images": images, "charts": charts, "crds": crds}
            index = {"schemaVersion": 2, "mediaType": fmt.OCI_INDEX,
                     "manifests": [{"mediaType": i["media_type"], "digest": i["digest"], "size": i["size"],
                                    "annotations": {fmt.REF_NAME: i["reference"]}} for i in images]}
            writer.add(f"{fmt.LAYOUT}/oci-layout", json.dumps(fmt.OCI_LAYOUT).encode())
            writer.add(f"{fmt.LAYOUT}/index.json", json.dumps(index, indent=1, sort_keys=True).encode())
            manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
            writer.add(fmt.MANIFEST_NAME, manifest_bytes)
            blobs = len(writer.blobs)
            writer.close()
        partial.replace(out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return ExportResult(out, len(images), blobs, len(charts), len(crds), out.stat().st_size, _file_sha256(out),
                        fmt.sha256_hex(manifest_bytes))


def _file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return fmt._stream_sha256(handle)


def _export_images(writer: fmt.ArchiveWriter, planned: list[PlannedImage], client: RegistryClient, work: Path,
                   progress: Progress) -> list[dict[str, Any]]:
    out, problems = [], []
    unreachable: dict[str, tuple[str, list[str]]] = {}
    for number, item in enumerate(planned, start=1):
        host = item.source.registry
        if host in unreachable:
            unreachable[host][1].append(item.bom_line)
            continue
        progress(f"image {number}/{len(planned)}: {item.source.name}@{item.pull}" if item.pull.startswith("sha256:")
                 else f"image {number}/{len(planned)}: {item.source.name}:{item.pull}")
        try:
            top = client.manifest(item.source, item.pull)
            size = _export_tree(writer, client, item.source, top, work)
        except RegistryUnreachable as exc:
            unreachable[host] = (exc.reason, [item.bom_line])
            continue
        except RegistryError as exc:
            problems.append(f"{item.bom_line}: cannot be pulled from {item.source.name}:{item.pull}: {exc}")
            continue
        locked = item.image.digest if item.image.status in ("locked", PINNED_IN_FILE) else None
        if locked and top.digest != locked:
            problems.append(f"{item.bom_line}: the source serves {top.digest}, the lock says {locked}")
            continue
        out.append({"reference": item.image.reference, "upstream": item.image.upstream, "digest": top.digest,
                    "media_type": top.media_type, "size": len(top.body), "bytes": size,
                    "source": f"{item.source.name}:{item.pull}" if not item.pull.startswith("sha256:")
                    else f"{item.source.name}@{item.pull}"})
    for host, (reason, lines) in sorted(unreachable.items()):
        problems.append(f"registry {host} cannot be reached ({reason}): {len(lines)} images not exported, first "
                        f"{lines[0]}; hint: pull from a connected-side mirror with --from REGISTRY/PREFIX/, or "
                        f"point the host at a reachable copy with --endpoint {host}=https://HOST:PORT")
    if problems:
        raise AirgapError(f"nothing exported: {len(problems)} problems with the stack's {len(planned)} images", problems)
    return out


def _export_tree(writer: fmt.ArchiveWriter, client: RegistryClient, source: ImageRef, top: FetchedManifest,
                 work: Path) -> int:
    """Write one image's manifests and blobs (each once per archive); returns the bytes its blobs hold."""
    total = 0
    pending = [top]
    while pending:
        current = pending.pop()
        if current.digest not in writer.blobs:
            writer.add(fmt.blob_member(current.digest), current.body)
            writer.blobs.add(current.digest)
        for descriptor in fmt.children(current.media_type, current.body):
            digest = str(descriptor["digest"])
            if fmt.is_manifest(descriptor):
                pending.append(client.manifest(source, digest, accept=(str(descriptor["mediaType"]),)))
                continue
            total += int(descriptor.get("size", 0))
            if digest in writer.blobs:
                continue
            with tempfile.TemporaryFile(dir=work) as spool:
                size = client.blob(source, digest, spool.write)
                spool.seek(0)
                writer.add_stream(fmt.blob_member(digest), size, spool)
            writer.blobs.add(digest)
    return total


def _export_charts(writer: fmt.ArchiveWriter, releases: list[ChartRelease], charts_dir: Path | None,
                   progress: Progress) -> list[dict[str, Any]]:
    assert charts_dir is not None
    out, problems, seen = [], [], set()
    with tempfile.TemporaryDirectory(prefix="trainyard-charts-") as work:
        for release in releases:
            key = (release.chart_name, release.version)
            if key in seen:
                continue
            seen.add(key)
            progress(f"chart {release.chart_name} {release.version} (release {release.name})")
            try:
                source = chart_mirror.chart_source(release, charts_dir)  # listing hash verified
                assembled = chart_mirror.assemble(source, charts_dir, Path(work) / release.name)
            except chart_mirror.ChartUnavailable as exc:
                problems.append(f"chart {release.chart_name} {release.version} (release {release.name}): {exc}")
                continue
            package = fmt.package_chart(assembled.path)
            version = str(fmt.chart_metadata(package)["version"])
            writer.add(fmt.chart_member(release.chart_name, version), package)
            out.append({"release": release.name, "name": release.chart_name, "version": version,
                        "upstream": upstream_reference(release), "sha256": fmt.sha256_hex(package),
                        "size": len(package), "listing": chart_mirror.listing_sha256(charts_dir, source)})
    if problems:
        raise AirgapError("nothing exported: charts missing from the chart mirror", problems)
    return out


def _export_crds(writer: fmt.ArchiveWriter, rendered: RenderedPlatform, bom: Bom,
                 progress: Progress) -> list[dict[str, Any]]:
    contents = {source.blob_sha: source.content for source in rendered.crd_sources}  # verified by the render
    progress(f"{len(bom.crds)} CRD files")
    out = []
    for crd in bom.crds:
        content = contents[crd.blob_sha]
        assert git_blob_sha(content) == crd.blob_sha, crd.file
        writer.add(fmt.crd_member(crd.component, crd.version, crd.file), content)
        out.append({"component": crd.component, "version": crd.version, "file": crd.file, "blob_sha": crd.blob_sha,
                    "sha256": fmt.sha256_hex(content)})
    return out


# ----------------------------------------------------------------------------- import


@dataclass
class ImportResult:
    images: int
    blobs_pushed: int
    blobs_present: int
    charts: list[str] = field(default_factory=list)
    crds_dir: Path | None = None
    crds: int = 0


def coverage_problems(archive: fmt.Archive, stack: Stack, bom: Bom, rendered: RenderedPlatform) -> list[str]:
    """What the stack needs that the archive does not hold (an archive of another stack, or of an older BOM)."""
    manifest = archive.manifest
    images = {i.get("reference") for i in manifest.get("images") or []}
    charts = {(c.get("name"), c.get("version")) for c in manifest.get("charts") or []}
    crds = {(c.get("component"), c.get("version"), c.get("file")) for c in manifest.get("crds") or []}
    problems = [f"image {i.reference} (bom: {', '.join(i.sources)}) is not in the archive"
                for i in bom.images if i.reference not in images]
    problems += [f"chart {r.chart_name} {r.version} (release {r.name}) is not in the archive"
                 for r in rendered.releases if not r.external and (r.chart_name, r.version) not in charts]
    problems += [f"CRD {c.component} {c.version} {c.file} is not in the archive"
                 for c in bom.crds if (c.component, c.version, c.file) not in crds]
    if problems:
        problems.append(f"the archive was exported for stack {manifest.get('stack')!r} on {manifest.get('created')}; "
                        f"export it again for {stack.name!r}: trainyard bom {stack.name} --export FILE")
    return problems


def rendered_with_archive_crds(archive: fmt.Archive, stack: Stack, work: Path) -> tuple[RenderedPlatform, Bom]:
    """The stack rendered with the CRD files of a verified archive (the site's bundle may still be empty):
    what the stack needs, to hold the archive to."""
    for crd in archive.manifest.get("crds") or []:
        member = fmt.crd_member(crd["component"], crd["version"], crd["file"])
        target = work / member.removeprefix(f"{fmt.CRDS}/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(archive.read(member))
    crds = stack.config.crds.model_copy(update={"source": "mirror", "mirror_dir": str(work)})
    view = Stack(stack.name, stack.path, stack.root, stack.config.model_copy(update={"crds": crds}))
    rendered = view.render()
    return rendered, build_bom(view, rendered)


def import_archive(archive: fmt.Archive, stack: Stack, images_client: RegistryClient, charts_client: RegistryClient,
                   crds_dir: Path | None, progress: Progress, expect_manifest_sha256: str | None = None) -> ImportResult:
    """Verify ``archive`` whole, then push and write it; raises ``AirgapError`` (nothing pushed) on any problem."""
    problems = []
    if expect_manifest_sha256 is not None and fmt.manifest_sha256(archive) != expect_manifest_sha256:
        problems.append(f"{fmt.MANIFEST_NAME}: sha256 {fmt.manifest_sha256(archive)}, expected "
                        f"{expect_manifest_sha256} (--expect-manifest)")
    problems += fmt.verify(archive, progress)
    if not problems:
        with tempfile.TemporaryDirectory(prefix="trainyard-airgap-crds-") as work:
            try:
                rendered, bom = rendered_with_archive_crds(archive, stack, Path(work))
            except RenderError as exc:
                raise AirgapError(f"{archive.path}: refused, nothing pushed or written",
                                  [f"the stack does not render with the archive's CRD files: {exc}"]) from None
        problems += coverage_problems(archive, stack, bom, rendered)
    charts = archive.manifest.get("charts") or []
    if charts and stack.config.charts.mirror is None:
        problems.append(f"the archive holds {len(charts)} charts and the stack names no chart mirror: set charts.mirror")
    if archive.manifest.get("crds") and crds_dir is None:
        problems.append("the archive holds CRD files and the stack names no crds.mirror_dir: set it (or --crds-dir)")
    if problems:
        raise AirgapError(f"{archive.path}: refused, nothing pushed or written", problems)
    result = ImportResult(0, 0, 0)
    _import_images(archive, images_client, result, progress)
    _import_charts(archive, stack, charts_client, result, progress)
    if crds_dir is not None:
        _import_crds(archive, crds_dir, result, progress)
    return result


def _import_images(archive: fmt.Archive, client: RegistryClient, result: ImportResult, progress: Progress) -> None:
    index = {d["annotations"][fmt.REF_NAME]: d
             for d in json.loads(archive.read(f"{fmt.LAYOUT}/index.json")).get("manifests") or []}
    images = archive.manifest.get("images") or []
    for number, image in enumerate(images, start=1):
        target = ImageRef.parse(str(image["reference"]))
        progress(f"image {number}/{len(images)}: {target}")
        pushed: set[str] = set()
        for descriptor, manifest in fmt.image_tree(archive, index[str(image["reference"])]):
            digest, name = str(descriptor["digest"]), fmt.blob_member(str(descriptor["digest"]))
            if digest in pushed:
                continue
            pushed.add(digest)
            if manifest:
                body = archive.read(name)
                if "sha256:" + fmt.sha256_hex(body) != digest:  # verified already; a registry would store it under its own
                    raise fmt.ArchiveError(f"{name}: changed while it was imported")
                reference = digest if descriptor is not index[str(image["reference"])] else (target.tag or digest)
                client.push_manifest(target, reference, FetchedManifest(str(descriptor["mediaType"]), body))
                if reference != digest:
                    continue
            elif client.has_blob(target, digest):
                result.blobs_present += 1
            else:
                client.push_blob(target, digest, archive.members[name].size, functools.partial(archive.open, name))
                result.blobs_pushed += 1
        result.images += 1


def _import_charts(archive: fmt.Archive, stack: Stack, client: RegistryClient, result: ImportResult,
                   progress: Progress) -> None:
    source = stack.config.charts
    created = str(archive.manifest.get("created"))
    for chart in archive.manifest.get("charts") or []:
        package = archive.read(fmt.chart_member(chart["name"], chart["version"]))
        meta = fmt.chart_metadata(package)
        target = chart_target(stack.config.charts, str(chart["name"]), str(chart["version"]))
        progress(f"chart {chart['name']} {chart['version']} -> {source.mirror}/{chart['name']}:{target.tag}")
        push_chart(client, target, package, meta, created)
        result.charts.append(f"{source.mirror}/{chart['name']}:{target.tag}")


def chart_target(source: ChartSource, name: str, version: str) -> ImageRef:
    """Where a chart goes in the stack's OCI chart mirror: ``<mirror>/<name>:<version>`` (helm's layout)."""
    repository = "/".join(part for part in (source.mirror_path, name) if part)
    return ImageRef(str(source.mirror_host), repository, fmt.helm_tag(version))


def push_chart(client: RegistryClient, target: ImageRef, package: bytes, meta: dict[str, Any], created: str) -> None:
    """Push a packaged chart as a Helm OCI artifact (config, package layer, manifest), as ``helm push`` does."""
    config = fmt.helm_config(meta)
    for blob in (config, package):
        digest = "sha256:" + fmt.sha256_hex(blob)
        if not client.has_blob(target, digest):
            client.push_blob(target, digest, len(blob), functools.partial(bytes, blob))
    manifest = FetchedManifest(fmt.OCI_MANIFEST, fmt.helm_manifest(config, package, meta, created))
    client.push_manifest(target, str(target.tag), manifest)


def _import_crds(archive: fmt.Archive, crds_dir: Path, result: ImportResult, progress: Progress) -> None:
    crds = archive.manifest.get("crds") or []
    progress(f"{len(crds)} CRD files -> {crds_dir}")
    for crd in crds:
        member = fmt.crd_member(crd["component"], crd["version"], crd["file"])
        target = crds_dir / member.removeprefix(f"{fmt.CRDS}/")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(archive.read(member))
        os.replace(partial, target)
        result.crds += 1
    result.crds_dir = crds_dir


def crd_bundle_dir(stack: Stack, override: str | None) -> Path | None:
    """Where the import writes the CRD bundle: ``--crds-dir``, else the stack's ``crds.mirror_dir`` (relative to
    the stack file)."""
    given = override or stack.config.crds.mirror_dir
    if given is None:
        return None
    path = Path(given)
    return path if path.is_absolute() or override else stack.path.parent / path

