"""The barman-cloud CNPG-I plugin's two images, built here: the plugin (operator side) and the sidecar it injects.

CloudNativePG archives WAL and takes base backups through the plugin (``manifests/mlflow.py``: the Cluster's
``plugins`` entry, the ``ObjectStore``, ``ScheduledBackup`` with ``method: plugin``). Upstream publishes
``ghcr.io/cloudnative-pg/plugin-barman-cloud`` and ``...-sidecar`` (``catalog.BARMAN_CLOUD_IMAGES``), which cannot be
pulled here; both are made from the plugin's module (``tools/build.sh barman-cloud``: its ``cmd/manager``, one binary
for ``operator``, ``instance`` and ``restore``, built as upstream's Dockerfiles build it) and, for the sidecar, from
Debian trixie and PyPI. Read in plugin-barman-cloud@v0.15.0 (v0.14.0's Dockerfiles are the same but for ``tar`` in
the sidecar):

**A stand-in, named as one**: the module proxy refuses two modules v0.15.0 requires
(``github.com/cloudnative-pg/barman-cloud@v0.6.0``, ``machinery@v0.6.0``: "403 This module version is not available")
and serves every module of v0.14.0, also built against CloudNativePG v1.30.0, whose ObjectStore schema is v0.15.0's but
one field description. So both images are v0.14.0's (binary and sidecar pins) under the v0.15.0 names the stack
renders, saying so (``STAND_INS``, the ``dev.trainyard.stands-in-for`` label, the factory's note), as SeaweedFS 4.53
stands in for 4.44; a tag without a record is refused.

- **plugin** (containers/Dockerfile.plugin): ``FROM registry.access.redhat.com/ubi9/ubi-micro``, ``WORKDIR /``,
  ``COPY manager /manager``, ``USER 65532:65532``, ``ENTRYPOINT ["/manager"]``. The binary is static (CGO_ENABLED=0):
  here it sits on the factory's distroless ``static:nonroot`` files (``base_layer.py``) instead of UBI micro, which
  adds a libc the binary never loads.
- **sidecar** (containers/Dockerfile.sidecar): the same ``/manager`` on ``gcr.io/distroless/python3-debian13:nonroot``
  (CPython 3.13), a virtualenv ``/venv`` of ``containers/sidecar-requirements.txt`` (barman 3.20.0 in v0.15.0, 3.19.1
  in v0.14.0, with its cloud, Azure, Google, snappy, zstandard and lz4 extras: ``barman-cloud-backup``,
  ``-wal-archive``, ``-restore``, ``-wal-restore``, which the instance sidecar runs by name from ``PATH``), trixie's
  ``libpq5``, ``liblz4-1``, ``libsnappy1v5`` and ``tar``, ``USER 26:26`` (PostgreSQL's uid in CloudNativePG's pods), ``ENTRYPOINT
  ["/manager"]``. Here: Debian trixie's own ``python3`` (3.13.5) and ``python3-psycopg2`` with those libraries
  (``pins/barman-cloud-trixie.txt``, slim), and the wheels of every other pin of that file at its version
  (``pins/barman-cloud.lock``: ``debian_python.lock_on_debian``) in ``/usr/local/lib/python3.13/dist-packages``, their
  scripts in ``/usr/local/bin``, on Debian's ``PATH``. **Differences, named**: psycopg2 is Debian's 2.9.10 where
  upstream compiles 2.9.12 from source against apt.postgresql.org's libpq (barman needs ``psycopg2>=2.4.2``; no
  compiler runs in the factory), and there is no virtualenv (``/usr/local`` is where the factory's wheels go).

Both are cached like the factory's other images (``image_cache``), keyed by the binary, the pins and this recipe.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.rehearsal import base_layer, debian, wheels
from trainyard.rehearsal.debian_python import (
    CA_BUNDLE,
    DEBIAN_PATH,
    NSSWITCH,
    PythonOnDebian,
    lock_on_debian,
    wheel_target,
    write_lock,
)
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, cached_layout, layer_key, recipe_key
from trainyard.rehearsal.images import Entry, ImageError, Layer, tool_binary
from trainyard.supply.reference import ImageRef, mirrored

COMPONENT = "barman-cloud"  # the factory's name for both images (not a chart: the site installs the plugin)
TOOL, BINARY = "barman-cloud", "barman-cloud-manager"  # tools/build.sh
PINS = Path(__file__).resolve().parent / "pins"
DEBIAN_PIN_FILE = PINS / "barman-cloud-trixie.txt"
WHEEL_LOCK = PINS / "barman-cloud.lock"
UPSTREAM_REQUIREMENTS = "containers/sidecar-requirements.txt"  # in the module; tools/build.sh copies it to share/
PYTHON = "3.13"
FROM_DEBIAN = {"psycopg2": "python3-psycopg2"}  # upstream's pins Debian provides instead (the module says why)
PLUGIN_USER, SIDECAR_UID = "65532:65532", 26
ENTRYPOINT = "/manager"
IMAGE = "the barman-cloud sidecar"  # how errors name it


@dataclass(frozen=True)
class StandIn:
    """What the rehearsal builds for the plugin version the catalog pins, and why."""

    module_version: str  # tools/build.sh barman-cloud (BARMAN_CLOUD_BUILD_VERSION): binary and sidecar pins
    why: str


# The catalog's plugin version -> what is built for it (the module docstring says why; tools/build.sh pins the sum).
STAND_INS = {"v0.15.0": StandIn("v0.14.0", "the module proxy refuses github.com/cloudnative-pg/barman-cloud@v0.6.0 and "
                                           "machinery@v0.6.0, which v0.15.0 requires")}


def stand_in() -> StandIn:
    """The build for ``catalog.BARMAN_CLOUD_PLUGIN_VERSION``; refused where there is no record."""
    record = STAND_INS.get(catalog.BARMAN_CLOUD_PLUGIN_VERSION)
    if record is None:
        raise ImageError(f"no build recorded for plugin-barman-cloud {catalog.BARMAN_CLOUD_PLUGIN_VERSION} "
                         f"(barman_cloud_image.STAND_INS has {', '.join(STAND_INS)}): review what the module proxy "
                         "serves and record it")
    return record


def upstream_images() -> dict[str, ImageRef]:
    """``plugin`` and ``sidecar``: the upstream images the catalog pins."""
    return {role: ImageRef(i.registry, i.repository, i.tag) for role, i in catalog.BARMAN_CLOUD_IMAGES}


def targets(config: PlatformConfig) -> dict[str, ImageRef]:
    """The names the two images are pushed under: upstream's under the stack's mirror (refused without one)."""
    mirror = config.images.registry_mirror
    if mirror is None:
        raise ImageError("the stack sets no images.registry_mirror: the barman-cloud images built here are not "
                         "upstream's and must not be pushed under upstream's names")
    return {role: mirrored(image, mirror) for role, image in upstream_images().items()}


def plugin_binary(tools_dir: Path) -> bytes:
    """``tools/build.sh barman-cloud``'s binary, refused unless a static x86-64 ELF of the pinned version."""
    return tool_binary(tools_dir, BINARY, TOOL, stand_in().module_version,
                       source=f"{catalog.BARMAN_CLOUD_PLUGIN_MODULE}@", pinned_by="the image recipe expects")


