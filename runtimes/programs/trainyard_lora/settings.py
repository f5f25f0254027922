"""The program's settings (flags or ``LORA_*`` / ``TRAINYARD_*`` variables), its one error type and its messages."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


class LabError(Exception):
    """A setting or input the program cannot work with; printed as one line, exit 2."""


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class Settings:
    """Everything that decides the result. ``fingerprint`` over these guards a resume against changed settings."""

    dataset_uri: str
    dataset_version: str
    dataset_digest: str
    dataset_name: str
    base_model_uri: str
    base_model_revision: str
    base_model_name: str
    dataset_licence: str = ""
    dataset_classification: str = ""
    seed: int = 1234
    max_steps: int = 100
    micro_batch_size: int = 4
    grad_accumulation: int = 4
    seq_len: int = 512
    learning_rate: float = 2e-4
    weight_decay: float = 0.0
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    precision: str = "bf16"
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: str = "all-linear"

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


@dataclass
class Places:
    """Where things are; not part of the fingerprint (a resumed attempt may run on another node)."""

    dataset_dir: Path
    model_dir: Path
    checkpoint_uri: str
    output_dir: Path
    checkpoint_every: int
    keep_checkpoints: int
    experiment: str
    registered_model: str
    models_uri: str
    trainjob: str
    namespace: str
    pause_after_step: float = 0.0


def parse_args(argv: list[str]) -> tuple[Settings, Places]:
    try:
        return _parse_args(argv)
    except ValueError as exc:  # a TRAINYARD_* / LORA_* number that is not one
        raise LabError(f"a setting from the environment is not a number: {exc}") from None


def _parse_args(argv: list[str]) -> tuple[Settings, Places]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a = p.add_argument
    a("--dataset-uri", default=env("TRAINYARD_DATASET_URI"), help="s3://bucket/key of the approved dataset object")
    a("--dataset-version", default=env("TRAINYARD_DATASET_VERSION"), help="its pinned S3 version id")
    a("--dataset-digest", default=env("TRAINYARD_DATASET_DIGEST"), help="its sha256:<hex> content digest")
    a("--dataset-name", default=env("TRAINYARD_DATASET_NAME"), help="the approved entry's name")
    a("--dataset-licence", default=env("TRAINYARD_DATASET_LICENCE"), help="the approved entry's licence")
    a("--dataset-classification", default=env("TRAINYARD_DATASET_CLASSIFICATION"),
      help="the approved entry's data classification")
    a("--dataset-dir", default=env("TRAINYARD_DATASET_DIR", "/workspace/dataset"), help="the dataset initializer's output")
    a("--base-model-uri", default=env("TRAINYARD_BASE_MODEL_URI"), help="where the model initializer fetched from")
    a("--base-model-revision", default=env("TRAINYARD_BASE_MODEL_REVISION"), help="its pinned revision")
    a("--base-model-name", default=env("TRAINYARD_BASE_MODEL_NAME"), help="the approved entry's name")
    a("--model-dir", default=env("TRAINYARD_MODEL_DIR", "/workspace/model"), help="the model initializer's output")
    a("--checkpoint-uri", default=env("TRAINYARD_CHECKPOINT_URI"), help="s3://bucket/prefix/ or a directory")
    a("--checkpoint-every", type=int, default=int(env("TRAINYARD_CHECKPOINT_EVERY", "50")))
    a("--keep-checkpoints", type=int, default=int(env("TRAINYARD_CHECKPOINT_KEEP", "2")))
    a("--output-dir", default=env("TRAINYARD_OUTPUT_DIR", "/workspace/output"))
    a("--models-uri", default=env("TRAINYARD_MODELS_URI", ""),
      help="s3://<tenant>-models/ (default from TRAINYARD_MODELS_BUCKET); the adapter goes below <namespace>/<trainjob>/")
    a("--experiment", default=env("TRAINYARD_MLFLOW_EXPERIMENT", ""), help="default <namespace>/lora-peft")
    a("--registered-model", default=env("TRAINYARD_REGISTERED_MODEL", ""), help="default <namespace>-<trainjob>")
    a("--pause-after-step", type=float, default=float(env("TRAINYARD_PAUSE_AFTER_STEP", "0")),
      help="seconds to wait after each step: gives a person (or a test) time to interrupt at a known step")
    # Hyperparameters: flags, or LORA_<FLAG> variables (the Kubeflow SDK's CustomTrainerContainer passes env only).
    a("--seed", type=int, default=int(env("LORA_SEED", "1234")))
    a("--max-steps", type=int, default=int(env("LORA_MAX_STEPS", "100")), help="optimizer steps")
    a("--micro-batch-size", type=int, default=int(env("LORA_MICRO_BATCH_SIZE", "4")),
      help="sequences per device per forward pass")
    a("--grad-accumulation", type=int, default=int(env("LORA_GRAD_ACCUMULATION", "4")), help="forward passes per optimizer step")
    a("--seq-len", type=int, default=int(env("LORA_SEQ_LEN", "512")))
    a("--learning-rate", type=float, default=float(env("LORA_LEARNING_RATE", "2e-4")))
    a("--weight-decay", type=float, default=float(env("LORA_WEIGHT_DECAY", "0.0")))
    a("--warmup-steps", type=int, default=int(env("LORA_WARMUP_STEPS", "10")))
    a("--max-grad-norm", type=float, default=float(env("LORA_MAX_GRAD_NORM", "1.0")))
    a("--precision", choices=("fp32", "bf16", "fp16"), default=env("LORA_PRECISION", "bf16"),
      help="autocast dtype on GPU; on CPU only fp32 and bf16")
    a("--lora-rank", type=int, default=int(env("LORA_RANK", "16")))
    a("--lora-alpha", type=int, default=int(env("LORA_ALPHA", "32")))
    a("--lora-dropout", type=float, default=float(env("LORA_DROPOUT", "0.05")))
    a("--lora-target-modules", default=env("LORA_TARGET_MODULES", "all-linear"),
      help="comma list of module names, or all-linear")
    ns = p.parse_args(argv)
    for name in ("dataset_uri", "dataset_version", "dataset_digest", "checkpoint_uri"):
        if not getattr(ns, name):
            raise LabError(f"--{name.replace('_', '-')} is required (or its TRAINYARD_* variable)")
    if not ns.dataset_digest.startswith("sha256:"):
        raise LabError(f"--dataset-digest {ns.dataset_digest!r}: give sha256:<hex>")
    for name in ("max_steps", "micro_batch_size", "grad_accumulation", "seq_len", "checkpoint_every", "keep_checkpoints"):
        if getattr(ns, name) < 1:
            raise LabError(f"--{name.replace('_', '-')} must be at least 1")
    settings = Settings(
        dataset_uri=ns.dataset_uri, dataset_version=ns.dataset_version, dataset_digest=ns.dataset_digest,
        dataset_name=ns.dataset_name, dataset_licence=ns.dataset_licence,
        dataset_classification=ns.dataset_classification, base_model_uri=ns.base_model_uri,
        base_model_revision=ns.base_model_revision, base_model_name=ns.base_model_name, seed=ns.seed,
        max_steps=ns.max_steps, micro_batch_size=ns.micro_batch_size, grad_accumulation=ns.grad_accumulation,
        seq_len=ns.seq_len, learning_rate=ns.learning_rate,
        weight_decay=ns.weight_decay, warmup_steps=ns.warmup_steps, max_grad_norm=ns.max_grad_norm,
        precision=ns.precision, lora_rank=ns.lora_rank, lora_alpha=ns.lora_alpha, lora_dropout=ns.lora_dropout,
        lora_target_modules=ns.lora_target_modules)
    trainjob, namespace = env("TRAIN_JOB_NAME", "local"), env("TRAINYARD_NAMESPACE", "local")
    models_uri = ns.models_uri or (f"s3://{env('TRAINYARD_MODELS_BUCKET')}/" if env("TRAINYARD_MODELS_BUCKET") else "")
    places = Places(
        dataset_dir=Path(ns.dataset_dir), model_dir=Path(ns.model_dir), checkpoint_uri=ns.checkpoint_uri,
        output_dir=Path(ns.output_dir), checkpoint_every=ns.checkpoint_every, keep_checkpoints=ns.keep_checkpoints,
        experiment=ns.experiment or f"{namespace}/lora-peft",
        registered_model=ns.registered_model or f"{namespace}-{trainjob}", models_uri=models_uri,
        trainjob=trainjob, namespace=namespace, pause_after_step=ns.pause_after_step)
    return settings, places


def say(rank: int, message: str) -> None:
    if rank == 0:
        print(f"[lora-peft] {message}", flush=True)
