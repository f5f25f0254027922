"""A ``Review`` as Markdown for a pull request comment, or as plain text for a terminal.

Markdown: highlights first, then capacity, policy and chart tables, then one section per
concern. Field changes sit in ``diff`` code blocks (``+`` added, ``-`` removed, ``~``
changed) so GitHub and GitLab colour them. A section with many objects shows its counts
per kind and folds the objects into ``<details>``; a comment that would still exceed
GitHub's size limit drops the per-object details and says so.

Everything here formats; nothing decides. The same review always prints the same bytes.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from trainyard.review.capacity_delta import CapacityDelta
from trainyard.review.changes import ABSENT, ACTIONS, FieldChange, ObjectChange
from trainyard.review.diff import Review
from trainyard.review.policy_delta import PolicyDelta
from trainyard.review.upgrades import markdown_lines as upgrade_lines
from trainyard.review.values import arrow, compact, limit_arrow, limit_text

FOLD_OBJECTS: Final = 8  # a concern with more objects shows counts per kind and folds them
FOLD_LINES: Final = 40  # ... or with more field lines than this
MAX_FIELDS: Final = 40  # field lines shown per object
MAX_TEXT_LINES: Final = 16  # lines of a multi-line string diff shown per field
COMMENT_LIMIT: Final = 65_536  # GitHub's maximum comment body, in characters
_SIGN = {"added": "+", "removed": "-", "changed": "~"}


def field_lines(change: FieldChange) -> list[str]:
    """``~ path: old -> new (+d)``, ``+ path: value``, ``- path: value``; text values as a line diff."""
    if change.old is ABSENT:
        return [f"+ {change.path}: {compact(change.new)}"]
    if change.new is ABSENT:
        return [f"- {change.path}: {compact(change.old)}"]
    if isinstance(change.old, str) and isinstance(change.new, str) and ("\n" in change.old or "\n" in change.new):
        old_lines, new_lines = change.old.splitlines(), change.new.splitlines()
        lines = [f"~ {change.path}: text, {len(old_lines)} -> {len(new_lines)} lines"]
        body = [line for line in difflib.unified_diff(old_lines, new_lines, lineterm="", n=0)
                if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        lines += [f"{line[0]}     {line[1:]}" for line in body[:MAX_TEXT_LINES]]
        if len(body) > MAX_TEXT_LINES:
            lines.append(f"~     … {len(body) - MAX_TEXT_LINES} more lines")
        return lines
    if change.old == change.new:  # a secret that changed, shown redacted on both sides
        return [f"~ {change.path}: {compact(change.new)} (value changed)"]
    return [f"~ {change.path}: {arrow(change.old, change.new, change.path)}"]


def object_field_lines(change: ObjectChange) -> list[str]:
    lines = [line for f in change.fields for line in field_lines(f)]
    if len(lines) > MAX_FIELDS:
        hidden = len(lines) - MAX_FIELDS
        lines = [*lines[:MAX_FIELDS], f"~ … {hidden} more lines (--format json has them all)"]
    return lines


def _counts_line(review: Review) -> str:
    counts = review.counts()
    parts = [f"{counts[a]} {a}" for a in ACTIONS if counts[a] or a != "replaced"]
    return ", ".join(parts) + f" ({review.unchanged} unchanged)"


_PLAN_WORDS: Final = {"create": "to create", "update": "to update", "replace": "to replace", "delete": "to delete"}


def _plan_line(plan: dict[str, int]) -> str:
    """Pulumi's change summary in its own order: create, update, replace, delete, others, unchanged last."""
    order = [*_PLAN_WORDS, *sorted(op for op in plan if op not in _PLAN_WORDS and op != "same"), "same"]
    parts = [f"{plan[op]} {_PLAN_WORDS.get(op, 'unchanged' if op == 'same' else op)}" for op in order if plan.get(op)]
    return ", ".join(parts) or "no changes"


def _kind_counts(changes: Sequence[ObjectChange]) -> list[tuple[str, dict[str, int]]]:
    counted = Counter((c.kind, c.action) for c in changes)
    kinds = sorted({c.kind for c in changes})
    return [(kind, {a: counted[(kind, a)] for a in ACTIONS}) for kind in kinds]


