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

This file is the program; its parts are the package ``trainyard_lora`` beside it (the image copies both to
/opt/trainyard/programs): ``settings`` (flags and variables), ``store`` (S3 or a directory, digests), ``data``
(pinned inputs, data order), ``checkpoints`` (the training state, checkpoint and resume), ``tracking`` (MLflow
provenance, registration) and ``training`` (the loop). Their names are re-exported here.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a program (python or torchrun), this file's directory is on sys.path already; loaded from a path
# (tests/lab, bench), it is put there so that the package beside it is found.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainyard_lora.checkpoints import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_MANIFEST,
    Trainer,
    complete_checkpoints,
    rng_state,
    set_rng_state,
    step_dir,
    to_bytes,
)
from trainyard_lora.data import batches, inputs, load_examples, materialise_dataset, sample_index
from trainyard_lora.settings import LabError, Places, Settings, env, parse_args, say
from trainyard_lora.store import Store, directory_digest, program_digest, program_files, s3_client, sha256_hex, split_s3
from trainyard_lora.tracking import TRAINJOB_TAG, finish, flush_metrics, open_run, provenance_tags, start_tracking, upload_dir
from trainyard_lora.training import EXIT_PREEMPTED, build_model, check_ranks_agree, lr_lambda, optimizer_step, run, setup


def main() -> None:
    try:
        sys.exit(run(sys.argv[1:]))
    except LabError as exc:
        print(f"lora-peft: error: {exc}", file=sys.stderr)
        sys.exit(2)


__all__ = [
    "CHECKPOINT_FORMAT", "CHECKPOINT_MANIFEST", "EXIT_PREEMPTED", "TRAINJOB_TAG", "LabError", "Places", "Settings",
    "Store", "Trainer", "batches", "build_model", "check_ranks_agree", "complete_checkpoints", "directory_digest",
    "env", "finish", "flush_metrics", "inputs", "load_examples", "lr_lambda", "main", "materialise_dataset",
    "open_run", "optimizer_step", "parse_args", "program_digest", "program_files", "provenance_tags", "rng_state",
    "run", "s3_client", "sample_index", "say", "set_rng_state", "setup", "sha256_hex", "split_s3", "start_tracking",
    "step_dir", "to_bytes", "upload_dir"
]

if __name__ == "__main__":
    main()
