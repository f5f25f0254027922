"""MLflow's tracking server image, offline: named as the chart's values name the server, its wheel lock pinning exactly
the requirements' versions and the PostgreSQL driver SQLAlchemy picks for the chart's URIs, a config the chart's
restricted containers run, ``mlflow`` and ``python`` on ``PATH``, and a reproducible build. No package or wheel is
downloaded: the base and wheel layers are stubbed, or a hand-made wheel stands for MLflow's (the real one only where
the wheel cache already holds it)."""

from __future__ import annotations

import argparse
import io
import json
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainyard import catalog
from trainyard.manifests import mlflow as mlflow_manifests
from trainyard.project import open_stack
from trainyard.rehearsal import base_layer, busybox_image, factory, mlflow_image, python_base, wheels
from trainyard.rehearsal.images import Entry, ImageError, Layer, layer_tar
from trainyard.supply.reference import ImageRef

CHART = ROOT.parent / "shared" / "charts" / "mlflow" / "1.11.5"
UPSTREAM = ImageRef("docker.io", "burakince/mlflow", "3.15.1")


def _config() -> Any:
    return open_stack("staging", ROOT).config


def _locked() -> dict[str, str]:
    return {p.name: p.version for p in wheels.read_lock(mlflow_image.WHEEL_LOCK)}


def _env(config: dict[str, Any]) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in config["Env"])


def test_the_image_is_named_as_the_charts_values_name_the_server_and_built_with_its_chart() -> None:
    config = _config()
    values = mlflow_manifests.chart_values(config)
    name = mlflow_image.target(config)
    assert str(name) == "registry.trainyard.internal/mirror/burakince/mlflow:3.15.1"
    assert f"{values['image']['repository']}:{values['image']['tag']}" == str(name)
    migration = values["initImages"]["mlflowDbMigration"]
    assert f"{migration['repository']}:{migration['tag'].split('@')[0]}" == str(name)
    assert values["extraContainers"][0]["image"].split("@")[0] == str(name)  # the tenant sync sidecar
    release = catalog.release("mlflow", config.versions.mlflow)
    assert release.app_version == UPSTREAM.tag and release.installed()[2].repository == UPSTREAM.repository
    # A chart component: built where the stack installs MLflow's chart (mirror.installed_controllers), not otherwise.
    assert factory.MLFLOW == "mlflow" in factory.COMPONENTS and factory.MLFLOW not in factory.ON_REQUEST


def test_a_stack_without_a_mirror_is_refused() -> None:
    config = open_stack("local", ROOT).config
    assert config.images.registry_mirror is None
    with pytest.raises(ImageError, match=r"no images.registry_mirror"):
        mlflow_image.target(config)


def test_the_requirements_are_the_versions_the_data_plane_tier_runs_the_server_with() -> None:
    top = mlflow_image.top_level_pins()
    assert top == {"mlflow[auth]": "3.15.1", "psycopg[binary]": "3.3.9", "boto3": "1.44.8"}
    tools = mlflow_image.top_level_pins(ROOT / "tools" / "mlflow" / "requirements.txt")
    assert {name: tools[name] for name in top} == top
    if CHART.is_dir():  # the chart's appVersion is the MLflow it runs
        assert re.search(r'^appVersion: "3\.15\.1"$', (CHART / "Chart.yaml").read_text(), re.MULTILINE)


def test_the_lock_pins_exactly_the_requirements_versions_each_wheel_by_sha256() -> None:
    pins = wheels.read_lock(mlflow_image.WHEEL_LOCK)
    locked = _locked()
    assert len(locked) == len(pins) > 50  # one pin per distribution: MLflow's closure
    for requirement, version in mlflow_image.top_level_pins().items():
        assert locked[wheels.canonical(requirement.split("[")[0])] == version
    assert {"flask-wtf", "psycopg-binary", "botocore", "uvicorn", "alembic"} <= set(locked)  # the extras' and the server's
    assert all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) for p in pins)
    assert mlflow_image.check_lock(mlflow_image.top_level_pins(), pins, "3.15.1") == "psycopg"
    header = mlflow_image.WHEEL_LOCK.read_text().splitlines()[0]
    assert "mlflow-requirements.txt" in header and "CPython 3.11 on glibc 2.36" in header


def test_a_lock_that_drifts_from_the_requirements_or_the_tag_is_refused_with_the_command_that_rewrites_it() -> None:
    pins = wheels.read_lock(mlflow_image.WHEEL_LOCK)
    drifted = [wheels.WheelPin(p.name, "1.44.0" if p.name == "boto3" else p.version, p.sha256) for p in pins]
    with pytest.raises(ImageError, match=r"mlflow.lock is not mlflow-requirements.txt: boto3==1.44.8 \(locked: 1.44.0\); "
                                         r"rewrite it with `python -m trainyard.rehearsal.python_base lock "):
        mlflow_image.check_lock(mlflow_image.top_level_pins(), drifted, "3.15.1")
    with pytest.raises(ImageError, match=r"the chart runs MLflow 3.16.0 .* mlflow.lock has mlflow 3.15.1"):
        mlflow_image.check_lock(mlflow_image.top_level_pins(), pins, "3.16.0")


