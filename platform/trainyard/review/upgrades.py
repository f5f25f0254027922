"""The upgrade section of a review: what a component's version bump changes beyond Trainyard's own objects.

For every component whose chart version differs between the two sides:

- CRD schema changes: per CRD of the component, the versions served and the storage version
  before and after, and per API version the fields added and removed (``spec.foo.bar`` paths of
  the openAPIV3Schema; ``[]`` marks list items);
- chart defaults that changed and that Trainyard does not override: the chart's ``values.yaml``
  at both versions, minus every path Trainyard's values set. This needs both chart directories
  (``TRAINYARD_CHARTS_DIR``, laid out ``<chart>/<version>/``); where one is missing the section
  says so instead of guessing;
- images: the upstream controller image of each version (the catalog's).

Each component links its notes in docs/upgrades.md (what to do before the bump).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard import catalog, charts, yamlio
from trainyard.manifests import RenderedPlatform
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import Manifest
from trainyard.project import Stack

GUIDE = "docs/upgrades.md"
CATALOG_FILE = Path("platform") / "trainyard" / "catalog.py"


@dataclass(frozen=True)
class CrdChange:
    name: str
    served: tuple[tuple[str, ...], tuple[str, ...]]
    storage: tuple[str | None, str | None]
    added: dict[str, tuple[str, ...]] = field(default_factory=dict)
    removed: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def storage_changed(self) -> bool:
        return self.storage[0] != self.storage[1]


@dataclass(frozen=True)
class DefaultChange:
    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class ComponentUpgrade:
    component: str
    old_version: str
    new_version: str
    crds: tuple[CrdChange, ...]
    chart_defaults: tuple[DefaultChange, ...] | None
    chart_note: str
    images: tuple[tuple[str, ...], tuple[str, ...]]

    @property
    def anchor(self) -> str:
        return f"{GUIDE}#{self.component}"

    def summary(self) -> str:
        parts = [f"upgrade `{self.component}` {self.old_version} -> {self.new_version}"]
        changed = [c for c in self.crds if c.added or c.removed or c.served[0] != c.served[1] or c.storage_changed]
        if changed:
            parts.append(f"{len(changed)} CRD{'s' if len(changed) != 1 else ''} change")
        for crd in (c for c in self.crds if c.storage_changed):
            parts.append(f"storage version of `{crd.name}` {crd.storage[0]} -> {crd.storage[1]}")
        if self.chart_defaults:
            parts.append(f"{len(self.chart_defaults)} chart defaults change under Trainyard's values")
        return "; ".join(parts) + f" (read {self.anchor} first)"


def catalog_defaults_at(project: Path) -> dict[str, str]:
    """``DEFAULT_VERSIONS`` of the catalog file in ``project`` (a revision's tree), read without importing it."""
    try:
        tree = ast.parse((project / CATALOG_FILE).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign):
            target, value_node = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "DEFAULT_VERSIONS" and value_node is not None:
            try:
                value = ast.literal_eval(value_node)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
    return {}


def with_catalog_defaults(stack: Stack, project: Path) -> Stack:
    """``stack`` (a base revision's) with the versions its own catalog defaulted to, where the stack sets none.

    ``trainyard diff --base REV`` renders both sides with the work tree's code, so a bump of the
    catalog's ``DEFAULT_VERSIONS`` would otherwise be invisible: the base side takes the default of
    the revision's catalog (if the work tree's catalog still knows that version).
    """
    defaults = catalog_defaults_at(project)
    versions = stack.config.versions
    update = {c: v for c, v in defaults.items() if c in type(versions).model_fields and c not in versions.model_fields_set
              and getattr(versions, c) != v and (c, v) in catalog.RELEASES}
    if not update:
        return stack
    config = stack.config.model_copy(update={"versions": versions.model_copy(update=update)})
    return Stack(stack.name, stack.path, stack.root, config)


def schema_fields(schema: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every field path of an openAPIV3Schema (``spec.resourceGroups[].flavors[].name``)."""
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        yield path
        yield from schema_fields(sub, path)
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from schema_fields(items, f"{prefix}[]")


def _versions(crd: Manifest) -> dict[str, Mapping[str, Any]]:
    return {v["name"]: v for v in crd.get("spec", {}).get("versions", [])}


def crd_change(old: Manifest, new: Manifest) -> CrdChange:
    before, after = _versions(old), _versions(new)

    def served(versions: dict[str, Mapping[str, Any]]) -> tuple[str, ...]:
        return tuple(sorted(n for n, v in versions.items() if v.get("served")))

    def storage(versions: dict[str, Mapping[str, Any]]) -> str | None:
        return next((n for n, v in versions.items() if v.get("storage")), None)

    added, removed = {}, {}
    for name in sorted(set(before) & set(after)):
        old_fields = set(schema_fields((before[name].get("schema") or {}).get("openAPIV3Schema") or {}))
        new_fields = set(schema_fields((after[name].get("schema") or {}).get("openAPIV3Schema") or {}))
        if new_fields - old_fields:
            added[name] = tuple(sorted(new_fields - old_fields))
        if old_fields - new_fields:
            removed[name] = tuple(sorted(old_fields - new_fields))
    return CrdChange(old["metadata"]["name"], (served(before), served(after)), (storage(before), storage(after)),
                     added, removed)


def component_crd_names(component: str, version: str) -> set[str]:
    """``<plural>.<group>`` of each CRD file of a release (files are named ``<group>_<plural>.yaml``)."""
    release = catalog.RELEASES.get((component, version))
    if release is None:
        return set()
    names = set()
    for crd in release.crds:
        group, _, plural = crd.name.removesuffix(".yaml").partition("_")
        names.add(f"{plural}.{group}")
    return names


def flatten(values: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf paths of a values tree (lists are leaves: Helm replaces them whole)."""
    if isinstance(values, Mapping) and values:
        out: dict[str, Any] = {}
        for key, value in values.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: values} if prefix else {}


def _chart_values(directory: Path, release: ChartRelease, version: str) -> dict[str, Any] | None:
    for candidate in (directory / release.mirror_dir / version, directory / release.mirror_dir / f"v{version}"):
        path = candidate / "values.yaml"
        if path.is_file():
            loaded = yamlio.safe_load(path.read_text(encoding="utf-8")) or {}
            return loaded if isinstance(loaded, dict) else {}
    return None


def chart_default_changes(old: ChartRelease, new: ChartRelease,
                          directory: Path | None) -> tuple[tuple[DefaultChange, ...] | None, str]:
    if directory is None:
        return None, "chart defaults not compared: no chart directory (set TRAINYARD_CHARTS_DIR)"
    before, after = _chart_values(directory, old, old.version), _chart_values(directory, new, new.version)
    missing = [v for v, found in ((old.version, before), (new.version, after)) if found is None]
    if before is None or after is None:
        return None, (f"chart defaults not compared: {new.chart_name} {', '.join(missing)} not in {directory} "
                      "(add the upstream chart directory of that version to compare)")
    old_flat, new_flat = flatten(before), flatten(after)
    overridden = set(flatten(new.values)) | set(flatten(old.values))

    def ours(path: str) -> bool:
        return any(path == q or path.startswith(q + ".") or q.startswith(path + ".") for q in overridden)

    changes = [DefaultChange(p, old_flat.get(p), new_flat.get(p)) for p in sorted(set(old_flat) | set(new_flat))
               if old_flat.get(p) != new_flat.get(p) and not ours(p)]
    return tuple(changes), f"values.yaml {old.version} -> {new.version}, paths Trainyard sets left out"


def _catalog_images(release: ChartRelease) -> tuple[str, ...]:
    """The upstream controller image of a release's version (the catalog's)."""
    pinned = catalog.RELEASES.get((release.component, release.version))
    image = pinned.image if pinned else None
    out = [f"{image.registry}/{image.repository}:{image.tag}"] if image else []
    return tuple(out)


def upgrades(base: RenderedPlatform | None, head: RenderedPlatform | None,
             directory: Path | None = None) -> list[ComponentUpgrade]:
    """One entry per component whose chart version differs between ``base`` and ``head``."""
    if base is None or head is None:
        return []
    chart_root = directory if directory is not None else charts.charts_dir()
    old_releases = {r.component: r for r in base.releases}
    old_crds = {c["metadata"]["name"]: c for c in base.crds}
    new_crds = {c["metadata"]["name"]: c for c in head.crds}
    out = []
    for new in head.releases:
        old = old_releases.get(new.component)
        if old is None or old.version == new.version:
            continue
        names = component_crd_names(new.component, old.version) | component_crd_names(new.component, new.version)
        crds = tuple(crd_change(old_crds[n], new_crds[n]) for n in sorted(names) if n in old_crds and n in new_crds
                     and old_crds[n] != new_crds[n])
        defaults, note = chart_default_changes(old, new, chart_root)
        images = (_catalog_images(old), _catalog_images(new))
        out.append(ComponentUpgrade(new.component, old.version, new.version, crds, defaults, note, images))
    return out


def markdown_lines(items: list[ComponentUpgrade], max_fields: int = 12) -> list[str]:
    lines: list[str] = []
    for item in items:
        lines += [f"#### `{item.component}` {item.old_version} -> {item.new_version}", "",
                  f"Before you merge: [{item.anchor}]({item.anchor}).", ""]
        if item.crds:
            lines += ["| CRD | served | storage | fields added | fields removed |", "|---|---|---|---|---|"]
            for crd in item.crds:
                served = ", ".join(crd.served[0]) + (" -> " + ", ".join(crd.served[1]) if crd.served[0] != crd.served[1]
                                                      else "")
                storage = f"**{crd.storage[0]} -> {crd.storage[1]}**" if crd.storage_changed else str(crd.storage[1])
                lines.append(f"| `{crd.name}` | {served} | {storage} | {_fields(crd.added, max_fields)} | "
                             f"{_fields(crd.removed, max_fields)} |")
            lines.append("")
        else:
            lines += ["No CRD schema changes.", ""]
        if item.chart_defaults is None:
            lines += [f"Chart defaults: {item.chart_note}.", ""]
        elif item.chart_defaults:
            lines += [f"Chart defaults that change and that Trainyard does not set ({item.chart_note}):", "",
                      "| value | old default | new default |", "|---|---|---|"]
            lines += [f"| `{d.path}` | `{d.old}` | `{d.new}` |" for d in item.chart_defaults]
            lines.append("")
        else:
            lines += [f"Chart defaults: none change outside what Trainyard sets ({item.chart_note}).", ""]
        old_images, new_images = item.images
        if old_images != new_images:
            lines += ["Images: " + ", ".join(f"`{i}`" for i in old_images) + " -> "
                      + ", ".join(f"`{i}`" for i in new_images), ""]
    return lines


def _fields(by_version: dict[str, tuple[str, ...]], limit: int) -> str:
    parts = []
    for version, paths in by_version.items():
        shown = ", ".join(f"`{p}`" for p in paths[:limit])
        more = f" (+{len(paths) - limit} more)" if len(paths) > limit else ""
        parts.append(f"{version}: {shown}{more}")
    return "<br>".join(parts) or "—"
