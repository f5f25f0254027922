"""The MLflow chart's busybox image, built here from BusyBox's source: the chart's two init containers run it.

The community MLflow chart (1.11.5) runs ``docker.io/library/busybox:1.38.0`` (``initImages.dbchecker`` and
``initImages.iniFileInitializer``, values.yaml) twice before its server starts:

- ``dbchecker``: ``/script/dbchecker.sh`` (files/dbchecker.sh, ``#!/bin/sh``), which waits with ``until nc -z -w 2
  $HOST $PORT`` and a ``function fib()`` back-off, for the database to listen: busybox's ``ash`` with its bash
  compatibility (``[[``, ``function``) and ``nc`` with ``-z`` (``CONFIG_NC_EXTRA``);
- the ini-file initializer: ``sh -c 'sed -e ... /template/auth_template.ini > /config/auth_result.ini'``
  (templates/deployment.yaml:283-300), which writes basic-auth's configuration with the admin's and the database's
  credentials.

Debian's busybox packages cannot stand in: neither ``busybox`` nor ``busybox-static`` (bookworm's 1.35.0, trixie's
1.37.0) is built with ``CONFIG_NC_EXTRA``, so their ``nc`` refuses ``-z`` ("invalid option -- 'z'", tried) and the
dbchecker would wait forever. So the factory compiles BusyBox as the official image's ``glibc`` variant is built
(upstream's ``make defconfig``, a static binary) from the source Debian ships, ``busybox_1.37.0.orig.tar.bz2`` (the
newest release any Debian suite has; 1.38.0's source is only on busybox.net), fetched from deb.debian.org by the
sha256 trixie's ``Sources`` gives it (``SOURCE_SHA256``). Two changes to defconfig: ``CONFIG_STATIC=y`` (no loader in
the image) and ``CONFIG_TC`` off (its ``tc.c`` uses the CBQ scheduler that Linux 6.8 removed from its headers; the
chart never runs ``tc``). The build is reproducible: ``SOURCE_DATE_EPOCH=0`` and ``KCONFIG_NOTIMESTAMP=1`` keep the
date out (the banner says ``BusyBox v1.37.0 ()``), and two builds gave the same bytes. It needs gcc, make and the C
library's headers (``make node-packages``); ~40 s of CPU, once: the image is cached by its inputs.

The image: ``/bin/busybox`` and a link per applet in ``/bin`` (as upstream's ``busybox --install``), a world-writable
``/tmp``, upstream's config (``Cmd ["sh"]``, its ``PATH``); named as the chart pulls it, under the stack's mirror
(``<mirror>library/busybox:1.38.0``, the MLflow release's ``busybox`` image in the catalog). The chart's pod runs it
as uid 1001 with a read-only root filesystem (Trainyard's restricted container securityContext).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.rehearsal import debian
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, recipe_key
from trainyard.rehearsal.images import ImageError, Layer, busybox_entries, busybox_version, is_static_elf
from trainyard.supply.reference import ImageRef, mirrored

COMPONENT = "mlflow"  # the chart whose init containers run it
ROLE = "busybox"  # its image's role in the catalog's MLflow release
VERSION = "1.37.0"
SOURCE_NAME = f"busybox_{VERSION}.orig.tar.bz2"
SOURCE_URL = f"{debian.MIRROR}/pool/main/b/busybox/{SOURCE_NAME}"
# trixie's Sources (busybox 1:1.37.0-6): Checksums-Sha256 of the orig tarball.
SOURCE_SHA256 = "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4"
# What differs from upstream's defconfig (``make defconfig``), as .config lines.
CONFIG = ("CONFIG_STATIC=y", "# CONFIG_TC is not set")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the official image's
BUILD_ENV = {"SOURCE_DATE_EPOCH": "0", "KCONFIG_NOTIMESTAMP": "1", "LC_ALL": "C", "TZ": "UTC"}


def upstream(config: PlatformConfig) -> ImageRef:
    image = catalog.release(COMPONENT, config.versions.mlflow).image_for(ROLE)
    return ImageRef(image.registry, image.repository, image.tag)


def target(config: PlatformConfig) -> ImageRef:
    """The name the chart's init containers pull (before the lock's digest): upstream's under the stack's mirror."""
    if config.images.registry_mirror is None:
        raise ImageError("the stack has no images.registry_mirror: the factory pushes under the mirror's names")
    return mirrored(upstream(config), config.images.registry_mirror)


def source(cache: Path) -> Path:
    """The source tarball from the cache, downloaded from deb.debian.org first when absent; refused unless its
    sha256 is ``SOURCE_SHA256``."""
    path = cache / SOURCE_NAME
    if path.is_file() and debian.sha256_file(path) == SOURCE_SHA256:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".part-{os.getpid()}")
    try:
        with urllib.request.urlopen(SOURCE_URL, timeout=120) as response, partial.open("wb") as out:  # noqa: S310
            shutil.copyfileobj(response, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ImageError(f"BusyBox's source {SOURCE_URL}: {exc} (deb.debian.org must be reachable, or put "
                         f"{SOURCE_NAME} in {cache})") from None
    got = debian.sha256_file(partial)
    if got != SOURCE_SHA256:
        partial.unlink(missing_ok=True)
        raise ImageError(f"{SOURCE_URL}: sha256 {got}, pinned {SOURCE_SHA256}: refused")
    os.replace(partial, path)
    return path


def _compiler() -> str:
    """What compiles it (part of the cache key: another compiler may give other bytes)."""
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        raise ImageError(f"{' and '.join(missing)} not found: BusyBox is compiled here for the MLflow chart's init "
                         "containers (apt-get install gcc make libc6-dev; `make node-packages`)")
    result = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True)  # noqa: S607
    return result.stdout.splitlines()[0]


def _option(line: str) -> str | None:
    """The option a .config line sets (``CONFIG_X=...``) or leaves unset (``# CONFIG_X is not set``)."""
    if line.startswith("CONFIG_"):
        return line.split("=", 1)[0]
    if line.startswith("# CONFIG_") and line.endswith(" is not set"):
        return line[2:].split(" ", 1)[0]
    return None


def configured(defconfig: str) -> str:
    """``defconfig``'s .config with ``CONFIG``'s lines in place of its own for those options."""
    changed = {_option(line) for line in CONFIG}
    kept = [line for line in defconfig.splitlines() if _option(line) not in changed]
    return "\n".join([*kept, *CONFIG]) + "\n"


def compile_busybox(tarball: Path, work: Path) -> bytes:
    """``make defconfig`` with ``CONFIG``, ``make busybox``: the static binary's bytes."""
    with tarfile.open(tarball) as archive:
        archive.extractall(work, filter="data")
    tree = work / f"busybox-{VERSION}"
    env = {**os.environ, **BUILD_ENV}

    def make(*args: str, stdin: str | None = None) -> None:
        result = subprocess.run(["make", *args], cwd=tree, env=env, input=stdin, capture_output=True,  # noqa: S603, S607
                                text=True, check=False)
        if result.returncode != 0:
            raise ImageError(f"BusyBox {VERSION}: make {' '.join(args)} failed:\n"
                             f"{(result.stderr or result.stdout).strip()[-2000:]}")

    make("defconfig")
    config = tree / ".config"
    config.write_text(configured(config.read_text()))
    make("oldconfig", stdin="\n" * 200)  # what the changes leave undecided takes its default
    make(f"-j{os.cpu_count() or 1}", "busybox")
    data = (tree / "busybox").read_bytes()
    if not is_static_elf(data):
        raise ImageError(f"BusyBox {VERSION} did not link statically (the C library's static archive is in libc6-dev)")
    return data


def applets(binary: Path) -> list[str]:
    result = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=True)  # noqa: S603
    return sorted(name for name in result.stdout.split() if name != "busybox")


