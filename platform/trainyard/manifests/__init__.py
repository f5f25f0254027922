"""Pure builders: a ``PlatformConfig`` in, plain manifest dicts out.

Same config, same output, byte for byte: no clocks, no randomness, no cluster access.
``render_platform`` is the one entry point that the Pulumi program, ``trainyard render``,
``check``, ``diff`` and the tests all share. It returns the objects grouped by concern
(``trainyard.manifests.concern.Concern``), in apply order, as each builder made them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests import (
    admission,
    cert_manager,
    crds,
    data_cache,
    data_cache_concern,
    gpu_operator,
    installs,
    kueue,
    mlflow,
    monitoring,
    multikueue,
    network,
    object_store,
    runtimes,
    serving,
    serving_admission,
    tenants,
    trainjob_resources,
)
from trainyard.manifests.chart_release import ChartRelease, from_chart_mirror
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import Manifest, object_id, object_key
from trainyard.supply.lock import ImageLock, LockFileError, load_lock

# Components whose CRDs every stack declares, in apply order (JobSet before Trainer, which uses it).
CRD_COMPONENTS = ["jobset", "kueue", "trainer"]


def crd_components(config: PlatformConfig) -> list[tuple[str, str]]:
    """(component, version) of every CRD set the stack declares: the core, then those of the optional
    concerns the stack turns on (CloudNativePG for MLflow, cert-manager's and KServe's with serving,
    the GPU operator's, the prometheus-operator's).
    All CRDs are applied before any other object."""
    out = [(component, getattr(config.versions, component)) for component in CRD_COMPONENTS]
    if config.mlflow.enabled:
        out.append(("cnpg", config.versions.cnpg))
    if cert_manager.installed(config):
        out.append(("cert_manager", config.versions.cert_manager))
    if config.serving is not None:
        out.append(("kserve", config.versions.kserve))
    if config.gpu_operator is not None:
        out.append(("gpu_operator", config.gpu_operator.version))
    if config.data_cache.enabled:
        out.append(("lws", data_cache.lws_version(config)))
    if config.monitoring.enabled and config.monitoring.declare_crds:
        out.append(("prometheus_operator", config.versions.prometheus_operator))
    out += object_store.crd_components(config)
    return out


@dataclass(frozen=True)
class RenderedPlatform:
    """Everything one stack declares: CRDs, then each concern's objects and chart releases.

    The CRDs come as verified files (``crd_sources``) and are parsed on first use of ``crds``: the
    upstream CRDs are MBs, and ``trainyard render`` writes their YAML without needing their documents
    (``review.render.rendered_files``). A platform built from documents (``flat``) holds them as given.
    """

    crd_sources: tuple[crds.CrdSource, ...]
    concerns: tuple[Concern, ...]
    given_crds: tuple[Manifest, ...] = ()

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the parsed CRDs: the sources carry the verified files, and the receiving side parses
        them again (sharing one document per file inside ``crds.read_only_documents``)."""
        return {key: value for key, value in self.__dict__.items() if key != "crds"}

    @cached_property
    def crds(self) -> tuple[Manifest, ...]:
        """The CRD documents, parsed once (the same objects on every call)."""
        return self.given_crds + tuple(source.document() for source in self.crd_sources)

    @property
    def crd_count(self) -> int:
        return len(self.given_crds) + len(self.crd_sources)

    @property
    def crds_parsed(self) -> bool:
        """Whether ``crds`` was asked for (its documents may since have been edited)."""
        return "crds" in self.__dict__

    @property
    def objects(self) -> tuple[Manifest, ...]:
        """Every non-CRD object, concern by concern."""
        return tuple(obj for concern in self.concerns for obj in concern.all_objects)

    @property
    def releases(self) -> tuple[ChartRelease, ...]:
        return tuple(release for concern in self.concerns for release in concern.releases)

    @property
    def all_objects(self) -> tuple[Manifest, ...]:
        return self.crds + self.objects

    @classmethod
    def flat(cls, crds: tuple[Manifest, ...], objects: tuple[Manifest, ...],
             releases: tuple[ChartRelease, ...] = ()) -> RenderedPlatform:
        """A set of objects with no concern structure (edited copies in reviews and tests)."""
        return cls((), (Concern("objects", objects=objects, releases=releases),), given_crds=tuple(crds))

    def concern(self, name: str) -> Concern:
        try:
            return next(c for c in self.concerns if c.name == name)
        except StopIteration:
            raise KeyError(f"no concern {name!r} (concerns: {', '.join(c.name for c in self.concerns)})") from None

    def tenant_objects(self, tenant: str) -> tuple[Manifest, ...]:
        """Everything every concern puts into one tenant's namespace: the Namespace first, then concern by concern."""
        objects = [obj for concern in self.concerns for obj in concern.tenant_objects.get(tenant, ())]
        return tuple(sorted(objects, key=lambda obj: obj["kind"] != "Namespace"))

    def by_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.all_objects if o["kind"] == kind]


