"""The PostgreSQL operand image and what it stands on, offline: Debian packages taken apart as a merged-/usr,
slimmed tree; the pin file; the image's tag refused unless it is the pinned package's version; the postgres user at
26; the operator tool pinned as the catalog says; the real node's local volumes; only installed controllers'
images built."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard import catalog
from trainyard.manifests import render_platform
from trainyard.project import open_stack
from trainyard.rehearsal import debian, postgres_image
from trainyard.rehearsal.cluster import REHEARSAL_STORAGE_CLASS
from trainyard.rehearsal.images import ImageError
from trainyard.rehearsal.mirror import installed_controllers
from trainyard.rehearsal.session import IN_CLUSTER_CONTROLLERS
from trainyard.rehearsal.stack import InCluster, read_platform, rehearsal_platform
from trainyard.rehearsal.volumes import database_volumes


def fake_deb(directory: Path, name: str, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    """A .deb built with dpkg-deb from ``files`` (path -> content) and symbolic ``links`` (path -> target), put in the
    Debian cache ``directory`` under the name the factory looks for."""
    root = directory / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: {name}\nVersion: 1.0\nArchitecture: amd64\n"
                                             f"Maintainer: t <t@example.com>\nDescription: test\n")
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    for path, target in (links or {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).symlink_to(target)
    out = directory / f"{name}_1.0.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(out)], check=True, capture_output=True)
    return out


def _pin(deb: Path) -> debian.DebianPin:
    return debian.DebianPin(deb.name.split("_")[0], "1.0", debian.sha256_file(deb))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    directory = tmp_path / "debs"
    directory.mkdir()
    fake_deb(directory, "base", {"usr/bin/.keep": b""}, {"bin": "usr/bin", "lib64": "usr/lib64"})
    fake_deb(directory, "dash", {"usr/bin/dash": b"#!dash", "usr/share/man/man1/dash.1.gz": b"man",
                                 "usr/share/doc/dash/changelog.gz": b"log", "usr/share/doc/dash/copyright": b"BSD"},
             {"usr/bin/sh": "dash"})
    fake_deb(directory, "pg", {"usr/lib/postgresql/17/bin/postgres": b"ELF", "usr/share/locale/de/pg.mo": b"de"})
    return directory


def _layer(cache: Path, names: tuple[str, ...] = ("base", "dash", "pg")) -> dict[str, object]:
    pins = [_pin(cache / f"{name}_1.0.deb") for name in names]
    layer = debian.package_layer(pins, "test", cache, slim=True)
    return {entry.path: entry for entry in layer.entries}


def test_a_slim_layer_drops_what_debian_slim_drops_but_every_copyright(cache: Path) -> None:
    entries = _layer(cache)
    assert "usr/share/doc/dash/copyright" in entries and "usr/lib/postgresql/17/bin/postgres" in entries
    assert not {"usr/share/doc/dash/changelog.gz", "usr/share/man/man1/dash.1.gz", "usr/share/locale/de/pg.mo"} & set(entries)
    assert "var/lib/dpkg/status.d/dash" in entries  # dpkg's record, for scanners


def test_a_package_outside_usr_is_refused_in_a_merged_usr_layer(cache: Path) -> None:
    fake_deb(cache, "old", {"bin/tool": b"tool"})
    with pytest.raises(ImageError, match=r"old=1\.0 ships /bin: not a merged-/usr package"):
        _layer(cache, ("base", "old"))


def test_the_pin_file_is_read_and_a_malformed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pins.txt"
    path.write_text("# suite: trixie\n# roots: a\na 1.0 " + "0" * 64 + "\n")
    assert debian.read_pins(path) == debian.PinFile("trixie", ("a",), (debian.DebianPin("a", "1.0", "0" * 64),))
    path.write_text("# suite: trixie\n# roots: a\na 1.0\n")
    with pytest.raises(ImageError, match=r"pins.txt:3: not 'name version sha256'"):
        debian.read_pins(path)


def test_the_committed_closure_holds_the_postgresql_the_catalog_names_and_a_shell() -> None:
    pins = debian.read_pins(postgres_image.pin_file("17"))
    assert pins.suite == "trixie"
    # initdb starts its bootstrap backend through popen(): /bin/sh must be in the image (dash is Essential, so only
    # a root brings it in).
    assert {"postgresql-17", "libsasl2-modules", "libldap-common", "dash"} <= set(pins.roots)
    names = {p.name for p in pins.pins}
    assert {"postgresql-17", "postgresql-client-17", "libc6", "dash", "tzdata"} <= names
    version = postgres_image.check_tag(pins, "17", catalog.POSTGRESQL_OPERANDS["17"].tag)
    assert catalog.POSTGRESQL_OPERANDS["17"].tag.startswith(version.split("-")[0] + "-")


def test_an_image_tag_that_is_not_the_pinned_version_is_refused() -> None:
    pins = debian.PinFile("trixie", ("postgresql-17",),
                          (debian.DebianPin("postgresql-17", "17.12-0+deb13u1", "0" * 64),))
    assert postgres_image.check_tag(pins, "17", "17.12-minimal-trixie") == "17.12-0+deb13u1"
    with pytest.raises(ImageError, match=r"the tag must start with 17\.12-"):
        postgres_image.check_tag(pins, "17", "17.11-minimal-trixie")


def test_postgres_is_user_26_with_its_home_as_cloudnative_pg_runs_it() -> None:
    entries = {e.path: e for e in postgres_image.user_layer().entries}
    assert "postgres:x:26:26:" in (entries["etc/passwd"].data or b"").decode()
    home = entries["var/lib/postgresql"]
    assert (home.uid, home.gid) == (26, 26) and entries["tmp"].mode == 0o1777
    config = postgres_image.image_config("17", "17.12-minimal-trixie", "17.12-0+deb13u1")
    assert config["User"] == "26"
    assert config["Env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/17/bin"]


def test_a_major_without_a_pin_file_is_refused_naming_the_setting(tmp_path: Path) -> None:
    stack = open_stack("local", ROOT)
    with pytest.raises(ImageError, match=r'set mlflow.database.postgresql: "17"'):
        postgres_image.build(stack.config, tmp_path, tmp_path, major="18")


def test_the_operator_tool_builds_the_version_and_module_the_catalog_pins() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    release = catalog.release("cnpg", "1.30.0")
    assert re.search(rf"^CNPG_VERSION=v{re.escape(release.version)}$", script, re.M)
    assert re.search(rf"^CNPG_MODULE={re.escape(release.repository.removeprefix('https://'))}$", script, re.M)


def test_the_database_instances_get_volumes_named_as_the_operator_names_their_claims(tmp_path: Path) -> None:
    """CloudNativePG claims <cluster>-<serial> (and -wal) for instances 1..N of a new Cluster: one pre-bound local
    volume each, of the stack's size and class, in the state directory."""
    from trainyard.config import validate_platform

    stack = open_stack("local", ROOT)
    in_cluster = InCluster(IN_CLUSTER_CONTROLLERS, tmp_path / "lock.yaml")
    database = {"instances": 2, "storage_size": "2Gi", "wal_storage_size": "1Gi"}
    config = validate_platform(rehearsal_platform(read_platform(stack.path), _mlflow(database), in_cluster), "test")
    found = {v.claim: v for v in database_volumes(config, tmp_path, "node-0")}
    assert sorted(found) == ["mlflow-db-1", "mlflow-db-1-wal", "mlflow-db-2", "mlflow-db-2-wal"]
    first = found["mlflow-db-1"].manifest()
    assert first["spec"]["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "mlflow",
                                        "name": "mlflow-db-1"}
    assert first["spec"]["capacity"] == {"storage": "2Gi"} and found["mlflow-db-2-wal"].size == "1Gi"
    assert first["spec"]["local"]["path"] == str(tmp_path / "volumes" / "mlflow" / "mlflow-db-1")
    assert first["spec"]["storageClassName"] == REHEARSAL_STORAGE_CLASS  # what the claim gets at admission
    assert database_volumes(stack.config, tmp_path, "node-0") == []  # no MLflow: no database


