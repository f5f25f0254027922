"""MLflow's tracking server image, built here: mlflow[auth] from pinned wheels on the factory's Python base.

The community MLflow chart (1.11.5, appVersion 3.15.1) runs its one image three ways, as ``manifests/mlflow.py``
``chart_values`` sets it up: the server, ``command: ["mlflow"]``, ``args: [server, --backend-store-uri=postgresql://,
--artifacts-destination=s3://<bucket>/<prefix>, --serve-artifacts, --app-name=basic-auth, ...]``
(templates/deployment.yaml:350-390); the ``mlflow-db-migration`` init container, ``python /opt/mlflow/migrations.py``
(deployment.yaml:266-268; the chart's script, templates/configmap.yaml ``migrations.py``, imports
``mlflow.store.db.utils``); and Trainyard's ``tenant-user-sync`` sidecar, ``python /opt/trainyard/sync.py`` (the
standard library only). All three run as uid/gid 1001, non-root, with a read-only root filesystem (Trainyard's
restricted container securityContext; the chart's podSecurityContext ``fsGroup: 1001``).

Upstream, the chart's ``image.repository`` ``burakince/mlflow:3.15.1``, is built from github.com/burakince/mlflow at
tag 3.15.1 (``UPSTREAM_COMMIT``) with ``Dockerfile-debian`` (the tags without a suffix; ``-alpine`` ones come from
``Dockerfile-alpine``: .github/workflows/docker-publish.yml). Its final stage: ``FROM python:3.13.14-slim``, perl-base
purged, ``groupadd -r -g 1001 mlflow && useradd -r -u 1001 -g mlflow -m -d /home/mlflow mlflow``, ``WORKDIR
/mlflow/`` (chowned to mlflow), a ``/opt/venv`` (owned by mlflow) of its ``poetry.lock``: 145 packages for
pyproject.toml's ``mlflow[auth,pipelines]``, SQLAlchemy 2.0.51, psycopg2-binary 2.9.12, boto3 1.43.66, pymysql,
pymssql, google-cloud-storage, azure-storage-blob, ldap3, mlflow-oidc-auth[cache], prometheus-flask-exporter,
requests-auth-aws-sigv4, pysftp, and its own ``mlflowstack`` package (the LDAP authorization function the chart's
``ldapAuth`` names); ``ENV PATH="/opt/venv/bin:$PATH" PYTHONUNBUFFERED=1``, ``USER mlflow``, ``EXPOSE 5000``,
``CMD ["mlflow", "server", "--backend-store-uri", "sqlite:///mlflow.sqlite", ...]``, no ENTRYPOINT.

The rehearsal makes an image the chart runs in the same three ways, without a registry or a container build:

- the Python base (``python_base.py``: distroless ``python3-debian12`` from pinned Debian bookworm packages): CPython
  **3.11** where upstream has 3.13 (MLflow 3.15.1 and SQLAlchemy 2.1 require >=3.10 and >=3.11); ``python`` is
  ``/usr/bin/python`` -> ``python3.11`` on the base's ``PATH``;
- the user (one small layer): upstream's ``mlflow`` 1001:1001 in ``/etc/passwd`` and ``/etc/group`` beside
  distroless's entries, its home ``/home/mlflow`` and the ``WORKDIR`` ``/mlflow``, both owned by it, as upstream has
  them: Python 3.11's ``getpass.getuser()``, which MLflow records as a run's user, raises KeyError for a uid without
  an entry (mlflow/tracking/context/default_context.py catches only ImportError);
- one layer of wheels: ``pins/mlflow.lock``, the closure of ``pins/mlflow-requirements.txt`` (``mlflow[auth]``,
  ``psycopg[binary]``, ``boto3``: tools/mlflow/requirements.txt's versions, which the data-plane tier runs the server
  with) for the base's interpreter, each wheel by sha256 (``python -m trainyard.rehearsal.python_base lock
  REQUIREMENTS LOCK``), installed into ``/usr/local/lib/python3.11/dist-packages`` with the ``mlflow`` console script in
  ``/usr/local/bin`` (first line ``#!/usr/bin/python3.11``: ``wheels.py``). The server starts uvicorn as
  ``sys.executable -m uvicorn`` (mlflow/server/__init__.py ``_build_uvicorn_command``), and finds ``basic-auth`` among
  the ``mlflow.app`` entry points of the installed distribution's metadata.

**The PostgreSQL driver.** The chart writes ``postgresql<+driver>://`` and ``backendStore.postgres.driver`` (like
``auth.postgres.driver``) is ``""`` by default, which Trainyard keeps: the URIs say no driver, and SQLAlchemy uses its
default PostgreSQL DBAPI. That is psycopg (3) from SQLAlchemy 2.1 on (sqlalchemy/dialects/postgresql/__init__.py:
``base.dialect = dialect = psycopg.dialect``), psycopg2 before. Upstream's lock has SQLAlchemy 2.0.51 with
psycopg2-binary; this lock has SQLAlchemy 2.1 with psycopg 3 and its binary (its own libpq; no libpq from Debian),
as the data-plane tier's venv does. ``postgres_driver`` refuses a lock whose SQLAlchemy would pick a driver it lacks.

Config: ``User 1001:1001`` (numeric, as the restricted securityContext's ``runAsNonRoot`` can check it; upstream's
``USER mlflow`` is the same uid), ``WorkingDir /mlflow``, upstream's ``Cmd`` and ``EXPOSE 5000``, the base's
environment with ``PYTHONUNBUFFERED=1`` (upstream's) and ``PYTHONDONTWRITEBYTECODE=1`` (the root filesystem is
read-only and the site directory root's: no ``__pycache__``). Labels say what it is built from and how it differs.

Not there, unlike upstream: what the stack's settings do not use (the MySQL, MSSQL, Google, Azure, LDAP and OIDC
libraries, the Prometheus exporter of ``serviceMonitor.enabled``, ``mlflowstack``: a stack that turns one of those on
needs a new lock), a shell, pip, ``/opt/venv``.

Named under the stack's mirror as the chart's values name the server (``manifests.installs.upstream_image`` and
``supply.reference.mirrored``, which ``chart_values`` reaches through ``pinned_image``): ``<mirror>burakince/mlflow:
3.15.1``. Built where the stack installs MLflow's chart (``factory.COMPONENTS``; the rehearsal with real nodes, when
``mlflow.enabled``: ``mirror.installed_controllers``), with the chart's busybox (``busybox_image.py``); by hand,
``trainyard images build STACK --component mlflow``. The wheels are several hundred MB (docs/supply-chain.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests.installs import upstream_image
from trainyard.rehearsal import base_layer, python_base, wheels
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key, targets
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.supply.reference import ImageRef

COMPONENT = "mlflow"  # the catalog component, and the factory's name for it (``images build --component``)
UPSTREAM_SOURCE = "https://github.com/burakince/mlflow"
UPSTREAM_COMMIT = "9820281d4e4778f778e7b555341ee3c9c89d06c2"  # tag 3.15.1
UPSTREAM_BASE = "python:3.13.14-slim"  # Dockerfile-debian: the final stage's FROM
UPSTREAM_POSTGRES = "SQLAlchemy 2.0.51 with psycopg2-binary 2.9.12"  # poetry.lock at the tag
# Dockerfile-debian: useradd -u 1001 -g mlflow -d /home/mlflow mlflow; WORKDIR /mlflow/; EXPOSE 5000; CMD.
USER = 1001
USER_NAME = "mlflow"
HOME = "home/mlflow"
WORKDIR = "mlflow"
PORT = 5000
UPSTREAM_CMD = ("mlflow", "server", "--backend-store-uri", "sqlite:///mlflow.sqlite", "--default-artifact-root",
                "./mlruns", "--host=0.0.0.0", "--port=5000")
PINS = Path(__file__).resolve().parent / "pins"
REQUIREMENTS = PINS / "mlflow-requirements.txt"
WHEEL_LOCK = PINS / "mlflow.lock"
RELOCK = ("python -m trainyard.rehearsal.python_base lock platform/trainyard/rehearsal/pins/mlflow-requirements.txt "
          "platform/trainyard/rehearsal/pins/mlflow.lock")
# What SQLAlchemy's default DBAPI for a ``postgresql://`` URI without a driver needs installed: from 2.1 on psycopg
# (with its libpq: the binary extra), before psycopg2.
PSYCOPG, PSYCOPG2 = ("psycopg", "psycopg-binary"), ("psycopg2-binary",)


def target(config: PlatformConfig) -> ImageRef:
    """The name the chart's server, its migration init container and the tenant sync sidecar pull (before the lock's
    digest): upstream's under the stack's mirror; a stack without a mirror is refused."""
    return targets(config, [COMPONENT])[COMPONENT]


def top_level_pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """The requirements file's pins: each requirement as written, extras included (``mlflow[auth]``) -> version."""
    return wheels.top_level_pins(path)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def postgres_driver(locked: Mapping[str, str]) -> str:
    """The distribution of the DBAPI SQLAlchemy picks for the chart's ``postgresql://`` URIs, refused unless the lock
    has it."""
    sqlalchemy = locked.get("sqlalchemy")
    if sqlalchemy is None:
        raise ImageError(f"{WHEEL_LOCK.name} has no sqlalchemy: not MLflow's closure")
    needs = PSYCOPG if _release(sqlalchemy) >= (2, 1) else PSYCOPG2
    missing = [name for name in needs if name not in locked]
    if missing:
        raise ImageError(f"SQLAlchemy {sqlalchemy} takes the chart's postgresql:// URIs (no driver) to {needs[0]}, and "
                         f"{WHEEL_LOCK.name} has no {', '.join(missing)}")
    return needs[0]


