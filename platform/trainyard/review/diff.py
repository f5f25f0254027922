"""``trainyard diff``: a review of what a change does to a stack, built offline from renders.

Two sides, each a stack config and its rendered platform (or nothing, where the stack file
does not exist yet), become one ``Review``: per object added, removed or changed with the
fields that moved; chart releases as objects of their own; the capacity table before and
after; policy results that changed; and a few sentences on top that say what an admin
approves ("`team-a` h100 nominal quota 16 -> 24 (+8)").

The sides come from a git revision (``--base REV``, through a temporary worktree) or from
another stack of the same tree (``--against STACK``, a promotion review).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard import catalog
from trainyard.config import ConfigError, PlatformConfig
from trainyard.manifests import RenderedPlatform, RenderError
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.crds import read_only_documents
from trainyard.manifests.meta import Manifest
from trainyard.project import Stack, open_stack
from trainyard.review import revision
from trainyard.review.beside import Beside
from trainyard.review.capacity_delta import CapacityDelta, capacity_delta, capacity_highlights
from trainyard.review.changes import (
    ABSENT,
    ACTIONS,
    CONCERNS,
    NETWORK,
    FieldChange,
    ObjectChange,
    diff_objects,
    diff_values,
    is_policy_params,
)
from trainyard.review.policy_delta import (
    Evaluator,
    FindingLike,
    PolicyDelta,
    PolicyResult,
    as_result,
    policy_delta,
)
from trainyard.review.upgrades import ComponentUpgrade, upgrades, with_catalog_defaults
from trainyard.review.values import arrow, compact

Renderer = Callable[[Stack], RenderedPlatform]
CHART_API = "helm.sh/v3"

_GPU_QUOTA = re.compile(
    r"^spec\.resourceGroups\[\d+\]\.flavors\[(?P<flavor>[^\]]+)\]\.resources\[(?P<resource>[^\]]+)\]\."
    r"(?P<field>nominalQuota|borrowingLimit|lendingLimit)$"
)
_QUOTA_WORDS = {"nominalQuota": "nominal quota", "borrowingLimit": "borrowing limit", "lendingLimit": "lending limit"}
_CONTAINER_IMAGE = re.compile(r"(?:initContainers|containers)\[(?P<container>[^\]]+)\]\.image$")


@dataclass(frozen=True)
class Side:
    """One side of a review: a label, and the stack's config and render (None where the stack did not exist)."""

    label: str
    config: PlatformConfig | None = None
    rendered: RenderedPlatform | None = None
    # The policy results of this side where they were worked out with it (prepared beside the head).
    findings: tuple[PolicyResult, ...] | None = None


@dataclass(frozen=True)
class Diagnostic:
    severity: str
    message: str
    subject: str = ""


