"""Every image a stack renders carries the image lock's digest, and the gate names the one that does not.

The builders pin each image they render (``<name>:<tag>@<digest>``, or the chart's own digest value);
``supply.gate`` finds every reference the stack renders (``image_scan`` over objects and chart values,
the pod images of each chart from its templates) and reports the ones without a digest, with the lock
and bill-of-materials lines that would fix them. The chart tier does the same on helm's output
(``tests/charts/test_chart_images.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import ROOT, rendered, stack
from trainyard.manifests import cert_manager, gpu_operator
from trainyard.project import Stack
from trainyard.supply import gate
from trainyard.supply.bom import build_bom
from trainyard.supply.image_scan import FoundImage
from trainyard.supply.lock import ImageLock, LockEntry, load_lock
from trainyard.supply.reference import ImageRef

LOCK = load_lock(ROOT / "images.lock.yaml")
MIRROR = "registry.trainyard.internal/mirror/"
WEBHOOK = f"{MIRROR}jetstack/cert-manager-webhook:v1.21.1"


def _references(name: str) -> list[FoundImage]:
    platform = rendered(name)
    return gate.rendered_references(platform, build_bom(stack(name), platform))


@pytest.mark.parametrize("name", ["prod", "staging"])
def test_every_image_a_data_protecting_stack_renders_carries_the_locks_digest(name: str) -> None:
    wrong = []
    for image in _references(name):
        ref = ImageRef.parse(image.reference)
        entry = LOCK.entry(ref) if ref.tag else None
        # A reviewed runtime file may pin by digest itself (no tag, no lock entry); anything else is the lock's.
        if ref.digest is None or (entry is not None and ref.digest != entry.digest):
            wrong.append(f"{image.reference} at {image.where} (lock: {entry.digest if entry else 'no entry'})")
    assert not wrong, "images rendered without the lock's digest:\n  " + "\n  ".join(wrong)


def test_the_references_cover_each_chart_that_was_tag_only() -> None:
    """One image per chart that used to render by tag alone, where it renders (issue #24 item 3)."""
    found = {(ImageRef.parse(i.reference).tagged, i.where) for i in _references("prod")}
    assert {
        (WEBHOOK, "chart:cert-manager pod image (templates)"),
        (f"{MIRROR}cloudnative-pg/cloudnative-pg:1.30.0", "chart:cnpg values.image"),
        (f"{MIRROR}cloudnative-pg/postgresql:18.4-system-trixie", "Cluster/mlflow/mlflow-db.spec.imageName"),
        (f"{MIRROR}burakince/mlflow:3.15.1", "chart:mlflow values.image"),
        (f"{MIRROR}library/busybox:1.38.0", "chart:mlflow values.initImages.dbchecker"),
        (f"{MIRROR}kserve/storage-initializer:v0.20.0", "chart:kserve values.kserve.storage"),
        (f"{MIRROR}nvidia/k8s/container-toolkit:v1.20.0", "chart:gpu-operator values.toolkit"),
        (f"{MIRROR}nvidia/driver:595.91.07", "NVIDIADriver/h100.spec"),
    } <= found


def test_prod_has_no_unpinned_image_only_placeholders() -> None:
    assert {p.status for p in gate.unlocked_images(stack("prod"))} == {"placeholder"}


def test_without_a_lock_entry_nothing_pretends_to_be_a_digest() -> None:
    config = stack("prod").config
    assert "webhook" not in cert_manager.values(config) and "image" not in cert_manager.values(config)
    operator = config.gpu_operator
    assert operator is not None
    assert gpu_operator.chart_values(config, operator)["toolkit"]["version"] == "v1.20.0"
    pinned = gpu_operator.chart_values(config, operator, LOCK)["toolkit"]["version"]
    assert pinned == f"v1.20.0@{LOCK.entries[MIRROR + 'nvidia/k8s/container-toolkit:v1.20.0'].digest}"
    assert cert_manager.values(config, LOCK)["webhook"] == {
        "image": {"tag": "v1.21.1", "digest": LOCK.entries[WEBHOOK].digest}}


def test_a_dropped_pin_is_an_error_naming_the_image_where_it_renders_and_the_lines_that_fix_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cert_manager, "IMAGE_KEYS", ("cainjector", "acmesolver"))  # the webhook's pin dropped
    unpinned = [p for p in gate.unlocked_images(stack("prod")) if p.status == "unpinned"]
    assert [(p.reference, p.where, p.error) for p in unpinned] == [
        (WEBHOOK, "chart:cert-manager pod image (templates)", True)]
    message = unpinned[0].message
    assert f"images.lock.yaml: {WEBHOOK} holds {LOCK.entries[WEBHOOK].digest} (placeholder)" in message
    assert f"BOM line {WEBHOOK} (chart:cert-manager)" in message


def test_unpinned_images_name_the_lock_line_to_add_and_whether_the_bom_lists_them() -> None:
    bom = build_bom(stack("prod"), rendered("prod"))
    toolkit = f"{MIRROR}nvidia/k8s/container-toolkit:v1.20.0"
    found = [FoundImage(toolkit, "chart:gpu-operator values.toolkit"),
             FoundImage(toolkit, "ClusterPolicy/cluster-policy.spec.toolkit"),
             FoundImage("registry.example.com/elsewhere:1.0", "Deployment/x.spec.template.spec.containers[0].image"),
             FoundImage(f"{toolkit}@{LOCK.entries[toolkit].digest}", "pinned, not reported")]
    empty = dataclasses.replace(ImageLock(), path=Path("images.lock.yaml"))
    problems = gate.unpinned_images(empty, found, protect_data=True, bom=bom, stack="prod")
    assert [(p.reference, p.where) for p in problems] == [
        ("registry.example.com/elsewhere:1.0", "Deployment/x.spec.template.spec.containers[0].image"),
        (toolkit, "ClusterPolicy/cluster-policy.spec.toolkit (and 1 more)")]
    assert problems[0].message.endswith("add images.lock.yaml: registry.example.com/elsewhere:1.0 (trainyard images lock "
                                        "prod); not in the bill of materials: list it in the catalog first "
                                        "(rule images-in-bom)")
    assert f"BOM line {toolkit} (operand:gpu-operator:values.toolkit)" in problems[1].message
    assert all(p.error for p in problems)
    assert not any(p.error for p in gate.unpinned_images(empty, found, protect_data=False))


def test_the_program_refuses_a_registry_filled_lock_when_one_image_renders_without_its_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filled = ImageLock({key: LockEntry(e.digest, "registry", e.upstream) for key, e in LOCK.entries.items()})
    (tmp_path / "images.lock.yaml").write_text(filled.dump())
    prod = stack("prod")
    config = prod.config.model_copy(update={"images": prod.config.images.model_copy(
        update={"lock_file": str(tmp_path / "images.lock.yaml")})})
    gate.refuse_unlocked("prod", config, ROOT, prod.path.parent)  # every digest confirmed and rendered: deploys
    assert gate.unlocked_images(Stack("prod", prod.path, ROOT, config)) == []
    monkeypatch.setattr(cert_manager, "IMAGE_KEYS", ("cainjector", "acmesolver"))
    with pytest.raises(gate.UnlockedImages, match=f"{WEBHOOK} renders without a digest at chart:cert-manager") as caught:
        gate.refuse_unlocked("prod", config, ROOT, prod.path.parent)
    assert "every image must render as <name>:<tag>@<digest>" in str(caught.value)
    assert "trainyard images lock prod" not in str(caught.value)  # nothing to fill: the lock is complete
