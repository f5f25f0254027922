"""The rehearsal's mirror: what an air-gapped site's registry holds for its stack, filled on this machine.

With real nodes the rehearsal deploys the stack the way an air-gapped site does (docs/supply-chain.md): every
chart from the site's OCI chart mirror and every image from its image mirror, by digest. Here both mirrors are the
real nodes' loopback registry (``rehearsal/node.py``, ``LoopbackRegistry``), and nothing comes from outside:

- **charts**: each chart release the rehearsal installs, taken from the verified upstream chart copies
  (``$TRAINYARD_CHARTS_DIR``, listing hashes checked by ``chart_mirror.chart_source``), assembled with its
  dependencies and packaged as ``helm package`` would, then pushed as a Helm OCI artifact to
  ``<registry>/charts/<name>:<version>`` (the layout ``trainyard bom STACK --import`` writes; the same push:
  ``supply.airgap.push_chart``). The stack's ``charts.mirror`` names it (``stack.InCluster``).
- **images**: the image factory's builds, pushed under the stack's mirror names (and Trainyard's own provisioner
  image under the stack's own reference, whose host the node's containerd maps to the same registry:
  ``registry_hosts``); their digests go into the rehearsal's own image lock (the repository's lock is never written).
  Only the charts the stack installs get theirs (the local stack without MLflow needs no CloudNativePG operator), and
  the PostgreSQL operand where the stack's MLflow database runs (``postgres_image.py``).

Packages carry the epoch as their creation time, so the same chart gives the same artifact digest.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainyard import chart_mirror
from trainyard.config.model import PlatformConfig
from trainyard.manifests.chart_release import ChartRelease
from trainyard.project import Stack
from trainyard.rehearsal import factory, provisioner_image
from trainyard.rehearsal.stack import InCluster
from trainyard.supply import archive as fmt
from trainyard.supply.airgap import chart_target, push_chart
from trainyard.supply.lock import ImageLock, load_lock
from trainyard.supply.registry import RegistryClient, RegistryError

EPOCH = "1970-01-01T00:00:00Z"
CHARTS_PATH = "charts"


class MirrorError(Exception):
    """The rehearsal's mirror could not be filled; says what and why."""


def chart_mirror_url(registry: str) -> str:
    """The ``charts.mirror`` of a stack deployed from the rehearsal's loopback registry (host:port)."""
    return f"oci://{registry}/{CHARTS_PATH}"


@dataclass(frozen=True)
class PushedChart:
    release: str
    reference: str  # oci://.../<name>:<version>


def push_charts(config: PlatformConfig, releases: list[ChartRelease], registry: str,
                charts_dir: Path | None = None) -> list[PushedChart]:
    """Push the chart of every installed (not external) release to the loopback registry at ``registry``."""
    directory = charts_dir or chart_mirror.charts_dir()
    if directory is None:
        raise MirrorError(f"the upstream chart copies are not found: set {chart_mirror.CHARTS_DIR_ENV} "
                          "(default ../shared/charts next to the project)")
    if config.charts.mirror != chart_mirror_url(registry):
        raise MirrorError(f"the stack's charts.mirror is {config.charts.mirror!r}, not the rehearsal's registry "
                          f"{chart_mirror_url(registry)!r}")
    client = RegistryClient({registry: f"http://{registry}"}, insecure=True)
    pushed, seen = [], set()
    with tempfile.TemporaryDirectory(prefix="trainyard-rehearsal-charts-") as work:
        for release in releases:
            if release.external or (release.chart_name, release.version) in seen:
                continue
            seen.add((release.chart_name, release.version))
            try:
                source = chart_mirror.chart_source(release, directory)
                assembled = chart_mirror.assemble(source, directory, Path(work) / release.name)
            except chart_mirror.ChartUnavailable as exc:
                raise MirrorError(f"chart of release {release.name}: {exc}") from None
            package = fmt.package_chart(assembled.path)
            meta = fmt.chart_metadata(package)
            target = chart_target(config.charts, release.chart_name, str(meta["version"]))
            try:
                push_chart(client, target, package, meta, EPOCH)
            except RegistryError as exc:
                raise MirrorError(f"pushing chart {release.chart_name} to {registry}: {exc}") from None
            pushed.append(PushedChart(release.name, f"oci://{target.registry}/{target.repository}:{target.tag}"))
    return pushed


def seed_lock(stack: Stack, in_cluster: InCluster) -> ImageLock:
    """The rehearsal's lock starts as a copy of the stack's own (runtimes and serving images keep their pins);
    the factory's images are added to it. Written to ``in_cluster.lock_file``; the repository's lock is untouched."""
    source = Path(stack.config.images.lock_file)
    lock = load_lock(source if source.is_absolute() else stack.root / source)
    seeded = ImageLock(dict(lock.entries), in_cluster.lock_file)
    in_cluster.lock_file.parent.mkdir(parents=True, exist_ok=True)
    in_cluster.lock_file.write_text(seeded.dump(), encoding="utf-8")
    return seeded


def installed_controllers(in_cluster: InCluster, releases: list[ChartRelease]) -> tuple[str, ...]:
    """The in-cluster components whose chart the stack installs: only their images are built and pushed (the local
    stack without MLflow renders no CloudNativePG release, and so needs no operator image)."""
    installed = {release.component for release in releases if not release.external}
    return tuple(c for c in in_cluster.controllers if c in installed)


def registry_hosts(config: PlatformConfig, in_cluster: InCluster) -> tuple[str, ...]:
    """The registry hosts besides the mirror's whose images the rehearsal pushes to its registry: the provisioner's
    (Trainyard's own image, named by the stack: ``registry.trainyard.internal``), when the object store runs in it."""
    if factory.SEAWEEDFS not in in_cluster.controllers or config.object_store is None:
        return ()
    return (provisioner_image.target(config).registry,)


def push_images(stack: Stack, config: PlatformConfig, in_cluster: InCluster, tools_dir: Path,
                components: tuple[str, ...] | None = None) -> Iterator[str]:
    """The images of what runs in the cluster (``components``, default every in-cluster one): built by the factory (or
    taken from its cache), pushed under the names the stack renders, and locked: the rehearsal's lock then holds the
    digests the registry reports for them."""
    started = time.monotonic()
    wanted = in_cluster.controllers if components is None else components
    built = factory.build_images(config, tools_dir, components=wanted)
    yield f"{len(built)} images built in {time.monotonic() - started:.1f}s ({sum(b.cached for b in built)} from the cache)"
    factory.push_images(built, in_cluster.registry)
    overlay = Stack(stack.name, stack.path, stack.root, config)
    factory.lock_pushed(overlay, built, in_cluster.registry)
    for image in built:
        yield f"image {image.reference} ({'cached' if image.cached else 'built'}{'; ' + image.note if image.note else ''})"


def fill_mirror(stack: Stack, config: PlatformConfig, in_cluster: InCluster, tools_dir: Path) -> Iterator[str]:
    """Fill the loopback registry for the in-cluster stack ``config`` (the rehearsal overlay of ``stack``):
    the lock, the images the factory builds, the charts. Yields one line per thing done."""
    from trainyard.manifests import render_platform

    lock = seed_lock(stack, in_cluster)
    yield f"image lock {in_cluster.lock_file} (from {stack.config.images.lock_file}: {len(lock.entries)} entries)"
    rendered = render_platform(config, stack.root, stack.path.parent)
    releases = list(rendered.releases)
    yield from push_images(stack, config, in_cluster, tools_dir, installed_controllers(in_cluster, releases))
    for chart in push_charts(config, releases, in_cluster.registry):
        yield f"chart {chart.reference} (release {chart.release})"
