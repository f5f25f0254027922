"""``trainyard preview-comment``: a Pulumi preview as the same review ``trainyard diff`` prints.

Two inputs are read, both as Pulumi writes them:

- the JSON of ``pulumi preview --diff --json``: a *preview digest* with ``steps`` (each with
  ``op``, ``urn``, ``oldState``/``newState`` and a ``detailedDiff`` of property paths),
  ``diagnostics`` and a ``changeSummary`` of counts per operation.
  Ref: pulumi/pulumi sdk/go/common/display/json.go (``PreviewDigest``, ``PreviewStep``) and
  pkg/backend/display/json.go (``ShowPreviewDigest``).
- an engine event log (``pulumi preview --event-log FILE``, one JSON event a line; the flag
  is listed only with ``PULUMI_DEBUG_COMMANDS=true``). The
  digest leaves policy events out; the log carries them as ``policyEvent`` (policy name,
  pack, enforcement level, resource URN, message), next to ``resourcePreEvent`` steps,
  ``diagnosticEvent`` and ``summaryEvent``.
  Ref: pulumi/pulumi sdk/go/common/apitype/events.go (``EngineEvent``).

Pass the digest as FILE and the log with ``--events``, or the log alone as FILE. Secret
values arrive as ``[secret]`` and leave as ``<redacted>``; credential-like keys are redacted
as in ``trainyard diff``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from trainyard.manifests.meta import TENANT_LABEL
from trainyard.review.changes import (
    ABSENT,
    INSTALLS,
    PULUMI_SECRET,
    Action,
    FieldChange,
    ObjectChange,
    concern_of,
    diff_manifests,
    diff_values,
    join_path,
    key_segment,
    labels_of,
)
from trainyard.review.diff import Diagnostic, Review, highlights_for
from trainyard.review.policy_delta import PolicyResult
from trainyard.review.render import REDACTED, is_secret_key

NOT_IN_PREVIEW: Final = "(not in the preview)"
_ACTIONS: Final[dict[str, Action]] = {
    "create": "added", "import": "added",
    "delete": "removed", "discard": "removed", "read-discard": "removed",
    "update": "changed",
    "replace": "replaced", "create-replacement": "replaced", "delete-replaced": "replaced",
    "import-replacement": "replaced", "read-replacement": "replaced", "discard-replaced": "replaced",
}
# Parts of the stack that are not resources on the cluster: the stack itself, Trainyard's components.
_SKIPPED_TYPES = ("pulumi:pulumi:Stack",)
_SKIPPED_PACKAGES = ("trainyard",)
_SHOWN_SEVERITIES = ("warning", "error")
# Pulumi's colour tags (<{%fg 1%}>, <{%reset%}>) and ANSI escapes in messages.
_COLOUR = re.compile(r"<\{%[^%]*%\}>|\x1b\[[0-9;]*m")
_PATH_TOKEN = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|\.?([^.\[\]]+)')


class PreviewFormatError(Exception):
    """A file that is neither a preview digest nor an engine event log."""


@dataclass
class _Step:
    urn: str
    ops: list[str] = field(default_factory=list)
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None
    detailed_diff: dict[str, str] | None = None
    diff_reasons: list[str] = field(default_factory=list)
    replace_reasons: list[str] = field(default_factory=list)


@dataclass
class Preview:
    """What a preview says, gathered from a digest and/or an event log."""

    steps: dict[str, _Step] = field(default_factory=dict)
    summary: dict[str, int] | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    violations: list[PolicyResult] = field(default_factory=list)
    stack: str = ""

    def step(self, urn: str) -> _Step:
        if not self.stack and urn.startswith("urn:pulumi:"):
            self.stack = urn.split("::", 1)[0].removeprefix("urn:pulumi:")
        return self.steps.setdefault(urn, _Step(urn))


def _clean(message: Any) -> str:
    return _COLOUR.sub("", str(message or "")).strip()


def _inputs(state: Any) -> dict[str, Any] | None:
    if not isinstance(state, Mapping):
        return None
    inputs = state.get("inputs")
    return dict(inputs) if isinstance(inputs, Mapping) else {}


def _add_step(preview: Preview, op: str, urn: str, old: Any, new: Any, detailed: Any, diffs: Any, keys: Any) -> None:
    step = preview.step(urn)
    step.ops.append(op)
    # A replacement comes as several steps of one URN; any of them may carry the states.
    step.old = step.old if step.old is not None else _inputs(old)
    step.new = step.new if step.new is not None else _inputs(new)
    if isinstance(detailed, Mapping) and detailed:
        kinds = {str(path): str(d.get("kind") or d.get("diffKind") or "update") if isinstance(d, Mapping) else "update"
                 for path, d in detailed.items()}
        step.detailed_diff = {**(step.detailed_diff or {}), **kinds}
    step.diff_reasons += [str(k) for k in diffs or () if str(k) not in step.diff_reasons]
    step.replace_reasons += [str(k) for k in keys or () if str(k) not in step.replace_reasons]


def read_digest(doc: Mapping[str, Any], preview: Preview) -> None:
    """A ``pulumi preview --json`` digest (``PreviewDigest``)."""
    for step in doc.get("steps") or ():
        if isinstance(step, Mapping) and step.get("urn"):
            _add_step(preview, str(step.get("op", "")), str(step["urn"]), step.get("oldState"), step.get("newState"),
                      step.get("detailedDiff"), step.get("diffReasons"), step.get("replaceReasons"))
    for diag in doc.get("diagnostics") or ():
        if isinstance(diag, Mapping):
            _add_diagnostic(preview, diag.get("severity"), diag.get("urn"),
                            f"{diag.get('prefix') or ''}{diag.get('message') or ''}")
    summary = doc.get("changeSummary")
    if isinstance(summary, Mapping):
        preview.summary = {str(op): int(n) for op, n in summary.items()}


def read_events(events: Iterable[Mapping[str, Any]], preview: Preview) -> None:
    """Engine events (``EngineEvent``), in sequence order."""
    for event in sorted(events, key=lambda e: int(e.get("sequence") or 0)):
        if isinstance(pre := event.get("resourcePreEvent"), Mapping):
            meta = pre.get("metadata") or {}
            if meta.get("urn"):
                _add_step(preview, str(meta.get("op", "")), str(meta["urn"]), meta.get("old"), meta.get("new"),
                          meta.get("detailedDiff"), meta.get("diffs"), meta.get("keys"))
        elif isinstance(diag := event.get("diagnosticEvent"), Mapping):
            if not diag.get("ephemeral"):
                _add_diagnostic(preview, diag.get("severity"), diag.get("urn"),
                                f"{diag.get('prefix') or ''}{diag.get('message') or ''}")
        elif isinstance(policy := event.get("policyEvent"), Mapping):
            urn = str(policy.get("resourceUrn") or "")
            pack = str(policy.get("policyPackName") or "")
            name = str(policy.get("policyName") or "")
            preview.violations.append(PolicyResult(
                rule_id=f"{pack}/{name}" if pack else name,
                severity=str(policy.get("enforcementLevel") or "advisory"),
                object_id=_resource_id(urn) if urn else "",
                message=_clean(policy.get("message")).splitlines()[0] if _clean(policy.get("message")) else "",
                hint=_clean(policy.get("message")),
            ))
        elif isinstance(summary := event.get("summaryEvent"), Mapping) and preview.summary is None:
            changes = summary.get("resourceChanges")
            if isinstance(changes, Mapping):
                preview.summary = {str(op): int(n) for op, n in changes.items()}


def _add_diagnostic(preview: Preview, severity: Any, urn: Any, message: str) -> None:
    severity = str(severity or "info")
    text = _clean(message).removeprefix(f"{severity}: ")
    if severity not in _SHOWN_SEVERITIES or not text:
        return
    subject = "" if not urn or _parse_urn(str(urn)).kind == "Stack" else _resource_id(str(urn))
    diagnostic = Diagnostic(severity, text, subject)
    if diagnostic not in preview.diagnostics:  # the digest and the event log both carry it
        preview.diagnostics.append(diagnostic)


def load_preview(path: Path, events: Path | None = None) -> Preview:
    """Read FILE (a digest or an event log) and, optionally, an event log beside it."""
    preview = Preview()
    for source in (path, events):
        if source is None:
            continue
        try:
            text = source.read_bytes().decode("utf-8")
        except OSError as exc:
            raise PreviewFormatError(f"{source}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise PreviewFormatError(f"{source}: not UTF-8 text (byte {exc.start})") from None
        docs = _documents(text, source)
        if len(docs) == 1 and ("steps" in docs[0] or "changeSummary" in docs[0] or "diagnostics" in docs[0]):
            _read_checked(read_digest, docs[0], preview, source)
        elif all("sequence" in d or "timestamp" in d for d in docs):
            _read_checked(read_events, docs, preview, source)
        else:
            raise PreviewFormatError(f"{source}: neither the JSON of `pulumi preview --json` (a digest with steps) "
                                     "nor an engine event log (`--event-log`, one event a line)")
    return preview


def _read_checked(reader: Any, docs: Any, preview: Preview, source: Path) -> None:
    """Run a reader over Pulumi's JSON; a value of the wrong type anywhere is bad input, named as such.

    The readers take Pulumi's documented shapes (``PreviewDigest``, ``EngineEvent``) at their word;
    a log edited by hand or cut short can hold a list where a count belongs, so the whole read
    is the boundary where that becomes an error rather than a traceback.
    """
    try:
        reader(docs, preview)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError, RecursionError) as exc:
        raise PreviewFormatError(f"{source}: (document): not the shape of a Pulumi preview or event log "
                                 f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _documents(text: str, source: Path) -> list[dict[str, Any]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    except (ValueError, RecursionError) as exc:  # valid JSON Python refuses: a 5,000-digit number, deep nesting
        raise PreviewFormatError(f"{source}: (document): {str(exc)[:200]}") from None
    if isinstance(doc, dict):
        return [doc]
    if isinstance(doc, list) and all(isinstance(d, dict) for d in doc):
        return list(doc)
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PreviewFormatError(f"{source}:{number}: not JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:
            raise PreviewFormatError(f"{source}:{number}: {str(exc)[:200]}") from None
        if not isinstance(item, dict):
            raise PreviewFormatError(f"{source}:{number}: expected a JSON object")
        out.append(item)
    if not out:
        raise PreviewFormatError(f"{source}: empty")
    return out


# --- URNs, property paths ------------------------------------------------------------------


@dataclass(frozen=True)
class _Resource:
    group: str
    kind: str
    namespace: str
    name: str
    in_chart: bool
    skipped: bool


def _parse_urn(urn: str) -> _Resource:
    """``urn:pulumi:STACK::PROJECT::PARENT$...$TYPE::NAME`` -> what the resource is."""
    parts = urn.split("::", 3)
    chain = parts[2].split("$") if len(parts) == 4 else [""]
    name = parts[3] if len(parts) == 4 else urn
    token = chain[-1]
    in_chart = any(t.startswith("kubernetes:helm.sh/") for t in chain[:-1])
    package, _, rest = token.partition(":")
    module, _, kind = rest.rpartition(":")
    skipped = token in _SKIPPED_TYPES or package in _SKIPPED_PACKAGES
    if token.startswith("pulumi:providers:"):
        return _Resource("pulumi", "Provider", "", f"{kind}/{name}", in_chart, skipped=False)
    if package != "kubernetes":
        return _Resource(package, kind or token, "", name, in_chart, skipped)
    group = module.split("/")[0] if "/" in module else "core"
    if in_chart and ":" in name:
        name = name.split(":", 1)[1]  # a chart's child is named "<release>:<namespace>/<name>"
    namespace, _, short = name.rpartition("/")
    return _Resource(group, kind, namespace, short, in_chart, skipped)


def _resource_id(urn: str) -> str:
    r = _parse_urn(urn)
    return f"{r.kind}/{r.namespace}/{r.name}" if r.namespace else f"{r.kind}/{r.name}"


def parse_property_path(path: str) -> list[str | int]:
    """Pulumi's property path syntax: ``spec.items[0]["a.b/c"].value``."""
    out: list[str | int] = []
    for quoted, index, bare in _PATH_TOKEN.findall(path):
        if index:
            out.append(int(index))
        elif bare:
            out.append(bare)
        else:
            out.append(json.loads(f'"{quoted}"'))
    return out


