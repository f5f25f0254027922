"""Value probes: does a chart read every value Trainyard sets?

``probe_values`` renders the release once per leaf value with that leaf changed (``trainyard.charts``)
and reports the leaves that change nothing (a value path the chart does not read, such as a misspelt key).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainyard.charts import ChartRenderer, ChartRenderError, parse_manifests
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import Manifest

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
