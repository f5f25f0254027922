"""The PostgreSQL operand image CloudNativePG runs each instance in, built here from Debian's packages.

Upstream's images (cloudnative-pg/postgres-containers ``Dockerfile``, target ``minimal``) are ``debian:trixie-slim``
plus ``postgresql-<major>`` from apt.postgresql.org, ``libsasl2-modules`` and ``libldap-common``, with the packaged
``postgres`` user's uid changed to 26 (``usermod -u 26 postgres``, ``USER 26``) and
``PATH=$PATH:/usr/lib/postgresql/<major>/bin``. Neither registry nor apt.postgresql.org is reachable here, so the
image is made of Debian's own packages (``rehearsal/debian.py``: a pin file holding a closure of trixie's packages,
downloaded with apt through a private apt root, SHA-256 checked, unpacked as distroless does, without what
``debian:trixie-slim`` drops), which is why the major is the one Debian trixie ships, 17
(``catalog.POSTGRESQL_OPERANDS``; docs/architecture.md says why not 18).

What CloudNativePG needs of it (cloudnative-pg@v1.30.0:docs/src/container_images.md, "Container Image Requirements"):

- ``initdb``, ``postgres``, ``pg_ctl``, ``pg_controldata``, ``pg_basebackup`` on ``PATH``: Debian installs them in
  ``/usr/lib/postgresql/17/bin``, which the image's ``PATH`` ends with, as upstream's does;
- locales: CloudNativePG runs ``initdb --encoding=UTF8 --lc-collate=C --lc-ctype=C`` unless the Cluster says
  otherwise (api/v1/cluster_types.go:1888-1894, pkg/specs/jobs.go:142-148); ``C`` and ``C.UTF-8`` are glibc's own
  (``libc6`` ships ``/usr/lib/locale/C.utf8``), as in upstream's minimal image. Other locales need upstream's
  ``standard`` flavour (``locales-all``), which is not built here;
- no entry point: the operator runs its instance manager (``/controller/manager``, copied in by the
  ``bootstrap-controller`` init container from the operator image).

Besides the packages' files the image has what their maintainer scripts would have made and CloudNativePG relies
on: ``/etc/passwd`` and ``/etc/group`` with ``postgres`` at 26:26 (the pods run as ``runAsUser: 26``,
``runAsGroup: 26``, ``fsGroup: 26``: pkg/specs/pods.go:458-461; ``initdb`` looks the running user up), its home
``/var/lib/postgresql`` and ``/var/run/postgresql`` (postgresql-common's postinst), and ``/tmp``. No
``/bin/sh`` would mean no ``initdb`` (it starts the bootstrap backend through ``popen``): ``dash`` and ``bash``
are roots of the closure, and ``coreutils`` for ``du`` (``kubectl cnpg status``).

Two layers: the packages (one layer, the big one, with their dpkg records) and the user layer. Cached like the
factory's images (``image_cache.cached_build``), keyed by the pins and this recipe: a warm build reads no package.
"""

from __future__ import annotations

from pathlib import Path

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests.installs import mirrored_parts
from trainyard.rehearsal import debian
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.supply.reference import ImageRef

PINS_DIR = Path(__file__).parent / "pins"
POSTGRES_UID = 26  # upstream's `usermod -u 26 postgres`; CloudNativePG's default PostgresUID/PostgresGID
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # debian:trixie-slim's ENV PATH
COMPONENT = "cnpg/postgresql"


def pin_file(major: str, suite: str = "trixie") -> Path:
    return PINS_DIR / f"postgresql-{major}-{suite}.txt"


def check_tag(pins: debian.PinFile, major: str, tag: str) -> str:
    """The pinned ``postgresql-<major>`` version, refused unless the image tag starts with its upstream version."""
    version = pins.version_of(f"postgresql-{major}")
    upstream = version.split(":")[-1].split("-")[0]  # 17.12-0+deb13u1 -> 17.12
    if not tag.startswith(f"{upstream}-"):
        raise ImageError(f"the pins hold postgresql-{major} {version}, but the stack pins the image tag {tag}: the "
                         f"tag must start with {upstream}- (catalog.POSTGRESQL_OPERANDS, or re-pin)")
    return version


