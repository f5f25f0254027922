"""The upstream CRDs, from a verified mirror, a verified cache, or the pinned release.

Every file is checked against the git blob SHA pinned in the catalog before it is used,
whichever way it arrived: a mirror that drifted from upstream is an error, not a surprise
on the cluster.

Lookup order: the stack's ``crds.mirror_dir``; ``$TRAINYARD_CRDS_DIR``; the download cache
(``$XDG_CACHE_HOME/trainyard/crds``); for a CRD upstream ships only in a chart's ``crds/``
directory (LeaderWorkerSet), the chart mirror (``catalog.CHART_CRD_DIRS``); the upstream release,
saved into the cache. With ``crds.source: mirror`` only the first: the stack's bundle, nothing else.
The first three share the layout ``<component>/v<version>/<file>``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainyard import catalog, yamlio
from trainyard.config.model import PlatformConfig
from trainyard.derived_cache import derived_text
from trainyard.manifests.meta import Manifest


class CrdUnavailable(Exception):
    """A CRD could not be found, fetched, or did not match its pinned blob SHA."""


def git_blob_sha(content: bytes) -> str:
    """The id git gives a file's content (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()  # noqa: S324 - git's content id, not security


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainyard" / "crds"


def mirror_dirs(config: PlatformConfig, stack_dir: Path | None) -> list[Path]:
    """Where CRD files are looked for, in order. ``crds.source: mirror`` means the stack's bundle alone (an
    air-gapped site's, written by ``trainyard bom STACK --import``): never the environment's mirror or the cache."""
    dirs: list[Path] = []
    if config.crds.mirror_dir:
        mirror = Path(config.crds.mirror_dir)
        dirs.append(mirror if mirror.is_absolute() or stack_dir is None else stack_dir / mirror)
    if config.crds.source == "mirror":
        return dirs
    env = os.environ.get("TRAINYARD_CRDS_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(cache_dir())
    return dirs


def chart_crd_paths(release: catalog.Release, crd: catalog.CrdFile) -> list[Path]:
    """Where a chart mirror (``$TRAINYARD_CHARTS_DIR``, else ../shared/charts) keeps a CRD that upstream ships
    only in a chart's ``crds/`` directory (``catalog.CHART_CRD_DIRS``); empty for every other CRD."""
    directory = catalog.CHART_CRD_DIRS.get((release.component, release.version))
    if directory is None:
        return []
    from trainyard.config.load import project_root

    env = os.environ.get("TRAINYARD_CHARTS_DIR")
    charts = Path(env) if env else project_root().parent / "shared" / "charts"
    return [charts / directory / crd.name]


@dataclass(frozen=True)
class CrdSource:
    """One upstream CRD file, verified against its pinned blob SHA; parsed only when its document is asked for.

    ``patch`` is what Trainyard changes in it (Kueue's conversion webhooks), applied to each fresh document.
    """

    name: str  # metadata.name
    blob_sha: str
    content: bytes
    patch: Callable[[Manifest], Manifest] | None = None

    @property
    def identity(self) -> Manifest:
        """The CRD's apiVersion, kind and name only: what object_key, object_id and object_path read."""
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": self.name}}

    def document(self) -> Manifest:
        """A fresh copy of the CRD as Trainyard declares it (callers may edit it), except inside
        ``read_only_documents``."""
        shared = _SHARED.get()
        if shared is None:
            doc: Manifest = _parse(self.blob_sha, self.content)
        else:
            if self.blob_sha not in shared:
                shared[self.blob_sha] = _parse(self.blob_sha, self.content)
            doc = shared[self.blob_sha]
        return self.patch(doc) if self.patch is not None else doc


_SHARED: ContextVar[dict[str, Any] | None] = ContextVar("trainyard_crds_shared", default=None)


@contextmanager
def read_only_documents() -> Iterator[None]:
    """Within it, every ``CrdSource.document()`` of one file shares one parsed document, for callers that
    only read them: a review renders the stack twice (base and head) from the same CRD files, and
    sharing halves the parsing and makes comparing the two sides' CRDs an identity check per field.
    Nothing within may edit a document."""
    outer = _SHARED.get()
    token = _SHARED.set({} if outer is None else outer)
    try:
        yield
    finally:
        _SHARED.reset(token)


def crd_sources(config: PlatformConfig, components: list[tuple[str, str]],
                stack_dir: Path | None = None) -> list[CrdSource]:
    """The verified CRD files of each (component, version), in catalog order, unparsed (names from the cache)."""
    out: list[CrdSource] = []
    for component, version in components:
        release = catalog.release(component, version)
        for crd in release.crds:
            content = _read_verified(config, release, crd, stack_dir)
            name = _crd_name(crd.blob_sha, content)
            if name is None:
                raise CrdUnavailable(f"{crd.name} of {component} {release.version} is not a CustomResourceDefinition")
            out.append(CrdSource(name, crd.blob_sha, content))
    return out


def load_crds(config: PlatformConfig, components: list[tuple[str, str]], stack_dir: Path | None = None) -> list[Manifest]:
    """The CRD manifests of each (component, version), in catalog order."""
    return [source.document() for source in crd_sources(config, components, stack_dir)]


@lru_cache(maxsize=64)
def _crd_name(blob_sha: str, content: bytes) -> str | None:
    """The CRD's metadata.name (None when the file is not a CustomResourceDefinition), cached by blob SHA."""
    def compute() -> str | None:
        doc = _parse(blob_sha, content)
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            return None
        name = (doc.get("metadata") or {}).get("name")
        return name if isinstance(name, str) and name else None

    return derived_text("crd-name", ("crd-name/1", blob_sha, yaml.__version__), compute)


def parsed(content: bytes) -> Any:
    """A fresh copy of the document of a CRD file's ``content``, parsed once per content (``_parse``'s caches)."""
    return _parse(git_blob_sha(content), content)


def _parse(blob_sha: str, content: bytes) -> Any:
    """A fresh copy of the parsed CRD (callers may edit it), from its JSON form.

    Parsing the YAML of the large CRDs took most of a render; the same document as JSON loads
    many times faster, so it is cached by the content's blob SHA (the file was verified against
    that SHA before this is called), in memory and on disk.
    """
    text = _json_text(blob_sha, content)
    return json.loads(text) if text is not None else yamlio.safe_load(content)


@lru_cache(maxsize=64)
def _json_text(blob_sha: str, content: bytes) -> str | None:
    def compute() -> str | None:
        doc = yamlio.safe_load(content)
        return _as_json(doc)

    return derived_text("crd-json", ("crd-json/1", blob_sha, yaml.__version__), compute)


def _as_json(doc: Any) -> str | None:
    """JSON of ``doc`` when it round-trips exactly (YAML may hold dates or non-string keys: then None)."""
    try:
        text = json.dumps(doc, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == doc else None


def _read_verified(config: PlatformConfig, release: catalog.Release, crd: catalog.CrdFile,
                   stack_dir: Path | None) -> bytes:
    relative = Path(catalog.MIRROR_DIRS[release.component]) / f"v{release.version}" / crd.name
    candidates = [directory / relative for directory in mirror_dirs(config, stack_dir)]
    chart_paths = chart_crd_paths(release, crd) if config.crds.source == "release" else []
    for path in [*candidates, *chart_paths]:
        if path.is_file():
            content = path.read_bytes()
            if git_blob_sha(content) != crd.blob_sha:
                raise CrdUnavailable(
                    f"{path}: content does not match upstream {release.tag}:{crd.repo_path} "
                    f"(blob {git_blob_sha(content)}, pinned {crd.blob_sha})"
                )
            return content
    if config.crds.source != "release":
        raise CrdUnavailable(f"{relative} not found in the mirror ({', '.join(map(str, mirror_dirs(config, stack_dir)))})")
    import urllib.error
    import urllib.request

    url = release.crd_url(crd)
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - pinned https URL
            content = bytes(response.read())
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise CrdUnavailable(
            f"cannot fetch {url} ({exc}); on a machine without internet set TRAINYARD_CRDS_DIR "
            "or crds.mirror_dir to a mirror of the upstream CRDs"
        ) from None
    if git_blob_sha(content) != crd.blob_sha:
        raise CrdUnavailable(f"{url}: content does not match the pinned blob {crd.blob_sha}")
    target = cache_dir() / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    return content
