"""Refreshing a stack's image lock from a registry: the digest each image's tag has there, all or nothing.

``trainyard images lock STACK`` and the rehearsal's image factory (``rehearsal/factory.py``, which fills the
rehearsal's own lock after pushing the images it built) both go through ``refresh``; only the CLI prints.

Every reference the stack's BOM needs in the lock is asked for (``HEAD /v2/<name>/manifests/<tag>``,
``supply/registry.py``). ``only`` narrows that to the images under the given registry hosts, the others keep
their entries as they are: the rehearsal's registry serves the images the factory built and nothing else, so the
runtimes' images stay placeholders (which a stack that does not protect data accepts); ``images`` narrows it to
exactly those references (the provisioner's host, ``registry.trainyard.internal``, names the runtimes' images too). A host
that does not answer is asked once, not once per image. Any image not resolved means no lock is returned.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainyard import yamlio
from trainyard.manifests import image_lock, render_platform
from trainyard.manifests.runtimes import containers_of
from trainyard.project import Stack
from trainyard.supply.bom import build_bom, lock_references
from trainyard.supply.lock import ImageLock, LockEntry, placeholder_digest
from trainyard.supply.reference import ImageRef, ReferenceError
from trainyard.supply.registry import RegistryClient, RegistryError, RegistryUnreachable


@dataclass
class LockRefresh:
    """What a refresh found: the updated lock (valid only when ``ok``), what moved, and what could not be resolved."""

    path: Path
    lock: ImageLock
    asked: list[ImageRef] = field(default_factory=list)
    kept: list[ImageRef] = field(default_factory=list)  # references outside ``only``: entries left as they were
    changes: list[tuple[ImageRef, LockEntry | None, LockEntry]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unreachable: dict[str, tuple[str, int]] = field(default_factory=dict)  # host -> (reason, images not resolved)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.unreachable

    @property
    def unresolved(self) -> int:
        return sum(count for _, count in self.unreachable.values()) + len(self.errors)


def seeded_lock(stack: Stack, lock: ImageLock) -> ImageLock:
    """``lock`` plus a placeholder for every image an approved training or serving runtime names by tag only and the
    lock lacks, so a new image can be rendered, then locked."""
    from trainyard.manifests.serving import runtime_containers

    config = stack.config
    files = [(stack.root / config.runtimes.directory / f"{name}.yaml", containers_of) for name in config.runtimes.approved]
    if config.serving is not None:
        files += [(stack.root / config.serving.runtimes_directory / f"{name}.yaml", runtime_containers)
                  for name in config.serving.approved_runtimes]
    seeded = lock
    for path, containers in files:
        try:
            doc = yamlio.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue  # the render reports the broken file
        for _, container in containers(doc) if isinstance(doc, dict) else []:
            try:
                ref = ImageRef.parse(str(container.get("image", "")))
            except ReferenceError:
                continue
            if ref.digest is None and seeded.entry(ref) is None:
                seeded = seeded.with_entry(ref, LockEntry(placeholder_digest(str(ref)), "placeholder"))
    return seeded


def refresh(stack: Stack, client: RegistryClient, only: Collection[str] = (),
            images: Collection[ImageRef] = ()) -> LockRefresh:
    """Ask ``client`` for every lock reference of ``stack`` (under the hosts ``only``, when given; only ``images``,
    when given: the rehearsal locks exactly what it pushed to a host that also names images it does not build); raises
    ``LockFileError`` for a lock file that cannot be read."""
    wanted = {ref.tagged for ref in images}
    lock = image_lock(stack.config, stack.root)
    path = lock.path or stack.root / stack.config.images.lock_file
    rendered = render_platform(stack.config, stack.root, stack.path.parent, lock=seeded_lock(stack, lock))
    bom = build_bom(stack, rendered)
    upstream = {image.reference: image.upstream for image in bom.images}
    result = LockRefresh(path, lock)
    for ref in lock_references(bom):
        if (only and ref.registry not in only) or (wanted and ref.tagged not in wanted):
            result.kept.append(ref)
            continue
        result.asked.append(ref)
        if ref.registry in result.unreachable:  # one unanswered host is enough: do not ask it again per image
            reason, count = result.unreachable[ref.registry]
            result.unreachable[ref.registry] = (reason, count + 1)
            continue
        try:
            digest = client.digest(ref)
        except RegistryUnreachable as exc:
            result.unreachable[ref.registry] = (exc.reason, 1)
            continue
        except RegistryError as exc:
            result.errors.append(str(exc))
            continue
        old = lock.entry(ref)
        entry = LockEntry(digest, "registry", upstream.get(ref.tagged) or (old.upstream if old else None))
        if old != entry:
            result.changes.append((ref, old, entry))
        result.lock = result.lock.with_entry(ref, entry)
    return result