def user_layer() -> Layer:
    uid = POSTGRES_UID
    passwd = (f"root:x:0:0:root:/root:/bin/bash\npostgres:x:{uid}:{uid}:PostgreSQL administrator:/var/lib/postgresql:"
              "/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    group = f"root:x:0:\npostgres:x:{uid}:\nnogroup:x:65534:\n"
    entries = (Entry("etc", mode=0o755), Entry("etc/passwd", passwd.encode(), mode=0o644),
               Entry("etc/group", group.encode(), mode=0o644), Entry("tmp", mode=0o1777),
               Entry("var", mode=0o755), Entry("var/lib", mode=0o755),
               Entry("var/lib/postgresql", mode=0o755, uid=uid, gid=uid),
               Entry("var/run", mode=0o755), Entry("var/run/postgresql", mode=0o2775, uid=uid, gid=uid))
    return Layer(entries, f"postgres user {uid}:{uid} (upstream's usermod -u 26 postgres), /var/lib/postgresql, "
                          "/var/run/postgresql (postgresql-common's postinst), /etc/passwd, /etc/group")


def image_config(major: str, tag: str, version: str) -> dict[str, object]:
    return {"Env": [f"PATH={DEBIAN_PATH}:/usr/lib/postgresql/{major}/bin"], "User": str(POSTGRES_UID),
            "Cmd": ["bash"],
            "Labels": {"org.opencontainers.image.version": tag,
                       "dev.trainyard.built-from": f"Debian trixie postgresql-{major} {version} "
                                                   f"({pin_file(major).name}, trainyard.rehearsal.postgres_image)",
                       "dev.trainyard.upstream-image": f"ghcr.io/cloudnative-pg/postgresql:{tag}"}}


def target(config: PlatformConfig, major: str) -> ImageRef:
    if config.images.registry_mirror is None:
        raise ImageError("the stack has no images.registry_mirror: the operand image is pushed under a mirror's name")
    registry, repository, tag = mirrored_parts(config, catalog.POSTGRESQL_OPERANDS[major])
    return ImageRef(registry, repository, tag)


def build(config: PlatformConfig, cache: Path, deb_cache: Path | None = None, major: str | None = None,
          apt_cache: Path | None = None) -> BuiltImage:
    """The operand image of ``major`` (default: the stack's ``mlflow.database.postgresql``), or the cached one."""
    major = major or config.mlflow.database.postgresql
    path = pin_file(major)
    if not path.is_file():
        raise ImageError(f"PostgreSQL {major} cannot be built here: no pin file {path} (Debian trixie ships "
                         f"postgresql-17 only; set mlflow.database.postgresql: \"17\" for the rehearsal)")
    name = target(config, major)
    pins = debian.read_pins(path)
    version = check_tag(pins, major, str(name.tag))
    suite = debian.SuiteRoot.of(pins.suite, apt_cache)
    config_doc = image_config(major, str(name.tag), version)
    created_by = (f"Debian {pins.suite}: the closure of {' '.join(pins.roots)} ({path.name}, {len(pins.pins)} "
                  "packages), slim")

    def layers() -> list[Layer]:
        return [debian.package_layer(pins.pins, created_by, deb_cache, suite=suite, slim=True), user_layer()]

    parts = [{"debs": debian.pins_key(pins.pins), "suite": pins.suite, "slim": True, "created_by": created_by},
             layer_key(user_layer())]
    layout, digest, cached = cached_build(cache, recipe_key(parts, config_doc), layers, config_doc)
    upstream = catalog.POSTGRESQL_OPERANDS[major]
    return BuiltImage(COMPONENT, name, ImageRef(upstream.registry, upstream.repository, upstream.tag), layout, digest,
                      cached, note=f"Debian's postgresql-{major} {version}")
