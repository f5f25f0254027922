"""Trainyard's object-store provisioner image, built here: the factory's Python base and the pinned wheels.

The provisioning Job (``manifests/object_store.py`` ``provisioning_objects``) runs ``python3 /provision/object_store.py``
(the program comes from a ConfigMap) in ``object_store.provisioner_image``, Trainyard's own image, as uid/gid 1000 with
a read-only root filesystem. ``platform/trainyard/provisioning/image/`` says what the image holds: Python 3 and the
libraries of ``requirements.txt`` (boto3, the minio SDK), as its ``Containerfile`` installs them for a site's
pipeline. The rehearsal makes the same image from the same pins without a container build:

- the Python base (``python_base.py``: distroless ``python3-debian12``'s layers, from pinned Debian packages);
- one layer of wheels: ``requirements.lock`` (the closure of ``requirements.txt`` with every wheel's sha256; written by
  ``python -m trainyard.rehearsal.python_base lock requirements.txt requirements.lock``), installed into
  ``/usr/local/lib/python3.11/dist-packages`` (``wheels.py``);
- the Containerfile's config: ``USER 1000:1000`` (the Job's user), ``PYTHONDONTWRITEBYTECODE=1`` (the root filesystem
  is read-only: no ``__pycache__``), and ``python3`` as the command, as the Python images it names as ``BASE`` have.

Named as the stack names it (``registry.trainyard.internal/trainyard/object-store-provisioner:1.0.0``): the image is
Trainyard's own, so the name is not borrowed. The rehearsal pushes it to the loopback registry, which the real node's
containerd serves that host from (``rehearsal/node.py``), and locks its digest like the controllers'.
"""

from __future__ import annotations

from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests.object_store import RESTRICTED_USER
from trainyard.rehearsal import python_base, wheels
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, recipe_key
from trainyard.rehearsal.images import ImageError, Layer
from trainyard.supply.reference import ImageRef

IMAGE_DIR = Path(__file__).resolve().parent.parent / "provisioning" / "image"
REQUIREMENTS_LOCK = IMAGE_DIR / "requirements.lock"
COMPONENT = "object-store-provisioner"


def target(config: PlatformConfig) -> ImageRef:
    """The stack's provisioner image, by tag (the lock adds the digest the registry reports)."""
    if config.object_store is None:
        raise ImageError("the stack has no object_store: no provisioning Job, no provisioner image")
    return ImageRef.parse(config.object_store.provisioner_image).with_digest(None)


def image_config(name: ImageRef, pins: list[wheels.WheelPin]) -> dict[str, object]:
    return python_base.python_config(
        env=("PYTHONDONTWRITEBYTECODE=1",), Cmd=["python3"], User=f"{RESTRICTED_USER}:{RESTRICTED_USER}",
        WorkingDir="/",
        Labels={"org.opencontainers.image.version": str(name.tag),
                "dev.trainyard.built-from": "platform/trainyard/provisioning/image/requirements.lock: "
                                            + ", ".join(f"{p.name}=={p.version}" for p in pins)})


def build(config: PlatformConfig, cache: Path, root: Path = Path("/"), deb_cache: Path | None = None,
          wheel_cache: Path | None = None) -> BuiltImage:
    """The provisioner image (or the cached one of the same inputs)."""
    name = target(config)
    pins = wheels.read_lock(REQUIREMENTS_LOCK)
    image = image_config(name, pins)
    parts = [*python_base.key_parts(root), {"wheels": wheels.pins_key(pins), "into": python_base.WHEEL_TARGET.site_packages}]

    def layers() -> list[Layer]:
        return [*python_base.layers(root, deb_cache),
                wheels.wheels_layer(pins, python_base.WHEEL_TARGET, "requirements.lock", wheel_cache)]

    layout, digest, cached = cached_build(cache, recipe_key(parts, image), layers, image)
    return BuiltImage(COMPONENT, name, None, layout, digest, cached)