def test_the_charts_plain_postgresql_uris_get_the_driver_sqlalchemy_picks_and_the_lock_has() -> None:
    values = mlflow_manifests.chart_values(_config())
    assert not values["backendStore"]["postgres"].get("driver") and not values["auth"]["postgres"].get("driver")
    if CHART.is_dir():  # the chart's default: no "+driver" in postgresql://
        chart = (CHART / "values.yaml").read_text()
        assert chart.count('# -- postgres database connection driver. e.g.: "psycopg2"\n    driver: ""') == 2
    locked = _locked()
    assert tuple(int(x) for x in locked["sqlalchemy"].split(".")[:2]) >= (2, 1)  # psycopg (3) is its default
    assert mlflow_image.postgres_driver(locked) == "psycopg"
    assert locked["psycopg"] == locked["psycopg-binary"] == "3.3.9"
    # An older SQLAlchemy takes postgresql:// to psycopg2, which the lock does not have.
    with pytest.raises(ImageError, match=r"SQLAlchemy 2.0.51 takes the chart's postgresql:// URIs \(no driver\) to "
                                         r"psycopg2-binary, and mlflow.lock has no psycopg2-binary"):
        mlflow_image.postgres_driver({**locked, "sqlalchemy": "2.0.51"})
    without_libpq = {name: version for name, version in locked.items() if name != "psycopg-binary"}
    with pytest.raises(ImageError, match=r"has no psycopg-binary"):
        mlflow_image.postgres_driver(without_libpq)


def test_the_config_runs_as_the_charts_restricted_user_with_upstreams_command_and_workdir() -> None:
    values = mlflow_manifests.chart_values(_config())
    pins = wheels.read_lock(mlflow_image.WHEEL_LOCK)
    config: dict[str, Any] = mlflow_image.image_config(UPSTREAM, mlflow_image.top_level_pins(), pins, "psycopg")
    security = values["securityContext"]
    assert config["User"] == f"{security['runAsUser']}:{security['runAsGroup']}" == "1001:1001"
    assert security["runAsNonRoot"] is True and security["readOnlyRootFilesystem"] is True
    assert values["podSecurityContext"]["fsGroup"] == 1001
    assert config["WorkingDir"] == "/mlflow" and "Entrypoint" not in config
    assert config["Cmd"][:2] == ["mlflow", "server"] and config["ExposedPorts"] == {"5000/tcp": {}}
    assert config["Env"] == [*python_base.ENV, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"]
    assert _env(config)["PATH"].split(":")[:4] == ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == "3.15.1"
    assert labels["dev.trainyard.upstream-image"] == "docker.io/burakince/mlflow:3.15.1"
    assert labels["dev.trainyard.built-from"] == ("mlflow-requirements.txt: mlflow[auth]==3.15.1, psycopg[binary]==3.3.9, "
                                                  f"boto3==1.44.8; mlflow.lock: {len(pins)} wheels")
    assert "CPython 3.11" in labels["dev.trainyard.python"] and "python:3.13.14-slim" in labels["dev.trainyard.python"]
    sqlalchemy = _locked()["sqlalchemy"]
    assert labels["dev.trainyard.differs"].startswith(f"PostgreSQL through psycopg 3.3.9 under SQLAlchemy {sqlalchemy} "
                                                      "for upstream's SQLAlchemy 2.0.51 with psycopg2-binary 2.9.12")


def _tar_files(layer: Layer) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(layer_tar(layer.entries))) as tar:
        return {m.name: (m, (f.read() if (f := tar.extractfile(m)) else None)) for m in tar.getmembers()}


def test_the_user_layer_is_upstreams_mlflow_user_beside_distroless_entries() -> None:
    files = _tar_files(mlflow_image.user_layer())
    passwd = (files["etc/passwd"][1] or b"").decode()
    assert passwd == base_layer.PASSWD + "mlflow:x:1001:1001::/home/mlflow:/sbin/nologin\n"
    assert (files["etc/group"][1] or b"").decode() == base_layer.GROUP + "mlflow:x:1001:\n"
    for directory in ("home/mlflow", "mlflow"):
        info = files[directory][0]
        assert info.isdir() and (info.uid, info.gid, info.mode) == (1001, 1001, 0o755)


def _mlflow_wheel(path: Path) -> Path:
    """A wheel shaped as MLflow's where it matters here: its console script and its ``mlflow.app`` entry point."""
    info = "mlflow-3.15.1.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mlflow/__init__.py", "")
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: mlflow\nVersion: 3.15.1\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/entry_points.txt", "[console_scripts]\nmlflow = mlflow.cli:cli\n\n"
                                                     "[mlflow.app]\nbasic-auth = mlflow.server.auth:create_app\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def _assert_mlflow_on_path(entries: dict[str, Entry]) -> None:
    script = entries["usr/local/bin/mlflow"]
    assert script.mode == 0o755 and (script.data or b"").startswith(b"#!/usr/bin/python3.11\n")
    assert b"from mlflow.cli import cli" in (script.data or b"")
    site = python_base.WHEEL_TARGET.site_packages
    points = (entries[f"{site}/mlflow-3.15.1.dist-info/entry_points.txt"].data or b"").decode()
    assert "[mlflow.app]" in points and "basic-auth = mlflow.server.auth:create_app" in points  # --app-name=basic-auth


