"""The training state and its checkpoints: written every N steps and on SIGTERM, verified, resumed, retained.

Each checkpoint is ``step-<n>/`` under ``TRAINYARD_CHECKPOINT_URI``: adapter weights, optimizer, scheduler, grad
scaler, every rank's RNG states and the data position, and ``CHECKPOINT.json`` with every object's sha256 written
last; a checkpoint without it, or whose digests do not match, is not complete and never resumed from.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from trainyard_lora.settings import LabError, Places, Settings, say
from trainyard_lora.store import Store, sha256_hex

CHECKPOINT_MANIFEST = "CHECKPOINT.json"


CHECKPOINT_FORMAT = 1


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
