"""``trainyard images verify STACK --in-mirror`` against a real OCI registry on loopback (``crane registry serve``).

The prod stack (serving off: its runtimes pin upstream digests no test can build) gets one small image per
bill-of-materials entry under its mirror names, and its lock from that registry (``images lock``). The mirror host
is mapped to the registry through ``TRAINYARD_REGISTRY_ENDPOINTS``, the mapping the Pulumi program reads too
(loopback: plain http without ``--insecure``). Then one image is taken out of the registry (its tag and its digest
deleted): the check exits 1 naming it, the URL it asked and the line of ``trainyard bom STACK --format sync`` that
mirrors it; with the image pushed back (the same digest, ``crane copy``), it passes. A tag that serves other
content than the lock is named with the digest it serves.

Needs the ``crane`` binary from ``make tools`` (``tools/build.sh crane``); skips, saying so, without it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, needs_crds
from tests.oci_registry import CRANE, Registry, serve_registry
from trainyard.cli import main
from trainyard.project import open_stack
from trainyard.supply.bom import build_bom, lock_references
from trainyard.supply.endpoints import ENDPOINTS_ENV
from trainyard.supply.reference import ImageRef

pytestmark = [pytest.mark.registry, needs_crds]
MIRROR_HOST = "registry.trainyard.internal"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if not CRANE.is_file():
        pytest.skip(f"crane not built ({CRANE}): run `make tools` (tools/build.sh crane)")
    with serve_registry(tmp_path_factory.mktemp("registry") / "registry.log") as running:
        yield running


@pytest.fixture(scope="module")
def locked_prod(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prod without serving, every BOM image pushed to the registry, its lock filled from there."""
    base = tmp_path_factory.mktemp("prod")
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    doc["config"]["trainyard:platform"]["serving"] = None
    doc["config"]["trainyard:platform"]["images"]["lock_file"] = str(base / "images.lock.yaml")
    (base / "images.lock.yaml").write_text((ROOT / "images.lock.yaml").read_text())
    stack_file = base / "Pulumi.prod.yaml"
    stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    start = time.monotonic()
    refs = lock_references(build_bom(open_stack(str(stack_file))))
    for ref in refs:
        registry.push(ref, base)
    print(f"\npushed {len(refs)} images in {time.monotonic() - start:.1f} s")
    endpoint = ["--endpoint", f"{MIRROR_HOST}=http://{registry.address}", "--insecure"]
    assert main(["images", "lock", str(stack_file), *endpoint]) == 0, "images lock failed"
    return stack_file


def verify(stack_file: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    start = time.monotonic()
    code = main(["images", "verify", str(stack_file), "--in-mirror"])
    out = capsys.readouterr()
    with capsys.disabled():  # shown as it happens, not mixed into the next capture
        print(f"\n$ trainyard images verify {stack_file.name} --in-mirror  (exit {code}, "
              f"{time.monotonic() - start:.2f} s with the render)\n{out.err}{out.out}")
    return code, out.out, out.err


def sync_output(stack_file: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["bom", str(stack_file), "--format", "sync"]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_missing_image_is_named_with_its_sync_line_and_passes_once_pushed(
        registry: Registry, locked_prod: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://{registry.address}")  # loopback: no --insecure
    code, out, _ = verify(locked_prod, capsys)
    assert code == 0 and out.rstrip().endswith(", 0 missing")

    jobset = ImageRef.parse(f"{MIRROR_HOST}/mirror/jobset/jobset:v0.12.0")
    here = f"{registry.address}/{jobset.repository}"
    digest = registry.crane("digest", "--insecure", f"{here}:{jobset.tag}")
    registry.crane("copy", "--insecure", f"{here}:{jobset.tag}", f"{registry.address}/spare/jobset:{jobset.tag}")
    registry.crane("delete", "--insecure", f"{here}@{digest}")
    registry.crane("delete", "--insecure", f"{here}:{jobset.tag}")

    code, out, err = verify(locked_prod, capsys)
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith("error: stack 'prod': 1 of ") and "images it pulls are not in their registry" in lines[0]
    assert lines[1] == f"  {jobset.with_digest(digest)}"
    assert lines[2] == f"    asked:  http://{registry.address}/v2/{jobset.repository}/manifests/{digest}: HTTP 404"
    assert lines[3].startswith("    pulled: chart:jobset ")
    printed = sync_output(locked_prod, capsys)
    entry, command = lines[4].removeprefix("    sync:   "), lines[5].strip()
    file = entry.split(":", 1)[0]
    assert entry == f"{file}: registry.k8s.io jobset/jobset [v0.12.0]"
    assert f"# file: {file} (destination {MIRROR_HOST}/mirror/jobset)" in printed
    assert command in printed  # the very line `trainyard bom prod --format sync` prints
    assert "images.lock.yaml" not in err and "Traceback" not in err

    registry.crane("copy", "--insecure", f"{registry.address}/spare/jobset:{jobset.tag}", f"{here}:{jobset.tag}")
    code, out, _ = verify(locked_prod, capsys)
    assert code == 0 and out.rstrip().endswith(", 0 missing")


def test_a_tag_that_serves_other_content_than_the_lock_is_named_with_what_it_serves(
        registry: Registry, locked_prod: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://{registry.address}")
    kueue = ImageRef.parse(f"{MIRROR_HOST}/mirror/kueue/kueue:v0.19.2")
    here = f"{registry.address}/{kueue.repository}"
    locked = registry.crane("digest", "--insecure", f"{here}:{kueue.tag}")
    registry.crane("copy", "--insecure", f"{here}:{kueue.tag}", f"{registry.address}/spare/kueue:{kueue.tag}")
    registry.crane("delete", "--insecure", f"{here}@{locked}")
    other = registry.push(kueue, tmp_path, "other content under the same tag")  # a re-sync without the digests
    try:
        code, _, err = verify(locked_prod, capsys)
        assert code == 1
        assert f"  {kueue.with_digest(locked)}\n" in err
        assert (f"    the tag v0.19.2 is there, with {other}: the mirror holds other content under it than the lock "
                "(synced without --preserve-digests, or the tag moved)") in err
        assert "then take the digests the mirror serves into the lock: trainyard images lock prod" in err
    finally:
        registry.crane("copy", "--insecure", f"{registry.address}/spare/kueue:{kueue.tag}", f"{here}:{kueue.tag}")
    assert verify(locked_prod, capsys)[0] == 0
