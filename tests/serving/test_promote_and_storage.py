"""From the registry to the storage initializer, for real: MLflow, an S3 server, ``trainyard promote``, kserve_storage.

A small model (and a LoRA adapter on it) is logged to team-a's model bucket through a real MLflow
server and registered; ``trainyard promote`` turns the registered versions into InferenceService files
that ``trainyard check`` passes; KServe's own storage initializer code (``kserve_storage.Storage``,
kserve-storage 0.20.0) then downloads the promoted ``storageUri`` with exactly the environment KServe's
credential builder injects for the Secret Trainyard renders, and is refused on another tenant's bucket.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import CRDS_DIR, stack
from tests.serving import promotion
from tests.serving.conftest import BUCKETS, READ_ONLY, S3Server, serving_python
from trainyard.manifests import object_store
from trainyard.manifests.serving import SERVICE_ACCOUNT
from trainyard.schemas import Validator

pytestmark = pytest.mark.serving

REGISTER = """
import json, os, sys, tempfile
from pathlib import Path
import mlflow
from mlflow.tracking import MlflowClient
client = MlflowClient()
out = {}
def register(experiment, location, model, files, alias=None):
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment, artifact_location=location)
    run = client.create_run(exp_id)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        client.log_artifacts(run.info.run_id, tmp, artifact_path="model")
    client.set_terminated(run.info.run_id)
    if not client.search_registered_models(f"name='{model}'"):
        client.create_registered_model(model)
    mv = client.create_model_version(model, f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    if alias:
        client.set_registered_model_alias(model, alias, mv.version)
    out[model] = {"version": mv.version, "source": mv.source}
register("team-a", "s3://team-a-models/mlflow/team-a", "chat-base",
         {"config.json": json.dumps({"model_type": "llama", "hidden_size": 64}), "model.safetensors": "weights" * 100},
         alias="champion")
register("team-a", "s3://team-a-models/mlflow/team-a", "chat-support-lora",
         {"adapter_config.json": json.dumps({"r": 8, "peft_type": "LORA"}), "adapter_model.safetensors": "lora" * 50})
register("team-b", "s3://team-b-models/mlflow/team-b", "ranker",
         {"config.json": json.dumps({"model_type": "bert"}), "model.safetensors": "b" * 100})
print(json.dumps(out))
"""

@pytest.fixture(scope="module")
def registered(mlflow_server: str, s3: S3Server) -> dict[str, dict[str, str]]:
    result = serving_python(REGISTER, {**s3.admin_env(), "MLFLOW_TRACKING_URI": mlflow_server})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def promote(mlflow_server: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "isvc.yaml"
    result = promotion.promote("local", "team-a", mlflow_server, out, "--gpus", "0", "--cpu", "2", "--memory", "8Gi", *args)
    print(result.stdout, result.stderr)
    return result, out


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return promotion.check("local", path)


def test_the_read_only_identities_are_the_ones_trainyard_renders() -> None:
    rendered_identities = {i.name: i.buckets for i in object_store.identities(stack("local").config) if i.access == "read-only"}
    assert rendered_identities == READ_ONLY
    assert set(BUCKETS) == {b for buckets in READ_ONLY.values() for b in buckets}


def test_promote_writes_an_inference_service_on_the_tenant_bucket_that_passes_check(
        mlflow_server: str, registered: dict[str, dict[str, str]], tmp_path: Path) -> None:
    result, out = promote(mlflow_server, tmp_path, "--model", "chat-base", "--alias", "champion", "--runtime", "vllm-openai")
    assert result.returncode == 0, result.stderr
    isvc = yaml.safe_load(out.read_text())
    predictor = isvc["spec"]["predictor"]
    assert registered["chat-base"]["source"].startswith("s3://team-a-models/mlflow/team-a/")
    assert predictor["model"]["storageUri"] == registered["chat-base"]["source"]
    assert predictor["model"]["runtime"] == "vllm-openai"
    assert predictor["model"]["modelFormat"] == {"name": "vLLM"}
    assert predictor["serviceAccountName"] == SERVICE_ACCOUNT
    assert isvc["metadata"]["namespace"] == "team-a"
    assert isvc["metadata"]["labels"]["networking.kserve.io/visibility"] == "cluster-local"
    assert CRDS_DIR is not None
    assert [str(e) for e in Validator(CRDS_DIR).errors(isvc)] == []
    checked = check(out)
    print(checked.stdout)
    assert checked.returncode == 0, checked.stdout
    assert "local: 0 mandatory, 0 advisory findings" in checked.stdout


def test_promote_serves_a_lora_adapter_on_its_base_model(
        mlflow_server: str, registered: dict[str, dict[str, str]], tmp_path: Path) -> None:
    result, out = promote(mlflow_server, tmp_path, "--model", "chat-support-lora", "--version", "1",
                          "--base-model", "chat-base@champion", "--name", "chat-support")
    assert result.returncode == 0, result.stderr
    predictor = yaml.safe_load(out.read_text())["spec"]["predictor"]
    assert predictor["storageUris"] == [
        {"uri": registered["chat-base"]["source"], "mountPath": "/mnt/models"},
        {"uri": registered["chat-support-lora"]["source"], "mountPath": "/mnt/adapters/chat-support-lora"},
    ]
    assert "storageUri" not in predictor["model"]
    assert predictor["model"]["args"] == ["--lora-modules", "chat-support-lora=/mnt/adapters/chat-support-lora"]
    assert predictor["model"]["runtime"] == "vllm-openai"
    assert CRDS_DIR is not None
    assert [str(e) for e in Validator(CRDS_DIR).errors(yaml.safe_load(out.read_text()))] == []
    assert check(out).returncode == 0


def test_promote_refuses_a_version_stored_in_another_tenants_bucket(
        mlflow_server: str, registered: dict[str, dict[str, str]], tmp_path: Path) -> None:
    result, out = promote(mlflow_server, tmp_path, "--model", "ranker", "--version", "1")
    assert result.returncode == 2
    assert "outside tenant team-a's model bucket (s3://team-a-models/...)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_promote_names_an_unknown_model_version(mlflow_server: str, registered: dict[str, dict[str, str]],
                                                tmp_path: Path) -> None:
    result, _ = promote(mlflow_server, tmp_path, "--model", "chat-base", "--version", "7")
    assert result.returncode == 2
    assert result.stderr.startswith("error: model registry:")


@pytest.fixture(scope="module")
def team_a_storage_env(s3: S3Server) -> dict[str, str]:
    """team-a's rendered serving Secret, its generated keys filled in (as the component would), as KServe's env."""
    config = stack("local").config
    identity = object_store.serving_identity(config, next(t for t in config.tenants if t.name == "team-a"))
    access_key, secret_key = s3.identities[identity.name]
    env = promotion.predictor_storage_env("local", "team-a", {identity.access_key.name: access_key,
                                                              identity.secret_key.name: secret_key}, s3.url)
    print({k: ("<redacted>" if "SECRET" in k else v) for k, v in env.items()})
    return env


def test_kserve_storage_initializer_downloads_the_promoted_model_with_the_rendered_credentials(
        registered: dict[str, dict[str, str]], team_a_storage_env: dict[str, str], tmp_path: Path, s3: S3Server) -> None:
    dest = tmp_path / "mnt-models"
    result = serving_python(promotion.DOWNLOAD, team_a_storage_env, registered["chat-base"]["source"], str(dest))
    files = sorted(p.name for p in dest.iterdir()) if dest.exists() else []
    print(f"[{s3.kind}] allowed: exit {result.returncode}; files {files}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"]


def test_kserve_storage_initializer_is_refused_another_tenants_model(
        registered: dict[str, dict[str, str]], team_a_storage_env: dict[str, str], tmp_path: Path, s3: S3Server) -> None:
    dest = tmp_path / "mnt-models"
    result = serving_python(promotion.DOWNLOAD, team_a_storage_env, registered["ranker"]["source"], str(dest))
    last = (result.stderr.strip().splitlines() or [""])[-1]
    print(f"[{s3.kind}] refused: exit {result.returncode}: {last}")
    assert result.returncode != 0
    assert "AccessDenied" in result.stderr or "403" in result.stderr, result.stderr[-3000:]
    assert not any(dest.rglob("*.safetensors"))
