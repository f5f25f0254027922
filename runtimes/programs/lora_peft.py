"""Trainyard's reference LoRA fine-tuning program: the ``lora-peft`` approved runtime runs it under torchrun.

PEFT LoRA on a Hugging Face causal LM. What it guarantees, and docs/lab.md shows a tenant:

- **Pinned inputs.** The dataset is one object (JSON Lines, ``{"text": ...}`` per line) approved at an S3
  version id and a sha256 digest. The dataset initializer fetches ``spec.initializer.dataset.storageUri``
  into ``/workspace/dataset``; Trainer's S3 initializer knows no version ids, so the program checks the file
  there against the pinned digest and, where it differs (the object was overwritten since it was approved),
  reads the pinned version itself (``GetObject VersionId=``) into the same place. The base model is the
  model initializer's ``/workspace/model``; its content digest is recorded and, when the approved revision
  is a ``sha256:`` digest, must match.
- **Checkpoints.** Every ``--checkpoint-every`` optimizer steps and on SIGTERM (Kueue preemption, node drain):
  adapter weights, optimizer, scheduler, grad scaler, every rank's RNG states and the data position
  (samples consumed), under ``TRAINYARD_CHECKPOINT_URI`` (``s3://<tenant>-checkpoints/<trainjob>/``, or a
  directory). Each object is written whole (S3 PUT; a file by temp + rename) and ``CHECKPOINT.json`` with
  every object's sha256 last: a checkpoint without it, or whose digests do not match, is not complete
  and never resumed from. On start the newest complete checkpoint is loaded. Retention: the newest
  ``--keep-checkpoints`` complete ones stay; older and abandoned ones are deleted, and the bucket's
  lifecycle (object_store.buckets.checkpoints) expires what is left.
- **Provenance.** One MLflow run per TrainJob, found again by the tag ``trainyard.trainjob`` =
  ``<namespace>/<name>`` so a resumed attempt continues it: parameters, per-step metrics, the dataset
  entry (name, URI, version, digest, licence, classification) and the base model entry, code version,
  runtime and image, the process count, Kueue's workload and queue where the pod carries them. The
  final adapter is uploaded to the tenant's models bucket, logged to the run, and registered as a model
  version whose source is that ``s3://`` location, with the same tags.

Determinism: the data order is a function of (seed, epoch), the position is saved, and the RNG states
are restored, so a run interrupted and resumed takes the same steps as one that was not.

Run locally (single process): ``python lora_peft.py --max-steps 20 --checkpoint-uri /tmp/ckpt ...``;
in a TrainJob the runtime's command is ``torchrun /opt/trainyard/programs/lora_peft.py`` and torchrun
takes nodes, ranks and the rendezvous from the PET_* environment Trainer sets.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

CHECKPOINT_MANIFEST = "CHECKPOINT.json"
CHECKPOINT_FORMAT = 1
TRAINJOB_TAG = "trainyard.trainjob"
EXIT_PREEMPTED = 143  # 128 + SIGTERM: the container was asked to stop and did, after checkpointing


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


# ---- storage: a directory or an S3 prefix, each object written whole ----

def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise LabError(f"{uri!r} is not an s3://bucket/key URI")
    return bucket, key


def s3_client() -> Any:
    import boto3  # AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / ... from the object-store Secret (envFrom)

    return boto3.client("s3")


class Store:
    """Objects under a root: ``put`` replaces an object whole, so a reader sees the old or the new, never half."""

    def __init__(self, uri: str) -> None:
        self.uri = uri if uri.endswith("/") else uri + "/"
        if uri.startswith("s3://"):
            self.bucket, self.prefix = split_s3(self.uri)
            self.s3 = s3_client()
        else:
            self.root = Path(uri)
            self.root.mkdir(parents=True, exist_ok=True)

    def put(self, key: str, data: bytes) -> None:
        if hasattr(self, "s3"):
            self.s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
            return
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)

    def get(self, key: str) -> bytes:
        if hasattr(self, "s3"):
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read())
        return (self.root / key).read_bytes()

    def list_keys(self) -> list[str]:
        if hasattr(self, "s3"):
            out: list[str] = []
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                out += [o["Key"][len(self.prefix):] for o in page.get("Contents", [])]
            return out
        return [str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()]

    def delete(self, keys: list[str]) -> None:
        if hasattr(self, "s3"):
            for start in range(0, len(keys), 1000):
                chunk = [{"Key": self.prefix + k} for k in keys[start:start + 1000]]
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})
            return
        for key in keys:
            (self.root / key).unlink(missing_ok=True)
            if not any((self.root / key).parent.iterdir()):
                (self.root / key).parent.rmdir()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def directory_digest(root: Path) -> str:
    """sha256 over ``<sha256>  <relative path>`` lines of every file, sorted: the content identity of a model dir."""
    lines = [f"{sha256_hex(p.read_bytes())}  {p.relative_to(root)}"
             for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")]
    if not lines:
        raise LabError(f"{root}: empty (did the model initializer run?)")
    return "sha256:" + sha256_hex("\n".join(lines).encode())


# ---- inputs ----

def materialise_dataset(settings: Settings, dataset_dir: Path) -> tuple[Path, str]:
    """The pinned dataset version as a local file, and how it got there ("initializer" or "s3-version")."""
    bucket, key = split_s3(settings.dataset_uri)
    local = dataset_dir / Path(key).name
    want = settings.dataset_digest.removeprefix("sha256:")
    if local.is_file() and sha256_hex(local.read_bytes()) == want:
        return local, "initializer"
    response = s3_client().get_object(Bucket=bucket, Key=key, VersionId=settings.dataset_version)
    data = response["Body"].read()
    if sha256_hex(data) != want:
        raise LabError(f"{settings.dataset_uri} version {settings.dataset_version}: sha256 {sha256_hex(data)} is not "
                       f"the approved {settings.dataset_digest}")
    dataset_dir.mkdir(parents=True, exist_ok=True)
    Store(str(dataset_dir)).put(local.name, data)
    return local, "s3-version"


def load_examples(path: Path, tokenizer: Any, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention masks, one row per line, truncated and right-padded to ``seq_len``."""
    texts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                texts.append(str(json.loads(line)["text"]))
            except (ValueError, KeyError, TypeError):
                raise LabError(f"{path}:{number}: not a JSON object with a 'text' field") from None
    if not texts:
        raise LabError(f"{path}: no examples")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(texts, max_length=seq_len, truncation=True, padding="max_length", return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def sample_index(i: int, n: int, seed: int) -> int:
    """The dataset row of the i-th sample the run consumes: a fresh permutation per epoch, a function of (seed, epoch)."""
    epoch, offset = divmod(i, n)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    return int(order[offset])


# ---- checkpoints ----

def step_dir(step: int) -> str:
    return f"step-{step:08d}"


def complete_checkpoints(store: Store) -> dict[int, dict[str, Any]]:
    """Step -> manifest, for every checkpoint whose manifest exists (it is written last)."""
    out = {}
    for key in store.list_keys():
        parts = key.split("/")
        if len(parts) == 2 and parts[1] == CHECKPOINT_MANIFEST and parts[0].startswith("step-"):
            manifest = json.loads(store.get(key))
            out[int(manifest["step"])] = manifest
    return out


def to_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class Trainer:
    settings: Settings
    places: Places
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    rank: int
    world: int
    store: Store
    losses: list[float] = field(default_factory=list)
    step: int = 0
    resumed: int | None = None

    def peft_model(self) -> Any:
        return self.model.module if hasattr(self.model, "module") else self.model

    def adapter_safetensors(self) -> bytes:
        """The adapter weights as a checkpoint stores them (adapter_model.safetensors)."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save as save_safetensors

        weights = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(self.peft_model()).items()}
        return bytes(save_safetensors(weights))

    def save_checkpoint(self, reason: str) -> None:
        prefix = step_dir(self.step)
        files: dict[str, str] = {}

        def put(name: str, data: bytes) -> None:
            self.store.put(f"{prefix}/{name}", data)
            files[name] = sha256_hex(data)

        rng = to_bytes(rng_state())
        rng_name = f"rng-rank{self.rank:05d}.pt"
        if self.world > 1:
            gathered: list[Any] = [None] * self.world
            dist.all_gather_object(gathered, (rng_name, sha256_hex(rng)))
        self.store.put(f"{prefix}/{rng_name}", rng)
        if self.world > 1:
            dist.barrier()
        if self.rank == 0:
            files.update(dict(gathered) if self.world > 1 else {rng_name: sha256_hex(rng)})
            put("adapter_model.safetensors", self.adapter_safetensors())
            put("trainer_state.pt", to_bytes({
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "step": self.step, "samples_consumed": self.samples_consumed(self.step),
                "losses": self.losses, "world_size": self.world}))
            manifest = {"format": CHECKPOINT_FORMAT, "step": self.step, "reason": reason,
                        "samples_consumed": self.samples_consumed(self.step),
                        "settings_fingerprint": self.settings.fingerprint(), "files": files}
            self.store.put(f"{prefix}/{CHECKPOINT_MANIFEST}", json.dumps(manifest, indent=1).encode())
            self.apply_retention()
        if self.world > 1:
            dist.barrier()
        say(self.rank, f"checkpoint step {self.step} ({reason}) complete at {self.store.uri}{prefix}/")

    def apply_retention(self) -> None:
        complete = complete_checkpoints(self.store)
        keep = {step_dir(s) for s in sorted(complete)[-self.places.keep_checkpoints:]}
        newest = max(complete)
        stale = [k for k in self.store.list_keys() if k.split("/")[0].startswith("step-") and k.split("/")[0] not in keep
                 and (int(k.split("/")[0][5:]) in complete or int(k.split("/")[0][5:]) < newest)]
        # Manifests first: a checkpoint half deleted is then an incomplete one, never a corrupt "complete" one.
        manifests = [k for k in stale if k.endswith("/" + CHECKPOINT_MANIFEST)]
        for batch in (manifests, [k for k in stale if k not in manifests]):
            if batch:
                self.store.delete(batch)

    def samples_consumed(self, step: int) -> int:
        return step * self.settings.micro_batch_size * self.settings.grad_accumulation * self.world

    def resume(self) -> int | None:
        """Load the newest complete checkpoint whose digests verify; its step, or None."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load as load_safetensors

        for step, manifest in sorted(complete_checkpoints(self.store).items(), reverse=True):
            prefix = step_dir(step)
            if manifest.get("settings_fingerprint") != self.settings.fingerprint():
                raise LabError(f"checkpoint {self.store.uri}{prefix} was written with other settings; start a new "
                               f"TrainJob (or delete its checkpoints) to change them")
            blobs = {}
            try:
                for name, digest in manifest["files"].items():
                    blobs[name] = self.store.get(f"{prefix}/{name}")
                    if sha256_hex(blobs[name]) != digest:
                        raise ValueError(name)
            except (OSError, ValueError, KeyError) as exc:
                say(self.rank, f"checkpoint {prefix} does not verify ({exc}); trying an older one")
                continue
            state = torch.load(io.BytesIO(blobs["trainer_state.pt"]), weights_only=False)
            if state["world_size"] != self.world:
                raise LabError(f"checkpoint {prefix} was written by {state['world_size']} processes, this attempt has "
                               f"{self.world}: the data position and RNG states are per rank")
            set_peft_model_state_dict(self.peft_model(), load_safetensors(blobs["adapter_model.safetensors"]))
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            if self.scaler is not None:
                self.scaler.load_state_dict(state["scaler"])
            set_rng_state(torch.load(io.BytesIO(blobs[f"rng-rank{self.rank:05d}.pt"]), weights_only=False))
            self.losses, self.step = list(state["losses"]), int(state["step"])
            return step
        return None


def say(rank: int, message: str) -> None:
    if rank == 0:
        print(f"[lora-peft] {message}", flush=True)


# ---- provenance ----

def provenance_tags(settings: Settings, places: Places, dataset_source: str, model_digest: str,
                    world: int) -> dict[str, str]:
    program = Path(__file__).read_bytes()
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
        "trainyard.code.program_sha256": sha256_hex(program),
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


def flush_metrics(mlflow: Any, pending: list[tuple[int, dict[str, float]]]) -> None:
    """Log the pending steps' metrics in one request (one per 1000 values, MLflow's log_batch limit)."""
    if mlflow is None or not pending:
        pending.clear()
        return
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, step) for step, values in pending for key, value in values.items()]
    client, run_id = mlflow.MlflowClient(), mlflow.active_run().info.run_id
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start:start + 1000])
    pending.clear()


