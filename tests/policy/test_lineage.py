"""Approved datasets and base models: the stack section, the review rule and the admission policy agree.

A TrainJob initialises only from an entry approved for its tenant (platform-wide or the tenant's own),
pinned in spec.trainer.env at the approved version. The CEL runs with cel-python, as in test_admission.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.conftest import stack
from tests.policy.cases import TENANT_NS, trainjob, with_change
from tests.policy.test_admission import admit
from trainyard.config.lineage import ApprovedDataset, ApprovedModel, Lineage
from trainyard.config.model import PlatformConfig
from trainyard.manifests import admission
from trainyard.policy import RULES_BY_ID, Context
from trainyard.policy.engine import run_rules

DIGEST = "sha256:" + "a" * 64
MODEL_DIGEST = "sha256:" + "b" * 64
DATASET = ApprovedDataset(name="support-chat", uri=f"s3://{TENANT_NS}-datasets/chat/train.jsonl", version="v-2026-11-01",
                          digest=DIGEST, licence="CC-BY-4.0", source="support tickets", classification="internal")
MODEL = ApprovedModel(name="tiny-llama", uri=f"s3://{TENANT_NS}-models/base/tiny-llama/", revision=MODEL_DIGEST,
                      licence="Apache-2.0", source="made in house", classification="public")
PINS = [{"name": "TRAINYARD_DATASET_VERSION", "value": DATASET.version},
        {"name": "TRAINYARD_DATASET_DIGEST", "value": DATASET.digest},
        {"name": "TRAINYARD_BASE_MODEL_REVISION", "value": MODEL.revision}]


def config_with(lineage: Lineage) -> PlatformConfig:
    return stack("prod").config.model_copy(update={"lineage": lineage})


def job(env: list[dict[str, Any]] | None = None, dataset: str = DATASET.uri, model: str = MODEL.uri) -> dict[str, Any]:
    out = with_change(trainjob(), "spec.initializer", {"dataset": {"storageUri": dataset}, "model": {"storageUri": model}})
    return with_change(out, "spec.trainer.env", PINS if env is None else env)


def findings(config: PlatformConfig, obj: dict[str, Any]) -> list[str]:
    return [f.message for f in run_rules([RULES_BY_ID["trainjob-approved-inputs"]], [obj], Context(config))]


SCOPES = {"platform-wide": Lineage(datasets=(DATASET,), base_models=(MODEL,)),
          "the tenant's own": Lineage.model_validate({"tenants": {TENANT_NS: {"datasets": [DATASET.model_dump()],
                                                                               "base_models": [MODEL.model_dump()]}}})}


@pytest.mark.parametrize("scope", SCOPES)
def test_an_approved_pinned_trainjob_passes_review_and_admission(scope: str) -> None:
    config = config_with(SCOPES[scope])
    assert findings(config, job()) == []
    assert admit(admission.trainjob_inputs_policy(), job(), config=config)


@pytest.mark.parametrize(("case", "obj", "message"), [
    ("unapproved dataset", job(dataset=f"s3://{TENANT_NS}-datasets/other.jsonl"), "is not an approved dataset"),
    ("unapproved model", job(model=f"s3://{TENANT_NS}-models/base/other/"), "is not an approved base model"),
    ("no pins", job(env=[]), "TRAINYARD_DATASET_VERSION is None"),
    ("another version", job(env=[{**PINS[0], "value": "v-newer"}, *PINS[1:]]), "approved at 'v-2026-11-01'"),
    ("another digest", job(env=[PINS[0], {**PINS[1], "value": "sha256:" + "c" * 64}, PINS[2]]), "TRAINYARD_DATASET_DIGEST"),
    ("another revision", job(env=[*PINS[:2], {**PINS[2], "value": DIGEST}]), "TRAINYARD_BASE_MODEL_REVISION"),
    ("pin from a Secret", job(env=[{"name": "TRAINYARD_DATASET_VERSION", "valueFrom": {"secretKeyRef": {
        "name": "s", "key": "k"}}}, *PINS[1:]]), "TRAINYARD_DATASET_VERSION is None"),
], ids=lambda v: v if isinstance(v, str) and " " in v else "")
def test_review_and_admission_refuse_what_is_not_approved_at_its_version(case: str, obj: dict[str, Any],
                                                                        message: str) -> None:
    config = config_with(SCOPES["platform-wide"])
    assert any(message in f for f in findings(config, obj)), findings(config, obj)
    assert not admit(admission.trainjob_inputs_policy(), obj, config=config)


def test_another_tenants_entries_are_not_approved_here() -> None:
    config = config_with(Lineage.model_validate({"tenants": {"assistant": {"datasets": [DATASET.model_dump()]}}}))
    dataset_only = with_change(job(), "spec.initializer", {"dataset": {"storageUri": DATASET.uri}})
    assert any("is not an approved dataset of tenant llm-research (approved: none)" in f
               for f in findings(config, dataset_only))
    assert not admit(admission.trainjob_inputs_policy(), dataset_only, config=config)


# The rest of each entry, in the same environment: what the reference program records in the MLflow run.
RECORD = {"TRAINYARD_DATASET_URI": DATASET.uri, "TRAINYARD_DATASET_NAME": DATASET.name,
          "TRAINYARD_DATASET_LICENCE": DATASET.licence, "TRAINYARD_DATASET_CLASSIFICATION": DATASET.classification}
MODEL_RECORD = {"TRAINYARD_BASE_MODEL_URI": MODEL.uri, "TRAINYARD_BASE_MODEL_NAME": MODEL.name}


@pytest.mark.parametrize("scope", SCOPES)
def test_the_pins_lineage_gives_are_what_review_and_admission_accept(scope: str) -> None:
    config = config_with(SCOPES[scope])
    pins = config.lineage.pins(TENANT_NS, DATASET.uri, MODEL.uri)
    assert pins == {**{p["name"]: p["value"] for p in PINS}, **RECORD, **MODEL_RECORD}
    pinned = job(env=[{"name": k, "value": v} for k, v in pins.items()])
    assert findings(config, pinned) == []
    assert admit(admission.trainjob_inputs_policy(), pinned, config=config)
    assert config.lineage.pins(TENANT_NS, dataset=DATASET.uri) == {**{p["name"]: p["value"] for p in PINS[:2]}, **RECORD}
    assert config.lineage.pins(TENANT_NS) == {}



@pytest.mark.parametrize(("variable", "value"), [
    ("TRAINYARD_DATASET_LICENCE", "MIT"), ("TRAINYARD_DATASET_CLASSIFICATION", "public"),
    ("TRAINYARD_DATASET_NAME", "other-chat"), ("TRAINYARD_DATASET_URI", f"s3://{TENANT_NS}-datasets/other.jsonl"),
    ("TRAINYARD_BASE_MODEL_NAME", "other-llama"), ("TRAINYARD_BASE_MODEL_URI", f"s3://{TENANT_NS}-models/base/x/"),
    ("TRAINYARD_DATASET_LICENCE", None),
], ids=lambda v: v if isinstance(v, str) and v.startswith("TRAINYARD") else ("valueFrom" if v is None else ""))
def test_what_the_run_records_may_be_left_out_but_not_changed(variable: str, value: str | None) -> None:
    """A run cannot record another licence, classification or name than the entry's: set, they must be the entry's."""
    config = config_with(SCOPES["platform-wide"])
    recorded = {**RECORD, **MODEL_RECORD}
    entry: dict[str, Any] = ({"name": variable, "value": value} if value is not None
                             else {"name": variable, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}})
    env = [*PINS, *({"name": k, "value": v} for k, v in recorded.items() if k != variable), entry]
    assert any(variable in f and "the run records it" in f for f in findings(config, job(env=env))), \
        findings(config, job(env=env))
    assert not admit(admission.trainjob_inputs_policy(), job(env=env), config=config)
    left_out = [*PINS, *({"name": k, "value": v} for k, v in recorded.items() if k != variable)]
    assert findings(config, job(env=left_out)) == []
    assert admit(admission.trainjob_inputs_policy(), job(env=left_out), config=config)

def test_pins_for_an_input_that_is_not_approved_name_it_and_the_approved_ones() -> None:
    config = config_with(SCOPES["the tenant's own"])
    with pytest.raises(ValueError, match=rf"dataset s3://x-datasets/a.jsonl is not approved for tenant {TENANT_NS} "
                                         rf"\(lineage: {DATASET.uri}\)"):
        config.lineage.pins(TENANT_NS, "s3://x-datasets/a.jsonl", MODEL.uri)
    with pytest.raises(ValueError, match=r"base model s3://x-models/m/ is not approved for tenant eval \(lineage: "
                                         r"none approved\)"):
        config.lineage.pins("eval", model="s3://x-models/m/")


def test_a_trainjob_without_initializers_is_not_concerned() -> None:
    config = config_with(Lineage())
    assert findings(config, trainjob()) == []
    assert admit(admission.trainjob_inputs_policy(), trainjob(), config=config)


@pytest.mark.parametrize(("change", "message"), [
    ({"version": "null"}, "written before versioning was on"),
    ({"digest": "md5:abc"}, "is not a content digest sha256"),
    ({"uri": "s3://bucket/dir/"}, "is not an s3://bucket/key URI of one object"),
])
def test_a_dataset_entry_must_pin_one_object_version_by_digest(change: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ApprovedDataset.model_validate({**DATASET.model_dump(), **change})


@pytest.mark.parametrize(("change", "message"), [
    ({"revision": "main"}, "pinned by its content digest"),
    ({"uri": "hf://Qwen/Qwen2.5-0.5B", "revision": "main"}, "40-hex commit, not a branch or tag"),
])
def test_a_model_entry_pins_a_revision_that_cannot_move(change: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ApprovedModel.model_validate({**MODEL.model_dump(), **change})


def test_entry_names_are_unique_and_tenants_exist() -> None:
    with pytest.raises(ValidationError, match="repeated: support-chat"):
        Lineage.model_validate({"datasets": [DATASET.model_dump()],
                                "tenants": {TENANT_NS: {"datasets": [DATASET.model_dump()]}}})
    raw = stack("prod").config.model_dump()
    raw["lineage"] = {"tenants": {"no-such-team": {}}}
    with pytest.raises(ValidationError, match="'no-such-team' is not a tenant of this stack"):
        PlatformConfig.model_validate(raw)