def test_the_wheel_layer_puts_mlflow_on_path_run_by_the_bases_python(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pin = next(p for p in wheels.read_lock(mlflow_image.WHEEL_LOCK) if p.name == "mlflow")
    wheel = _mlflow_wheel(tmp_path / "mlflow-3.15.1-py3-none-any.whl")
    monkeypatch.setattr(wheels, "fetch", lambda pins, target, cache=None: dict.fromkeys(pins, wheel))
    layer = wheels.wheels_layer([pin], python_base.WHEEL_TARGET, mlflow_image.WHEEL_LOCK.name)
    _assert_mlflow_on_path({e.path: e for e in layer.entries})
    # The script's interpreter, and `python` of the migration and sync containers, are the base's, on its PATH.
    assert python_base.INTERPRETER == "/usr/bin/python3.11"
    assert any(p.name == "python3.11-minimal" for p in python_base.PYTHON_PINS)
    assert {e.path: e.link for e in python_base._aliases() if e.link}["usr/bin/python"] == "python3.11"
    assert {"/usr/local/bin", "/usr/bin"} <= set(_env(python_base.python_config())["PATH"].split(":"))


def test_the_real_mlflow_wheel_gives_the_same_script_where_the_wheel_cache_holds_it() -> None:
    pin = next(p for p in wheels.read_lock(mlflow_image.WHEEL_LOCK) if p.name == "mlflow")
    wheel = wheels._cached(pin, wheels.cache_root())
    if wheel is None:
        pytest.skip(f"mlflow {pin.version} is not in the wheel cache ({wheels.cache_root()}); a build puts it there")
    _assert_mlflow_on_path({e.path: e for e in wheels.wheel_entries(wheel, python_base.WHEEL_TARGET)})


def test_build_is_reproducible_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe's shape with the base and wheel layers stubbed (no Debian package or wheel is read)."""
    monkeypatch.setattr(python_base, "layers", lambda root, cache=None: [Layer((Entry("usr", mode=0o755),), "base")])
    seen: list[int] = []

    def wheels_layer(pins: list[wheels.WheelPin], target: wheels.Target, created_by: str, cache: Path | None = None) -> Layer:
        seen.append(len(pins))
        return Layer((Entry("usr/local/bin/mlflow", b"#!/usr/bin/python3.11\n"),), f"{created_by}: {len(pins)} wheels")

    monkeypatch.setattr(wheels, "wheels_layer", wheels_layer)
    busybox: list[Path] = []  # the chart's busybox is compiled from source (tests/unit/test_busybox_image.py)
    monkeypatch.setattr(busybox_image, "build", lambda config, cache: busybox.append(cache))
    built = factory.build_images(_config(), tmp_path / "tools", tmp_path / "a", [factory.MLFLOW], project=ROOT)
    assert busybox == [tmp_path / "a"] and built.pop() is None
    again = mlflow_image.build(_config(), tmp_path / "a")
    elsewhere = mlflow_image.build(_config(), tmp_path / "b")
    assert [b.component for b in built] == ["mlflow"]
    assert built[0].digest == again.digest == elsewhere.digest
    assert (built[0].cached, again.cached, elsewhere.cached) == (False, True, False)
    assert seen == [len(_locked())] * 2  # the cached build read no wheel
    assert str(built[0].target) == "registry.trainyard.internal/mirror/burakince/mlflow:3.15.1"
    assert built[0].upstream == UPSTREAM and "psycopg 3.3.9" in built[0].note
    blobs = built[0].layout / "blobs" / "sha256"
    index = json.loads((built[0].layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"].removeprefix("sha256:")).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"].removeprefix("sha256:")).read_bytes())
    assert config["config"]["User"] == "1001:1001" and len(manifest["layers"]) == 3  # base, user, wheels
    assert [h["created_by"].split(" ")[0] for h in config["history"]] == ["base", "user", "mlflow.lock:"]



def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = action.choices[name]
    return found


def test_images_build_offers_every_component_the_factory_builds() -> None:
    """`trainyard images build --component` names exactly the factory's components (charts' and on-request ones)."""
    from trainyard.rehearsal import factory
    from trainyard.supply import cli as supply_cli

    parser = argparse.ArgumentParser()
    supply_cli.register(parser.add_subparsers())
    build = _subparser(_subparser(parser, "images"), "build")
    (component,) = [a for a in build._actions if a.dest == "component"]
    assert set(component.choices or ()) == {*factory.COMPONENTS, *factory.ON_REQUEST}
