"""Every image reference anywhere in rendered objects and chart values, found without knowing the field.

The bill of materials is built from the places Trainyard knows images live (controller images,
runtimes, chart templates, operand fields). This scan is its independent check: it walks every
value of every object and every chart release and recognises images however they are spelt, so
an image in a field nobody listed (an operator's operand, an env var, a controller argument) is
found and the coverage test (``tests/unit/test_bom_coverage.py``) names it.

Recognised:

- a string under an image-like key (``image``, ``imageName``, ``*Image``, ``*_IMAGE``; an env var
  ``{name: *IMAGE*, value: ...}``) that parses as a reference with a tag or digest, Docker Hub short
  names included;
- any other string, or a token of one (split at blanks, ``=``, ``,``, quotes), that parses as a
  reference naming its registry host (``host.tld/...``, ``host:port/...``, ``localhost/...``) and a
  tag or digest: controller arguments, JSON in a ConfigMap, scripts;
- a mapping with image parts in separate fields: ``repository``/``image``/``version`` (the GPU
  operator's ClusterPolicy and NVIDIADriver: ``<repository>/<image>:<version>``, or ``@<version>``
  for a digest), ``[registry/]repository``/``tag`` (Helm charts' convention; a ``digest`` too),
  ``image``/``tag`` (KServe's values).

Not recognised, by design: images a chart composes from values at different levels (SeaweedFS's
``global.imageRegistry`` + ``global.seaweedfs.image.name`` + ``image.tag``); the chart tier renders
those with helm and scans the output. CRDs are not scanned: their descriptions hold examples.

Ref: https://github.com/distribution/reference/blob/main/reference.go (the grammar
``supply.reference.ImageRef`` follows); NVIDIA gpu-operator internal/image/image.go ``ImagePath``
(``repository/image:version``, ``@`` when the version is a digest).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainyard.supply.reference import ImageRef, ReferenceError

if TYPE_CHECKING:
    from trainyard.manifests import RenderedPlatform

_TOKEN_SPLIT = re.compile(r"[\s=,\"'`()\[\]{}<>;|]+")
_EXPLICIT_HOST = re.compile(r"^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::[0-9]+)?|[A-Za-z0-9-]+:[0-9]+)/")


@dataclass(frozen=True, order=True)
class FoundImage:
    """One image reference found in a rendered value: where (a readable path) and the reference as composed."""

    reference: str
    where: str

    @property
    def ref(self) -> ImageRef:
        return ImageRef.parse(self.reference)


def image_key_like(key: str) -> bool:
    """A key that names an image: ``image``, ``imageName``, ``rbacProxyImage``, ``CACHE_IMAGE``, ``sidecarImage``."""
    lowered = key.lower()
    return lowered in ("image", "imagename") or lowered.endswith("image") or lowered.endswith("_image")


def _reference(text: str, explicit_host: bool) -> str | None:
    """``text`` if it is an image reference with a tag or digest (and, where asked, a registry host)."""
    if not text or len(text) > 512 or "://" in text or (explicit_host and not _EXPLICIT_HOST.match(text)):
        return None
    try:
        ImageRef.parse(text)
    except ReferenceError:
        return None
    return text


def images_in_text(text: str) -> list[str]:
    """Image references in free text: each token that names a registry host and a tag or digest."""
    whole = _reference(text.strip(), explicit_host=True)
    if whole is not None:
        return [whole]
    return [ref for token in _TOKEN_SPLIT.split(text) if (ref := _reference(token, explicit_host=True))]


def composed(parts: Mapping[str, Any]) -> str | None:
    """The reference a mapping spells in separate fields, or None.

    ``{repository, image, version}`` -> ``repository/image:version`` (``@version`` for a digest);
    ``{[registry,] repository, tag [, digest]}`` -> ``[registry/]repository:tag[@digest]``;
    ``{image, tag}`` -> ``image:tag``.
    """
    def text(key: str) -> str | None:
        value = parts.get(key)
        return value if isinstance(value, str) and value else None

    repository, image, version, tag = text("repository"), text("image"), text("version"), text("tag")
    registry, digest = text("registry"), text("digest")
    candidate = None
    if repository and image and version:
        separator = "@" if version.startswith("sha256:") else ":"
        candidate = f"{repository.rstrip('/')}/{image}{separator}{version}"
    elif repository and (tag or digest):
        name = f"{registry.rstrip('/')}/{repository}" if registry else repository
        candidate = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest and "@" not in (tag or "") else "")
    elif image and tag and "/" in image:
        candidate = f"{image}:{tag}"
    if candidate is None:
        return None
    return _reference(candidate, explicit_host=False)


def find_images(value: Any, where: str = "") -> list[FoundImage]:
    """Every image reference in ``value`` (a manifest, chart values, any JSON-like data), with its path."""
    return sorted(set(_walk(value, where, under_image_key=False)))


def _walk(value: Any, where: str, under_image_key: bool) -> Iterator[FoundImage]:
    if isinstance(value, Mapping):
        whole = composed(value)
        if whole is not None:
            yield FoundImage(whole, where or ".")
        env_name = value.get("name")
        env_image = isinstance(env_name, str) and "IMAGE" in env_name.upper() and isinstance(value.get("value"), str)
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if env_image and key == "value":
                path = f"{where}[{env_name}]"
            yield from _walk(item, path, under_image_key=image_key_like(str(key)) or (env_image and key == "value"))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, f"{where}[{index}]", under_image_key)
    elif isinstance(value, str):
        loose = _reference(value.strip(), explicit_host=False) if under_image_key else None
        for reference in ([loose] if loose else images_in_text(value)):
            yield FoundImage(reference, where)


def _object_name(obj: Mapping[str, Any]) -> str:
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')}/{namespace}{meta.get('name')}"


def objects_images(objects: Iterable[Mapping[str, Any]], prefix: str = "") -> list[FoundImage]:
    """Every image any of ``objects`` names (CRDs skipped: their descriptions hold example references)."""
    out: list[FoundImage] = []
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            out += find_images(obj, f"{prefix}{_object_name(obj)}")
    return out


def platform_images(rendered: RenderedPlatform) -> list[FoundImage]:
    """Every image the stack's rendered objects and the values of its installed charts name.

    A chart installed outside the stack (``external``) is not the stack's to pull, nor are its values.
    """
    found = objects_images(rendered.objects)
    for release in rendered.releases:
        if not release.external:
            found += find_images(release.values, f"chart:{release.name} values")
    return sorted(set(found))


def bom_key(reference: str) -> str:
    """What the bill of materials lists a reference as: tagged without the digest, or by digest alone."""
    ref = ImageRef.parse(reference)
    return ref.tagged if ref.tag else str(ref)
