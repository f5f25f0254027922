"""The upstream chart mirror: where a chart release's chart is, verified, and assembled with its dependencies.

The mirror is found through ``$TRAINYARD_CHARTS_DIR`` (default ``../shared/charts`` next to
the project), the same pattern as ``TRAINYARD_CRDS_DIR``; every chart directory used is checked
against its listing hash in ``catalog.CHART_LISTINGS``. The mirror is never written to:
each chart is copied to a temporary directory, and the dependencies its ``Chart.yaml`` lists
are copied in as ``charts/<name>/`` (Helm refuses a chart whose dependency is missing, even
when its condition is false; helm/helm#8600). A dependency that is not in the mirror is
replaced by a stub ``Chart.yaml`` only where its condition is false under Trainyard's values;
Ref: ../shared/charts/SOURCES.md ("Dependencies: assembling charts for helm template").
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainyard import catalog, yamlio
from trainyard.config.load import project_root
from trainyard.manifests.chart_release import ChartRelease

CHARTS_DIR_ENV = "TRAINYARD_CHARTS_DIR"


STUB_NOTE = "STUB written by trainyard.charts: this dependency is not in the chart mirror and is disabled by the values"


class ChartUnavailable(Exception):
    """The chart, one of its dependencies, or helm itself cannot be found."""


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
