"""The air gap end to end on real OCI registries: export a stack's BOM to one archive, import it into empty ones.

Two ``crane registry serve`` registries on loopback stand for the two sides of the gap. The *source* holds
small images built in the test (``crane append`` of a one-file layer; one of them a two-platform index) under
``<prefix><upstream repository>``, as a connected-side mirror would (upstream itself is unreachable here). The
stack is ``local`` pointed at a site's mirrors (``airgap_overlay``: ``images.registry_mirror``, ``charts.mirror``,
Kueue's chart installed, serving off), with a copy of the image lock.

- ``trainyard bom STACK --export FILE --from PREFIX`` writes the archive; its manifest lists every image of the
  BOM with the digest the source serves, the Kueue chart, the 15 CRD files.
- ``trainyard bom STACK --import FILE`` (with ``crds.source: mirror`` at an empty directory) pushes into the
  *empty* target registry: every image at its mirror name with the same digest, the chart as a Helm OCI
  artifact (helm's media types, pulled back with the real helm), the CRD bundle byte-identical to the upstream
  files; ``images lock`` against the target then records exactly the exported digests, and ``images verify``
  passes.
- One byte of one layer blob changed: the import is refused, naming the blob and both digests, and the
  target registry and the CRD directory stay empty.

Needs ``crane`` (``tools/build.sh crane``) and, for the chart pull-back, ``helm``; skips, saying so, without crane.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.airgap import MIRROR_HOST, SOURCE_HOST, SOURCE_PREFIX, airgap_overlay, fill_source, registry_catalog, write_stack
from tests.conftest import CRDS_DIR, ROOT, needs_crds
from tests.oci_registry import CRANE, Registry, serve_registry
from trainyard import catalog, charts
from trainyard.cli import main
from trainyard.manifests.crds import git_blob_sha
from trainyard.project import open_stack
from trainyard.rehearsal.stack import EXTERNAL
from trainyard.supply import archive as fmt
from trainyard.supply.bom import build_bom
from trainyard.supply.lock import load_lock

pytestmark = [pytest.mark.registry, needs_crds]


@pytest.fixture(scope="module")
def crane() -> None:
    if not CRANE.is_file():
        pytest.skip(f"crane not built ({CRANE}): run `make tools` (tools/build.sh crane)")


@pytest.fixture(scope="module")
def source(crane: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with serve_registry(tmp_path_factory.mktemp("source") / "registry.log") as running:
        yield running


@pytest.fixture(scope="module")
def exported(source: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The source filled with one image per BOM image (the first a two-platform index), then the export."""
    base = tmp_path_factory.mktemp("export")
    lock = base / "images.lock.yaml"
    shutil.copy(ROOT / "images.lock.yaml", lock)
    stack_file = write_stack(base, airgap_overlay(), lock)
    bom = build_bom(open_stack(str(stack_file)))
    digests = fill_source(source, bom, base / "layers")
    archive = base / "local-airgap.tar"
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "trainyard"), "bom", str(stack_file), "--export", str(archive),
                           "--from", SOURCE_PREFIX, "--endpoint", f"{SOURCE_HOST}=http://{source.address}", "--insecure"],
                          capture_output=True, text=True, check=False, cwd=ROOT, timeout=600)
    print(f"\n$ trainyard bom {stack_file.name} --export {archive.name} --from {SOURCE_PREFIX} ...\n"
          f"{done.stderr}{done.stdout}")
    assert done.returncode == 0, done.stderr
    return {"archive": archive, "digests": digests, "bom": bom, "lock": lock, "output": done.stdout + done.stderr}


def test_the_archive_holds_every_image_chart_and_crd_of_the_bom_with_the_source_digests(exported: dict[str, Any]) -> None:
    with tarfile.open(exported["archive"]) as tar:
        names = set(tar.getnames())
        extracted = tar.extractfile(fmt.MANIFEST_NAME)
        assert extracted is not None
        manifest = json.loads(extracted.read())
        layout = tar.extractfile("images/oci-layout")
        assert layout is not None and json.loads(layout.read()) == {"imageLayoutVersion": "1.0.0"}
    assert {i["reference"]: i["digest"] for i in manifest["images"]} == exported["digests"]
    assert [(c["name"], c["version"]) for c in manifest["charts"]] == [("kueue", "0.19.2")]
    assert len(manifest["crds"]) == len(exported["bom"].crds) == 15
    assert {"images/index.json", "charts/kueue-0.19.2.tgz", "crds/kueue/v0.19.2/kueue.x-k8s.io_workloads.yaml"} <= names
    assert manifest["stack"] == "local" and manifest["trainyard_version"]


