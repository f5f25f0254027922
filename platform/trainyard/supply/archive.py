"""The air-gap archive: one tar holding a stack's images, charts and CRD files, with a manifest of their digests.

Layout (an uncompressed tar, so that the import can read any member without unpacking the rest)::

    trainyard-airgap.json           the manifest (``FORMAT``): stack, trainyard version, every image, chart, CRD
    images/oci-layout               the images as an OCI image layout
    images/index.json               one descriptor per image, named by its mirror reference
    images/blobs/sha256/<hex>       manifests, configs and layers, each named by its digest
    charts/<name>-<version>.tgz     each chart in helm package form
    crds/<component>/v<version>/<file>   the CRD bundle, exactly the layout ``crds.mirror_dir`` reads

Ref: https://github.com/opencontainers/image-spec/blob/main/image-layout.md (oci-layout, index.json, blobs/<alg>/<hex>)
Ref: https://github.com/opencontainers/image-spec/blob/main/annotations.md (``org.opencontainers.image.ref.name``)

``verify`` reads every member and holds it to the manifest before anything leaves the archive: each blob's
sha256 is its name, each image's tree (index, manifests, config, layers) is complete and of the sizes its
descriptors say, each chart's sha256 and ``Chart.yaml`` are the manifest's, each CRD file's git blob SHA is
the manifest's and the catalog's (the CRDs are anchored in the catalog, not only in the archive). Members
the manifest does not account for, links and paths outside the archive are refused.

Charts are packaged here from the verified chart mirror (``chart_mirror``), assembled with their
dependencies exactly as the chart tier renders them, as a deterministic ``.tgz`` (sorted, owner 0, fixed
times), so the same chart always has the same sha256. A chart becomes a Helm OCI artifact with helm's own
media types. Ref: helm v3.22.0 pkg/registry/constants.go (``ConfigMediaType``, ``ChartLayerMediaType``),
pkg/registry/client.go ``Push`` (config = the chart's metadata as JSON, one layer, tag = version with
``+`` as ``_``), pkg/registry/util.go ``generateChartOCIAnnotations``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from trainyard import catalog, yamlio
from trainyard.manifests.crds import git_blob_sha

FORMAT = "trainyard.dev/airgap/v1"
MANIFEST_NAME = "trainyard-airgap.json"
LAYOUT = "images"
CHARTS = "charts"
CRDS = "crds"
REF_NAME = "org.opencontainers.image.ref.name"
OCI_LAYOUT = {"imageLayoutVersion": "1.0.0"}
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
INDEX_TYPES = (OCI_INDEX, "application/vnd.docker.distribution.manifest.list.v2+json")
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# The fields of helm's chart.Metadata (pkg/chart/metadata.go, JSON names = Chart.yaml keys), for the config blob.
HELM_METADATA_FIELDS = ("name", "home", "sources", "version", "description", "keywords", "maintainers", "icon",
                        "apiVersion", "condition", "tags", "appVersion", "deprecated", "annotations", "kubeVersion",
                        "dependencies", "type")
_BLOB = re.compile(rf"^{LAYOUT}/blobs/sha256/([0-9a-f]{{64}})$")
CHUNK = 1 << 20


class ArchiveError(Exception):
    """An archive that cannot be trusted or read: names the member and, for a mismatch, both digests."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_member(digest: str) -> str:
    return f"{LAYOUT}/blobs/sha256/{digest.removeprefix('sha256:')}"


def crd_member(component: str, version: str, file: str) -> str:
    return f"{CRDS}/{catalog.MIRROR_DIRS[component]}/v{version}/{file}"


def chart_member(name: str, version: str) -> str:
    return f"{CHARTS}/{name}-{version}.tgz"


def helm_tag(version: str) -> str:
    """The OCI tag helm pushes and pulls a chart version as (``+`` is not allowed in tags)."""
    return version.replace("+", "_")


def children(media_type: str, body: bytes) -> list[dict[str, Any]]:
    """The descriptors a manifest points at: an index's manifests, or an image manifest's config and layers."""
    doc = json.loads(body)
    if media_type in INDEX_TYPES or doc.get("mediaType") in INDEX_TYPES:
        return list(doc.get("manifests") or [])
    return [doc["config"], *(doc.get("layers") or [])]


def is_index(media_type: str, body: bytes) -> bool:
    return media_type in INDEX_TYPES or json.loads(body).get("mediaType") in INDEX_TYPES


def is_manifest(descriptor: dict[str, Any]) -> bool:
    return str(descriptor.get("mediaType", "")).endswith(("manifest.v1+json", "manifest.v2+json", "index.v1+json",
                                                          "manifest.list.v2+json"))


# ----------------------------------------------------------------------------- charts


