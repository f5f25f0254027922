"""A component version bump shows in `trainyard diff` as an upgrade section.

The catalog gets a second Kueue entry for the test (0.19.3, monkeypatched in) whose CRDs are the
0.19.2 files with one ClusterQueue field added and one removed and the Cohort storage version
moved; two synthetic chart directories stand for the two chart versions (only one version of
each upstream chart is kept in ../shared/charts).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, crds_dir, needs_crds
from tests.review.conftest import git
from trainyard import catalog
from trainyard.manifests.crds import git_blob_sha
from trainyard.project import open_stack
from trainyard.review.diff import Side, review_against_revision, review_platforms
from trainyard.review.markdown import to_markdown

OLD, NEW = "0.19.2", "0.19.3"


def _bumped_crds(mirror: Path) -> tuple[catalog.CrdFile, ...]:
    source = crds_dir()
    assert source is not None
    target = mirror / "kueue" / f"v{NEW}"
    shutil.copytree(source / "kueue" / f"v{OLD}", target)
    queues = target / "kueue.x-k8s.io_clusterqueues.yaml"
    doc = yaml.safe_load(queues.read_text())
    v1beta2 = next(v for v in doc["spec"]["versions"] if v["name"] == "v1beta2")
    spec = v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec["dispatchPolicy"] = {"type": "string", "description": "synthetic field added in the test release"}
    del spec["stopPolicy"]
    queues.write_text(yaml.safe_dump(doc))
    cohorts = target / "kueue.x-k8s.io_cohorts.yaml"
    doc = yaml.safe_load(cohorts.read_text())
    for version in doc["spec"]["versions"]:
        version["storage"] = version["name"] == "v1beta1"
    cohorts.write_text(yaml.safe_dump(doc))
    pinned = catalog.release("kueue", OLD)
    return tuple(dataclasses.replace(crd, blob_sha=git_blob_sha((target / crd.name).read_bytes())) for crd in pinned.crds)


def _charts(directory: Path) -> Path:
    real = yaml.safe_load((ROOT.parent / "shared" / "charts" / "kueue" / OLD / "values.yaml").read_text()) \
        if (ROOT.parent / "shared" / "charts" / "kueue" / OLD).is_dir() else {"controllerManager": {"replicas": 1}}
    bumped = yaml.safe_load(yaml.safe_dump(real))
    bumped["controllerManager"]["replicas"] = 2  # a default Trainyard does not set: shown
    bumped.setdefault("controllerManager", {}).setdefault("manager", {}).setdefault("image", {})["tag"] = "v9"  # set: hidden
    bumped["newFeature"] = {"enabled": True}
    for version, values in ((OLD, real), (NEW, bumped)):
        (directory / "kueue" / version).mkdir(parents=True)
        (directory / "kueue" / version / "values.yaml").write_text(yaml.safe_dump(values))
    return directory


def _stack_files(tmp_path: Path, mirror: Path) -> tuple[Path, Path]:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    doc["config"]["trainyard:platform"]["crds"]["mirror_dir"] = str(mirror)
    base = tmp_path / "Pulumi.base.yaml"
    base.write_text(yaml.safe_dump(doc))
    doc["config"]["trainyard:platform"]["versions"] = {"kueue": NEW}
    head = tmp_path / "Pulumi.head.yaml"
    head.write_text(yaml.safe_dump(doc))
    return base, head


@pytest.fixture
def bumped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Side, Side]:
    mirror = tmp_path / "crds"
    crds = _bumped_crds(mirror)
    old = catalog.release("kueue", OLD)
    monkeypatch.setitem(catalog.RELEASES, ("kueue", NEW), dataclasses.replace(
        old, version=NEW, tag=f"v{NEW}", crds=crds, image=dataclasses.replace(old.image, tag=f"v{NEW}")))
    # The bumped Kueue counts as proven with the same JobSet and Trainer for this test only.
    monkeypatch.setattr(catalog, "PROVEN_TOGETHER", catalog.PROVEN_TOGETHER | {(NEW, "0.12.0", "2.3.0")})
    monkeypatch.setenv("TRAINYARD_CHARTS_DIR", str(_charts(tmp_path / "charts")))
    base_file, head_file = _stack_files(tmp_path, mirror)
    base, head = open_stack(str(base_file), ROOT), open_stack(str(head_file), ROOT)
    return Side("base", base.config, base.render()), Side("head", head.config, head.render())


@needs_crds
def test_a_kueue_bump_shows_crd_schema_changes_chart_defaults_and_images(bumped: tuple[Side, Side]) -> None:
    review = review_platforms(*bumped, title="kueue bump")
    [upgrade] = review.upgrades
    assert (upgrade.component, upgrade.old_version, upgrade.new_version) == ("kueue", OLD, NEW)
    crds = {c.name: c for c in upgrade.crds}
    assert set(crds) == {"clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io"}
    queues = crds["clusterqueues.kueue.x-k8s.io"]
    assert queues.added == {"v1beta2": ("spec.dispatchPolicy",)}
    assert "spec.stopPolicy" in queues.removed["v1beta2"]
    assert queues.served == (("v1beta1", "v1beta2"), ("v1beta1", "v1beta2"))
    assert crds["cohorts.kueue.x-k8s.io"].storage == ("v1beta2", "v1beta1")
    defaults = {d.path: (d.old, d.new) for d in upgrade.chart_defaults or ()}
    assert defaults["controllerManager.replicas"] == (1, 2)
    assert defaults["newFeature.enabled"] == (None, True)
    assert not any(p.startswith("controllerManager.manager.image") for p in defaults)  # Trainyard sets those
    assert upgrade.images == (("registry.k8s.io/kueue/kueue:v0.19.2",), ("registry.k8s.io/kueue/kueue:v0.19.3",))
    assert review.highlights[0].startswith(f"upgrade `kueue` {OLD} -> {NEW}; 2 CRDs change; storage version of "
                                           "`cohorts.kueue.x-k8s.io` v1beta2 -> v1beta1")
    text = to_markdown(review)
    assert "### Upgrades" in text and "docs/upgrades.md#kueue" in text
    assert "| `controllerManager.replicas` | `1` | `2` |" in text
    print(text[text.index("### Upgrades"):text.index("### Upgrades") + 2500])


@needs_crds
def test_an_upgrade_without_both_chart_directories_says_so(bumped: tuple[Side, Side], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.rmtree(tmp_path / "charts" / "kueue" / NEW)
    [upgrade] = review_platforms(*bumped, title="kueue bump").upgrades
    assert upgrade.chart_defaults is None
    assert f"kueue {NEW} not in" in upgrade.chart_note


@needs_crds
def test_a_catalog_default_that_differs_at_the_base_revision_shows_as_an_upgrade(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `diff --base REV` renders both sides with the work tree's code; the base side takes the
    # default versions of the catalog file at REV (read, not imported), so a catalog bump shows.
    source = crds_dir()
    assert source is not None
    mirror = tmp_path / "crds"
    crds = _bumped_crds(mirror)
    (mirror / "kueue" / f"v{OLD}").symlink_to(source / "kueue" / f"v{OLD}")
    for component in ("jobset", "kubeflow-trainer"):
        (mirror / component).symlink_to(source / component)
    monkeypatch.setenv("TRAINYARD_CRDS_DIR", str(mirror))
    old = catalog.release("kueue", OLD)
    monkeypatch.setitem(catalog.RELEASES, ("kueue", NEW), dataclasses.replace(
        old, version=NEW, tag=f"v{NEW}", crds=crds, image=dataclasses.replace(old.image, tag=f"v{NEW}")))
    # The bumped Kueue counts as proven with the same JobSet and Trainer for this test only.
    monkeypatch.setattr(catalog, "PROVEN_TOGETHER", catalog.PROVEN_TOGETHER | {(NEW, "0.12.0", "2.3.0")})
    catalog_file = project / "platform" / "trainyard" / "catalog.py"
    catalog_file.parent.mkdir(parents=True)
    catalog_file.write_text(f'DEFAULT_VERSIONS: dict[str, str] = {{"kueue": "{NEW}", "jobset": "0.12.0", "trainer": "2.3.0"}}\n')
    git(project, "add", ".")
    git(project, "commit", "--quiet", "-m", "catalog at the base revision")
    catalog_file.write_text(f'DEFAULT_VERSIONS: dict[str, str] = {{"kueue": "{OLD}", "jobset": "0.12.0", "trainer": "2.3.0"}}\n')
    review = review_against_revision("demo", "HEAD", project)
    [upgrade] = review.upgrades
    assert (upgrade.component, upgrade.old_version, upgrade.new_version) == ("kueue", NEW, OLD)
    assert {c.name for c in upgrade.crds} == {"clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io"}