def layer(data: bytes, work: Path) -> Layer:
    """``/bin/busybox``, a link per applet, ``/tmp``."""
    binary = work / "busybox"
    binary.write_bytes(data)
    binary.chmod(0o755)
    version = busybox_version(binary)
    if version != VERSION:
        raise ImageError(f"the compiled BusyBox says version {version}, not {VERSION}")
    names = applets(binary)
    return Layer(tuple(busybox_entries(data, names)),
                 f"BusyBox {VERSION} ({SOURCE_NAME}, defconfig + {', '.join(CONFIG)}): /bin/busybox and "
                 f"{len(names)} applet links")


def image_config(config: PlatformConfig) -> dict[str, object]:
    return {"Cmd": ["sh"], "Env": [f"PATH={PATH}"],
            "Labels": {"org.opencontainers.image.version": VERSION,
                       "dev.trainyard.upstream-image": str(upstream(config)),
                       "dev.trainyard.built-from": f"{SOURCE_URL} sha256:{SOURCE_SHA256}; make defconfig, "
                                                   + ", ".join(CONFIG)}}


def build(config: PlatformConfig, cache: Path, source_cache: Path | None = None) -> BuiltImage:
    """The chart's busybox image (or the cached one of the same inputs: source, config, compiler)."""
    name = target(config)
    image = image_config(config)
    parts = [{"source": SOURCE_SHA256, "config": list(CONFIG), "env": BUILD_ENV, "compiler": _compiler()}]

    def layers() -> list[Layer]:
        tarball = source(source_cache or debian.cache_root().parent / "sources")
        with tempfile.TemporaryDirectory(prefix="trainyard-busybox-") as work:
            data = compile_busybox(tarball, Path(work))
            return [layer(data, Path(work))]

    layout, digest, cached = cached_build(cache, recipe_key(parts, image), layers, image)
    return BuiltImage(COMPONENT, name, upstream(config), layout, digest, cached,
                      note=f"BusyBox {VERSION} from source standing in for {upstream(config).tag}")

