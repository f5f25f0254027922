"""Image references as the container runtimes read them: ``[registry/]repository[:tag][@digest]``.

A reference without a registry means Docker Hub (``docker.io``), and a one-part repository
there means ``library/<name>``. The registry part is the first path component when it
contains a ``.`` or a ``:`` or is ``localhost``.

Ref: https://github.com/distribution/reference/blob/main/reference.go (grammar and normalisation)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
# The host the Docker Hub registry API answers on (docker.io itself redirects).
DOCKER_HUB_API = "registry-1.docker.io"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


class ReferenceError(ValueError):
    """Not a valid image reference."""


@dataclass(frozen=True, order=True)
class ImageRef:
    """One image reference, normalised: the registry is always explicit."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        rest, _, digest = text.partition("@")
        if digest and not DIGEST.match(digest):
            raise ReferenceError(f"{text!r}: digest {digest!r} is not sha256:<64 hex>")
        first, slash, remainder = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, remainder
        else:
            registry, path = DOCKER_HUB, rest
        tag = None
        last_slash = path.rfind("/")
        colon = path.rfind(":")
        if colon > last_slash:
            path, tag = path[:colon], path[colon + 1:]
            if not _TAG.match(tag):
                raise ReferenceError(f"{text!r}: tag {tag!r} is not a valid tag")
        if registry == DOCKER_HUB and "/" not in path:
            path = f"library/{path}"
        if not _REPOSITORY.match(path):
            raise ReferenceError(f"{text!r}: repository {path!r} is not a valid repository name")
        if tag is None and not digest:
            raise ReferenceError(f"{text!r}: names neither a tag nor a digest")
        return cls(registry, path, tag, digest or None)

    @property
    def name(self) -> str:
        """``registry/repository``: what a pull names before the tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def tagged(self) -> str:
        """The reference without its digest (the key of the image lock)."""
        return f"{self.name}:{self.tag}" if self.tag else self.name

    @property
    def tag_with_digest(self) -> str:
        """``<tag>@<digest>``, or the tag alone where there is no digest: the ``tag`` value for a chart that
        composes ``<repository>:<tag>``, so the reference it renders pulls by digest and keeps the tag for
        readers (``name:tag@digest``: the runtime pulls the digest and ignores the tag)."""
        if self.tag is None:
            raise ValueError(f"{self}: names no tag")
        return f"{self.tag}@{self.digest}" if self.digest else self.tag

    def with_digest(self, digest: str | None) -> ImageRef:
        return ImageRef(self.registry, self.repository, self.tag, digest)

    def __str__(self) -> str:
        text = self.tagged
        return f"{text}@{self.digest}" if self.digest else text


def mirrored(upstream: ImageRef, mirror: str | None) -> ImageRef:
    """The upstream image under the platform's mirror prefix: ``<mirror><upstream repository>``.

    The upstream registry host is dropped, so ``registry.k8s.io/kueue/kueue`` becomes
    ``<mirror>kueue/kueue`` (the layout ``config.Images.registry_mirror`` documents).
    """
    if mirror is None:
        return upstream
    host, _, path = mirror.rstrip("/").partition("/")
    repository = f"{path}/{upstream.repository}" if path else upstream.repository
    return ImageRef(host, repository, upstream.tag, upstream.digest)