def check_lock(top: Mapping[str, str], pins: Sequence[wheels.WheelPin], tag: str) -> str:
    """The lock pins every top-level requirement at its version, MLflow at the image's tag and the PostgreSQL driver
    SQLAlchemy will pick (its distribution is returned)."""
    locked = {p.name: p.version for p in pins}
    drifted = [f"{requirement}=={version} (locked: {locked.get(wheels.canonical(requirement.split('[')[0]), 'none')})"
               for requirement, version in top.items()
               if locked.get(wheels.canonical(requirement.split("[")[0])) != version]
    if drifted:
        raise ImageError(f"{WHEEL_LOCK.name} is not {REQUIREMENTS.name}: {', '.join(drifted)}; rewrite it with `{RELOCK}`")
    if locked.get(COMPONENT) != tag:
        raise ImageError(f"the chart runs MLflow {tag} (its appVersion, the image's tag); {WHEEL_LOCK.name} has "
                         f"mlflow {locked.get(COMPONENT)}")
    return postgres_driver(locked)


def user_layer() -> Layer:
    """Upstream's user: ``mlflow`` 1001:1001 with distroless's entries, its home and the working directory."""
    passwd = base_layer.PASSWD + f"{USER_NAME}:x:{USER}:{USER}::/{HOME}:/sbin/nologin\n"
    group = base_layer.GROUP + f"{USER_NAME}:x:{USER}:\n"
    entries = (Entry("etc", mode=0o755), Entry("etc/passwd", passwd.encode(), mode=0o644),
               Entry("etc/group", group.encode(), mode=0o644), Entry("home", mode=0o755),
               Entry(HOME, mode=0o755, uid=USER, gid=USER), Entry(WORKDIR, mode=0o755, uid=USER, gid=USER))
    return Layer(entries, f"user {USER_NAME} {USER}:{USER} (upstream's, the chart's runAsUser), /{HOME}, /{WORKDIR} "
                          f"(upstream's WORKDIR, owned by {USER_NAME})")