def manager_layer(binary: bytes) -> Layer:
    return Layer((Entry("manager", binary, mode=0o755),),
                 f"COPY /manager: {BINARY} built by tools/build.sh from {catalog.BARMAN_CLOUD_PLUGIN_MODULE}@"
                 f"{stand_in().module_version} ./cmd/manager (CGO_ENABLED=0, -trimpath)")


def _labels(upstream: ImageRef, built_from: str) -> dict[str, str]:
    record = stand_in()
    return {"org.opencontainers.image.version": str(upstream.tag), "dev.trainyard.upstream-image": str(upstream),
            "dev.trainyard.built-from": built_from,
            "dev.trainyard.stands-in-for": f"{upstream} (plugin-barman-cloud {upstream.tag}), built from "
                                           f"{record.module_version}: {record.why}"}


def plugin_config(upstream: ImageRef) -> dict[str, object]:
    return {"Entrypoint": [ENTRYPOINT], "Env": list(base_layer.ENV), "User": PLUGIN_USER, "WorkingDir": "/",
            "Labels": _labels(upstream, f"{catalog.BARMAN_CLOUD_PLUGIN_MODULE}@{stand_in().module_version} "
                                        "./cmd/manager (containers/Dockerfile.plugin)")}


# ------------------------------------------------------------------------------------------ the sidecar's Python


