"""Runs inside the MLflow tool venv (tools/mlflow): one tenant's client session, as a training pod does it.

Reads MLFLOW_TRACKING_URI/USERNAME/PASSWORD from the environment (what the trainyard-mlflow Secret
gives a pod) and no AWS key: artifacts go through the server's proxy. Prints one JSON result.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException


def write(experiment: str, model: str) -> dict[str, str]:
    mlflow.set_experiment(experiment)
    with mlflow.start_run() as run:
        mlflow.log_params({"lr": "0.0002", "lora_rank": "16"})
        for step, loss in enumerate((2.31, 1.87, 1.52)):
            mlflow.log_metric("loss", loss, step=step)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "adapter_config.json").write_text('{"r": 16}')
            mlflow.log_artifacts(tmp, artifact_path="model")
    client = MlflowClient()
    client.create_registered_model(model)
    version = client.create_model_version(model, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    return {"run_id": run.info.run_id, "artifact_uri": run.info.artifact_uri, "model_version": version.version}


def read(run_id: str, model: str) -> dict[str, str]:
    out: dict[str, str] = {}
    client = MlflowClient()
    for what, call in (
        ("get_run", lambda: client.get_run(run_id).data.params["lora_rank"]),
        ("download_artifact", lambda: Path(mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path="model/adapter_config.json")).read_text()),
        ("get_registered_model", lambda: client.get_registered_model(model).name),
        ("metric_history", lambda: str([m.value for m in client.get_metric_history(run_id, "loss")])),
    ):
        try:
            out[what] = "ok: " + str(call())
        except MlflowException as exc:
            out[what] = f"{exc.error_code}: {exc.message.splitlines()[0][:120]}"
    return out


if __name__ == "__main__":
    command = sys.argv[1]
    result = write(sys.argv[2], sys.argv[3]) if command == "write" else read(sys.argv[2], sys.argv[3])
    print(json.dumps(result))
