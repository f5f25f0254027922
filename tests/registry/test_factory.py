"""The image factory against a real OCI registry on loopback (``crane registry serve``), with the real binaries.

The three controller images are built from the binaries ``tools/build.sh`` made (twice, in two cache directories:
the same digests), pushed under the mirror names of the rehearsal's stack (``images.registry_mirror:
trainyard.local/mirror/``, the mirror host mapped to the loopback registry as containerd's ``hosts.toml`` maps it),
read back by crane (its digest, its config, its flattened filesystem: ``/manager`` is the binary), then
``trainyard images lock`` fills a copy of the lock from that registry and ``trainyard images verify`` passes: the
lock holds ``source: registry`` digests equal to the built ones, and the charts' values render them.

Needs crane and the controllers from ``make tools`` (``tools/build.sh crane kueue jobset trainer``); skips, saying so,
without them. Timings are printed (``-s``), not asserted.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_crds
from tests.oci_registry import CRANE, TOOLS_DIR, Registry, serve_registry
from trainyard.cli import main
from trainyard.manifests import installs
from trainyard.project import open_stack
from trainyard.rehearsal import factory
from trainyard.rehearsal.stack import InCluster, write_rehearsal_stack
from trainyard.supply.lock import load_lock

pytestmark = [pytest.mark.registry, needs_crds]
MIRROR_HOST = "trainyard.local"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    missing = [str(p) for p in (CRANE, *(TOOLS_DIR / "bin" / r.binary for r in factory.RECIPES)) if not p.is_file()]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)}: run "
                    "`tools/build.sh crane kueue jobset trainer cnpg kserve kube-rbac-proxy`")
    with serve_registry(tmp_path_factory.mktemp("registry") / "registry.log") as running:
        yield running


def _rehearsal_stack(directory: Path, registry: Registry, lock: Path,
                     in_cluster: tuple[str, ...] = factory.COMPONENTS) -> Path:
    """The local stack with the rehearsal's in-cluster overlay: images under trainyard.local/mirror/, lock ``lock``."""
    target = directory / "Pulumi.rehearsal.yaml"
    write_rehearsal_stack(ROOT / "stacks" / "Pulumi.local.yaml", target,
                          in_cluster=InCluster(in_cluster, lock, registry.address))
    return target


# The controllers whose charts the local stack installs with real nodes (no MLflow: no CloudNativePG operator, whose image
# the stack then does not render and the lock cannot ask for).
INSTALLED = ("kueue", "jobset", "trainer", "kserve")
# Those whose every image under the mirror the factory builds: `images lock --only-registry` resolves every image the
# stack renders under that host, and KServe's chart also names the storage initializer, agent and router (not built yet),
# SeaweedFS's the server's (built by its own recipe, seaweedfs_image.py).
FULLY_BUILT = ("kueue", "jobset", "trainer")


def _recipe(image: factory.BuiltImage) -> factory.Recipe:
    return next(r for r in factory.RECIPES if factory.recipe_upstream(open_stack("local").config, r) == image.upstream)


