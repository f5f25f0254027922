"""The image factory's cache and names: a built image as an OCI layout, keyed by everything it is made of.

Shared by every recipe (``factory.py``'s controllers, ``seaweedfs_image.py``, ``provisioner_image.py``), below all of
them. A layout is kept under ``$TRAINYARD_IMAGE_CACHE`` (default ``$XDG_CACHE_HOME/trainyard/images``) in a directory
named by ``recipe_key``: a hash of each layer's inputs (``layer_key``: every entry's path, mode, owner, link and content
hash, and its history line; or, for a layer of pinned Debian packages or wheels, the pins), the config and the layout
format. It is written to a temporary directory and renamed; an entry with a missing or short blob is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests.installs import component_version, upstream_image
from trainyard.rehearsal.images import ImageError, Layer, write_image, write_image_on
from trainyard.supply.reference import ImageRef, mirrored

# Bumped whenever write_image or the recipe changes how the same inputs are laid out (a new cache key).
LAYOUT_FORMAT = "trainyard.factory/v1"


@dataclass(frozen=True)
class BuiltImage:
    """An image the factory built, as an OCI layout: the name it is pushed under, and its manifest digest."""

    component: str
    target: ImageRef  # <mirror><upstream repository>:<tag>; Trainyard's own images: the stack's reference
    upstream: ImageRef | None  # None for Trainyard's own images
    layout: Path
    digest: str
    cached: bool  # the layout came from the cache
    note: str = ""  # what a reader of the image's name must know (a stand-in version)

    @property
    def reference(self) -> str:
        """What the stack renders once the lock holds this image's digest."""
        return f"{self.target.tagged}@{self.digest}"


def cache_root() -> Path:
    given = os.environ.get("TRAINYARD_IMAGE_CACHE")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainyard" / "images"


def targets(config: PlatformConfig, components: Iterable[str]) -> dict[str, ImageRef]:
    """The name each component's image is pushed under: what the stack's charts pull (before the lock's digest)."""
    return {component: mirror_target(config, upstream_image(config, component)) for component in components}


def role_upstream(config: PlatformConfig, component: str, role: str) -> ImageRef:
    """The upstream image of ``role`` in the stack's release of ``component``: a chart's image other than its
    controller's (KServe's storage initializer, its kube-rbac-proxy sidecar)."""
    image = catalog.release(component, component_version(config, component)).image_for(role)
    return ImageRef(image.registry, image.repository, image.tag)


def mirror_target(config: PlatformConfig, upstream: ImageRef) -> ImageRef:
    """``upstream`` under the stack's mirror, the name the factory pushes it as; refused without a mirror."""
    if config.images.registry_mirror is None:
        raise ImageError("the stack has no images.registry_mirror: the factory's images are pushed under a mirror's "
                         "names only (an image built here is not upstream's and must not be named as it)")
    return mirrored(upstream, config.images.registry_mirror)


def layer_key(layer: Layer) -> dict[str, object]:
    """What one layer is made of: every entry's path, mode, owner, link and content hash, and its history line."""
    return {"created_by": layer.created_by,
            "entries": [[e.path, e.mode, e.uid, e.gid, e.link, None if e.data is None else hashlib.sha256(e.data).hexdigest(),
                         *([[name, value.hex()] for name, value in e.xattrs] if e.xattrs else [])]
                        for e in sorted(layer.entries, key=lambda e: e.path)]}


def recipe_key(layers: Sequence[object], config: dict[str, object]) -> str:
    """A hash of a layout's inputs: each layer's key (``layer_key``, or its pins), the config, the layout format."""
    doc = {"format": LAYOUT_FORMAT, "config": config, "layers": list(layers)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_key(layers: Sequence[Layer], config: dict[str, object]) -> str:
    """A hash of everything the layout is made of: equal keys, byte-identical layouts."""
    return recipe_key([layer_key(layer) for layer in layers], config)


def layout_digest(layout: Path) -> str | None:
    """The manifest digest of a complete layout (every blob its manifest names present, of its size), else None."""
    try:
        index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
        digest = str(index["manifests"][0]["digest"])
        blobs = layout / "blobs" / "sha256"
        manifest_bytes = (blobs / digest.removeprefix("sha256:")).read_bytes()
        if "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() != digest:
            return None
        manifest = json.loads(manifest_bytes)
        for descriptor in [manifest["config"], *manifest["layers"]]:
            if (blobs / str(descriptor["digest"]).removeprefix("sha256:")).stat().st_size != descriptor["size"]:
                return None
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return digest


def cached_layout(cache: Path, layers: Sequence[Layer], config: dict[str, object]) -> tuple[Path, str, bool]:
    """The layout of ``layers`` + ``config`` from ``cache`` (built there first when absent): (path, digest, was cached)."""
    return cached_build(cache, input_key(layers, config), lambda: layers, config)


def cached_build(cache: Path, key: str, build: Callable[[], Sequence[Layer]],
                 config: dict[str, object], base: Path | None = None) -> tuple[Path, str, bool]:
    """The layout named ``key`` from ``cache``; when absent, ``build()``'s layers + ``config`` written there first (on
    the layers of the layout ``base``, when given: ``images.write_image_on``)."""
    final = cache / key
    digest = layout_digest(final)
    if digest is not None:
        return final, digest, True
    cache.mkdir(parents=True, exist_ok=True)
    temporary = cache / f".tmp-{final.name[:16]}-{os.getpid()}"
    digest = write_image(temporary, build(), config) if base is None else write_image_on(base, temporary, build(), config)
    shutil.rmtree(final, ignore_errors=True)  # an incomplete entry (a crash, a full disk) is rebuilt
    try:
        os.replace(temporary, final)
    except OSError:  # another build wrote the same entry meanwhile: same inputs, same bytes
        shutil.rmtree(temporary, ignore_errors=True)
    return final, digest, False
