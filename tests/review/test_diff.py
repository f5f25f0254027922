"""`trainyard diff` reviews built from real configs and renders, changed in memory."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.review.conftest import changed_config, prod_config, side, with_objects
from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform
from trainyard.review.cli import format_review
from trainyard.review.diff import Side, review_platforms
from trainyard.review.markdown import to_markdown

pytestmark = pytest.mark.usefixtures("crds")


def tenant(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in data["tenants"] if t["name"] == name)


def raise_assistant_h100_and_add_a_node(data: dict[str, Any]) -> None:
    next(p for p in data["gpu_pools"] if p["name"] == "h100")["nodes"] += 1
    next(q for q in tenant(data, "assistant")["quotas"] if q["flavor"] == "h100")["gpus"] += 8


def add_vision_tenant(data: dict[str, Any]) -> None:
    next(p for p in data["gpu_pools"] if p["name"] == "h100")["nodes"] += 1
    data["tenants"].append({"name": "vision", "cohort": "product", "quotas": [{"flavor": "h100", "gpus": 8}]})


def test_quota_change_reads_per_tenant_and_flavor_with_the_committed_total() -> None:
    base = side("base", prod_config())
    head = side("head", changed_config(prod_config(), raise_assistant_h100_and_add_a_node))
    review = review_platforms(base, head, title="prod")
    assert "`assistant` h100 nominal quota 32 -> 40 (+8)" in review.highlights
    assert "flavor `h100`: 256 -> 264 (+8) GPUs, committed 256 -> 264 (+8), free 0" in review.highlights
    markdown = to_markdown(review)
    assert "| h100 | nvidia.com/gpu | 256 -> 264 (+8) | 256 -> 264 (+8) | 256 -> 264 (+8) | 0 |" in markdown
    assert "| assistant | h100 | nvidia.com/gpu | product | 32 -> 40 (+8) | 32 | 8 |" in markdown
    assert "~ spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota: 32 -> 40 (+8)" in markdown


def test_added_tenant_lists_its_objects_and_quota() -> None:
    review = review_platforms(side("base", prod_config()), side("head", changed_config(prod_config(), add_vision_tenant)),
                              title="prod")
    assert "tenant `vision` added with nominal GPU quota h100 8" in review.highlights
    added = {c.id for c in review.changes if c.action == "added"}
    assert {"Namespace/vision", "ClusterQueue/vision", "LocalQueue/vision/default"} <= added
    assert all(c.tenant == "vision" for c in review.changes if c.action == "added" and c.namespace == "vision")


def bump_torch_image(objects: list[dict[str, Any]]) -> None:
    runtime = next(o for o in objects if o["metadata"]["name"] == "torch-distributed")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["image"] = pod["containers"][0]["image"].split("@")[0] + "@sha256:" + "ab" * 32


def test_runtime_image_digest_change_is_a_highlight() -> None:
    base = side("base", prod_config())
    assert base.rendered is not None
    head = Side("head", base.config, with_objects(base.rendered, bump_torch_image))
    review = review_platforms(base, head, title="prod")
    assert review.highlights == ("runtime `torch-distributed` image digest changed "
                                 "(`node`: `sha256:631af2fb862d` -> `sha256:abababababab`)",)
    (change,) = review.changes
    assert change.id == "ClusterTrainingRuntime/torch-distributed"
    assert change.fields[0].path == "spec.template.spec.replicatedJobs[node].template.spec.template.spec.containers[node].image"


def test_chart_version_bump_gets_its_own_table() -> None:
    base = side("base", prod_config())
    assert base.rendered is not None
    releases = tuple(dataclasses.replace(r, version="0.19.3") if r.name == "kueue" else r for r in base.rendered.releases)
    head = Side("head", base.config, RenderedPlatform.flat(base.rendered.crds, base.rendered.objects, releases))
    review = review_platforms(base, head, title="prod")
    old = next(r.version for r in base.rendered.releases if r.name == "kueue")
    assert review.chart_bumps() == [("kueue", old, "0.19.3")]
    assert f"chart `kueue` version {old} -> 0.19.3" in review.highlights
    assert f"| kueue | {old} -> 0.19.3 |" in to_markdown(review)


@dataclass(frozen=True)
class StubFinding:
    rule_id: str
    severity: str
    object_id: str
    message: str
    hint: str = ""


def stub_rules(config: PlatformConfig, rendered: RenderedPlatform) -> list[StubFinding]:
    """Two made-up rules: no tenant above 100 nominal GPUs on a flavor; every tenant has groups."""
    findings = [StubFinding("quota-ceiling", "advisory", f"ClusterQueue/{t.name}", f"{q.flavor}: {q.gpus} GPUs")
                for t in config.tenants for q in t.quotas if q.gpus > 100]
    findings += [StubFinding("tenant-groups", "mandatory", f"RoleBinding/{t.name}/trainyard-tenant", "no groups bound")
                 for t in config.tenants if not t.groups]
    return findings


def lower_pretrain_and_add_vision(data: dict[str, Any]) -> None:
    next(q for q in tenant(data, "llm-pretrain")["quotas"] if q["flavor"] == "h100")["gpus"] = 96
    data["tenants"].append({"name": "vision", "cohort": "product", "quotas": [{"flavor": "h100", "gpus": 32}]})


def test_policy_results_that_changed_lists_new_and_fixed_violations() -> None:
    base = side("base", prod_config())
    head = side("head", changed_config(prod_config(), lower_pretrain_and_add_vision))
    review = review_platforms(base, head, title="prod", evaluator=stub_rules)
    assert review.policy is not None
    assert [(r.rule_id, r.object_id) for r in review.policy.new] == [("tenant-groups", "RoleBinding/vision/trainyard-tenant")]
    assert [(r.rule_id, r.object_id) for r in review.policy.fixed] == [("quota-ceiling", "ClusterQueue/llm-pretrain")]
    assert "policy: 1 new violation (1 mandatory), 1 fixed" in review.highlights
    markdown = to_markdown(review)
    assert "### Policy results that changed" in markdown
    assert "| new | mandatory | tenant-groups | `RoleBinding/vision/trainyard-tenant` | no groups bound |" in markdown
    assert "| fixed | advisory | quota-ceiling | `ClusterQueue/llm-pretrain` | h100: 128 GPUs |" in markdown


def test_without_policy_rules_the_section_is_left_out() -> None:
    head = side("head", changed_config(prod_config(), lower_pretrain_and_add_vision))
    review = review_platforms(side("base", prod_config()), head, title="prod", evaluator=None)
    assert review.policy is None
    assert "Policy results" not in to_markdown(review)


def shuffled(s: Side, seed: int) -> Side:
    assert s.rendered is not None
    rng = random.Random(seed)
    objects, releases, crds = list(s.rendered.objects), list(s.rendered.releases), list(s.rendered.crds)
    for items in (objects, releases, crds):
        rng.shuffle(items)
    return Side(s.label, s.config, RenderedPlatform.flat(tuple(crds), tuple(objects), tuple(releases)))


def test_output_does_not_depend_on_object_order() -> None:
    base = side("base", prod_config())
    head = side("head", changed_config(prod_config(), add_vision_tenant))
    expected = {fmt: format_review(review_platforms(base, head, title="prod", evaluator=stub_rules), fmt)
                for fmt in ("markdown", "text", "json")}
    for seed in range(3):
        review = review_platforms(shuffled(base, seed), shuffled(head, seed + 10), title="prod", evaluator=stub_rules)
        for fmt, text in expected.items():
            assert format_review(review, fmt) == text


def test_secrets_never_appear_in_any_format() -> None:
    base = side("base", prod_config())
    assert base.rendered is not None
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mlflow-db", "namespace": "mlflow"},
              "stringData": {"password": "plaintext-old"}}
    base = Side("base", base.config, with_objects(base.rendered, lambda objects: objects.append(secret)))
    rotated = {**secret, "stringData": {"password": "plaintext-new"}}
    assert base.rendered is not None
    releases = tuple(dataclasses.replace(r, values={**r.values, "db": {"password": "chart-plaintext"}})
                     for r in base.rendered.releases)
    head_objects = with_objects(base.rendered, lambda objects: objects.__setitem__(-1, rotated))
    head = Side("head", base.config, RenderedPlatform.flat(head_objects.crds, head_objects.objects, releases))
    review = review_platforms(base, head, title="prod")
    for fmt in ("markdown", "text", "json"):
        out = format_review(review, fmt)
        assert "plaintext" not in out
        assert "<redacted>" in out
    assert "~ stringData.password: <redacted> (value changed)" in to_markdown(review)


def test_a_large_diff_shows_counts_per_kind_and_folds_the_objects() -> None:
    review = review_platforms(Side("base"), side("head", prod_config()), title="prod",
                              notes=["`stacks/Pulumi.prod.yaml` does not exist at base: everything is added."])
    markdown = to_markdown(review)
    assert "### Counts per kind" in markdown
    assert "| CustomResourceDefinition |" in markdown
    assert markdown.count("<details>") == markdown.count("</details>") >= 1
    assert "everything is added" in markdown
    short = to_markdown(review, limit=2_000)
    assert "<details>" not in short and "Per-object details are left out" in short
    assert "### Counts per kind" in short


def test_identical_sides_say_no_changes() -> None:
    same = side("base", prod_config())
    review = review_platforms(same, same, title="prod", evaluator=stub_rules)
    assert review.changes == () and review.highlights == ()
    assert "No changes." in to_markdown(review)


def test_json_format_is_plain_data(tmp_path: Path) -> None:
    review = review_platforms(side("base", prod_config()),
                              side("head", changed_config(prod_config(), raise_assistant_h100_and_add_a_node)), title="prod")
    data = json.loads(format_review(review, "json"))
    assert data["counts"]["changed"] >= 1
    quota = next(q for q in data["capacity"]["quotas"] if q["tenant"] == "assistant")
    assert (quota["old"]["nominal"], quota["new"]["nominal"]) == (32, 40)
    change = next(c for c in data["changes"] if c["id"] == "ClusterQueue/assistant")
    assert {"path": "spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota", "old": "32", "new": "40"} \
        in change["fields"]


def unprotect(data: dict[str, Any]) -> None:
    data["lifecycle"]["protect_data"] = False


def test_settings_that_change_no_object_are_still_named() -> None:
    review = review_platforms(side("base", prod_config()), side("head", changed_config(prod_config(), unprotect)),
                              title="prod")
    assert review.changes == ()
    assert review.highlights == ("stack setting `lifecycle.protect_data`: true -> false",)
    markdown = to_markdown(review)
    assert "No changes." not in markdown
    assert "### Stack settings (1 changed)" in markdown and "~ lifecycle.protect_data: true -> false" in markdown


def test_settings_name_tenants_and_quotas_by_identity() -> None:
    review = review_platforms(side("base", prod_config()),
                              side("head", changed_config(prod_config(), raise_assistant_h100_and_add_a_node)), title="prod")
    assert [(f.path, f.old, f.new) for f in review.settings] == [
        ("gpu_pools[h100].nodes", 32, 33), ("tenants[assistant].quotas[h100].gpus", 32, 40)]


def test_many_policy_results_are_counted_per_rule_and_folded() -> None:
    def every_namespace(config: PlatformConfig, rendered: RenderedPlatform) -> list[StubFinding]:
        if config.lifecycle.protect_data:
            return []
        return [StubFinding("data-protected", "mandatory", f"{o['kind']}/{o['metadata']['name']}", "not protected")
                for o in rendered.by_kind("Namespace") + rendered.by_kind("CustomResourceDefinition")]

    head = side("head", changed_config(prod_config(), unprotect))
    review = review_platforms(side("base", prod_config()), head, title="prod", evaluator=every_namespace)
    count = len(every_namespace(head.config, head.rendered))  # type: ignore[arg-type]
    assert count > 8
    markdown = to_markdown(review)
    assert f"| data-protected | mandatory | {count} |  |" in markdown
    assert f"<details><summary>{count} findings</summary>" in markdown