def _show(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Printed past the capture (``-s``): the figures of the run."""
    with capsys.disabled():
        print(text)


def test_the_controller_images_are_built_pushed_under_the_mirror_names_and_locked(
        registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock_file = tmp_path / "images.lock.yaml"
    shutil.copy(ROOT / "images.lock.yaml", lock_file)  # a copy: the repository's lock is never written
    stack_file = _rehearsal_stack(tmp_path, registry, lock_file, FULLY_BUILT)
    config = open_stack(str(stack_file)).config

    started = time.monotonic()
    built = factory.build_controller_images(config, TOOLS_DIR, tmp_path / "cache-one", FULLY_BUILT)
    _show(capsys, f"cold build ({len(built)} images): {time.monotonic() - started:.2f}s")
    started = time.monotonic()
    again = factory.build_controller_images(config, TOOLS_DIR, tmp_path / "cache-two", FULLY_BUILT)
    _show(capsys, f"cold build in a second directory: {time.monotonic() - started:.2f}s")
    assert [b.digest for b in again] == [b.digest for b in built]  # reproducible
    started = time.monotonic()
    warm = factory.build_controller_images(config, TOOLS_DIR, tmp_path / "cache-one", FULLY_BUILT)
    _show(capsys, f"warm build (from the cache): {time.monotonic() - started:.2f}s")
    assert all(b.cached for b in warm) and [b.digest for b in warm] == [b.digest for b in built]
    started = time.monotonic()
    factory.push_images(built, registry.address)
    _show(capsys, f"push to the loopback registry: {time.monotonic() - started:.2f}s")
    for image in built:
        size = sum(p.stat().st_size for p in image.layout.rglob("*") if p.is_file())
        _show(capsys, f"{image.reference} ({size / 1e6:.1f} MB uncompressed)")

    for image in built:
        pulled = f"{registry.address}/{image.target.repository}:{image.target.tag}"
        assert registry.crane("digest", "--insecure", pulled) == image.digest
        runtime = json.loads(registry.crane("config", "--insecure", pulled))["config"]
        recipe = _recipe(image)
        assert runtime["Entrypoint"] == [recipe.entrypoint] and runtime["User"].startswith("65532")
        binary = (TOOLS_DIR / "bin" / recipe.binary).read_bytes()
        exported = subprocess.run([str(CRANE), "export", "--insecure", pulled, "-"], capture_output=True, check=True,
                                  timeout=120).stdout
        with tarfile.open(fileobj=io.BytesIO(exported)) as flat:
            names = set(flat.getnames())
            manager = flat.extractfile(recipe.path)
            assert manager is not None
            assert hashlib.sha256(manager.read()).digest() == hashlib.sha256(binary).digest()
        assert {"etc/passwd", "etc/ssl/certs/ca-certificates.crt", "tmp", "home/nonroot"} <= names

    endpoint = f"{MIRROR_HOST}=http://{registry.address}"
    assert factory.endpoint_argument(built, registry.address) == [endpoint]
    assert main(["images", "lock", str(stack_file), "--only-registry", MIRROR_HOST, "--endpoint", endpoint,
                 "--insecure"]) == 0
    out = capsys.readouterr().out
    _show(capsys, out)
    assert f"{len(built)} images of rehearsal locked from the registry ({len(built)} changed)" in out
    lock = load_lock(lock_file)
    for image in built:
        entry = lock.entries[image.target.tagged]
        assert (entry.digest, entry.source, entry.upstream) == (image.digest, "registry", str(image.upstream))
    # The runtimes' images are not on the rehearsal's registry: kept as they were (placeholders).
    assert lock.entries["registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"].source == "placeholder"

    assert main(["images", "verify", str(stack_file), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not [p for p in report["problems"] if p["reference"].startswith(f"{MIRROR_HOST}/")]
    releases = {r.component: r for r in installs.releases(config, lock)}
    kueue = releases["kueue"].values["controllerManager"]["manager"]["image"]
    assert f"{kueue['repository']}:{kueue['tag']}" == next(b.reference for b in built if b.component == "kueue")


def test_the_factory_fills_a_new_rehearsal_lock_from_the_registry(registry: Registry, tmp_path: Path) -> None:
    lock_file = tmp_path / "state" / "images.lock.yaml"  # not there yet: it starts as a copy of the project's lock
    stack = open_stack(str(_rehearsal_stack(tmp_path, registry, lock_file)))
    built = factory.build_controller_images(stack.config, TOOLS_DIR, tmp_path / "cache", INSTALLED)
    factory.push_images(built, registry.address)
    result = factory.lock_pushed(stack, built, registry.address)
    assert sorted(str(r) for r in result.asked) == sorted(str(b.target) for b in built)
    lock = load_lock(lock_file)
    assert {b.target.tagged: lock.entries[b.target.tagged].digest for b in built} == {b.target.tagged: b.digest
                                                                                       for b in built}
    assert lock.entries.keys() >= load_lock(ROOT / "images.lock.yaml").entries.keys()
    assert main(["images", "verify", str(stack.path)]) == 0
