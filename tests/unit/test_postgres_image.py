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
from trainyard.rehearsal.images import ImageError
from trainyard.rehearsal.mirror import installed_controllers
from trainyard.rehearsal.session import IN_CLUSTER_CONTROLLERS
from trainyard.rehearsal.stack import InCluster, read_platform, rehearsal_platform
from trainyard.rehearsal.volumes import NODE_LOCAL_CLASS, node_local_volumes


def fake_deb(directory: Path, name: str, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    """A .deb built with dpkg-deb from ``files`` (path -> content) and symbolic ``links`` (path -> target)."""
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
    out = directory / f"{name}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture
def packages(tmp_path: Path) -> list[Path]:
    return [
        fake_deb(tmp_path, "base", {"usr/bin/.keep": b""}, {"bin": "usr/bin", "lib64": "usr/lib64"}),
        fake_deb(tmp_path, "dash", {"bin/dash": b"#!dash", "usr/share/man/man1/dash.1.gz": b"man",
                                    "usr/share/doc/dash/changelog.gz": b"log", "usr/share/doc/dash/copyright": b"BSD"},
                 {"bin/sh": "dash"}),
        fake_deb(tmp_path, "pg", {"usr/lib/postgresql/17/bin/postgres": b"ELF", "usr/share/locale/de/pg.mo": b"de"}),
    ]


def test_a_package_under_bin_lands_under_usr_and_the_merged_usr_links_are_made(packages: list[Path]) -> None:
    entries = {e.path: e for e in debian.closure_entries(packages)}
    assert entries["usr/bin/dash"].data == b"#!dash" and "bin/dash" not in entries
    assert entries["usr/bin/sh"].link == "dash"
    assert {top: entries[top].link for top in ("bin", "sbin", "lib", "lib64")} == {
        "bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
    assert entries["usr/lib/postgresql/17/bin/postgres"].data == b"ELF"


def test_documentation_is_dropped_as_debian_slim_drops_it_but_every_copyright_stays(packages: list[Path]) -> None:
    paths = {e.path for e in debian.closure_entries(packages)}
    assert "usr/share/doc/dash/copyright" in paths
    assert not {"usr/share/doc/dash/changelog.gz", "usr/share/man/man1/dash.1.gz", "usr/share/locale/de/pg.mo"} & paths


def test_a_file_two_packages_ship_differently_is_refused(tmp_path: Path) -> None:
    one = fake_deb(tmp_path, "one", {"usr/bin/tool": b"one"})
    two = fake_deb(tmp_path, "two", {"usr/bin/tool": b"two"})
    with pytest.raises(ImageError, match=r"/usr/bin/tool is shipped differently by one\.deb and two\.deb"):
        debian.closure_entries([one, two])


def test_the_pin_file_is_read_and_a_malformed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pins.txt"
    path.write_text("# suite: trixie\n# roots: a\na 1.0 " + "0" * 64 + "\n")
    assert debian.read_pins(path) == debian.PinFile("trixie", ("a",), (debian.Pin("a", "1.0", "0" * 64),))
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
    pins = debian.PinFile("trixie", ("postgresql-17",), (debian.Pin("postgresql-17", "17.12-0+deb13u1", "0" * 64),))
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
        postgres_image.build_operand(stack.config, tmp_path, tmp_path, major="18")


def test_the_operator_tool_builds_the_version_and_module_the_catalog_pins() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    release = catalog.release("cnpg", "1.30.0")
    assert re.search(rf"^CNPG_VERSION=v{re.escape(release.version)}$", script, re.M)
    assert re.search(rf"^CNPG_MODULE={re.escape(release.repository.removeprefix('https://'))}$", script, re.M)


def test_node_local_volumes_are_local_pvs_pinned_to_the_node_whose_directories_exist(tmp_path: Path) -> None:
    storage_class, *volumes = node_local_volumes("node-0", tmp_path, count=2, size="8Gi")
    assert storage_class["metadata"]["name"] == NODE_LOCAL_CLASS
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert [v["spec"]["local"]["path"] for v in volumes] == [str(tmp_path / "pv-0"), str(tmp_path / "pv-1")]
    assert all((tmp_path / f"pv-{i}").is_dir() for i in range(2))
    terms = volumes[0]["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]}]}]


def test_only_the_controllers_whose_chart_the_stack_installs_get_images(tmp_path: Path) -> None:
    """The local stack declares no MLflow, so no CloudNativePG operator image is built for it; with MLflow it is."""
    if not (ROOT.parent / "shared" / "crds").is_dir():
        pytest.skip("the upstream CRD mirror (../shared/crds) is needed to render")
    from trainyard.config import validate_platform

    stack = open_stack("local", ROOT)
    lock = tmp_path / "images.lock.yaml"
    lock.write_text((ROOT / "images.lock.yaml").read_text())
    in_cluster = InCluster(IN_CLUSTER_CONTROLLERS, lock)
    mlflow = {"mlflow": {"enabled": True, "object_store": {"endpoint_url": "http://seaweedfs-all-in-one.object-store.svc:8333"},
                         "backup": {"enabled": False}},
              "object_store": {"platform_buckets": [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups"}],
                               "services": [{"name": "mlflow", "namespace": "mlflow",
                                             "buckets": ["mlflow-artifacts", "mlflow-backups"]}]}}
    for overrides, expected in (({}, ("kueue", "jobset", "trainer")), (mlflow, ("kueue", "jobset", "trainer", "cnpg"))):
        config = validate_platform(rehearsal_platform(read_platform(stack.path), overrides, in_cluster), "test")
        rendered = render_platform(config, stack.root, stack.path.parent)
        assert installed_controllers(in_cluster, list(rendered.releases)) == expected
