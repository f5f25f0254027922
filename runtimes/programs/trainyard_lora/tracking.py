"""Provenance in MLflow: one run per TrainJob (continued by a resumed attempt), its tags and metrics, and the
final adapter uploaded to the tenant's models bucket and registered as a model version."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trainyard_lora.checkpoints import (
    Trainer,
)
from trainyard_lora.settings import LabError, Places, Settings, env, say
from trainyard_lora.store import Store, program_digest

TRAINJOB_TAG = "trainyard.trainjob"


def provenance_tags(settings: Settings, places: Places, dataset_source: str, model_digest: str,
                    world: int) -> dict[str, str]:
    return {
        TRAINJOB_TAG: f"{places.namespace}/{places.trainjob}",
        "trainyard.trainjob.name": places.trainjob, "trainyard.trainjob.namespace": places.namespace,
        # The approved entry, from the TrainJob's environment (the stack's lineage entry; Lineage.pins gives it).
        "trainyard.dataset.name": settings.dataset_name or "unrecorded", "trainyard.dataset.uri": settings.dataset_uri,
        "trainyard.dataset.version": settings.dataset_version, "trainyard.dataset.digest": settings.dataset_digest,
        "trainyard.dataset.licence": settings.dataset_licence or "unrecorded",
        "trainyard.dataset.classification": settings.dataset_classification or "unrecorded",
        "trainyard.dataset.read_from": dataset_source,
        "trainyard.base_model.name": settings.base_model_name, "trainyard.base_model.uri": settings.base_model_uri,
        "trainyard.base_model.revision": settings.base_model_revision, "trainyard.base_model.digest": model_digest,
        "trainyard.code.version": env("TRAINYARD_CODE_VERSION", "unrecorded"),
        "trainyard.code.program_sha256": program_digest(),
        "trainyard.runtime.name": env("TRAINYARD_RUNTIME_NAME", "unrecorded"),
        "trainyard.runtime.image": env("TRAINYARD_RUNTIME_IMAGE", "unrecorded"),
        # The processes that trained (torchrun's WORLD_SIZE): the effective batch is micro batch x accumulation x this.
        "trainyard.world_size": str(world),
        # Empty where the pod has no such annotation or label (the downward API then gives ""). The flavor is
        # the platform's trainyard.dev/kueue-flavor annotation, derived from the nodeSelector Kueue gives the
        # pod; the Workload named here records Kueue's own word on it (docs/lab.md).
        "trainyard.kueue.workload": env("TRAINYARD_KUEUE_WORKLOAD") or "unrecorded",
        "trainyard.kueue.queue": env("TRAINYARD_KUEUE_QUEUE") or "unrecorded",
        "trainyard.kueue.flavor": env("TRAINYARD_KUEUE_FLAVOR") or "unrecorded",
    }


def open_run(places: Places, tags: dict[str, str], settings: Settings) -> tuple[Any, str, bool]:
    """The TrainJob's MLflow run: the one tagged with its namespace/name if an earlier attempt made it."""
    import mlflow

    experiment = mlflow.set_experiment(places.experiment)
    found = mlflow.search_runs([experiment.experiment_id], filter_string=f"tags.`{TRAINJOB_TAG}` = '{tags[TRAINJOB_TAG]}'",
                               output_format="list", max_results=2)
    if len(found) > 1:
        raise LabError(f"two MLflow runs carry {TRAINJOB_TAG}={tags[TRAINJOB_TAG]} in {places.experiment}")
    continued = bool(found)
    run = mlflow.start_run(run_id=found[0].info.run_id) if continued else mlflow.start_run(
        run_name=places.trainjob, tags=tags)
    if not continued:
        mlflow.log_params({k: str(v) for k, v in asdict(settings).items()})
    return mlflow, run.info.run_id, continued