def _mlflow(database: dict[str, object] | None = None) -> dict[str, object]:
    return {"mlflow": {"enabled": True, "object_store": {"endpoint_url": "http://seaweedfs-all-in-one.object-store.svc:8333"},
                       "backup": {"enabled": False}, **({"database": database} if database else {})},
            "object_store": {"platform_buckets": [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups"}],
                             "services": [{"name": "mlflow", "namespace": "mlflow",
                                           "buckets": ["mlflow-artifacts", "mlflow-backups"]}]}}

def test_only_the_controllers_whose_chart_the_stack_installs_get_images(tmp_path: Path) -> None:
    """The local stack declares no MLflow, so no CloudNativePG operator or MLflow image is built for it; with MLflow
    they are."""
    if not (ROOT.parent / "shared" / "crds").is_dir():
        pytest.skip("the upstream CRD mirror (../shared/crds) is needed to render")
    from trainyard.config import validate_platform

    stack = open_stack("local", ROOT)
    lock = tmp_path / "images.lock.yaml"
    lock.write_text((ROOT / "images.lock.yaml").read_text())
    in_cluster = InCluster(IN_CLUSTER_CONTROLLERS, lock)
    installed = []
    for overrides in ({}, _mlflow()):
        config = validate_platform(rehearsal_platform(read_platform(stack.path), overrides, in_cluster), "test")
        rendered = render_platform(config, stack.root, stack.path.parent)
        installed.append(installed_controllers(in_cluster, list(rendered.releases)))
    without, with_mlflow = installed
    assert {"kueue", "jobset", "trainer"} <= set(without) and not {"cnpg", "mlflow"} & set(without)
    assert set(with_mlflow) == {*without, "cnpg", "mlflow"}  # the operator's image, MLflow's server and busybox