def image_config(upstream: ImageRef, top: Mapping[str, str], pins: Sequence[wheels.WheelPin],
                 driver: str) -> dict[str, object]:
    python = next(p.version for p in python_base.PYTHON_PINS if p.name == f"python{python_base.PYTHON}-minimal")
    locked = {p.name: p.version for p in pins}
    return python_base.python_config(
        env=("PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"), Cmd=list(UPSTREAM_CMD), User=f"{USER}:{USER}",
        WorkingDir=f"/{WORKDIR}", ExposedPorts={f"{PORT}/tcp": {}},
        Labels={"org.opencontainers.image.version": str(upstream.tag),
                "org.opencontainers.image.source": UPSTREAM_SOURCE,
                "dev.trainyard.upstream-image": str(upstream),
                "dev.trainyard.built-from": f"{REQUIREMENTS.name}: "
                                            + ", ".join(f"{name}=={version}" for name, version in top.items())
                                            + f"; {WHEEL_LOCK.name}: {len(pins)} wheels",
                "dev.trainyard.python": f"CPython {python_base.PYTHON} (Debian bookworm python{python_base.PYTHON}-minimal "
                                        f"{python}) for upstream's {UPSTREAM_BASE}",
                "dev.trainyard.differs": f"PostgreSQL through {driver} {locked[driver]} under SQLAlchemy "
                                         f"{locked['sqlalchemy']} for upstream's {UPSTREAM_POSTGRES}; only the "
                                         "stack's backends (PostgreSQL, S3): no MySQL, MSSQL, Google, Azure, LDAP or "
                                         "OIDC libraries; no /opt/venv (wheels in /usr/local)"})


def build(config: PlatformConfig, cache: Path, root: Path = Path("/"), deb_cache: Path | None = None,
          wheel_cache: Path | None = None) -> BuiltImage:
    """The MLflow server image (or the cached one of the same inputs)."""
    name, upstream = target(config), upstream_image(config, COMPONENT)
    top = top_level_pins()
    pins = wheels.read_lock(WHEEL_LOCK)
    driver = check_lock(top, pins, str(upstream.tag))
    image = image_config(upstream, top, pins, driver)
    user = user_layer()
    parts = [*python_base.key_parts(root), layer_key(user),
             {"wheels": wheels.pins_key(pins), "into": python_base.WHEEL_TARGET.site_packages}]

    def layers() -> list[Layer]:
        return [*python_base.layers(root, deb_cache), user,
                wheels.wheels_layer(pins, python_base.WHEEL_TARGET, WHEEL_LOCK.name, wheel_cache)]

    layout, digest, cached = cached_build(cache, recipe_key(parts, image), layers, image)
    return BuiltImage(COMPONENT, name, upstream, layout, digest, cached,
                      note=f"CPython {python_base.PYTHON} for upstream's {UPSTREAM_BASE}; {driver} "
                           f"{next(p.version for p in pins if p.name == driver)} for upstream's psycopg2-binary")
