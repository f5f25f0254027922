"""The training loop: model and LoRA set up, optimizer steps (DDP across ranks), checkpoints on schedule and on
SIGTERM, and the final agreement of the ranks."""

from __future__ import annotations

import contextlib
import math
import random
import signal
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from trainyard_lora.checkpoints import (
    Trainer,
)
from trainyard_lora.data import batches, inputs, load_examples
from trainyard_lora.settings import LabError, Places, Settings, env, parse_args, say
from trainyard_lora.store import Store, sha256_hex
from trainyard_lora.tracking import finish, flush_metrics, provenance_tags, start_tracking

EXIT_PREEMPTED = 143  # 128 + SIGTERM: the container was asked to stop and did, after checkpointing


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
    pending: list[tuple[int, int, dict[str, float]]] = []  # (step, when it ended in ms, its metrics)
    tokens_per_step = settings.micro_batch_size * settings.grad_accumulation * world * settings.seq_len
    trainer.model.train()
    while trainer.step < settings.max_steps:
        started = time.perf_counter()
        loss = optimizer_step(trainer, ids, mask, device)
        trainer.step += 1
        trainer.losses.append(loss)
        say(rank, f"step {trainer.step}/{settings.max_steps} loss {loss:.6f}")
        pending.append((trainer.step, int(time.time() * 1000), {
            "loss": loss, "learning_rate": trainer.scheduler.get_last_lr()[0],
            "tokens_per_second": tokens_per_step / (time.perf_counter() - started)}))
        if places.pause_after_step:
            time.sleep(places.pause_after_step)
        flag = torch.tensor([1.0 if stop["requested"] else 0.0], device=device)
        if world > 1:  # every rank stops at the same step, or the collective calls of the checkpoint hang
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            return stop_on_sigterm(trainer, mlflow, pending)
        if trainer.step % places.checkpoint_every == 0 and trainer.step < settings.max_steps:
            trainer.save_checkpoint("periodic")
            flush_metrics(mlflow, pending)

    if trainer.resumed != settings.max_steps:
        trainer.save_checkpoint("final")
    flush_metrics(mlflow, pending, must=True)
    if world > 1:
        check_ranks_agree(trainer)
    if rank == 0:
        finish(trainer, tokenizer, mlflow, tags)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def stop_on_sigterm(trainer: Trainer, mlflow: Any, pending: list[tuple[int, int, dict[str, float]]]) -> int:
    """Checkpoint, send the metrics MLflow can take, end the attempt's part of the run; the next attempt resumes."""
    rank = trainer.rank
    trainer.save_checkpoint("SIGTERM")
    flush_metrics(mlflow, pending)
    if pending:  # MLflow could not take them now, and the next attempt resumes after these steps
        say(rank, f"the metrics of steps {pending[0][0]}-{pending[-1][0]} are not in MLflow")
    say(rank, f"stopped at step {trainer.step} on SIGTERM; the next attempt resumes here")
    if mlflow is not None:
        try:
            mlflow.end_run(status="KILLED")
        except Exception as exc:  # the next attempt continues the run either way
            say(rank, f"MLflow did not take the run's end ({type(exc).__name__})")
    return EXIT_PREEMPTED


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
