"""The deploy gate: a stack that protects data deploys only images whose digests a registry reported.

``unlocked_images`` lists every image of the stack's bill of materials whose lock entry is a
placeholder or missing; the Pulumi program refuses to declare anything on a stack that
protects data while the list is not empty, and ``trainyard images verify`` prints it (errors
on staging and prod, warnings on local).
"""

from __future__ import annotations

from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests import image_lock
from trainyard.project import Stack
from trainyard.supply.bom import build_bom, lock_references
from trainyard.supply.lock import LockProblem, problems


def unlocked_images(stack: Stack) -> list[LockProblem]:
    bom = build_bom(stack)
    return problems(image_lock(stack.config, stack.root), lock_references(bom), stack.config.lifecycle.protect_data)


class UnlockedImages(Exception):
    """A stack that protects data would deploy images the registry never confirmed."""


def refuse_unlocked(name: str, config: PlatformConfig, root: Path, stack_dir: Path) -> None:
    """Raise ``UnlockedImages`` (nothing declared) when a data-protecting stack has placeholder or missing digests."""
    stack = Stack(name, stack_dir / f"Pulumi.{name}.yaml", root, config)
    errors = [p for p in unlocked_images(stack) if p.error]
    if errors:
        listed = "\n".join(f"  {p.message}" for p in errors)
        raise UnlockedImages(
            f"stack {name!r} protects data and refuses images whose digest no registry reported:\n{listed}\n"
            f"fill the lock from the mirror: trainyard images lock {name}")


__all__ = ["UnlockedImages", "refuse_unlocked", "unlocked_images"]