def _lookup(value: Any, segments: list[str | int]) -> Any:
    for segment in segments:
        in_list = isinstance(segment, int) and isinstance(value, list) and 0 <= segment < len(value)
        in_map = isinstance(segment, str) and isinstance(value, Mapping) and segment in value
        if not (in_list or in_map):
            return ABSENT
        value = value[segment]
    return value


def _display_path(segments: list[str | int], new: Any, old: Any) -> str:
    """Index segments become ``[name]`` where the item has a name, as ``trainyard diff`` writes them."""
    path = ""
    for position, segment in enumerate(segments):
        if isinstance(segment, int):
            item = _lookup(new, segments[: position + 1])
            if item is ABSENT:
                item = _lookup(old, segments[: position + 1])
            name = item.get("name") if isinstance(item, Mapping) else None
            path += f"[{name}]" if isinstance(name, str) else f"[{segment}]"
        else:
            path = join_path(path, key_segment(segment))
    return path


def _field_changes(step: _Step, kind: str) -> list[FieldChange]:
    old, new = step.old, step.new
    if step.detailed_diff:
        out: list[FieldChange] = []
        for raw_path, diff_kind in sorted(step.detailed_diff.items()):
            segments = parse_property_path(raw_path)
            before = _lookup(old, segments) if old is not None else NOT_IN_PREVIEW
            after = _lookup(new, segments) if new is not None else NOT_IN_PREVIEW
            if diff_kind.startswith("add"):
                before = ABSENT
            elif diff_kind.startswith("delete"):
                after = ABSENT
            keys = [s for s in segments if isinstance(s, str)]
            secret = bool(keys) and (is_secret_key(keys[-1]) or (kind == "Secret" and keys[0] in ("data", "stringData")))
            path = _display_path(segments, new, old)
            changes = diff_values(before, after, path, secret=secret)
            out += changes or [FieldChange(path, _shown(before), _shown(after))]
        return out
    if old is not None and new is not None:
        reasons = set(step.diff_reasons)
        changes = diff_manifests({"kind": kind, **old}, {"kind": kind, **new})
        return [c for c in changes if not reasons or c.path.split(".")[0].split("[")[0] in reasons]
    return []


