"""KServe's storage initializer image, built here: ``kserve-storage`` from pinned wheels on the factory's Python base.

KServe runs it as the ``storage-initializer`` init container of every predictor pod whose InferenceService has a
``storageUri`` (or ``storageUris``): the kserve-resources chart's ``ClusterStorageContainer`` names it
(``kserve.storage.image``/``tag``, ``manifests/serving.py`` ``chart_values``), and the pod mutator gives it, with no
command, the arguments ``SOURCE_URI DEST_PATH`` per location (``/mnt/models``; ``storageUris``' ``mountPath``s) and the
S3 settings of the predictor's ServiceAccount's Secret as environment (``AWS_ACCESS_KEY_ID``, ``S3_ENDPOINT``, ...).

Upstream, ``kserve/storage-initializer:v0.20.0`` is ``python/storage-initializer.Dockerfile`` at that tag: ``FROM
python:3.11-slim-bookworm``, a virtualenv ``/prod_venv`` of the ``kserve-storage`` package (``python/storage``,
poetry-locked) on ``PATH``, ``useradd kserve -m -u 1000 -d /home/kserve``, ``/storage-initializer/scripts/
initializer-entrypoint`` (a Python script: source/destination pairs to ``kserve_storage.Storage.download_files``),
``WORKDIR /work``, ``USER 1000``, ``ENTRYPOINT ["/storage-initializer/scripts/initializer-entrypoint"]``.

The rehearsal makes the same, without a registry or a container build:

- the Python base (``python_base.py``: distroless ``python3-debian12`` from pinned Debian bookworm packages): CPython
  3.11, upstream's version;
- the user (one small layer): ``kserve`` 1000:1000 beside distroless's entries, its home ``/home/kserve`` and the
  ``WORKDIR`` ``/work``;
- one layer of wheels: ``pins/storage-initializer.lock``, the closure of ``pins/storage-initializer-requirements.txt``
  (``kserve-storage==0.20.0``, the version the data-plane tier runs the same code at) for the base's interpreter, each
  by sha256, in ``/usr/local/lib/python3.11/dist-packages`` (``wheels.py``);
- the entrypoint (one layer): ``ENTRYPOINT_SCRIPT`` below at upstream's path, ``#!/usr/bin/python3.11`` (the base has
  no ``/usr/bin/env``): it takes the same arguments and calls the same function upstream's script does.

Config: ``User 1000:1000``, ``WorkingDir /work``, upstream's ``Entrypoint``, the base's environment with
``PYTHONDONTWRITEBYTECODE=1`` (the site directory is root's). Not there, unlike upstream: HDFS and Kerberos
(``krbcontext``, ``hdfs``, ``requests-kerberos``: upstream adds them by pip beside the lock), ``/prod_venv``, pip, a
shell.

Named under the stack's mirror as the chart's values name it: ``<mirror>kserve/storage-initializer:v0.20.0``. Built
where the stack installs KServe's chart (``factory.build_images`` with ``kserve``), beside the controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.rehearsal import base_layer, python_base, wheels
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, mirror_target, recipe_key, role_upstream
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.supply.reference import ImageRef

COMPONENT = "kserve"  # the chart whose values name the image
ROLE = "storage-initializer"  # its image in the catalog's KServe release
UPSTREAM_SOURCE = "https://github.com/kserve/kserve"
UPSTREAM_BASE = "python:3.11-slim-bookworm"  # python/storage-initializer.Dockerfile: BASE_IMAGE
USER = 1000
USER_NAME = "kserve"
HOME = "home/kserve"
WORKDIR = "work"
ENTRYPOINT = "storage-initializer/scripts/initializer-entrypoint"
PINS = Path(__file__).resolve().parent / "pins"
REQUIREMENTS = PINS / "storage-initializer-requirements.txt"
WHEEL_LOCK = PINS / "storage-initializer.lock"
RELOCK = ("python -m trainyard.rehearsal.python_base lock platform/trainyard/rehearsal/pins/storage-initializer-"
          "requirements.txt platform/trainyard/rehearsal/pins/storage-initializer.lock")
PACKAGE = "kserve-storage"

# Trainyard's entrypoint: upstream's contract (arguments are SOURCE DEST pairs; kserve_storage configures its logging,
# then downloads each pair in order), written here.
ENTRYPOINT_SCRIPT = f'''#!/usr/bin/python{python_base.PYTHON}
"""KServe's storage initializer: download each SOURCE_URI to its DEST_PATH (kserve_storage.Storage.download_files)."""
import sys

from kserve_storage import Storage, configure_logging, logger

configure_logging()
pairs = sys.argv[1:]
if not pairs or len(pairs) % 2:
    print("usage: initializer-entrypoint SOURCE_URI DEST_PATH [SOURCE_URI DEST_PATH ...]", file=sys.stderr)
    sys.exit(2)
