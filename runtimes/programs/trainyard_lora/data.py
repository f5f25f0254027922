"""The pinned inputs and the data order: the dataset at its approved version and digest, the base model's digest,
and each rank's micro-batches as a function of (seed, position) only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainyard_lora.checkpoints import (
    Trainer,
)
from trainyard_lora.settings import LabError, Places, Settings
from trainyard_lora.store import Store, directory_digest, s3_client, sha256_hex, split_s3


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
