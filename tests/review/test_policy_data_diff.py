"""Policy data in review: a change of what a tenant may read, run or serve reads as that tenant's params keys.

The admission policies read every per-tenant fact from the ``trainyard-policy`` TenantPolicy of the tenant's
namespace (manifests/policy_params.py), so a stack change that approves a dataset for a tenant, moves an
approved version, or lets a tenant expose models is a diff of named keys, ``data[key]: old -> new``, under
the tenant; the policies themselves do not change. A long string that changes (a CEL literal of a rule every
tenant shares) shows the part that differs on both sides, never the same cut prefix twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import stack
from tests.review.conftest import changed_config, side
from trainyard.config.model import PlatformConfig
from trainyard.review.changes import ABSENT, NETWORK, FieldChange, diff_values
from trainyard.review.diff import Review, review_platforms
from trainyard.review.markdown import field_lines, to_markdown, to_text
from trainyard.review.values import MAX_VALUE_CHARS, arrow

pytestmark = pytest.mark.usefixtures("crds")

# staging approves one dataset and one base model for the assistant team (its own buckets).
ASSISTANT_DATASET = "s3://stg-assistant-datasets/support-chat/train.jsonl"


def staging() -> PlatformConfig:
    return stack("staging").config


def review_of(edit: Any) -> Review:
    return review_platforms(side("base", staging()), side("head", changed_config(staging(), edit)), title="staging")


def grant_eval_the_assistant_dataset(data: dict[str, Any]) -> None:
    """The eval team may read the assistant team's dataset: the same entry, approved for eval too."""
    entry = dict(data["lineage"]["tenants"]["assistant"]["datasets"][0], name="support-chat-eval")
    data["lineage"]["tenants"]["eval"] = {"datasets": [entry]}


def params_change(review: Review, tenant: str) -> Any:
    (change,) = [c for c in review.changes if c.id == f"TenantPolicy/{tenant}/trainyard-policy"]
    return change


def test_granting_a_tenant_another_tenants_dataset_reads_as_that_tenants_params_keys() -> None:
    review = review_of(grant_eval_the_assistant_dataset)
    change = params_change(review, "eval")
    assert (change.action, change.tenant, change.concern) == ("changed", "eval", NETWORK)
    assert FieldChange("data[dataset.support-chat-eval.uri]", ABSENT, ASSISTANT_DATASET) in change.fields
    assert {f.path for f in change.fields} == {f"data[dataset.support-chat-eval.{k}]" for k in (
        "name", "uri", "version", "digest", "licence", "classification")}
    # The policies are unchanged: the data moved out of their CEL.
    assert [c.id for c in review.changes] == ["TenantPolicy/eval/trainyard-policy"]
    assert (f"admission params of tenant `eval`: `[dataset.support-chat-eval.uri]` (absent) -> {ASSISTANT_DATASET}"
            in review.highlights[1])
    text = to_text(review)
    assert "  changed TenantPolicy/eval/trainyard-policy  [tenant eval]" in text
    assert f"      + data[dataset.support-chat-eval.uri]: {ASSISTANT_DATASET}" in text
    assert f"  + data[dataset.support-chat-eval.uri]: {ASSISTANT_DATASET}" in to_markdown(review)


def test_a_moved_approved_version_names_tenant_key_old_and_new() -> None:
    def move(data: dict[str, Any]) -> None:
        data["lineage"]["tenants"]["assistant"]["datasets"][0]["version"] = "0b1e7d44-second-upload"

    change = params_change(review_of(move), "assistant")
    old = staging().lineage.approved_for("assistant").datasets[0].version
    assert change.fields == (FieldChange("data[dataset.support-chat.version]", old, "0b1e7d44-second-upload"),)
    assert field_lines(change.fields[0]) == [f"~ data[dataset.support-chat.version]: {old} -> 0b1e7d44-second-upload"]


def test_letting_a_tenant_expose_models_is_one_key_of_its_params() -> None:
    def publish(data: dict[str, Any]) -> None:
        data["serving"]["exposure"] |= {"ingress_creation": True, "public_tenants": ["assistant"]}

    review = review_of(publish)
    assert params_change(review, "assistant").fields == (FieldChange("data[serving.public]", "false", "true"),)
    # The values are strings (the params' data are strings): they read quoted, not as booleans.
    assert "admission params of tenant `assistant`: `[serving.public]` \"false\" -> \"true\"" in review.highlights


LONG_PREFIX = '["registry.trainyard.internal/", ' + ", ".join(f'"mirror-{i}.example/"' for i in range(8))


def test_a_long_changed_string_shows_where_it_differs_on_both_sides() -> None:
    old, new = LONG_PREFIX + ', "a.example/"]', LONG_PREFIX + ', "b.example/"]'
    assert len(old) > MAX_VALUE_CHARS
    before, _, after = arrow(old, new).partition(" -> ")
    assert before != after.split(" (from")[0]
    assert '\\"a.example/\\"]' in before and '\\"b.example/\\"]' in after
    assert arrow(old, new).endswith(f"(from character {len(LONG_PREFIX) + 4})")
    # The window starts shortly before the difference, not at the start of the string.
    assert before.startswith("…") and "registry.trainyard.internal" not in before


def test_a_cel_map_literal_diffs_by_field() -> None:
    old = '{"h100": {"cpu": "192", "memory": "1800Gi", "nvidia.com/gpu": "8"}, "l40s": {"cpu": "64"}}'
    new = '{"h100": {"cpu": "96", "memory": "1800Gi", "nvidia.com/gpu": "8"}, "l40s": {"cpu": "64"}}'
    assert diff_values({"expression": old}, {"expression": new}) == [
        FieldChange("expression(json).h100.cpu", "192", "96")]