def _shown(value: Any) -> Any:
    return REDACTED if value == PULUMI_SECRET else value


def _object_change(step: _Step) -> ObjectChange | None:
    ops = [op for op in step.ops if op in _ACTIONS]
    if not ops:
        return None
    action: Action = "replaced" if any(_ACTIONS[op] == "replaced" for op in ops) else _ACTIONS[ops[0]]
    resource = _parse_urn(step.urn)
    if resource.skipped:
        return None
    labels = labels_of(step.new) or labels_of(step.old)
    meta = (step.new or step.old or {}).get("metadata") or {}
    name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
    concern = INSTALLS if resource.in_chart or resource.kind == "Provider" else concern_of(resource.group, resource.kind,
                                                                                            labels, name)
    fields = tuple(_field_changes(step, resource.kind)) if action in ("changed", "replaced") else ()
    note = ""
    if action == "replaced" and step.replace_reasons:
        note = "replaced because of " + ", ".join(f"`{k}`" for k in sorted(step.replace_reasons))
    elif "import" in ops:
        note = "imported"
    tenant = labels.get(TENANT_LABEL)
    return ObjectChange(action, resource.group, resource.kind, resource.namespace, resource.name, concern,
                        str(tenant) if tenant is not None else None, fields, note)


def preview_review(preview: Preview) -> Review:
    changes = sorted((c for step in preview.steps.values() if (c := _object_change(step)) is not None),
                     key=ObjectChange.sort_key)
    unchanged = (preview.summary or {}).get("same", 0)
    highlights = highlights_for(changes, None, None)
    if preview.violations:
        mandatory = sum(1 for v in preview.violations if v.severity == "mandatory")
        highlights.append(f"policy pack: {len(preview.violations)} violation"
                          f"{'s' if len(preview.violations) != 1 else ''} ({mandatory} mandatory)")
    stack = preview.stack or "stack"
    return Review(
        title=f"{stack} (pulumi preview)", base="deployed state", head="this change", changes=tuple(changes),
        unchanged=unchanged, highlights=tuple(highlights), plan=preview.summary,
        violations=tuple(sorted(preview.violations, key=lambda v: (v.severity != "mandatory", v))),
        diagnostics=tuple(sorted(preview.diagnostics, key=lambda d: (d.severity != "error", d.subject, d.message))),
        marker=f"trainyard-preview:{stack}",
    )
