"""Render an upstream Helm chart locally, exactly as Trainyard installs it.

Every chart release a stack declares (``RenderedPlatform.releases``) can be rendered here
from a chart mirror laid out like ``../shared/charts`` (``<dir>/<chart version>/``; ``<dir>``
from ``catalog.chart_mirror_dir``), with exactly the values Trainyard renders and the same
``helm template`` options the Pulumi Kubernetes provider's ``helm.v4.Chart`` uses: hooks
off, the ``crds/`` directory skipped (``skipCrds``), and Trainyard's post-renderer
(``trainyard.post_render``) that leaves every CRD to Trainyard.
Ref: pulumi-kubernetes provider/pkg/provider/helm/v4/chart.go (``DisableHooks = true``,
``IncludeCRDs = !SkipCrds``, ``postrender.NewExec``).

The mirror is found through ``$TRAINYARD_CHARTS_DIR`` (default ``../shared/charts`` next to
the project), the same pattern as ``TRAINYARD_CRDS_DIR``; every chart directory used is checked
against its listing hash in ``catalog.CHART_LISTINGS``. The mirror is never written to:
each chart is copied to a temporary directory, and the dependencies its ``Chart.yaml`` lists
are copied in as ``charts/<name>/`` (Helm refuses a chart whose dependency is missing, even
when its condition is false; helm/helm#8600). A dependency that is not in the mirror is
replaced by a stub ``Chart.yaml`` only where its condition is false under Trainyard's values;
Ref: ../shared/charts/SOURCES.md ("Dependencies: assembling charts for helm template").

``helm`` is the binary ``tools/build.sh helm`` builds (``$TRAINYARD_HELM``, else
``$TRAINYARD_TOOLS_DIR/bin/helm``); it must report ``catalog.HELM_VERSION``.

``probe_values`` answers "does the chart read every value Trainyard sets?": it renders once
per leaf value with that leaf changed and reports the leaves that change nothing (a value
path the chart does not read, such as a misspelt key).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard import catalog, post_render, yamlio
from trainyard.config.load import project_root
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import Manifest

CHARTS_DIR_ENV = "TRAINYARD_CHARTS_DIR"
HELM_ENV = "TRAINYARD_HELM"
STUB_NOTE = "STUB written by trainyard.charts: this dependency is not in the chart mirror and is disabled by the values"




class ChartUnavailable(Exception):
    """The chart, one of its dependencies, or helm itself cannot be found."""


class ChartRenderError(Exception):
    """``helm template`` failed for a release with the given values."""


def charts_dir(root: Path | None = None) -> Path | None:
    """The chart mirror: ``$TRAINYARD_CHARTS_DIR``, else ``../shared/charts`` next to the project; None if absent."""
    env = os.environ.get(CHARTS_DIR_ENV)
    candidate = Path(env) if env else (root or project_root()).parent / "shared" / "charts"
    return candidate if candidate.is_dir() else None


def crd_mirror(root: Path | None = None) -> Path | None:
    """The upstream CRD mirror (``$TRAINYARD_CRDS_DIR``, else ``../shared/crds``), for schema checks of chart output."""
    env = os.environ.get("TRAINYARD_CRDS_DIR")
    candidate = Path(env) if env else (root or project_root()).parent / "shared" / "crds"
    return candidate if candidate.is_dir() else None


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


def _chart_yaml(chart: Path) -> dict[str, Any]:
    meta = yamlio.safe_load((chart / "Chart.yaml").read_bytes())
    if not isinstance(meta, dict):
        raise ChartUnavailable(f"{chart / 'Chart.yaml'}: not a mapping")
    return meta


def find_chart(directory: Path, name: str, version: str) -> Path | None:
    """``<mirror dir>/<version>/`` of chart ``name`` (the mirror writes some versions with a leading ``v``)."""
    base = directory / catalog.chart_mirror_dir(name)
    for candidate in (version, f"v{version}", version.removeprefix("v")):
        if (base / candidate / "Chart.yaml").is_file():
            return base / candidate
    return None


def listing_sha256(directory: Path, chart: Path) -> str:
    """The mirror's listing hash of one chart directory (``catalog.CHART_LISTINGS`` says how)."""
    files = sorted((p for p in chart.rglob("*") if p.is_file()), key=lambda p: p.relative_to(directory).as_posix().encode())
    listing = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(directory).as_posix()}\n"
                      for p in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def verify_listing(directory: Path, chart: Path) -> None:
    key = chart.relative_to(directory).as_posix()
    pinned = catalog.CHART_LISTINGS.get(key)
    if pinned is None:
        raise ChartUnavailable(f"{chart}: no listing hash pinned for {key} in catalog.CHART_LISTINGS")
    actual = listing_sha256(directory, chart)
    if actual != pinned:
        raise ChartUnavailable(f"{chart}: content does not match the pinned listing hash of {key} "
                               f"(sha256 {actual}, pinned {pinned})")


