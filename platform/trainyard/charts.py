"""Render an upstream Helm chart locally, exactly as Trainyard installs it.

Every chart release a stack declares (``RenderedPlatform.releases``) can be rendered here
from a chart mirror laid out like ``../shared/charts`` (``<dir>/<chart version>/``; ``<dir>``
from ``catalog.chart_mirror_dir``), with exactly the values Trainyard renders and the same
``helm template`` options the Pulumi Kubernetes provider's ``helm.v4.Chart`` uses: hooks
off, the ``crds/`` directory skipped (``skipCrds``), and Trainyard's post-renderer
(``trainyard.post_render``) that leaves every CRD to Trainyard.
Ref: pulumi-kubernetes provider/pkg/provider/helm/v4/chart.go (``DisableHooks = true``,
``IncludeCRDs = !SkipCrds``, ``postrender.NewExec``).

The chart comes from the upstream chart mirror, verified and assembled with its dependencies
(``trainyard.chart_mirror``, whose names are re-exported here).

``helm`` is the binary ``tools/build.sh helm`` builds (``$TRAINYARD_HELM``, else
``$TRAINYARD_TOOLS_DIR/bin/helm``); it must report ``catalog.HELM_VERSION``.

Whether the chart reads every value Trainyard sets is ``trainyard.chart_probes``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainyard import catalog, post_render, yamlio
from trainyard.chart_mirror import (
    CHARTS_DIR_ENV,
    STUB_NOTE,
    Assembled,
    ChartUnavailable,
    assemble,
    chart_source,
    charts_dir,
    condition_enabled,
    crd_mirror,
    find_chart,
    listing_sha256,
    lookup,
    merge_values,
    verify_listing,
)
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import Manifest

HELM_ENV = "TRAINYARD_HELM"


class ChartRenderError(Exception):
    """``helm template`` failed for a release with the given values."""


def api_versions(crds: Sequence[Manifest]) -> list[str]:
    """``.Capabilities.APIVersions`` of a cluster holding ``crds`` (Pulumi's render asks the cluster for these)."""
    out: list[str] = []
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                out += [f"{spec['group']}/{version['name']}", f"{spec['group']}/{version['name']}/{spec['names']['kind']}"]
    return out


def helm_binary() -> Path | None:
    """The helm built by ``tools/build.sh helm`` (or ``$TRAINYARD_HELM``); None if absent."""
    explicit = os.environ.get(HELM_ENV)
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
    candidate = Path(explicit) if explicit else tools / "bin" / "helm"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def helm_version(helm: Path) -> str:
    done = subprocess.run([str(helm), "version", "--template", "{{.Version}}"],  # noqa: S603 - our own built binary
                          capture_output=True, text=True, check=False, env=_helm_env(Path(tempfile.gettempdir())))
    return done.stdout.strip()


def _helm_env(home: Path) -> dict[str, str]:
    # Keep helm away from the user's repositories, registry logins and plugins.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update(HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"))
    return env


@dataclass(frozen=True)
class RenderedChart:
    """One release rendered: what Pulumi would install, and the CRDs the post-renderer removed."""

    release: ChartRelease
    values: Mapping[str, Any]
    objects: tuple[Manifest, ...]
    dropped: tuple[Manifest, ...]
    stubs: tuple[str, ...] = ()

    @property
    def all_objects(self) -> tuple[Manifest, ...]:
        """The chart's output before the post-renderer."""
        return self.objects + self.dropped

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for obj in self.objects:
            counts[obj["kind"]] = counts.get(obj["kind"], 0) + 1
        return dict(sorted(counts.items()))


def parse_manifests(text: str) -> list[Manifest]:
    return [doc for doc in yamlio.safe_load_all(text) if isinstance(doc, dict)]


class ChartRenderer:
    """Renders chart releases from a mirror with a built helm; every render is cached by its inputs."""

    def __init__(self, directory: Path, helm: Path, kube_version: str = catalog.KUBERNETES_VERSION,
                 api_versions: Sequence[str] = ()) -> None:
        version = helm_version(helm)
        if version != catalog.HELM_VERSION:
            raise ChartUnavailable(f"{helm} reports {version or 'nothing'}, want {catalog.HELM_VERSION} (tools/build.sh helm)")
        self.directory = directory
        self.helm = helm
        self.kube_version = kube_version
        self.api_versions = tuple(api_versions)
        self._work = Path(tempfile.mkdtemp(prefix="trainyard-charts-"))
        self._sources: dict[tuple[str, str], Path] = {}
        self._assembled: dict[Path, Assembled] = {}
        self._renders: dict[str, str] = {}
        self.helm_runs = 0

    def close(self) -> None:
        shutil.rmtree(self._work, ignore_errors=True)

    def assembled(self, release: ChartRelease) -> Assembled:
        key = (release.chart_name, release.version)
        if key not in self._sources:
            self._sources[key] = chart_source(release, self.directory)
        source = self._sources[key]
        if source not in self._assembled:
            into = self._work / "charts" / f"{len(self._assembled)}"
            into.mkdir(parents=True)
            self._assembled[source] = assemble(source, self.directory, into)
        return self._assembled[source]

    def render_text(self, release: ChartRelease, values: Mapping[str, Any] | None = None,
                    post_renderer: tuple[str, Sequence[str]] | None = None, fresh: bool = False) -> str:
        """``helm template`` output for ``release`` (with ``values`` instead of its own, if given).

        ``post_renderer`` (command, args) is run by helm the way Pulumi's provider runs it
        (Trainyard's is ``post_render.command()``);
        ``fresh`` renders again instead of answering from the cache.
        """
        values = release.values if values is None else values
        chart = self.assembled(release)
        effective = merge_values(chart.defaults, values)
        for name, condition in chart.stubs:
            if condition_enabled(condition, effective):
                raise ChartUnavailable(f"release {release.name}: dependency {name} is enabled "
                                       f"({condition or 'no condition'}) but not in the chart mirror")
        values_json = json.dumps(values, sort_keys=True)
        key = json.dumps([str(chart.path), release.name, release.namespace, values_json, post_renderer])
        if fresh:
            return self._helm_template(release, chart.path, values_json, post_renderer)
        if key not in self._renders:
            self._renders[key] = self._helm_template(release, chart.path, values_json, post_renderer)
        return self._renders[key]

    def _helm_template(self, release: ChartRelease, chart: Path, values_json: str,
                       post_renderer: tuple[str, Sequence[str]] | None) -> str:
        values_file = self._work / f"values-{len(self._renders)}.json"
        values_file.write_text(values_json)
        cmd = [str(self.helm), "template", release.name, str(chart), "--namespace", release.namespace,
               "--no-hooks", "--kube-version", self.kube_version, "--values", str(values_file)]
        for api in self.api_versions:
            cmd += ["--api-versions", api]
        if post_renderer is not None:
            command, args = post_renderer
            cmd += ["--post-renderer", command]
            for arg in args:
                cmd += ["--post-renderer-args", arg]
        self.helm_runs += 1
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,  # noqa: S603 - our own built binary
                              env=_helm_env(self._work / "home"))
        values_file.unlink()
        if done.returncode != 0:
            raise ChartRenderError(f"helm template {release.name} ({release.chart_name} {release.version}): "
                                   f"{done.stderr.strip()}")
        return done.stdout

    def render(self, release: ChartRelease, values: Mapping[str, Any] | None = None) -> RenderedChart:
        """The release as Pulumi would install it (post-renderer applied in-process) and what it dropped."""
        raw = parse_manifests(self.render_text(release, values))
        chart = self.assembled(release)
        return RenderedChart(
            release=release,
            values=release.values if values is None else values,
            objects=tuple(o for o in raw if o.get("kind") not in post_render.DROPPED_KINDS),
            dropped=tuple(o for o in raw if o.get("kind") in post_render.DROPPED_KINDS),
            stubs=tuple(name for name, _ in chart.stubs),
        )


__all__ = [
    "CHARTS_DIR_ENV",
    "HELM_ENV",
    "STUB_NOTE",
    "Assembled",
    "ChartRenderError",
    "ChartRenderer",
    "ChartUnavailable",
    "RenderedChart",
    "api_versions",
    "assemble",
    "chart_source",
    "charts_dir",
    "condition_enabled",
    "crd_mirror",
    "find_chart",
    "helm_binary",
    "helm_version",
    "listing_sha256",
    "lookup",
    "merge_values",
    "parse_manifests",
    "verify_listing",
]
