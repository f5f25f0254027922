"""`trainyard promote` without a registry: the lab's adapter versions name their base model in tags."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, stack
from trainyard.serving.promote import (
    ModelRef,
    PromoteError,
    Resources,
    base_from_tags,
    inference_service,
    resolve,
    storage_uri,
    to_file,
)

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
    # The base model's directory keeps its slash (KServe downloads every key under the prefix).
    assert [u["uri"] for u in predictor["storageUris"]] == ["s3://team-a-models/base/tiny-llama/",
                                                           "s3://team-a-models/team-a/lab-sft/adapter"]
    assert predictor["model"]["args"] == ["--lora-modules", "team-a-lab-sft=/mnt/adapters/team-a-lab-sft"]
    assert "from the version's tags" in to_file(isvc, ADAPTER, base).splitlines()[0]


def test_the_adapter_on_peft_cpu_gets_the_same_predictor_as_on_vllm_and_a_runtime_without_lora_names_those_with() -> None:
    config = stack("local").config
    tenant = next(t for t in config.tenants if t.name == "team-a")
    base = base_from_tags(ADAPTER)
    vllm = inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="vllm-openai", base=base)
    cpu = inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="peft-cpu", base=base)
    assert cpu["spec"]["predictor"]["model"].pop("runtime") == "peft-cpu"
    assert cpu["spec"]["predictor"]["model"].pop("modelFormat") == {"name": "huggingface"}
    for key in ("runtime", "modelFormat"):
        vllm["spec"]["predictor"]["model"].pop(key)
    assert cpu == vllm  # the same mounts, --lora-modules and resources: only the runtime differs
    with pytest.raises(PromoteError, match="runtime huggingface-server does not serve LoRA adapters "
                                           r"\(no --enable-lora\); approved runtimes that do: vllm-openai, peft-cpu"):
        inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="huggingface-server", base=base)


def test_a_cpu_predictor_runs_in_the_stacks_cpu_pool_and_a_named_pool_brings_its_taints() -> None:
    config = stack("local").config
    tenant = next(t for t in config.tenants if t.name == "team-a")
    cpu = inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="peft-cpu",
                            resources=Resources(gpus=0, cpu="1", memory="2Gi"))["spec"]["predictor"]
    assert cpu["nodeSelector"] == {"trainyard.dev/pool": "cpu"} and "tolerations" not in cpu
    gpu = inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="vllm-openai")["spec"]["predictor"]
    assert "nodeSelector" not in gpu  # a GPU predictor without --pool: its GPU request places it
    a100 = inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", runtime="vllm-openai",
                             pool="fake-a100")["spec"]["predictor"]
    pool = config.pool("fake-a100")
    assert a100["nodeSelector"] == dict(pool.node_labels)
    assert [t["key"] for t in a100["tolerations"]] == [t.key for t in pool.taints] and pool.taints
    with pytest.raises(PromoteError, match=r"--pool 'gpu' is not a node pool of this stack \(fake-a100, fake-l4, cpu\)"):
        inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", pool="gpu")
    with pytest.raises(PromoteError, match="--pool cpu is a CPU pool: a predictor with 1 GPU"):
        inference_service(config, ROOT, tenant, ADAPTER, name="lab-sft", pool="cpu")


class Registry:
    """An MLflow client's registry calls as PostgreSQL-backed MLflow 3.15.1 answers them (mlflow/mlflow#24515)."""

    def __init__(self, *versions: ModelRef) -> None:
        self.versions = versions
        self.searches: list[str] = []

    def search_model_versions(self, filter_string: str) -> list[SimpleNamespace]:
        self.searches.append(filter_string)
        return [SimpleNamespace(name=v.name, version=v.version, source=v.location, tags=dict(v.tags)) for v in self.versions
                if filter_string in (f"name = '{v.name}'", f'name = "{v.name}"')]

    def get_model_version(self, name: str, version: str) -> None:
        raise AssertionError("get_model_version by number: PostgreSQL refuses it on MLflow 3.15.1")

    def get_model_version_download_uri(self, name: str, version: str) -> None:
        raise AssertionError("get_model_version_download_uri: the same lookup by number")


def test_a_version_number_is_found_among_the_models_versions_and_its_s3_source_is_the_location() -> None:
    registry = Registry(ADAPTER, ModelRef("team-a-lab-sft", "4", None, "s3://team-a-models/team-a/lab-sft-4/adapter"))
    ref = resolve(registry, "team-a-lab-sft", "3", None)
    assert (ref.name, ref.version, ref.location, ref.alias) == ("team-a-lab-sft", "3", ADAPTER.location, None)
    assert ref.tags["trainyard.base_model.uri"] == "s3://team-a-models/base/tiny-llama/"
    assert registry.searches == ["name = 'team-a-lab-sft'"]


def test_an_unknown_version_number_names_the_versions_there_are() -> None:
    with pytest.raises(PromoteError, match=r"model registry: model 'team-a-lab-sft' has no version 7 \(versions: 3\)"):
        resolve(Registry(ADAPTER), "team-a-lab-sft", "7", None)
    with pytest.raises(PromoteError, match="give a version number"):
        resolve(Registry(ADAPTER), "team-a-lab-sft", "three", None)


def test_a_directory_location_keeps_one_trailing_slash_and_a_bare_bucket_is_refused() -> None:
    config = stack("local").config
    tenant = next(t for t in config.tenants if t.name == "team-a")
    uri = storage_uri(config, tenant, ModelRef("m", "1", None, "s3://team-a-models/base/qwen//"))
    assert uri == "s3://team-a-models/base/qwen/"
    assert storage_uri(config, tenant, ModelRef("m", "1", None, "s3://team-a-models/base/qwen")) == "s3://team-a-models/base/qwen"
    with pytest.raises(PromoteError, match="outside tenant team-a's model bucket"):
        storage_uri(config, tenant, ModelRef("m", "1", None, "s3://team-a-models/"))