def upload_dir(uri: str, local: Path) -> None:
    store = Store(uri)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            store.put(str(path.relative_to(local)), path.read_bytes())


# ---- the program ----

def build_model(settings: Settings, places: Places, device: torch.device) -> tuple[Any, Any]:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(places.model_dir)
    # Base weights in the training dtype; the LoRA matrices PEFT adds stay fp32 (autocast_adapter_dtype).
    dtype = torch.bfloat16 if settings.precision == "bf16" and device.type == "cuda" else torch.float32
    base = AutoModelForCausalLM.from_pretrained(places.model_dir, dtype=dtype).to(device)
    targets: str | list[str] = settings.lora_target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in str(targets).split(",") if t.strip()]
    lora = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(base, lora), tokenizer


def lr_lambda(settings: Settings) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < settings.warmup_steps:
            return (step + 1) / settings.warmup_steps
        progress = (step - settings.warmup_steps) / max(1, settings.max_steps - settings.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return factor


def batches(trainer: Trainer, ids: torch.Tensor, mask: torch.Tensor, step: int,
            device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of this rank for optimizer step ``step`` (0-based): a function of the position only."""
    s = trainer.settings
    base = trainer.samples_consumed(step)
    for micro in range(s.grad_accumulation):
        first = base + (micro * trainer.world + trainer.rank) * s.micro_batch_size
        rows = [sample_index(first + j, ids.shape[0], s.seed) for j in range(s.micro_batch_size)]
        yield ids[rows].to(device), mask[rows].to(device)


def inputs(settings: Settings, places: Places, world: int, local_rank: int) -> tuple[Path, str, str]:
    """The pinned dataset file (one process per node fetches it), how it got there, and the base model's digest."""
    if local_rank == 0:
        dataset_path, dataset_source = materialise_dataset(settings, places.dataset_dir)
    if world > 1:
        dist.barrier()
    if local_rank != 0:
        dataset_path, dataset_source = materialise_dataset(settings, places.dataset_dir)
    model_digest = directory_digest(places.model_dir)
    if settings.base_model_revision.startswith("sha256:") and settings.base_model_revision != model_digest:
        raise LabError(f"{places.model_dir}: content {model_digest} is not the approved revision "
                       f"{settings.base_model_revision} of {settings.base_model_uri}")
    return dataset_path, dataset_source, model_digest


def optimizer_step(trainer: Trainer, ids: torch.Tensor, mask: torch.Tensor, device: torch.device) -> float:
    """One optimizer step over ``grad_accumulation`` micro-batches; the mean loss over all ranks."""
    s, model, scaler = trainer.settings, trainer.model, trainer.scaler
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(s.precision)
    total = torch.zeros((), device=device)
    for micro, (x, m) in enumerate(batches(trainer, ids, mask, trainer.step, device)):
        labels = x.masked_fill(m == 0, -100)
        # DDP all-reduces gradients on the last micro-batch only.
        last = trainer.world == 1 or micro == s.grad_accumulation - 1
        with model.no_sync() if not last else contextlib.nullcontext(), \
                torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            loss = model(input_ids=x, attention_mask=m, labels=labels).loss / s.grad_accumulation
        (scaler.scale(loss) if scaler is not None else loss).backward()
        total += loss.detach()
    if scaler is not None:
        scaler.unscale_(trainer.optimizer)
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], s.max_grad_norm)
    if scaler is not None:
        scaler.step(trainer.optimizer)
        scaler.update()
    else:
        trainer.optimizer.step()
    trainer.scheduler.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    if trainer.world > 1:
        dist.all_reduce(total)
        total /= trainer.world
    return float(total)


