"""Pure builders: a ``PlatformConfig`` in, plain manifest dicts out.

Same config, same output, byte for byte: no clocks, no randomness, no cluster access.
``render_platform`` is the one entry point that the Pulumi program, ``trainyard render``,
``check``, ``diff`` and the tests all share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests import admission, crds, installs, kueue, network, runtimes, tenants
from trainyard.manifests.installs import ChartRelease
from trainyard.manifests.meta import Manifest, object_id, object_key

# Components whose CRDs the platform declares, in apply order (JobSet before Trainer, which uses it).
CRD_COMPONENTS = ["jobset", "kueue", "trainer"]


@dataclass(frozen=True)
class RenderedPlatform:
    """Everything one stack declares: CRDs, objects and chart releases."""

    crds: tuple[Manifest, ...]
    objects: tuple[Manifest, ...]
    releases: tuple[ChartRelease, ...]

    @property
    def all_objects(self) -> tuple[Manifest, ...]:
        return self.crds + self.objects

    def by_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.all_objects if o["kind"] == kind]


class RenderError(Exception):
    """The stack is valid but something it points at is not (a runtime file, a CRD source)."""


def render_platform(config: PlatformConfig, root: Path, stack_dir: Path | None = None) -> RenderedPlatform:
    try:
        crd_docs = crds.load_crds(config, CRD_COMPONENTS, stack_dir)
        objects = (installs.namespaces(config) + kueue.build(config) + runtimes.build(config, root)
                   + tenants.build(config) + network.build(config) + admission.build(config))
    except (crds.CrdUnavailable, runtimes.RuntimeFileError) as exc:
        raise RenderError(str(exc)) from None
    _check_unique(crd_docs + objects)
    return RenderedPlatform(tuple(crd_docs), tuple(objects), tuple(installs.build(config)))


def _check_unique(objects: list[Manifest]) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = object_key(obj)
        if key in seen:
            raise RenderError(f"two objects render to the same identity {object_id(obj)}")
        seen.add(key)


__all__ = ["ChartRelease", "Manifest", "RenderError", "RenderedPlatform", "render_platform"]