def package_chart(chart_dir: Path) -> bytes:
    """``chart_dir`` (an assembled chart, named as the chart) as helm's package form: a gzipped tar of
    ``<name>/...``, byte-for-byte the same for the same files."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted((p for p in chart_dir.rglob("*") if p.is_file()), key=lambda p: p.as_posix()):
            info = tarfile.TarInfo(f"{chart_dir.name}/{path.relative_to(chart_dir).as_posix()}")
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped:
        zipped.write(raw.getvalue())
    return out.getvalue()


def chart_metadata(package: bytes) -> dict[str, Any]:
    """The ``Chart.yaml`` of a packaged chart (the one at ``<name>/Chart.yaml``)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(package), mode="r:gz") as tar:
            for member in tar.getmembers():
                parts = PurePosixPath(member.name).parts
                if len(parts) == 2 and parts[1] == "Chart.yaml" and member.isfile():
                    extracted = tar.extractfile(member)
                    meta = yamlio.safe_load(extracted.read()) if extracted else None
                    if isinstance(meta, dict):
                        return meta
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"not a helm chart package: {exc}") from None
    raise ArchiveError("not a helm chart package: no <name>/Chart.yaml")


def helm_config(meta: dict[str, Any]) -> bytes:
    """The config blob helm writes for a chart: its metadata as JSON (string fields as strings)."""
    config = {key: meta[key] for key in HELM_METADATA_FIELDS if key in meta}
    for key in ("name", "version", "appVersion", "apiVersion", "kubeVersion", "description", "type"):
        if key in config and not isinstance(config[key], str):
            config[key] = str(config[key])
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def helm_manifest(config: bytes, package: bytes, meta: dict[str, Any], created: str) -> bytes:
    """The OCI manifest of a chart as helm pushes it: helm's config and chart layer, helm's annotations."""
    annotations = {"org.opencontainers.image.title": str(meta["name"]),
                   "org.opencontainers.image.version": str(meta["version"]),
                   "org.opencontainers.image.created": created}
    if meta.get("description"):
        annotations["org.opencontainers.image.description"] = str(meta["description"])
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": HELM_CONFIG, "digest": "sha256:" + sha256_hex(config), "size": len(config)},
                "layers": [{"mediaType": HELM_CHART_LAYER, "digest": "sha256:" + sha256_hex(package),
                            "size": len(package)}],
                "annotations": annotations}
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


# ----------------------------------------------------------------------------- writing