def setup(settings: Settings, places: Places, rank: int, world: int, local_rank: int,
          device: torch.device) -> tuple[Trainer, Any, torch.Tensor, torch.Tensor, dict[str, str]]:
    dataset_path, dataset_source, model_digest = inputs(settings, places, world, local_rank)
    random.seed(settings.seed)
    torch.manual_seed(settings.seed)
    model, tokenizer = build_model(settings, places, device)
    ids, mask = load_examples(dataset_path, tokenizer, settings.seq_len)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate,
                                  weight_decay=settings.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(settings))
    scaler = torch.amp.GradScaler("cuda") if settings.precision == "fp16" else None
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    trainer = Trainer(settings, places, model, optimizer, scheduler, scaler, rank, world, Store(places.checkpoint_uri))
    trainer.resumed = trainer.resume()
    say(rank, f"resumed from checkpoint step {trainer.resumed} at {trainer.store.uri}" if trainer.resumed is not None
        else f"no complete checkpoint at {trainer.store.uri}; starting at step 0")
    say(rank, f"dataset {settings.dataset_uri} version {settings.dataset_version} {settings.dataset_digest} "
              f"({dataset_source}); base model {settings.base_model_uri} {model_digest}")
    return trainer, tokenizer, ids, mask, provenance_tags(settings, places, dataset_source, model_digest, world)