@pytest.fixture
def target(crane: None, tmp_path: Path) -> Iterator[Registry]:
    with serve_registry(tmp_path / "target.log") as running:
        yield running


def import_stack(tmp_path: Path, lock: Path) -> tuple[Path, Path]:
    """The air-gapped side's stack: CRDs from an empty bundle directory only."""
    bundle = tmp_path / "crd-bundle"
    bundle.mkdir()
    return write_stack(tmp_path, airgap_overlay({"source": "mirror", "mirror_dir": str(bundle)}), lock), bundle


def test_import_into_empty_registries_gives_the_same_digests_and_the_lock_resolves(
        exported: dict[str, Any], target: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "images.lock.yaml"
    shutil.copy(exported["lock"], lock)
    stack_file, bundle = import_stack(tmp_path, lock)
    assert registry_catalog(target) == []
    endpoint = ["--endpoint", f"{MIRROR_HOST}=http://{target.address}", "--insecure"]
    assert main(["bom", str(stack_file), "--import", str(exported["archive"]), *endpoint]) == 0
    out = capsys.readouterr()
    print(f"\n$ trainyard bom {stack_file.name} --import {exported['archive'].name} ...\n{out.err}{out.out}")
    # Every image at its mirror name, with the digest the source served.
    for reference, digest in exported["digests"].items():
        repository_tag = reference.split("/", 1)[1]
        assert target.crane("digest", "--insecure", f"{target.address}/{repository_tag}") == digest, reference
    # The CRD bundle: exactly the upstream files, in the layout crds.mirror_dir reads.
    assert CRDS_DIR is not None
    for crd in exported["bom"].crds:
        written = bundle / catalog.MIRROR_DIRS[crd.component] / f"v{crd.version}" / crd.file
        assert git_blob_sha(written.read_bytes()) == crd.blob_sha, written
    # The chart: a Helm OCI artifact with helm's media types.
    manifest = json.loads(target.crane("manifest", "--insecure", f"{target.address}/charts/kueue:0.19.2"))
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/vnd.cncf.helm.chart.content.v1.tar+gzip"]
    # The stack now renders from the bundle alone, and the lock resolves against the imported registry.
    assert main(["images", "lock", str(stack_file), *endpoint]) == 0
    assert main(["images", "verify", str(stack_file)]) == 0
    capsys.readouterr()
    entries = load_lock(lock).entries
    for reference, digest in exported["digests"].items():
        assert entries[reference].digest == digest and entries[reference].source == "registry", reference


def test_helm_pulls_the_imported_chart_back_unchanged(exported: dict[str, Any], target: Registry, tmp_path: Path) -> None:
    helm = charts.helm_binary()
    if helm is None:
        pytest.skip("helm not built (tools/build.sh helm)")
    stack_file, _ = import_stack(tmp_path, exported["lock"])
    assert main(["bom", str(stack_file), "--import", str(exported["archive"]), "--endpoint",
                 f"{MIRROR_HOST}=http://{target.address}", "--insecure"]) == 0
    home = tmp_path / "helm"
    env = {"HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "PATH": "/usr/bin:/bin"}
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    done = subprocess.run([str(helm), "pull", f"oci://{target.address}/charts/kueue", "--version", "0.19.2",
                           "--plain-http", "--destination", str(pulled)], capture_output=True, text=True, env=env,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    with tarfile.open(exported["archive"]) as tar:
        extracted = tar.extractfile("charts/kueue-0.19.2.tgz")
        assert extracted is not None
        assert (pulled / "kueue-0.19.2.tgz").read_bytes() == extracted.read()


def _tampered(archive: Path, out: Path) -> str:
    """A copy of ``archive`` with one byte of its largest layer blob changed; returns that member's name."""
    with tarfile.open(archive) as tar:
        blobs = [m for m in tar.getmembers() if m.name.startswith("images/blobs/")]
        victim = max(blobs, key=lambda m: m.size)
        offset = victim.offset_data + victim.size // 2
    data = bytearray(archive.read_bytes())
    data[offset] ^= 0x01
    out.write_bytes(bytes(data))
    return victim.name


def test_a_tampered_archive_is_refused_naming_the_blob_and_nothing_is_pushed(
        exported: dict[str, Any], target: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tampered = tmp_path / "tampered.tar"
    victim = _tampered(exported["archive"], tampered)
    stack_file, bundle = import_stack(tmp_path, exported["lock"])
    assert main(["bom", str(stack_file), "--import", str(tampered), "--endpoint",
                 f"{MIRROR_HOST}=http://{target.address}", "--insecure"]) == 1
    err = capsys.readouterr().err
    print(f"\n$ trainyard bom {stack_file.name} --import {tampered.name} ...\n{err}")
    named = victim.rsplit("/", 1)[1]
    (line,) = [line for line in err.splitlines() if victim in line]
    assert f"its name (the manifest's digest) is sha256:{named}" in line and "content has digest sha256:" in line
    assert "refused, nothing pushed or written" in err
    assert registry_catalog(target) == []
    assert list(bundle.iterdir()) == []


def test_an_archive_whose_manifest_is_not_the_one_carried_apart_is_refused(
        exported: dict[str, Any], target: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_file, _ = import_stack(tmp_path, exported["lock"])
    assert main(["bom", str(stack_file), "--import", str(exported["archive"]), "--expect-manifest", "0" * 64,
                 "--endpoint", f"{MIRROR_HOST}=http://{target.address}", "--insecure"]) == 1
    assert "(--expect-manifest)" in capsys.readouterr().err
    assert registry_catalog(target) == []


def test_an_image_missing_at_the_source_is_named_with_its_bom_line(source: Registry, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "images.lock.yaml"
    shutil.copy(ROOT / "images.lock.yaml", lock)
    stack_file = write_stack(tmp_path, airgap_overlay(), lock)
    out = tmp_path / "out.tar"
    assert main(["bom", str(stack_file), "--export", str(out), "--from", f"{SOURCE_HOST}/nothing-here/",
                 "--endpoint", f"{SOURCE_HOST}=http://{source.address}", "--insecure"]) == 1
    err = capsys.readouterr().err
    assert "registry.trainyard.internal/mirror/kueue/kueue:v0.19.2 (bom: chart:kueue, controller:kueue): cannot be " \
           f"pulled from {SOURCE_HOST}/nothing-here/kueue/kueue:v0.19.2" in err
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_an_unreachable_source_names_the_host_and_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.loopback import free_port

    lock = tmp_path / "images.lock.yaml"
    shutil.copy(ROOT / "images.lock.yaml", lock)
    stack_file = write_stack(tmp_path, airgap_overlay(), lock)
    assert main(["bom", str(stack_file), "--export", str(tmp_path / "out.tar"), "--from", SOURCE_PREFIX,
                 "--endpoint", f"{SOURCE_HOST}=http://127.0.0.1:{free_port()}", "--insecure"]) == 1
    err = capsys.readouterr().err
    assert f"registry {SOURCE_HOST} cannot be reached" in err and "hint: " in err and "--endpoint" in err
    assert "Traceback" not in err


def test_an_archive_of_another_stack_is_refused_naming_what_it_lacks(
        exported: dict[str, Any], target: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    overlay = airgap_overlay({"source": "mirror", "mirror_dir": str(bundle)})
    overlay["rehearsal"] = {"external_controllers": [c for c in EXTERNAL if c not in ("kueue", "jobset")]}
    stack_file = write_stack(tmp_path, overlay, exported["lock"])
    assert main(["bom", str(stack_file), "--import", str(exported["archive"]), "--endpoint",
                 f"{MIRROR_HOST}=http://{target.address}", "--insecure"]) == 1
    err = capsys.readouterr().err
    assert "chart jobset 0.12.0 (release jobset) is not in the archive" in err
    assert registry_catalog(target) == []
    assert yaml.safe_load(stack_file.read_text())  # the stack file itself is untouched and valid