def upstream_pins(text: str, source: str) -> dict[str, str]:
    """``name -> version`` of a pip-compile'd requirements file (``name==version \\`` lines, hashes skipped)."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line or line.startswith("--"):
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip() or " " in version.strip():
            raise ImageError(f"{source}:{number}: {line!r} is not an exact `name==version` pin")
        pins[wheels.canonical(name.split("[")[0].strip())] = version.strip()
    if "barman" not in pins:
        raise ImageError(f"{source}: pins no barman")
    return pins


def check_upstream_pins(upstream: dict[str, str], locked: Sequence[wheels.WheelPin]) -> None:
    """Every upstream pin is in the lock at its version, but those Debian provides (``FROM_DEBIAN``)."""
    have = {p.name: p.version for p in locked}
    problems = [f"{name}=={version}: the lock has {have.get(name, 'none')}" for name, version in sorted(upstream.items())
                if name not in FROM_DEBIAN and have.get(name) != version]
    problems += [f"{name} is a wheel in the lock: Debian's {package} stands for it" for name, package in
                 FROM_DEBIAN.items() if name in have]
    if problems:
        raise ImageError(f"{WHEEL_LOCK.name} is not {UPSTREAM_REQUIREMENTS} of plugin-barman-cloud@"
                         f"{stand_in().module_version} (`python -m trainyard.rehearsal.barman_cloud_image lock "
                         "REQUIREMENTS` rewrites it):\n  " + "\n  ".join(problems))


def check_debian_stands_in(pins: debian.PinFile) -> None:
    missing = [package for package in FROM_DEBIAN.values() if package not in {p.name for p in pins.pins}]
    if missing:
        raise ImageError(f"{DEBIAN_PIN_FILE.name} pins no {', '.join(missing)}, which stands for upstream's pin")


def sidecar_user_layer(bundle: bytes) -> Layer:
    """distroless's passwd and group (no entry for 26, as upstream's image has none), /tmp, nsswitch.conf, CA bundle."""
    entries = (Entry("etc", mode=0o755), Entry("etc/passwd", base_layer.PASSWD.encode(), mode=0o644),
               Entry("etc/group", base_layer.GROUP.encode(), mode=0o644), Entry("etc/nsswitch.conf", NSSWITCH, mode=0o644),
               Entry("etc/ssl", mode=0o755), Entry("etc/ssl/certs", mode=0o755), Entry(CA_BUNDLE, bundle, mode=0o644),
               Entry("tmp", mode=0o1777))
    return Layer(entries, "distroless passwd/group, /tmp, nsswitch.conf, the CA bundle of the pinned ca-certificates")


def sidecar_config(upstream: ImageRef, pins: debian.PinFile, locked: Sequence[wheels.WheelPin]) -> dict[str, object]:
    versions = {p.name: p.version for p in pins.pins}
    barman = next(p.version for p in locked if p.name == "barman")
    return {"Entrypoint": [ENTRYPOINT], "Env": [f"PATH={DEBIAN_PATH}", "LANG=C.UTF-8", f"SSL_CERT_FILE=/{CA_BUNDLE}"],
            "User": f"{SIDECAR_UID}:{SIDECAR_UID}", "WorkingDir": "/",
            "Labels": {**_labels(upstream, f"{catalog.BARMAN_CLOUD_PLUGIN_MODULE}@{stand_in().module_version} ./cmd/manager, "
                                           f"{DEBIAN_PIN_FILE.name} ({len(pins.pins)} Debian packages), "
                                           f"{WHEEL_LOCK.name} ({len(locked)} wheels, barman {barman})"),
                       "dev.trainyard.differs": f"psycopg2 is Debian's python3-psycopg2 {versions['python3-psycopg2']}; "
                                                f"CPython {PYTHON} is Debian's python{PYTHON} "
                                                f"{versions[f'python{PYTHON}']}; no /venv (wheels in /usr/local)"}}


def build(config: PlatformConfig, tools_dir: Path, cache: Path, deb_cache: Path | None = None,
          wheel_cache: Path | None = None, apt_cache: Path | None = None) -> list[BuiltImage]:
    """The plugin's image and the sidecar's (or the cached ones of the same inputs)."""
    names, upstream = targets(config), upstream_images()
    binary = plugin_binary(tools_dir)
    requirements = tools_dir / "share" / TOOL / UPSTREAM_REQUIREMENTS
    try:
        production = upstream_pins(requirements.read_text(encoding="utf-8"), str(requirements))
    except OSError as exc:
        raise ImageError(f"{requirements}: {exc.strerror}: `tools/build.sh {TOOL}` copies it out of the module") from None
    pins = debian.read_pins(DEBIAN_PIN_FILE)
    check_debian_stands_in(pins)
    locked = wheels.read_lock(WHEEL_LOCK)
    check_upstream_pins(production, locked)
    base = PythonOnDebian(pins, DEBIAN_PIN_FILE.name, tuple(locked), WHEEL_LOCK.name, PYTHON, IMAGE,
                          tuple(debian.merged_usr_links([])), apt_cache)
    ca_pin = base.ca_pin
    manager = manager_layer(binary)

    plugin_layout, plugin_digest, plugin_cached = cached_layout(
        cache, [base_layer.base_layer(), manager], plugin_config(upstream["plugin"]))

    def layers() -> list[Layer]:
        return [*base.layers(deb_cache, wheel_cache), manager, sidecar_user_layer(base.ca_bundle(deb_cache))]

    config_doc = sidecar_config(upstream["sidecar"], pins, locked)
    parts = [*base.key_parts(), layer_key(manager),
             {"user": layer_key(sidecar_user_layer(b"")), "ca-bundle-of": debian.pins_key([ca_pin])}]
    sidecar_layout, sidecar_digest, sidecar_cached = cached_build(cache, recipe_key(parts, config_doc), layers, config_doc)
    built = stand_in().module_version
    return [BuiltImage(COMPONENT, names["plugin"], upstream["plugin"], plugin_layout, plugin_digest, plugin_cached,
                       note=f"stand-in: plugin-barman-cloud {built}"),
            BuiltImage(COMPONENT, names["sidecar"], upstream["sidecar"], sidecar_layout, sidecar_digest, sidecar_cached,
                       note=f"stand-in: plugin-barman-cloud {built}; Debian's psycopg2 and CPython {PYTHON}, wheels in "
                            "/usr/local")]


# ------------------------------------------------------------------------------------------ locking


def lock(requirements: Path, deb_cache: Path | None = None, apt_cache: Path | None = None) -> str:
    """The sidecar's wheel lock: upstream's pins (``requirements``) but those Debian provides, resolved on Debian's."""
    production = upstream_pins(requirements.read_text(encoding="utf-8"), str(requirements))
    pins = debian.read_pins(DEBIAN_PIN_FILE)
    check_debian_stands_in(pins)
    target = wheel_target(pins, PYTHON, DEBIAN_PIN_FILE.name)
    body = lock_on_debian([f"{n}=={v}" for n, v in production.items() if n not in FROM_DEBIAN], pins, PYTHON, IMAGE,
                          deb_cache, apt_cache)
    return (f"# The wheels the barman-cloud sidecar (rehearsal/barman_cloud_image.py) adds to Debian {pins.suite}'s "
            f"python3 and python3-psycopg2:\n# {UPSTREAM_REQUIREMENTS} of plugin-barman-cloud@"
            f"{stand_in().module_version} less psycopg2, for CPython {PYTHON} on glibc "
            f"{target.glibc[0]}.{target.glibc[1]} (x86-64).\n# Written by `python -m trainyard.rehearsal."
            "barman_cloud_image lock REQUIREMENTS`; the image factory installs exactly these files.\n" + body)


def main(argv: Sequence[str]) -> int:
    """``python -m trainyard.rehearsal.barman_cloud_image lock REQUIREMENTS``: rewrite pins/barman-cloud.lock."""
    if len(argv) != 2 or argv[0] != "lock":
        print("usage: python -m trainyard.rehearsal.barman_cloud_image lock "
              f"TOOLS_DIR/share/{TOOL}/{UPSTREAM_REQUIREMENTS}", file=sys.stderr)
        return 2
    return write_lock(WHEEL_LOCK, lambda: lock(Path(argv[1])))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