def _section_summary(changes: Sequence[ObjectChange]) -> str:
    counted = Counter(c.action for c in changes)
    return ", ".join(f"{counted[a]} {a}" for a in ACTIONS if counted[a])


def _should_fold(changes: Sequence[ObjectChange]) -> bool:
    return len(changes) > FOLD_OBJECTS or sum(len(object_field_lines(c)) for c in changes) > FOLD_LINES


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _fence(lines: Sequence[str]) -> str:
    """A code fence longer than any run of backticks inside the block."""
    runs = [len(run) for line in lines for run in re.findall(r"`+", line)]
    return "`" * max(3, max(runs, default=0) + 1)


class _Markdown:
    def __init__(self, review: Review, details: bool) -> None:
        self.review = review
        self.details = details
        self.out: list[str] = []

    def add(self, *lines: str) -> None:
        self.out.extend(lines)

    def table(self, header: Sequence[str], align: str, rows: Sequence[Sequence[Any]]) -> None:
        self.add("| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
        self.add(*("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows))
        self.add("")

    def render(self) -> str:
        r = self.review
        self.header()
        if r.capacity is not None and r.capacity.changed:
            self.capacity(r.capacity)
        if r.policy is not None and r.policy.changed:
            self.policy(r.policy)
        if r.violations:
            self.add("### Policy violations", "")
            self.table(["enforcement", "policy", "resource", "message"], "llll",
                       [[v.severity, v.rule_id, f"`{v.object_id}`" if v.object_id else "(stack)", v.message]
                        for v in r.violations])
        if r.chart_bumps():
            self.add("### Chart versions", "")
            self.table(["chart", "version"], "ll", [[n, arrow(o, v)] for n, o, v in r.chart_bumps()])
        if r.upgrades:
            self.add("### Upgrades", "", *upgrade_lines(list(r.upgrades)))
        if r.diagnostics:
            self.diagnostics()
        if r.settings:
            self.settings(r.settings)
        if len(r.changes) > FOLD_OBJECTS and len(r.by_concern()) > 1:
            self.add("### Counts per kind", "")
            self.table(["kind", *ACTIONS], "lrrrr", [[k, *(c[a] or "" for a in ACTIONS)] for k, c in _kind_counts(r.changes)])
        for concern, changes in r.by_concern():
            self.concern(concern, changes)
        if not self.details:
            self.add("> Per-object details are left out: the full review is longer than a pull request comment "
                     "may be. Run `trainyard diff` locally, or read the job's artifact, for every field.", "")
        return "\n".join(self.out).rstrip("\n") + "\n"

    def header(self) -> None:
        r = self.review
        self.add(f"<!-- {r.marker} -->", f"## Trainyard review: {r.title}", "")
        self.add(f"**{_counts_line(r)}** · base: {r.base} · head: {r.head}", "")
        if r.plan is not None:
            self.add(f"**Pulumi plan:** {_plan_line(r.plan)}", "")
        for note in r.notes:
            self.add(f"> {note}", "")
        if _nothing(r):
            self.add("No changes.", "")
        if r.highlights:
            self.add("### Highlights", "", *(f"- {h}" for h in r.highlights), "")

    def capacity(self, capacity: CapacityDelta) -> None:
        self.add("### Capacity", "")
        self.table(list(CAPACITY_COLUMNS), "llrrrr", _capacity_rows(capacity))
        changed = [q for q in capacity.quotas if q.changed]
        quota_rows = []
        for q in changed:
            old, new = q.old, q.new
            either = new if new is not None else old
            cohort = either.cohort if either is not None else None
            quota_rows.append([
                q.tenant, q.flavor, q.resource, cohort or "-",
                _maybe(old.nominal if old else None, new.nominal if new else None),
                _limits(old.borrowing_limit if old else ABSENT, new.borrowing_limit if new else ABSENT),
                _limits(old.lending_limit if old else ABSENT, new.lending_limit if new else ABSENT),
            ])
        self.table(["tenant", "flavor", "resource", "cohort", "nominal", "borrowing limit", "lending limit"], "llllrrr",
                   quota_rows)
        unchanged = len(capacity.quotas) - len(changed)
        if unchanged:
            self.add(f"{unchanged} unchanged quota row{'s' if unchanged != 1 else ''} not shown "
                     "(`trainyard capacity STACK` prints them all).", "")

    def policy(self, policy: PolicyDelta) -> None:
        self.add("### Policy results that changed", "")
        rows = [["new", r.severity, r.rule_id, f"`{r.object_id}`", r.message] for r in policy.new]
        rows += [["fixed", r.severity, r.rule_id, f"`{r.object_id}`", r.message] for r in policy.fixed]
        fold = len(rows) > FOLD_OBJECTS
        if fold:
            counted = Counter((row[2], row[1], row[0]) for row in rows)
            rules = sorted({(row[2], row[1]) for row in rows})
            self.table(["rule", "severity", "new", "fixed"], "llrr",
                       [[rule, severity, counted[(rule, severity, "new")] or "", counted[(rule, severity, "fixed")] or ""]
                        for rule, severity in rules])
            if not self.details:
                return
            self.add(f"<details><summary>{len(rows)} findings</summary>", "")
        self.table(["", "severity", "rule", "object", "message"], "lllll", rows)
        if fold:
            self.add("</details>", "")

    def settings(self, settings: Sequence[FieldChange]) -> None:
        lines = [line for f in settings for line in field_lines(f)]
        self.add(f"### Stack settings ({len(settings)} changed)", "")
        fold = len(lines) > FOLD_OBJECTS
        if fold and not self.details:
            return
        if fold:
            self.add(f"<details><summary>{len(settings)} settings</summary>", "")
        fence = _fence(lines)
        self.add(f"{fence}diff", *lines, fence, "")
        if fold:
            self.add("</details>", "")

    def diagnostics(self) -> None:
        self.add("### Diagnostics", "")
        for d in self.review.diagnostics:
            subject = f" `{d.subject}`" if d.subject else ""
            self.add(f"- **{d.severity}**{subject}: {_cell(d.message)}")
        self.add("")

    def concern(self, concern: str, changes: list[ObjectChange]) -> None:
        self.add(f"### {concern} ({_section_summary(changes)})", "")
        fold = _should_fold(changes)
        if fold:
            self.table(["kind", *ACTIONS], "lrrrr", [[k, *(c[a] or "" for a in ACTIONS)] for k, c in _kind_counts(changes)])
        if not self.details:
            return
        if fold:
            self.add(f"<details><summary>{len(changes)} objects</summary>", "")
        for change in changes:
            self.object(change)
        self.add("")
        if fold:
            self.add("</details>", "")

    def object(self, change: ObjectChange) -> None:
        tenant = f" · tenant `{change.tenant}`" if change.tenant else ""
        note = f" · {change.note}" if change.note else ""
        self.add(f"- **{change.action}** `{change.id}`{tenant}{note}")
        lines = object_field_lines(change)
        if lines:
            fence = _fence(lines)
            self.add(f"  {fence}diff", *(f"  {line}" for line in lines), f"  {fence}")


def _before_after(old: Any, new: Any, *, missing: Any = None, show: Any = compact, moved: Any = arrow) -> str:
    """A table cell for a value on both sides; ``missing`` marks the side where the row does not exist."""
    if old is missing and new is missing:
        return "-"
    if old is missing:
        return f"(new) {show(new)}"
    if new is missing:
        return f"{show(old)} (removed)"
    return str(moved(old, new))


CAPACITY_COLUMNS = ("flavor", "resource", "physical GPUs", "units", "committed (nominal)", "free")


def _capacity_rows(capacity: CapacityDelta) -> list[list[Any]]:
    """One row per flavor and resource: the GPUs it lives on, its units, the quota committed and what is free."""
    return [[r.flavor, r.resource, _maybe(*r.physical_gpus), _maybe(*r.units), _maybe(*r.committed), _maybe(*r.free)]
            for r in capacity.resources]


def _maybe(old: Any, new: Any) -> str:
    return _before_after(old, new)


def _limits(old: Any, new: Any) -> str:
    """Borrowing and lending limits: None is "unlimited", so a missing row is ABSENT."""
    return _before_after(old, new, missing=ABSENT, show=limit_text, moved=limit_arrow)


def _nothing(review: Review) -> bool:
    return not (review.changes or review.diagnostics or review.highlights or review.settings or review.violations)


def to_markdown(review: Review, limit: int = COMMENT_LIMIT) -> str:
    """The review as a pull request comment; per-object details go where it would be too long."""
    text = _Markdown(review, details=True).render()
    if len(text) <= limit:
        return text
    return _Markdown(review, details=False).render()


# --- plain text -----------------------------------------------------------------------------


def _plain(text: str) -> str:
    return text.replace("`", "").replace("**", "")


def _text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [list(header), *([_plain(str(v)) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def _text_charts(r: Review) -> list[str]:
    out: list[str] = []
    if r.chart_bumps():
        out += ["", "Chart versions", *(f"  {n}: {arrow(o, v)}" for n, o, v in r.chart_bumps())]
    if r.upgrades:
        out += ["", "Upgrades", *(f"  {_plain(line)}" for line in upgrade_lines(list(r.upgrades)) if line)]
    return out


def to_text(review: Review) -> str:
    """The review for a terminal: the same content as the Markdown, nothing folded."""
    r = review
    out = [f"Trainyard review: {r.title}", f"{_counts_line(r)}; base: {r.base}; head: {r.head}"]
    if r.plan is not None:
        out.append(f"Pulumi plan: {_plan_line(r.plan)}")
    out += [_plain(n) for n in r.notes]
    if _nothing(r):
        out.append("No changes.")
    if r.highlights:
        out += ["", "Highlights", *(f"  - {_plain(h)}" for h in r.highlights)]
    if r.capacity is not None and r.capacity.changed:
        out += ["", "Capacity", *_text_table(CAPACITY_COLUMNS, _capacity_rows(r.capacity))]
        quota_rows = [[q.tenant, q.flavor, q.resource,
                       _maybe(q.old.nominal if q.old else None, q.new.nominal if q.new else None),
                       _limits(q.old.borrowing_limit if q.old else ABSENT, q.new.borrowing_limit if q.new else ABSENT),
                       _limits(q.old.lending_limit if q.old else ABSENT, q.new.lending_limit if q.new else ABSENT)]
                      for q in r.capacity.quotas if q.changed]
        if quota_rows:
            out += ["", *_text_table(["tenant", "flavor", "resource", "nominal", "borrowing limit", "lending limit"],
                                     quota_rows)]
    if r.policy is not None and r.policy.changed:
        rows = [["new", p.severity, p.rule_id, p.object_id, p.message] for p in r.policy.new]
        rows += [["fixed", p.severity, p.rule_id, p.object_id, p.message] for p in r.policy.fixed]
        out += ["", "Policy results that changed", *_text_table(["", "severity", "rule", "object", "message"], rows)]
    if r.violations:
        rows = [[v.severity, v.rule_id, v.object_id or "(stack)", v.message] for v in r.violations]
        out += ["", "Policy violations", *_text_table(["enforcement", "policy", "resource", "message"], rows)]
    out += _text_charts(r)
    if r.settings:
        out += ["", f"Stack settings ({len(r.settings)} changed)", *(f"  {line}" for f in r.settings for line in field_lines(f))]
    if r.diagnostics:
        out += ["", "Diagnostics", *(f"  {d.severity}: {d.subject + ': ' if d.subject else ''}{d.message}"
                                     for d in r.diagnostics)]
    for concern, changes in r.by_concern():
        out += ["", f"{concern} ({_section_summary(changes)})"]
        for change in changes:
            tenant = f"  [tenant {change.tenant}]" if change.tenant else ""
            note = f"  ({change.note})" if change.note else ""
            out.append(f"  {change.action} {change.id}{tenant}{note}")
            out += [f"      {line}" for f in change.fields for line in field_lines(f)]
    return "\n".join(out) + "\n"