def start_tracking(places: Places, tags: dict[str, str], settings: Settings) -> Any:
    """The mlflow module with the TrainJob's run active; counts the attempt."""
    mlflow, run_id, continued = open_run(places, tags, settings)
    say(0, f"MLflow run {run_id} ({'continued' if continued else 'new'}) in {places.experiment}")
    attempts = int(mlflow.get_run(run_id).data.tags.get("trainyard.attempts", "0")) + 1
    mlflow.set_tag("trainyard.attempts", str(attempts))
    return mlflow


def flush_metrics(mlflow: Any, pending: list[tuple[int, int, dict[str, float]]], *, must: bool = False) -> None:
    """Log the pending steps' metrics (step, when it ended in ms, values) in one request per 1000 values (MLflow's
    log_batch limit).

    Training does not wait on tracking: a flush MLflow cannot take (restarting, or unreachable once the client's
    bounded retries are spent: MLFLOW_HTTP_REQUEST_TIMEOUT and _MAX_RETRIES, which the platform sets on approved
    runtimes) keeps the steps it did not send for the next flush, and says so. ``must``: the last flush of a
    finished run, which raises instead (the run would end without them; registering the adapter needs MLflow too).
    """
    if mlflow is None or not pending:
        pending.clear()
        return
    from mlflow.entities import Metric

    metrics = [Metric(key, value, when, step) for step, when, values in pending for key, value in values.items()]
    client, run_id = mlflow.MlflowClient(), mlflow.active_run().info.run_id
    sent = 0
    try:
        for sent in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[sent:sent + 1000])
    except Exception as exc:  # the client's errors vary by cause (MlflowException, requests' ConnectionError, ...)
        if must:
            raise
        steps = sorted({step for step, _, _ in pending})
        say(0, f"MLflow did not take the metrics of steps {steps[0]}-{steps[-1]} ({type(exc).__name__}: "
               f"{str(exc)[:200]}); training goes on and the next flush sends them")
        taken = {(m.key, m.step) for m in metrics[:sent]}  # the batches it did take are not sent again
        kept = [(step, when, {k: v for k, v in values.items() if (k, step) not in taken})
                for step, when, values in pending]
        pending[:] = [entry for entry in kept if entry[2]]
        return
    pending.clear()


def upload_dir(uri: str, local: Path) -> None:
    store = Store(uri)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            store.put(str(path.relative_to(local)), path.read_bytes())


def finish(trainer: Trainer, tokenizer: Any, mlflow: Any, tags: dict[str, str]) -> None:
    """Save the adapter, put it in the tenant's models bucket, log it and register it as a model version."""
    places = trainer.places
    adapter = places.output_dir / "adapter"
    trainer.peft_model().save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)
    (places.output_dir / "loss_curve.json").write_text(json.dumps(trainer.losses))
    say(0, f"adapter saved to {adapter}")
    if mlflow is None:
        return
    from mlflow import MlflowClient

    mlflow.log_artifacts(str(adapter), artifact_path="adapter")
    mlflow.log_artifact(str(places.output_dir / "loss_curve.json"))
    source = ""
    if places.models_uri:
        source = f"{places.models_uri.rstrip('/')}/{places.namespace}/{places.trainjob}/adapter"
        upload_dir(source, adapter)
        mlflow.set_tag("trainyard.adapter.uri", source)
    run_id = mlflow.active_run().info.run_id
    client = MlflowClient()
    from mlflow.exceptions import MlflowException

    registered = client.search_model_versions(f"run_id = '{run_id}'")
    if registered:  # an earlier attempt got this far: its version stands
        mlflow.end_run(status="FINISHED")
        say(0, f"already registered as {registered[0].name} version {registered[0].version}")
        return
    try:
        client.create_registered_model(places.registered_model)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version_tags = {**tags, "trainyard.adapter.uri": source, "trainyard.mlflow.run_id": run_id,
                    "trainyard.final_loss": f"{trainer.losses[-1]:.6f}"}
    version = client.create_model_version(places.registered_model, source=source or f"runs:/{run_id}/adapter",
                                          run_id=run_id, tags=version_tags)
    mlflow.end_run(status="FINISHED")
    say(0, f"registered {places.registered_model} version {version.version} (source {version.source})")