class RenderError(Exception):
    """The stack is valid but something it points at is not (a runtime file, a CRD source)."""


def render_platform(config: PlatformConfig, root: Path, stack_dir: Path | None = None,
                    lock: ImageLock | None = None) -> RenderedPlatform:
    """Every object of the stack; ``lock`` replaces the stack's image lock file (``trainyard images lock``)."""
    try:
        lock = lock if lock is not None else image_lock(config, root)
        patches = kueue.conversion_patches(config)
        crd_sources = tuple(dataclasses.replace(source, patch=patches.get(source.name))
                            for source in crds.crd_sources(config, crd_components(config), stack_dir))
        # Every concern's builder, in apply order; a new concern adds one line (docs/architecture.md).
        approved_runtimes = runtimes.build(config, root, lock)
        concerns = (
            installs.build(config, lock),
            kueue.build(config),
            multikueue.build(config),
            approved_runtimes,
            data_cache_concern.build(config, root, lock),
            admission.build(config),
            trainjob_resources.build(config, approved_runtimes.objects),
            tenants.build(config),
            runtimes.build_tenant_wiring(config),
            network.build(config),
            # Before MLflow: its buckets (the provisioning Job) exist before its database is backed up.
            object_store.build(config, lock),
            mlflow.build_operator(config, lock),
            mlflow.build(config, lock),
            cert_manager.build(config, lock),
            serving.build(config, root, lock),
            serving_admission.build(config),
            gpu_operator.build(config, lock),
            monitoring.build(config),
            # Last: the service identities' Secrets go into namespaces other concerns declare.
            object_store.service_credentials(config),
        )
    except (crds.CrdUnavailable, runtimes.RuntimeFileError, LockFileError) as exc:
        raise RenderError(str(exc)) from None
    # One place for where every chart is pulled from: the stack's OCI chart mirror, where it names one.
    charts = config.charts
    pulled = tuple(dataclasses.replace(concern, releases=tuple(
        from_chart_mirror(release, charts.mirror, charts.plain_http, charts.ca_file) for release in concern.releases))
        for concern in concerns)
    # Trainyard's own CRDs (the admission params' kind) come with the concern that defines them, before the upstream ones.
    rendered = RenderedPlatform(crd_sources, pulled, given_crds=admission.crds(config))
    _check_unique([*rendered.given_crds, *(source.identity for source in crd_sources), *rendered.objects])
    return rendered


def image_lock(config: PlatformConfig, root: Path) -> ImageLock:
    """The stack's image lock (``images.lock_file``, relative to the project root)."""
    path = Path(config.images.lock_file)
    return load_lock(path if path.is_absolute() else root / path)


def _check_unique(objects: list[Manifest]) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = object_key(obj)
        if key in seen:
            raise RenderError(f"two objects render to the same identity {object_id(obj)}")
        seen.add(key)


__all__ = ["ChartRelease", "Concern", "Manifest", "RenderError", "RenderedPlatform", "render_platform"]