def chart_source(release: ChartRelease, directory: Path) -> Path:
    """The mirrored chart of ``release``; its ``Chart.yaml`` must name the same chart and version."""
    path = find_chart(directory, release.chart_name, release.version)
    if path is None:
        raise ChartUnavailable(
            f"release {release.name}: chart {release.chart_name} {release.version} is not in the chart mirror "
            f"({directory / release.mirror_dir}/{release.version}/Chart.yaml missing; set {CHARTS_DIR_ENV})"
        )
    meta = _chart_yaml(path)
    if meta.get("name") != release.chart_name or str(meta.get("version")).removeprefix("v") != release.version.removeprefix("v"):
        raise ChartUnavailable(f"{path / 'Chart.yaml'}: is {meta.get('name')} {meta.get('version')}, "
                               f"release {release.name} wants {release.chart_name} {release.version}")
    verify_listing(directory, path)
    return path


def lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def merge_values(base: Any, override: Any) -> Any:
    """Helm's coalescing for maps: override wins, maps merge, everything else (lists too) is replaced."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge_values(base.get(key), value) if key in base else value
        return out
    return override


def condition_enabled(condition: str | None, values: Mapping[str, Any]) -> bool:
    """Helm's dependency condition: the first listed path that holds a bool decides; none means enabled."""
    for path in (condition or "").split(","):
        value = lookup(values, path.strip()) if path.strip() else None
        if isinstance(value, bool):
            return value
    return True


@dataclass(frozen=True)
class Assembled:
    """A chart copied out of the mirror with its dependencies in ``charts/``."""

    path: Path
    # (name, condition) of each dependency satisfied by a stub, and the chart's own values.yaml
    stubs: tuple[tuple[str, str | None], ...]
    defaults: Mapping[str, Any]


def assemble(source: Path, directory: Path, into: Path) -> Assembled:
    """Copy ``source`` to ``into/<name>`` and fill its ``charts/`` from the mirror, recursively."""
    meta = _chart_yaml(source)
    target = into / str(meta["name"])
    shutil.copytree(source, target)
    locked = {d["name"]: str(d["version"]) for d in (_lock(source) or [])}
    stubs: list[tuple[str, str | None]] = []
    for dep in meta.get("dependencies") or []:
        name, charts = str(dep["name"]), target / "charts"
        if (charts / name).is_dir() or any(charts.glob(f"{name}-*.tgz")):
            continue  # vendored upstream (gpu-operator vendors node-feature-discovery)
        version = locked.get(name, str(dep["version"]))
        found = find_chart(directory, name, version)
        charts.mkdir(exist_ok=True)
        if found is not None:
            verify_listing(directory, found)
            assemble(found, directory, charts)
        else:
            stub = charts / name
            stub.mkdir()
            stub.joinpath("Chart.yaml").write_text(f"# {STUB_NOTE}\napiVersion: v2\nname: {name}\nversion: {version}\n")
            stubs.append((name, dep.get("condition")))
    defaults = yamlio.safe_load((source / "values.yaml").read_bytes()) if (source / "values.yaml").is_file() else {}
    return Assembled(target, tuple(stubs), defaults or {})


def _lock(chart: Path) -> list[dict[str, Any]] | None:
    lock = chart / "Chart.lock"
    if not lock.is_file():
        return None
    doc = yamlio.safe_load(lock.read_bytes())
    return list(doc.get("dependencies") or []) if isinstance(doc, dict) else None


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


# ----------------------------------------------------------------- value probes

Path_ = tuple[str, ...]