@dataclass(frozen=True)
class Review:
    """Everything a review prints, in the order it prints it; plain data, already redacted."""

    title: str
    base: str
    head: str
    changes: tuple[ObjectChange, ...]
    unchanged: int
    highlights: tuple[str, ...]
    capacity: CapacityDelta | None = None
    policy: PolicyDelta | None = None
    plan: dict[str, int] | None = None
    violations: tuple[PolicyResult, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    settings: tuple[FieldChange, ...] = ()
    notes: tuple[str, ...] = ()
    marker: str = "trainyard-review"
    extra: dict[str, Any] = field(default_factory=dict)
    upgrades: tuple[ComponentUpgrade, ...] = ()

    def counts(self) -> dict[str, int]:
        counted = Counter(c.action for c in self.changes)
        return {action: counted[action] for action in ACTIONS}

    def by_concern(self) -> list[tuple[str, list[ObjectChange]]]:
        return [(concern, [c for c in self.changes if c.concern == concern]) for concern in CONCERNS
                if any(c.concern == concern for c in self.changes)]

    def chart_bumps(self) -> list[tuple[str, Any, Any]]:
        return sorted((c.name, f.old, f.new) for c in self.changes if c.kind == "Chart"
                      for f in c.fields if f.path == "version")


def release_manifest(release: ChartRelease) -> Manifest:
    """A chart release as a pseudo-object, so its version and values diff like any other object."""
    doc = release.as_document()
    doc.pop("release", None)
    return {"apiVersion": CHART_API, "kind": "Chart", "metadata": {"name": release.name}, **doc}


def objects_of(side: Side) -> list[Manifest]:
    if side.rendered is None:
        return []
    return [*side.rendered.all_objects, *(release_manifest(r) for r in side.rendered.releases)]


def review_platforms(base: Side, head: Side, *, title: str, evaluator: Evaluator | None = None,
                     notes: Sequence[str] = (), marker: str = "trainyard-review") -> Review:
    """The review of ``base -> head``; ``evaluator`` (the policy rules) adds the policy section.

    Both sides read, never edit, their CRDs, so one parsed document per CRD file serves both."""
    with read_only_documents():
        changes, unchanged = diff_objects(objects_of(base), objects_of(head))
        policy = None
        if evaluator is not None:
            policy = policy_delta(side_findings(base, evaluator), side_findings(head, evaluator))
    capacity = capacity_delta(base.config, head.config) if base.config or head.config else None
    settings = settings_changes(base.config, head.config)
    bumps = upgrades(base.rendered, head.rendered)
    highlights = [b.summary() for b in bumps] + highlights_for(changes, capacity, policy) + settings_highlights(settings)
    return Review(title, base.label, head.label, tuple(changes), unchanged, tuple(highlights), capacity, policy,
                  notes=tuple(notes), marker=marker, settings=tuple(settings), upgrades=tuple(bumps))


# Settings that the capacity table and the per-object sections already tell in full.
_SHOWN_ELSEWHERE = ("tenants", "gpu_pools", "cohorts", "priority_classes", "runtimes.approved")
MAX_SETTING_HIGHLIGHTS = 5
MAX_PARAM_HIGHLIGHTS = 3  # keys of one tenant's admission params named in the highlights


def settings_changes(old: PlatformConfig | None, new: PlatformConfig | None) -> list[FieldChange]:
    """The stack file's settings that changed, by path (tenants and pools by name, quotas by flavor).

    Some settings change no object at all (``lifecycle.protect_data`` only changes how Pulumi
    treats them), so the review names the settings themselves too.
    """
    if old is None or new is None:
        return []
    changes = diff_values(old.model_dump(mode="json"), new.model_dump(mode="json"), id_keys=("name", "flavor"))
    # An unset setting of a tenant or pool added or removed whole says nothing.
    return [c for c in changes if not ((c.old is ABSENT and c.new is None) or (c.new is ABSENT and c.old is None))]


def settings_highlights(settings: Sequence[FieldChange]) -> list[str]:
    other = [f for f in settings if not f.path.startswith(_SHOWN_ELSEWHERE)]
    lines = [f"stack setting `{f.path}`: {arrow(f.old, f.new)}" for f in other[:MAX_SETTING_HIGHLIGHTS]]
    if len(other) > MAX_SETTING_HIGHLIGHTS:
        lines.append(f"{len(other) - MAX_SETTING_HIGHLIGHTS} more stack settings changed (see Stack settings)")
    return lines


def highlights_for(changes: Sequence[ObjectChange], capacity: CapacityDelta | None,
                   policy: PolicyDelta | None) -> list[str]:
    """The sentences an admin reads first. Quotas come from the configs where there are some."""
    lines = capacity_highlights(capacity) if capacity is not None else queue_highlights(changes)
    lines += runtime_highlights(changes)
    lines += chart_highlights(changes)
    lines += security_highlights(changes)
    if policy is not None and policy.changed:
        lines.append(policy_highlight(policy.new, policy.fixed))
    return lines


def queue_highlights(changes: Sequence[ObjectChange]) -> list[str]:
    """Tenants and GPU quotas read from the objects themselves (a Pulumi preview has no config)."""
    lines: list[str] = []
    for change in changes:
        tenant = change.tenant
        if change.kind == "Namespace" and tenant and change.action in ("added", "removed"):
            lines.append(f"tenant `{tenant}` {change.action} (namespace `{change.name}`)")
        if change.kind != "ClusterQueue":
            continue
        for f in change.fields:
            match = _GPU_QUOTA.match(f.path)
            if match and match["resource"] == catalog.GPU_RESOURCE:
                lines.append(f"`{change.name}` {match['flavor']} {_QUOTA_WORDS[match['field']]} {arrow(f.old, f.new, f.path)}")
    return lines


def _image_parts(image: Any) -> tuple[str, str]:
    text = "" if image is ABSENT else str(image)
    repo, _, digest = text.partition("@")
    return repo, digest


def _short_image(image: Any) -> str:
    repo, digest = _image_parts(image)
    return f"{repo}@{digest[:19]}" if digest else compact(image)


def runtime_highlights(changes: Sequence[ObjectChange]) -> list[str]:
    lines: list[str] = []
    for change in changes:
        if change.kind not in ("ClusterTrainingRuntime", "ClusterServingRuntime"):
            continue
        noun = "runtime" if change.kind == "ClusterTrainingRuntime" else "serving runtime"
        if change.action != "changed":
            lines.append(f"{noun} `{change.name}` {change.action}")
            continue
        images = [(m["container"], f) for f in change.fields if (m := _CONTAINER_IMAGE.search(f.path))]
        for container, f in images:
            (old_repo, old_digest), (new_repo, new_digest) = _image_parts(f.old), _image_parts(f.new)
            if old_repo == new_repo and old_digest and new_digest:
                lines.append(f"{noun} `{change.name}` image digest changed (`{container}`: "
                             f"`{old_digest[:19]}` -> `{new_digest[:19]}`)")
            else:
                lines.append(f"{noun} `{change.name}` image changed (`{container}`: "
                             f"`{_short_image(f.old)}` -> `{_short_image(f.new)}`)")
        others = len(change.fields) - len(images)
        if others:
            lines.append(f"{noun} `{change.name}`: {others} other field{'s' if others != 1 else ''} changed")
    return lines


def chart_highlights(changes: Sequence[ObjectChange]) -> list[str]:
    lines: list[str] = []
    for change in changes:
        if change.kind != "Chart":
            continue
        if change.action != "changed":
            lines.append(f"chart `{change.name}` {change.action}")
            continue
        version = next((f for f in change.fields if f.path == "version"), None)
        if version is not None:
            lines.append(f"chart `{change.name}` version {arrow(version.old, version.new)}")
        values = [f for f in change.fields if f.path.startswith("values")]
        if values:
            lines.append(f"chart `{change.name}`: {len(values)} value{'s' if len(values) != 1 else ''} changed")
    return lines


def security_highlights(changes: Sequence[ObjectChange]) -> list[str]:
    counted = Counter((c.kind, c.action) for c in changes if c.concern == NETWORK)
    if not counted:
        return []
    parts = ", ".join(f"{kind} {n} {action}" for (kind, action), n in sorted(counted.items()))
    return [f"network and security: {parts}", *params_highlights(changes)]


def params_highlights(changes: Sequence[ObjectChange]) -> list[str]:
    """Per tenant whose admission params changed: the keys, before -> after (what it may read, run, serve)."""
    lines: list[str] = []
    for change in changes:
        if not is_policy_params(change.kind, change.name) or change.action != "changed":
            continue
        # What a tenant may read first: the URIs of approved entries and the model bucket.
        keys = sorted((f for f in change.fields if f.path.startswith("data")),
                      key=lambda f: (not f.path.endswith((".uri]", "model-bucket]")), f.path))
        shown = ", ".join(f"`{f.path.removeprefix('data')}` {arrow(f.old, f.new)}" for f in keys[:MAX_PARAM_HIGHLIGHTS])
        more = f" and {len(keys) - MAX_PARAM_HIGHLIGHTS} more" if len(keys) > MAX_PARAM_HIGHLIGHTS else ""
        lines.append(f"admission params of tenant `{change.tenant or change.namespace}`: {shown}{more}")
    return lines


def policy_highlight(new: Sequence[PolicyResult], fixed: Sequence[PolicyResult]) -> str:
    severities = Counter(r.severity for r in new)
    detail = f" ({', '.join(f'{n} {s}' for s, n in sorted(severities.items()))})" if severities else ""
    return f"policy: {len(new)} new violation{'s' if len(new) != 1 else ''}{detail}, {len(fixed)} fixed"


# --- the two ways to get sides --------------------------------------------------------------


def side_findings(side: Side, evaluator: Evaluator) -> Sequence[FindingLike]:
    if side.findings is not None:
        return side.findings
    return evaluator(side.config, side.rendered) if side.config and side.rendered else []


def _side(label: str, stack: Stack, render: Renderer) -> Side:
    return Side(label, stack.config, render(stack))


def _prepared_side(label: str, stack: Stack, render: Renderer, evaluator: Evaluator | None) -> Side:
    """A side whose policy results are worked out with it: plain data that may cross a process boundary (a rendered
    platform pickles without its parsed CRDs, which the receiving side shares with its own)."""
    rendered = render(stack)
    findings = tuple(as_result(f) for f in evaluator(stack.config, rendered)) if evaluator is not None else None
    return Side(label, stack.config, rendered, findings)


@dataclass(frozen=True)
class _Base:
    side: Side
    notes: tuple[str, ...] = ()


def _base_at_revision(root: Path, rev: str, resolved: revision.Revision, relative: Path, render: Renderer,
                      evaluator: Evaluator | None) -> _Base:
    repo = revision.repository_root(root)
    with revision.worktree(root, resolved) as tree:
        base_root = tree / root.resolve().relative_to(repo)
        base_file = tree / relative
        if not base_file.is_file():
            return _Base(Side(resolved.label), (f"`{relative}` does not exist at {resolved.label}: everything is added.",))
        try:
            base_stack = with_catalog_defaults(open_stack(str(base_file), base_root), base_root)
            return _Base(_prepared_side(resolved.label, base_stack, render, evaluator))
        except ConfigError as exc:
            problems = "; ".join(p.render(str(relative)) for p in exc.problems)
            raise revision.RevisionError(f"stack {relative} at {rev} does not load: {problems}") from None
        except RenderError as exc:
            # Paths name the temporary checkout; say which revision (--base) it was.
            message = str(exc).replace(f"{tree}/", "")
            raise revision.RevisionError(f"stack {relative} at revision {rev} (--base) does not render: {message}") from None


def review_against_revision(stack: str, rev: str, root: Path, *, evaluator: Evaluator | None = None,
                            render: Renderer = Stack.render) -> Review:
    """``STACK`` at ``rev`` (base) against the work tree (head).

    The base (worktree, load, render, policy) is prepared beside the head, in a forked child
    (``review.beside``: the same errors and results as one after the other)."""
    resolved = revision.resolve(root, rev)
    repo = revision.repository_root(root)
    relative = revision.relative_stack_path(stack, root, repo)
    with read_only_documents():
        base = Beside(lambda: _base_at_revision(root, rev, resolved, relative, render, evaluator))
        try:
            head_stack = open_stack(stack, root)
            head = _prepared_side("work tree", head_stack, render, evaluator)
        except BaseException:
            base.discard()
            raise
        prepared = base.result()
        # Inside the same read_only_documents: the base's CRDs are parsed into the documents the head's share.
        return review_platforms(prepared.side, head, title=f"{head_stack.name}: {resolved.label} -> work tree",
                                evaluator=evaluator, notes=prepared.notes, marker=f"trainyard-diff:{head_stack.name}")


def review_against_stack(stack: str, against: str, root: Path, *, evaluator: Evaluator | None = None,
                         render: Renderer = Stack.render) -> Review:
    """Promotion review: what ``against`` (base, e.g. prod) would become to match ``stack`` (e.g. staging)."""
    head_stack, base_stack = open_stack(stack, root), open_stack(against, root)
    base = _side(base_stack.name, base_stack, render)
    head = _side(head_stack.name, head_stack, render)
    return review_platforms(base, head, title=f"{head_stack.name} against {base_stack.name}",
                            evaluator=evaluator, marker=f"trainyard-diff:{head_stack.name}:{base_stack.name}")


def review_to_dict(review: Review) -> dict[str, Any]:
    """The review as JSON-ready data (``--format json``): absent values are left out."""

    def field_dict(f: FieldChange) -> dict[str, Any]:
        out: dict[str, Any] = {"path": f.path}
        if f.old is not ABSENT:
            out["old"] = f.old
        if f.new is not ABSENT:
            out["new"] = f.new
        return out

    out: dict[str, Any] = {
        "title": review.title,
        "base": review.base,
        "head": review.head,
        "counts": {**review.counts(), "unchanged": review.unchanged},
        "highlights": list(review.highlights),
        "notes": list(review.notes),
        "changes": [
            {"action": c.action, "id": c.id, "group": c.group, "kind": c.kind, "namespace": c.namespace,
             "name": c.name, "concern": c.concern, "tenant": c.tenant, "note": c.note,
             "fields": [field_dict(f) for f in c.fields]}
            for c in review.changes
        ],
        "chart_bumps": [{"chart": name, "old": compact(old), "new": compact(new)}
                        for name, old, new in review.chart_bumps()],
    }
    if review.capacity is not None:
        out["capacity"] = {
            "flavors": [{"flavor": f.flavor, "physical": list(f.physical), "committed": list(f.committed)}
                        for f in review.capacity.flavors],
            "resources": [{"flavor": r.flavor, "resource": r.resource, "physical_gpus": list(r.physical_gpus),
                           "units": list(r.units), "committed": list(r.committed), "free": list(r.free)}
                          for r in review.capacity.resources],
            "quotas": [{"flavor": q.flavor, "resource": q.resource, "tenant": q.tenant, "old": _quota(q.old),
                        "new": _quota(q.new)} for q in review.capacity.quotas if q.changed],
        }
    if review.policy is not None:
        out["policy"] = {"new": [vars(r) for r in review.policy.new], "fixed": [vars(r) for r in review.policy.fixed],
                         "unchanged": review.policy.unchanged}
    if review.plan is not None:
        out["plan"] = dict(sorted(review.plan.items()))
    if review.violations:
        out["violations"] = [vars(v) for v in review.violations]
    if review.diagnostics:
        out["diagnostics"] = [vars(d) for d in review.diagnostics]
    if review.settings:
        out["settings"] = [field_dict(f) for f in review.settings]
    if review.upgrades:
        out["upgrades"] = [dataclasses.asdict(u) for u in review.upgrades]
    out.update(review.extra)
    return out


def _quota(quota: Any) -> dict[str, Any] | None:
    if quota is None:
        return None
    return {"cohort": quota.cohort, "nominal": quota.nominal, "borrowing_limit": quota.borrowing_limit,
            "lending_limit": quota.lending_limit}
