"""The image lock: each image reference a stack uses, and the digest the platform's mirror serves for it.

Reviewed files (runtimes, the catalog) name images by tag; the lock file (``images.lock.yaml``
at the project root, ``images.lock_file`` in a stack) supplies the digest, and the builders
render ``<name>:<tag>@<digest>``, so what runs is exactly what the mirror held when the lock
was filled. ``trainyard images lock STACK`` fills or refreshes it from the registry; the review
diff shows every digest that moved.

An entry is either ``source: registry`` (a registry reported the digest) or ``source:
placeholder`` (nobody asked a registry yet; the digest is a stand-in so the reference keeps
its shape). Stacks that protect data refuse placeholders and missing entries at deploy time;
local stacks only warn (``problems``). The same holds for an image that renders without a digest at
all (``unpinned``, found by ``supply.gate``): the lock's digest must reach every reference the stack pulls.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from trainyard import yamlio
from trainyard.supply.reference import DIGEST, ImageRef, ReferenceError

Source = Literal["registry", "placeholder"]
Status = Literal["locked", "placeholder", "missing"]
# What ``images verify`` reports: a lock entry that is not a registry's answer, or an image rendered by tag alone.
ProblemStatus = Literal["placeholder", "missing", "unpinned"]
DEFAULT_LOCK_FILE = "images.lock.yaml"
HEADER = """\
# The image lock: every image reference the stacks use -> the digest the platform's mirror serves for it.
# Written by `trainyard images lock STACK` (docs/supply-chain.md); reviewed like code.
# source: registry     the digest a registry reported (Docker-Content-Digest of the manifest)
# source: placeholder  no registry was asked yet: stacks that protect data (staging, prod) refuse to deploy it
"""


class LockFileError(Exception):
    """A lock file that cannot be read: names the file, the entry and the reason."""


@dataclass(frozen=True)
class LockEntry:
    """One locked image: its digest, where the digest came from, and the upstream image it mirrors."""

    digest: str
    source: Source
    upstream: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {"digest": self.digest, "source": self.source}
        if self.upstream:
            out["upstream"] = self.upstream
        return out


@dataclass(frozen=True)
class ImageLock:
    """The lock file's content: tagged reference (``registry/repository:tag``) -> entry."""

    entries: dict[str, LockEntry] = field(default_factory=dict)
    path: Path | None = None

    def entry(self, ref: ImageRef) -> LockEntry | None:
        return self.entries.get(ref.tagged)

    def status(self, ref: ImageRef) -> Status:
        entry = self.entry(ref)
        if entry is None:
            return "missing"
        return "locked" if entry.source == "registry" else "placeholder"

    def pin(self, ref: ImageRef) -> ImageRef:
        """``ref`` with the locked digest (placeholder or not); unchanged where the lock has no entry.

        A reference that carries its own digest keeps it: a reviewed file may pin directly.
        """
        if ref.digest is not None:
            return ref
        entry = self.entry(ref)
        return ref.with_digest(entry.digest) if entry is not None else ref

    def with_entry(self, ref: ImageRef, entry: LockEntry) -> ImageLock:
        return replace(self, entries={**self.entries, ref.tagged: entry})

    def dump(self) -> str:
        body = {"images": {key: self.entries[key].as_dict() for key in sorted(self.entries)}}
        return HEADER + yaml.safe_dump(body, sort_keys=False, width=200)


def placeholder_digest(upstream: str) -> str:
    """The stand-in digest for an image nobody has asked a registry about (how runtimes/ started)."""
    return "sha256:" + hashlib.sha256(upstream.encode()).hexdigest()


def load_lock(path: Path) -> ImageLock:
    """The lock at ``path``; an absent file is an empty lock (every image then has status "missing")."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ImageLock(path=path)
    try:
        doc = yamlio.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise LockFileError(f"{path}: not valid YAML: {exc}") from None
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(images, dict):
        raise LockFileError(f"{path}: images: must be a mapping of image reference -> entry")
    entries: dict[str, LockEntry] = {}
    for key, raw in images.items():
        entries[str(key)] = _entry(path, str(key), raw)
    return ImageLock(entries, path)


def _entry(path: Path, key: str, raw: Any) -> LockEntry:
    where = f"{path}: images[{key!r}]"
    try:
        ref = ImageRef.parse(key)
    except ReferenceError as exc:
        raise LockFileError(f"{where}: {exc}") from None
    if ref.digest is not None or ref.tag is None:
        raise LockFileError(f"{where}: the key is a tagged reference without a digest (registry/repository:tag)")
    if not isinstance(raw, dict):
        raise LockFileError(f"{where}: must be a mapping with digest and source")
    digest, source, upstream = raw.get("digest"), raw.get("source"), raw.get("upstream")
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise LockFileError(f"{where}.digest: {digest!r} is not sha256:<64 hex>")
    if source not in ("registry", "placeholder"):
        raise LockFileError(f"{where}.source: {source!r} must be 'registry' or 'placeholder'")
    if upstream is not None and not isinstance(upstream, str):
        raise LockFileError(f"{where}.upstream: must be an image reference")
    unknown = sorted(set(raw) - {"digest", "source", "upstream"})
    if unknown:
        raise LockFileError(f"{where}: unknown fields {', '.join(unknown)}")
    return LockEntry(digest, source, upstream)


@dataclass(frozen=True)
class LockProblem:
    """An image a stack uses whose digest is not a registry's answer, or that renders without a digest.

    ``where`` (unpinned only) is where the image renders, ``fix`` the lock or BOM line that would fix it.
    """

    reference: str
    status: ProblemStatus
    error: bool
    where: str = ""
    fix: str = ""

    @property
    def message(self) -> str:
        if self.status == "unpinned":
            return f"{self.reference} renders without a digest at {self.where}: {self.fix}"
        what = ("has a placeholder digest (no registry reported it)" if self.status == "placeholder"
                else "has no entry in the image lock")
        return f"{self.reference} {what}"


def problems(lock: ImageLock, references: list[ImageRef], protect_data: bool) -> list[LockProblem]:
    """Placeholder or missing digests: errors on stacks that protect data, warnings elsewhere.

    A reference that carries its own digest was pinned in a reviewed file and needs no lock entry.
    """
    out = []
    for ref in sorted({r for r in references if r.digest is None}):
        status = lock.status(ref)
        if status != "locked":
            out.append(LockProblem(ref.tagged, status, error=protect_data))
    return out


def lock_line(lock: ImageLock, ref: ImageRef) -> str:
    """The lock file's entry for ``ref`` as a reader finds it: ``images.lock.yaml: <registry/repository:tag>``."""
    return f"{lock.path.name if lock.path else DEFAULT_LOCK_FILE}: {ref.tagged}"
