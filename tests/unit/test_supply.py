"""Image references, the image lock and the bill of materials (offline; the registry tier is tests/registry)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, rendered, stack
from trainyard.cli import main
from trainyard.supply.bom import build_bom, sync_groups, to_markdown
from trainyard.supply.lock import ImageLock, LockEntry, LockFileError, load_lock, placeholder_digest, problems
from trainyard.supply.reference import ImageRef, ReferenceError, mirrored
from trainyard.supply.registry import RegistryClient, RegistryError

DIGEST = "sha256:" + "c" * 64


@pytest.mark.parametrize(("text", "expected"), [
    ("pytorch/pytorch:2.10", ImageRef("docker.io", "pytorch/pytorch", "2.10")),
    ("busybox:1.38.0", ImageRef("docker.io", "library/busybox", "1.38.0")),
    ("registry.k8s.io/kueue/kueue:v0.19.2", ImageRef("registry.k8s.io", "kueue/kueue", "v0.19.2")),
    ("127.0.0.1:5000/a/b:t@" + DIGEST, ImageRef("127.0.0.1:5000", "a/b", "t", DIGEST)),
    ("localhost/x@" + DIGEST, ImageRef("localhost", "x", None, DIGEST)),
])
def test_references_are_normalised_with_an_explicit_registry(text: str, expected: ImageRef) -> None:
    assert ImageRef.parse(text) == expected


@pytest.mark.parametrize("text", ["pytorch/pytorch", "a/b@sha256:short", "UPPER/case:1"])
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(ReferenceError):
        ImageRef.parse(text)


def test_a_mirror_keeps_the_upstream_repository_path_and_drops_the_registry() -> None:
    upstream = ImageRef.parse("ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0")
    assert str(mirrored(upstream, "registry.example.com/mirror/")) == (
        "registry.example.com/mirror/kubeflow/trainer/trainer-controller-manager:v2.3.0")
    assert mirrored(upstream, None) == upstream


def test_lock_round_trips_and_pins_by_tag(tmp_path: Path) -> None:
    ref = ImageRef.parse("registry.example.com/a/b:1.0")
    lock = ImageLock().with_entry(ref, LockEntry(DIGEST, "registry", "docker.io/a/b:1.0"))
    path = tmp_path / "images.lock.yaml"
    path.write_text(lock.dump())
    again = load_lock(path)
    assert again.entries == lock.entries
    assert str(again.pin(ref)) == f"registry.example.com/a/b:1.0@{DIGEST}"
    assert again.pin(ImageRef.parse("registry.example.com/a/b:2.0")).digest is None


@pytest.mark.parametrize(("content", "reason"), [
    ("images: [1]", "images: must be a mapping"),
    ("images:\n  a/b:1: {digest: sha256:00, source: registry}", "digest: 'sha256:00' is not sha256"),
    (f"images:\n  a/b:1: {{digest: '{DIGEST}', source: guessed}}", "must be 'registry' or 'placeholder'"),
    (f"images:\n  a/b@{DIGEST}: {{digest: '{DIGEST}', source: registry}}", "tagged reference without a digest"),
])
def test_a_broken_lock_file_names_the_entry_and_the_reason(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "images.lock.yaml"
    path.write_text(content)
    with pytest.raises(LockFileError, match=reason):
        load_lock(path)


def test_placeholders_and_missing_entries_are_errors_only_where_data_is_protected() -> None:
    placeholder, missing = ImageRef.parse("r.example.com/a:1"), ImageRef.parse("r.example.com/b:1")
    pinned_in_file = ImageRef.parse(f"r.example.com/c@{DIGEST}")
    lock = ImageLock().with_entry(placeholder, LockEntry(placeholder_digest("docker.io/a:1"), "placeholder"))
    found = problems(lock, [placeholder, missing, pinned_in_file], protect_data=True)
    assert [(p.reference, p.status, p.error) for p in found] == [
        ("r.example.com/a:1", "placeholder", True), ("r.example.com/b:1", "missing", True)]
    assert all(not p.error for p in problems(lock, [placeholder, missing], protect_data=False))


def test_the_committed_lock_names_its_placeholders_as_such() -> None:
    lock = load_lock(ROOT / "images.lock.yaml")
    assert lock.entries and {e.source for e in lock.entries.values()} == {"placeholder"}


def test_rendered_runtimes_and_chart_values_take_their_digest_from_the_lock() -> None:
    lock = load_lock(ROOT / "images.lock.yaml")
    platform = rendered("prod")
    runtime = next(o for o in platform.by_kind("ClusterTrainingRuntime") if o["metadata"]["name"] == "torch-distributed")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    image = pod["containers"][0]["image"]
    key = "registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"
    assert image == f"{key}@{lock.entries[key].digest}"
    kueue = next(r for r in platform.releases if r.name == "kueue")
    digest = lock.entries["registry.trainyard.internal/mirror/kueue/kueue:v0.19.2"].digest
    assert kueue.values["controllerManager"]["manager"]["image"]["tag"] == f"v0.19.2@{digest}"


def test_bom_lists_controllers_runtimes_and_chart_images_with_their_sources() -> None:
    bom = build_bom(stack("prod"), rendered("prod"))
    by_ref = {image.reference: image for image in bom.images}
    kueue = by_ref["registry.trainyard.internal/mirror/kueue/kueue:v0.19.2"]
    assert kueue.upstream == "registry.k8s.io/kueue/kueue:v0.19.2"
    assert kueue.sources == ("chart:kueue", "controller:kueue")
    assert kueue.status == "placeholder"
    torch = by_ref["registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"]
    assert torch.upstream == "docker.io/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"
    assert torch.sources == ("runtime:torch-distributed",)
    assert {c.release: c.images_from for c in bom.charts} == {"jobset": "templates", "kueue": "templates",
                                                              "trainer": "templates", "cnpg": "templates",
                                                              "mlflow": "templates", "gpu-operator": "templates",
                                                              "cert-manager": "templates", "kserve": "templates",
                                                              "minio-operator": "templates", "minio-tenant": "templates"}
    # Every upstream CRD file; Trainyard's own CRDs are in its code, nothing to supply.
    assert len(bom.crds) == len(rendered("prod").crd_sources) and all(len(c.blob_sha) == 40 for c in bom.crds)
    built = {i.reference: i.sources for i in bom.images if i.reference.startswith("registry.trainyard.internal/trainyard/")}
    # The images the platform team builds itself: the object store's provisioner and the lab's program.
    assert built["registry.trainyard.internal/trainyard/object-store-provisioner:1.0.0"] == ("object-store:provisioner",)
    assert built["registry.trainyard.internal/trainyard/lora-peft:0.1.0"] == ("runtime:lora-peft",)
    assert "| `registry.trainyard.internal/mirror/kueue/kueue:v0.19.2` |" in to_markdown(bom)


def test_local_bom_leaves_out_images_of_external_controllers() -> None:
    bom = build_bom(stack("local"), rendered("local"))
    assert all(not s.startswith(("controller:", "chart:")) for image in bom.images for s in image.sources)
    assert {c.release for c in bom.charts if c.external} == {"jobset", "kueue", "trainer", "kserve", "cert-manager",
                                                             "seaweedfs"}


def test_sync_list_groups_images_so_skopeo_keeps_the_mirror_layout() -> None:
    groups = {g.destination: g.source for g in sync_groups(build_bom(stack("prod"), rendered("prod")))}
    # skopeo sync puts each image at <destination>/<last path part>: kueue/kueue -> .../mirror/kueue/kueue.
    assert groups["registry.trainyard.internal/mirror/kueue"] == {"registry.k8s.io": {"images": {"kueue/kueue": ["v0.19.2"]}}}
    assert groups["registry.trainyard.internal/pytorch"] == {
        "docker.io": {"images": {"pytorch/pytorch": ["2.10.0-cuda12.8-cudnn9-runtime"]}}}


def test_bom_sync_writes_one_yaml_per_destination_and_a_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered("prod")
    assert main(["bom", "prod", "--format", "sync", "--out", str(tmp_path)]) == 0
    script = (tmp_path / "sync.sh").read_text()
    assert ("skopeo sync --all --preserve-digests --src yaml --dest docker sync-09-mirror-kueue.yaml "
            "registry.trainyard.internal/mirror/kueue") in script
    assert yaml.safe_load((tmp_path / "sync-09-mirror-kueue.yaml").read_text()) == {
        "registry.k8s.io": {"images": {"kueue/kueue": ["v0.19.2"]}}}


def test_images_verify_fails_prod_on_placeholders_and_only_warns_on_local(capsys: pytest.CaptureFixture[str]) -> None:
    rendered("prod")
    assert main(["images", "verify", "prod"]) == 1
    err = capsys.readouterr().err
    assert "error: registry.trainyard.internal/mirror/kueue/kueue:v0.19.2 has a placeholder digest" in err
    rendered("local")
    assert main(["images", "verify", "local"]) == 0
    assert "warning: " in capsys.readouterr().err


def test_registry_client_refuses_plain_http_without_insecure() -> None:
    client = RegistryClient({"r.example.com": "http://127.0.0.1:9"})
    with pytest.raises(RegistryError, match="pass --insecure"):
        client.digest(ImageRef.parse("r.example.com/a:1"))


def test_images_verify_json_lists_each_problem_with_the_same_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    rendered("prod")
    assert main(["images", "verify", "prod", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "trainyard.images-verify/v1" and doc["ok"] is False and doc["protect_data"] is True
    assert {"reference": "registry.trainyard.internal/mirror/kueue/kueue:v0.19.2", "status": "placeholder",
            "severity": "error", "message": "registry.trainyard.internal/mirror/kueue/kueue:v0.19.2 has a placeholder "
            "digest (no registry reported it)", "where": None} in doc["problems"]
    assert doc["errors"] == len(doc["problems"])


def test_images_lock_without_a_registry_says_so_once_and_names_real_flags(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lock = tmp_path / "images.lock.yaml"
    assert main(["images", "lock", "prod", "--lock", str(lock), "--insecure",
                 "--endpoint", f"registry.trainyard.internal=http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {lock}: not changed; ") and lines[0].endswith(" images could not be resolved")
    assert lines[1].startswith("  registry registry.trainyard.internal cannot be reached (")
    assert len(lines) == 3 and lines[2].startswith("hint: ")
    assert "trainyard bom prod --format sync --out DIR" in lines[2]
    assert "--endpoint registry.trainyard.internal=" in lines[2]
    assert not lock.exists()
