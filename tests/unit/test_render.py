"""Rendering: deterministic, one file per object, integers stay integers, secrets redacted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import rendered, stack
from trainyard.cli import main
from trainyard.manifests import RenderedPlatform
from trainyard.review.render import REDACTED, redact, rendered_files, write_rendered


def test_same_input_gives_byte_identical_files(tmp_path: Path) -> None:
    rendered("prod")  # skips without the CRD mirror
    first = stack("prod").render()
    second = stack("prod").render()
    assert rendered_files(first) == rendered_files(second)
    write_rendered(first, tmp_path / "a")
    write_rendered(second, tmp_path / "b")
    for path in (tmp_path / "a").rglob("*.yaml"):
        assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _dirs(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


def test_rendering_into_a_used_directory_leaves_exactly_what_a_fresh_render_writes(tmp_path: Path) -> None:
    """The output directory is synchronised, not replaced: the result must equal a fresh directory's,
    whatever an earlier render (another stack) or a hand edit left in it."""
    rendered("prod")  # skips without the CRD mirror
    used, fresh = tmp_path / "used", tmp_path / "fresh"
    write_rendered(stack("local").render(), used)
    some = next(used.rglob("*.yaml"))
    some.write_text("edited by hand\n")  # a changed file is rewritten
    (used / "Stale.example.com" / "ns").mkdir(parents=True)
    (used / "Stale.example.com" / "ns" / "gone.yaml").write_text("x: 1\n")  # a stale file and its folders go
    prod = stack("prod").render()
    # a file where the render needs a directory (and so the reverse) is replaced too
    blocker = used / next(iter(rendered_files(prod))).parts[0]
    if blocker.is_dir():
        import shutil
        shutil.rmtree(blocker)
    blocker.write_text("not a directory\n")
    written = write_rendered(prod, used)
    write_rendered(prod, fresh)
    assert _tree(used) == _tree(fresh)
    assert _dirs(used) == _dirs(fresh)
    assert sorted(p.relative_to(used) for p in written) == sorted(rendered_files(prod))


def test_render_prod_writes_every_required_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered("prod")  # skips without the CRD mirror
    assert main(["render", "prod", "--out", str(tmp_path / "out")]) == 0
    kinds = {yaml.safe_load(p.read_text()).get("kind") for p in (tmp_path / "out").rglob("*.yaml")}
    required = {"Topology", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass",
                "ClusterTrainingRuntime", "Namespace", "Role", "RoleBinding", "ResourceQuota"}
    assert required <= kinds
    assert "wrote" in capsys.readouterr().out


def test_one_file_per_object() -> None:
    platform = rendered("prod")
    files = rendered_files(platform)
    assert len(files) == len(platform.all_objects) + len(platform.releases)


def test_types_survive_the_files() -> None:
    files = rendered_files(rendered("prod"))
    text = files[Path("ClusterQueue.kueue.x-k8s.io/assistant.yaml")]
    queue = yaml.safe_load(text)
    # A quantity is the string Kueue writes back; written quoted so that YAML does not read it as a number.
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "32"
    assert "nominalQuota: '32'\n" in text
    priority = files[Path("WorkloadPriorityClass.kueue.x-k8s.io/critical.yaml")]
    assert yaml.safe_load(priority)["value"] == 10000 and "value: 10000\n" in priority


def test_secret_values_are_redacted() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"},
              "stringData": {"password": "hunter2"}}
    platform = RenderedPlatform.flat(crds=(), objects=(secret,), releases=())
    (content,) = rendered_files(platform).values()
    assert "hunter2" not in content and REDACTED in content
    assert redact({"auth": {"rootPassword": "x", "user": "admin"}}) == {"auth": {"rootPassword": REDACTED, "user": "admin"}}


def test_render_refuses_to_clobber_a_foreign_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered("local")
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["render", "local", "--out", str(tmp_path)]) == 2
    assert "not written by trainyard render" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_capacity_table_shows_physical_committed_and_limits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "prod"]) == 0
    out = capsys.readouterr().out
    assert "| h100 | NVIDIA-H100-80GB-HBM3 | 32 x 8 | 256 | 256 | 0 | 100% | whole |" in out
    assert "| h100 | assistant | product | 32 | 32 | 8 | 64 |" in out


def test_validate_all_shipped_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    rendered("local")
    for name in ("local", "staging", "prod"):
        assert main(["validate", name]) == 0
    assert capsys.readouterr().out.count(": valid (") == 3


def test_render_groups_objects_by_concern_in_apply_order() -> None:
    platform = rendered("prod")
    assert [c.name for c in platform.concerns] == ["controllers", "queueing", "multikueue", "runtimes", "data-cache", "admission",
                                                    "trainjob-resources", "tenants", "runtime-wiring", "network",
                                                    "object-store", "postgres-operator", "mlflow", "cert-manager", "serving",
                                                    "serving-admission", "gpu-operator", "monitoring", "object-store-services"]
    assert {o["kind"] for o in platform.concern("runtimes").objects} == {"ClusterTrainingRuntime"}
    assert {r.name for r in platform.concern("controllers").releases} == {"jobset", "kueue", "trainer"}


def test_tenant_objects_live_in_their_tenants_namespace() -> None:
    config = stack("prod").config
    platform = rendered("prod")
    for tenant in config.tenants:
        objects = platform.tenant_objects(tenant.name)
        assert objects[0]["kind"] == "Namespace"
        assert objects[0]["metadata"]["name"] == tenant.namespace_name
        assert {o["metadata"].get("namespace") for o in objects[1:]} == {tenant.namespace_name}
        assert {"LocalQueue", "NetworkPolicy", "ResourceQuota"} <= {o["kind"] for o in objects}


def test_crd_documents_are_fresh_copies_except_where_a_review_reads_them_only() -> None:
    """``read_only_documents`` (a review's two renders) shares one parsed document per CRD file; elsewhere
    every render gets its own, which its callers may edit."""
    from trainyard.manifests.crds import read_only_documents

    local = stack("local")
    one, two = local.render(), local.render()
    assert one.crds[0] == two.crds[0] and one.crds[0] is not two.crds[0]
    one.crds[0]["metadata"]["labels"] = {"edited": "yes"}
    assert "labels" not in (two.crds[0]["metadata"] or {}) or two.crds[0]["metadata"]["labels"] != {"edited": "yes"}
    with read_only_documents():
        three, four = local.render(), local.render()
        files = slice(len(three.given_crds), None)  # Trainyard's own CRDs are built, not read from a file
        assert all(a is b for a, b in zip(three.crds[files], four.crds[files], strict=True))
    five = local.render()
    assert five.crds[0] is not three.crds[0] and five.crds[0] == two.crds[0]