def run(argv: list[str]) -> int:
    settings, places = parse_args(argv)
    world, rank = int(env("WORLD_SIZE", "1")), int(env("RANK", "0"))
    local_rank = int(env("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and settings.precision == "fp16":
        raise LabError("--precision fp16 needs a GPU; use fp32 or bf16 on CPU")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    stop = {"requested": False}

    def on_sigterm(signum: int, frame: Any) -> None:
        stop["requested"] = True  # finish the current optimizer step, checkpoint, exit

    signal.signal(signal.SIGTERM, on_sigterm)
    trainer, tokenizer, ids, mask, tags = setup(settings, places, rank, world, local_rank, device)

    mlflow = start_tracking(places, tags, settings) if rank == 0 and env("MLFLOW_TRACKING_URI") else None

    # Metrics of the steps since the last checkpoint; logged when the next one is complete, so the run's
    # history holds each step once even when an attempt dies between checkpoints and its successor redoes them.
    pending: list[tuple[int, dict[str, float]]] = []
    tokens_per_step = settings.micro_batch_size * settings.grad_accumulation * world * settings.seq_len
    trainer.model.train()
    while trainer.step < settings.max_steps:
        started = time.perf_counter()
        loss = optimizer_step(trainer, ids, mask, device)
        trainer.step += 1
        trainer.losses.append(loss)
        say(rank, f"step {trainer.step}/{settings.max_steps} loss {loss:.6f}")
        pending.append((trainer.step, {"loss": loss, "learning_rate": trainer.scheduler.get_last_lr()[0],
                                       "tokens_per_second": tokens_per_step / (time.perf_counter() - started)}))
        if places.pause_after_step:
            time.sleep(places.pause_after_step)
        flag = torch.tensor([1.0 if stop["requested"] else 0.0], device=device)
        if world > 1:  # every rank stops at the same step, or the collective calls of the checkpoint hang
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            trainer.save_checkpoint("SIGTERM")
            flush_metrics(mlflow, pending)
            say(rank, f"stopped at step {trainer.step} on SIGTERM; the next attempt resumes here")
            if mlflow is not None:
                mlflow.end_run(status="KILLED")
            return EXIT_PREEMPTED
        if trainer.step % places.checkpoint_every == 0 and trainer.step < settings.max_steps:
            trainer.save_checkpoint("periodic")
            flush_metrics(mlflow, pending)

    if trainer.resumed != settings.max_steps:
        trainer.save_checkpoint("final")
    flush_metrics(mlflow, pending)
    if world > 1:
        check_ranks_agree(trainer)
    if rank == 0:
        finish(trainer, tokenizer, mlflow, tags)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def check_ranks_agree(trainer: Trainer) -> None:
    """Every rank ends at the same step with the same adapter, or the run is not what rank 0 saves.

    DDP all-reduces the gradients of every optimizer step, so the ranks' adapters stay bitwise equal while
    each trains on its own slice of the samples; a rank that skipped steps or missed an all-reduce differs.
    """
    mine = (trainer.rank, trainer.step, sha256_hex(trainer.adapter_safetensors()))
    gathered: list[Any] = [None] * trainer.world
    dist.all_gather_object(gathered, mine)
    if len({(step, digest) for _, step, digest in gathered}) != 1:
        raise LabError("the ranks disagree at the end (rank, step, adapter sha256): "
                       + ", ".join(f"({r}, {s}, {d[:12]})" for r, s, d in gathered))
    say(trainer.rank, f"all {trainer.world} ranks at step {trainer.step} with the same adapter (sha256:{mine[2]})")


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


def main() -> None:
    try:
        sys.exit(run(sys.argv[1:]))
    except LabError as exc:
        print(f"lora-peft: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