def leaf_paths(values: Mapping[str, Any], prefix: Path_ = ()) -> Iterator[Path_]:
    """Every leaf Trainyard sets: a non-map value, or an empty map. Lists are leaves (Helm replaces them whole)."""
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            yield from leaf_paths(value, (*prefix, str(key)))
        else:
            yield (*prefix, str(key))


def get_path(values: Mapping[str, Any], path: Path_) -> Any:
    node: Any = values
    for part in path:
        node = node[part]
    return node


def with_leaf(values: Mapping[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(dict(values))
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


PROBE = "trainyard-probe"


def perturbations(value: Any) -> list[Any]:
    """Values to try instead of ``value``: the first that changes the output proves the chart reads the leaf."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float):
        return [value + 1]
    if isinstance(value, str):
        # Appending reaches values that are copied into the output; the empty string reaches
        # values that are only tested for being set.
        return [f"{value}-{PROBE}", ""] if value else [PROBE]
    if isinstance(value, list):
        return [[], [*value, value[-1]]] if value else [[PROBE]]
    if isinstance(value, Mapping):
        return [{PROBE: PROBE}]
    return [PROBE]


def _flatten(objects: Sequence[Manifest]) -> dict[str, Any]:
    """Every leaf of every object, keyed by object identity and field path."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(node, list) and node:
            for i, v in enumerate(node):
                walk(f"{prefix}[{i}]", v)
        else:
            out[prefix] = node

    for obj in objects:
        meta = obj.get("metadata") or {}
        walk(f"{obj.get('apiVersion')}/{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}", obj)
    return out


@dataclass(frozen=True)
class ValueProbe:
    """What changing one leaf value did to the chart's output."""

    path: str
    read: bool
    evidence: str


@dataclass
class ProbeReport:
    release: ChartRelease
    probes: list[ValueProbe] = field(default_factory=list)
    unstable_fields: int = 0

    @property
    def unread(self) -> list[ValueProbe]:
        return [p for p in self.probes if not p.read]

    @property
    def read(self) -> list[ValueProbe]:
        return [p for p in self.probes if p.read]


def _first_change(before: str, after: str) -> str:
    """Where two renders first differ: the template (helm's ``# Source:`` comment) and the line."""
    old, new = before.splitlines(), after.splitlines()
    index = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    source = next((line.removeprefix("# Source: ") for line in reversed(new[:index + 1]) if line.startswith("# Source: ")), "?")
    line = new[index].strip() if index < len(new) else "(document removed)"
    return f"output changes in {source}: {line[:120]}"


def probe_values(renderer: ChartRenderer, release: ChartRelease, values: Mapping[str, Any] | None = None) -> ProbeReport:
    """For every leaf of ``values`` (default: the release's), whether the chart's output depends on it.

    A chart that renders the same bytes twice is compared as text. Otherwise (generated
    certificates, random names) the fields that differ between two identical renders are
    left out of the comparison, so randomness never passes for "read".
    """
    values = release.values if values is None else values
    baseline = renderer.render_text(release, values)
    second = renderer.render_text(release, values, fresh=True)
    unstable: set[str] = set()
    if second != baseline:
        first, again = _flatten(parse_manifests(baseline)), _flatten(parse_manifests(second))
        unstable = {k for k in first.keys() | again.keys() if first.get(k, PROBE) != again.get(k, PROBE)}
    report = ProbeReport(release, unstable_fields=len(unstable))
    for path in leaf_paths(values):
        evidence = ""
        for candidate in perturbations(get_path(values, path)):
            try:
                changed = renderer.render_text(release, with_leaf(values, path, candidate))
            except ChartRenderError as exc:
                evidence = f"chart rejects {candidate!r}: {str(exc).splitlines()[-1][:160]}"
                break
            if not unstable:
                evidence = _first_change(baseline, changed) if changed != baseline else ""
            else:
                before, after = _flatten(parse_manifests(baseline)), _flatten(parse_manifests(changed))
                diff = sorted(k for k in before.keys() | after.keys()
                              if k not in unstable and before.get(k, PROBE) != after.get(k, PROBE))
                evidence = f"{len(diff)} output field(s) change, e.g. {diff[0]}" if diff else ""
            if evidence:
                break
        report.probes.append(ValueProbe(".".join(path), bool(evidence),
                                        evidence or "no output field changes: the chart does not read it"))
    return report