class ArchiveWriter:
    """Members added one by one to a tar; each blob once."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        self.tar = tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 - closed in close()
        self.blobs: set[str] = set()

    def add(self, name: str, data: bytes) -> None:
        self.add_stream(name, len(data), io.BytesIO(data))

    def add_stream(self, name: str, size: int, stream: IO[bytes]) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o644, 0
        self.tar.addfile(info, stream)

    def close(self) -> None:
        self.tar.close()


# ----------------------------------------------------------------------------- reading and verifying


@dataclass
class Archive:
    """An opened archive: its manifest and its members, read on demand (the tar is uncompressed)."""

    path: Path
    tar: tarfile.TarFile
    manifest: dict[str, Any]
    members: dict[str, tarfile.TarInfo]

    def read(self, name: str) -> bytes:
        stream = self.open(name)
        return stream.read()

    def open(self, name: str) -> IO[bytes]:
        extracted = self.tar.extractfile(self.members[name])
        if extracted is None:
            raise ArchiveError(f"{self.path}: {name}: not a regular file")
        return extracted

    def close(self) -> None:
        self.tar.close()


def open_archive(path: Path) -> Archive:
    try:
        tar = tarfile.open(path, mode="r:")  # noqa: SIM115 - Archive.close
    except (OSError, tarfile.TarError) as exc:
        raise ArchiveError(f"{path}: not an uncompressed tar archive ({exc})") from None
    members: dict[str, tarfile.TarInfo] = {}
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in PurePosixPath(name).parts or not member.isfile():
            tar.close()
            raise ArchiveError(f"{path}: {name}: refused (only regular files inside the archive are allowed)")
        if name in members:
            tar.close()
            raise ArchiveError(f"{path}: {name}: appears twice")
        members[name] = member
    if MANIFEST_NAME not in members:
        tar.close()
        raise ArchiveError(f"{path}: no {MANIFEST_NAME}: not a trainyard air-gap archive")
    extracted = tar.extractfile(members[MANIFEST_NAME])
    try:
        manifest = json.loads(extracted.read() if extracted else b"")
    except ValueError as exc:
        tar.close()
        raise ArchiveError(f"{path}: {MANIFEST_NAME}: not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        tar.close()
        raise ArchiveError(f"{path}: {MANIFEST_NAME}: format is not {FORMAT}")
    return Archive(path, tar, manifest, members)


def manifest_sha256(archive: Archive) -> str:
    return sha256_hex(archive.read(MANIFEST_NAME))


def _stream_sha256(stream: IO[bytes]) -> str:
    hasher = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        hasher.update(chunk)
    return hasher.hexdigest()


def verify(archive: Archive, progress: Callable[[str], None] = lambda _: None) -> list[str]:  # noqa: PLR0912
    """Every problem of the archive (empty: it may be imported). Reads every byte once."""
    problems: list[str] = []
    manifest = archive.manifest
    expected = {MANIFEST_NAME, f"{LAYOUT}/oci-layout", f"{LAYOUT}/index.json"}
    blobs = [name for name in archive.members if _BLOB.match(name)]
    progress(f"verifying {len(blobs)} blobs")
    for name in blobs:
        actual = _stream_sha256(archive.open(name))
        named = _BLOB.match(name)
        assert named is not None
        if actual != named.group(1):
            problems.append(f"{name}: content has digest sha256:{actual}, its name (the manifest's digest) is "
                            f"sha256:{named.group(1)}")
    expected |= set(blobs)
    for required in (f"{LAYOUT}/oci-layout", f"{LAYOUT}/index.json"):
        if required not in archive.members:
            problems.append(f"{required}: missing")
    index: dict[str, dict[str, Any]] = {}
    if f"{LAYOUT}/index.json" in archive.members:
        try:
            for descriptor in json.loads(archive.read(f"{LAYOUT}/index.json")).get("manifests") or []:
                index[str((descriptor.get("annotations") or {}).get(REF_NAME))] = descriptor
        except (ValueError, AttributeError) as exc:
            problems.append(f"{LAYOUT}/index.json: not an OCI image index ({exc})")
    for image in manifest.get("images") or []:
        reference, digest = image.get("reference"), image.get("digest")
        descriptor = index.get(str(reference))
        if descriptor is None:
            problems.append(f"{LAYOUT}/index.json: no entry for {reference}")
            continue
        if descriptor.get("digest") != digest:
            problems.append(f"{LAYOUT}/index.json: {reference} is {descriptor.get('digest')}, the manifest says {digest}")
            continue
        problems += _tree_problems(archive, reference, descriptor)
    for chart in manifest.get("charts") or []:
        name = chart_member(str(chart.get("name")), str(chart.get("version")))
        expected.add(name)
        if name not in archive.members:
            problems.append(f"{name}: missing")
            continue
        data = archive.read(name)
        if sha256_hex(data) != chart.get("sha256"):
            problems.append(f"{name}: content has sha256 {sha256_hex(data)}, the manifest says {chart.get('sha256')}")
            continue
        try:
            meta = chart_metadata(data)
        except ArchiveError as exc:
            problems.append(f"{name}: {exc}")
            continue
        if (meta.get("name"), str(meta.get("version"))) != (chart.get("name"), chart.get("version")):
            problems.append(f"{name}: Chart.yaml is {meta.get('name')} {meta.get('version')}, "
                            f"the manifest says {chart.get('name')} {chart.get('version')}")
    for crd in manifest.get("crds") or []:
        problems += _crd_problems(archive, crd, expected)
    problems += [f"{name}: not in the manifest (refused: the archive holds only what its manifest lists)"
                 for name in sorted(set(archive.members) - expected)]
    return problems


def _tree_problems(archive: Archive, reference: str, descriptor: dict[str, Any]) -> list[str]:
    """What is missing or of the wrong size in the tree of one image (index -> manifests -> config, layers)."""
    problems = []
    pending = [descriptor]
    while pending:
        current = pending.pop()
        name = blob_member(str(current.get("digest")))
        member = archive.members.get(name)
        if member is None:
            problems.append(f"{name}: missing (named by {reference})")
            continue
        if member.size != current.get("size"):
            problems.append(f"{name}: {member.size} bytes, its descriptor in {reference} says {current.get('size')}")
            continue
        if is_manifest(current):
            try:
                pending += children(str(current.get("mediaType")), archive.read(name))
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"{name}: not a manifest ({exc})")
    return problems


def _crd_problems(archive: Archive, crd: dict[str, Any], expected: set[str]) -> list[str]:
    component, version, file = str(crd.get("component")), str(crd.get("version")), str(crd.get("file"))
    try:
        pinned = next(f for f in catalog.release(component, version).crds if f.name == file)
        name = crd_member(component, version, file)
    except (KeyError, StopIteration):
        return [f"{MANIFEST_NAME}: CRD {component} {version} {file} is not in the catalog"]
    expected.add(name)
    if name not in archive.members:
        return [f"{name}: missing"]
    actual = git_blob_sha(archive.read(name))
    if actual != crd.get("blob_sha") or actual != pinned.blob_sha:
        return [f"{name}: content has git blob {actual}, the manifest says {crd.get('blob_sha')}, "
                f"the catalog pins {pinned.blob_sha}"]
    return []


def image_tree(archive: Archive, descriptor: dict[str, Any]) -> Iterator[tuple[dict[str, Any], bool]]:
    """(descriptor, is a manifest) of an image's tree, children before parents (the order a push needs)."""
    if is_manifest(descriptor):
        for child in children(str(descriptor.get("mediaType")), archive.read(blob_member(str(descriptor["digest"])))):
            yield from image_tree(archive, child)
    yield descriptor, is_manifest(descriptor)