logger.info("Initializing, args: (src_uri, dest_path): %s", list(zip(pairs[0::2], pairs[1::2])))
Storage.download_files(pairs[0::2], pairs[1::2])
'''.encode()


def upstream(config: PlatformConfig) -> ImageRef:
    """The image the KServe chart's storage initializer names upstream, at the stack's KServe version."""
    return role_upstream(config, COMPONENT, ROLE)


def target(config: PlatformConfig) -> ImageRef:
    """Upstream's name under the stack's mirror (refused without one)."""
    return mirror_target(config, upstream(config))


def top_level_pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """The requirements file's pins, by canonical name."""
    return {wheels.canonical(name): version for name, version in wheels.top_level_pins(path).items()}


def check_lock(top: Mapping[str, str], pins: Sequence[wheels.WheelPin], tag: str) -> None:
    """The lock pins the requirements at their versions, and kserve-storage at the chart's KServe version."""
    locked = {p.name: p.version for p in pins}
    drifted = [f"{name}=={version} (locked: {locked.get(name, 'none')})" for name, version in top.items()
               if locked.get(name) != version]
    if drifted:
        raise ImageError(f"{WHEEL_LOCK.name} is not {REQUIREMENTS.name}: {', '.join(drifted)}; rewrite it with `{RELOCK}`")
    if "v" + locked.get(PACKAGE, "none") != tag:
        raise ImageError(f"the KServe chart runs the storage initializer {tag}; {WHEEL_LOCK.name} has {PACKAGE} "
                         f"{locked.get(PACKAGE, 'none')}")


def user_layer() -> Layer:
    passwd = base_layer.PASSWD + f"{USER_NAME}:x:{USER}:{USER}::/{HOME}:/sbin/nologin\n"
    group = base_layer.GROUP + f"{USER_NAME}:x:{USER}:\n"
    entries = (Entry("etc", mode=0o755), Entry("etc/passwd", passwd.encode(), mode=0o644),
               Entry("etc/group", group.encode(), mode=0o644), Entry("home", mode=0o755),
               Entry(HOME, mode=0o755, uid=USER, gid=USER), Entry(WORKDIR, mode=0o755))
    return Layer(entries, f"useradd {USER_NAME} -m -u {USER} -d /{HOME}; mkdir /{WORKDIR} (upstream's)")


def entrypoint_layer() -> Layer:
    parents = ["storage-initializer", "storage-initializer/scripts"]
    return Layer((*(Entry(d, mode=0o755) for d in parents), Entry(ENTRYPOINT, ENTRYPOINT_SCRIPT, mode=0o755)),
                 f"COPY /{ENTRYPOINT} (Trainyard's, upstream's contract: SOURCE DEST pairs to Storage.download_files)")


def image_config(name: ImageRef, pins: Sequence[wheels.WheelPin]) -> dict[str, object]:
    python = next(p.version for p in python_base.PYTHON_PINS if p.name == f"python{python_base.PYTHON}-minimal")
    return python_base.python_config(
        env=("PYTHONDONTWRITEBYTECODE=1",), Entrypoint=[f"/{ENTRYPOINT}"], User=f"{USER}:{USER}",
        WorkingDir=f"/{WORKDIR}",
        Labels={"org.opencontainers.image.version": str(name.tag),
                "org.opencontainers.image.source": UPSTREAM_SOURCE,
                "dev.trainyard.built-from": f"{REQUIREMENTS.name}: {PACKAGE}=={top_level_pins()[PACKAGE]}; "
                                            f"{WHEEL_LOCK.name}: {len(pins)} wheels",
                "dev.trainyard.python": f"CPython {python_base.PYTHON} (Debian bookworm python{python_base.PYTHON}-minimal "
                                        f"{python}) for upstream's {UPSTREAM_BASE}",
                "dev.trainyard.differs": "no HDFS or Kerberos libraries; no /prod_venv (wheels in /usr/local); "
                                         "Trainyard's initializer-entrypoint with upstream's arguments"})


def build(config: PlatformConfig, cache: Path, root: Path = Path("/"), deb_cache: Path | None = None,
          wheel_cache: Path | None = None) -> BuiltImage:
    """The storage initializer image (or the cached one of the same inputs)."""
    name, source = target(config), upstream(config)
    pins = wheels.read_lock(WHEEL_LOCK)
    check_lock(top_level_pins(), pins, str(source.tag))
    image = image_config(source, pins)
    user, entry = user_layer(), entrypoint_layer()
    parts = [*python_base.key_parts(root), layer_key(user), layer_key(entry),
             {"wheels": wheels.pins_key(pins), "into": python_base.WHEEL_TARGET.site_packages}]

    def layers() -> list[Layer]:
        return [*python_base.layers(root, deb_cache), user,
                wheels.wheels_layer(pins, python_base.WHEEL_TARGET, WHEEL_LOCK.name, wheel_cache), entry]

    layout, digest, cached = cached_build(cache, recipe_key(parts, image), layers, image)
    return BuiltImage(COMPONENT, name, source, layout, digest, cached,
                      note=f"{PACKAGE} {top_level_pins()[PACKAGE]} on CPython {python_base.PYTHON}")
