"""`trainyard promote` without a registry: the lab's adapter versions name their base model in tags."""

from __future__ import annotations

from tests.conftest import ROOT, stack
from trainyard.serving.promote import ModelRef, base_from_tags, inference_service, to_file

ADAPTER = ModelRef(
    name="team-a-lab-sft", version="3", alias=None, location="s3://team-a-models/team-a/lab-sft/adapter",
    tags={"trainyard.base_model.uri": "s3://team-a-models/base/tiny-llama/", "trainyard.base_model.name": "tiny-llama",
          "trainyard.base_model.revision": "sha256:49004356", "trainyard.trainjob": "team-a/lab-sft"})


def test_an_adapter_version_names_its_base_model_in_its_tags() -> None:
    base = base_from_tags(ADAPTER)
    assert base is not None and not base.registered
    assert (base.name, base.version, base.location) == ("tiny-llama", "sha256:49004356", "s3://team-a-models/base/tiny-llama/")
    assert base_from_tags(ModelRef("plain", "1", None, "s3://team-a-models/plain")) is None


def test_promote_serves_the_lab_adapter_on_the_base_its_tags_name() -> None:
    config = stack("local").config
    tenant = next(t for t in config.tenants if t.name == "team-a")
    base = base_from_tags(ADAPTER)
    isvc = inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="vllm-openai", base=base)
    predictor = isvc["spec"]["predictor"]
    assert [u["uri"] for u in predictor["storageUris"]] == ["s3://team-a-models/base/tiny-llama",
                                                           "s3://team-a-models/team-a/lab-sft/adapter"]
    assert predictor["model"]["args"] == ["--lora-modules", "team-a-lab-sft=/mnt/adapters/team-a-lab-sft"]
    assert "from the version's tags" in to_file(isvc, ADAPTER, base).splitlines()[0]
