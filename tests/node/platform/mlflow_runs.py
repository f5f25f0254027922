"""Runs inside the MLflow tool venv (tools/mlflow): MLflow's own tracking and registry tables in a PostgreSQL database.

``write URI`` logs three runs of one experiment (params, a loss history) and registers a model with a version from
the last one, through MLflow's SQL store (what the tracking server does with ``--backend-store-uri``); ``read URI``
reads them back, and a summary of everything else in the database (the lab's runs and model versions). Both print the
same JSON summary, so a restored database can be compared with what was written.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import mlflow
from mlflow import MlflowClient

EXPERIMENT, MODEL = "restore-probe", "restore-probe-adapter"


def write(uri: str) -> None:
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    mlflow.set_experiment(EXPERIMENT)
    last = ""
    for attempt, losses in enumerate(((2.31, 1.87, 1.52), (1.52, 1.31, 1.12), (1.12, 0.98, 0.91)), start=1):
        with mlflow.start_run(run_name=f"lora-attempt-{attempt}") as run:
            mlflow.log_params({"lora_rank": "4", "resumed_from_step": str(3 * (attempt - 1))})
            for step, loss in enumerate(losses, start=3 * (attempt - 1)):
                mlflow.log_metric("loss", loss, step=step)
            last = run.info.run_id
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model(MODEL)
    client.create_model_version(MODEL, source=f"runs:/{last}/model", run_id=last)


def read(uri: str) -> dict[str, Any]:
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment is not None else []
    return {
        "runs": sorted(({"id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
                         "params": dict(sorted(r.data.params.items())),
                         "loss": [(m.step, m.value) for m in client.get_metric_history(r.info.run_id, "loss")]}
                        for r in runs), key=lambda r: str(r["name"])),
        "model_versions": sorted((v.name, v.version, v.run_id) for v in client.search_model_versions(f"name='{MODEL}'")),
        # And everything else the database holds (the lab's TrainJobs' runs and model versions, which the tracking
        # server in the cluster wrote): each experiment's runs by name, id and status; every model version.
        "all": {
            "experiments": {e.name: sorted((r.info.run_name, r.info.run_id, r.info.status)
                                           for r in client.search_runs([e.experiment_id]))
                            for e in client.search_experiments()},
            "model_versions": sorted((v.name, v.version, v.run_id, v.source) for v in client.search_model_versions()),
        },
    }


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    print(json.dumps(read(sys.argv[2])))
