"""What ``trainyard check`` reports, in the forms a person or a CI system reads.

One ``CheckReport`` (the findings, every rule with the stack's level, where each extra manifest came
from) is written as blocks for a terminal, as JSON (``trainyard.check/v1``, docs/policy.md), as SARIF
2.1.0 for code-scanning views, or as JUnit XML for test-report views. The forms carry the same
findings; none of them changes the exit code, which stays the gate (1 on a mandatory finding).
"""

from __future__ import annotations

import hashlib
import shutil
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainyard import __version__
from trainyard.policy.model import STACK_OBJECT, Finding, Rule

if TYPE_CHECKING:
    from trainyard.manifests.trainjob_defaults import AddedLabel

CHECK_SCHEMA = "trainyard.check/v1"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
# SARIF levels: a mandatory finding fails the gate (error), an advisory one does not (warning).
SARIF_LEVEL = {"mandatory": "error", "advisory": "warning", "disabled": "none"}


@dataclass(frozen=True)
class Source:
    """Where an extra manifest came from: its file (as given) and the line its document starts on."""

    file: str
    line: int


@dataclass(frozen=True)
class CheckReport:
    stack: str
    stack_file: Path
    root: Path
    findings: tuple[Finding, ...]
    rules: tuple[tuple[Rule, str], ...]  # every rule with the stack's level (mandatory, advisory, disabled)
    rendered_objects: int
    extra_objects: int
    sources: dict[str, Source] = field(default_factory=dict)  # object id -> where the extra manifest came from
    exceptions: tuple[str, ...] = ()
    # object id -> the labels the cluster adds to that extra manifest on create, which the rules saw it with
    assumed: dict[str, tuple[AddedLabel, ...]] = field(default_factory=dict)

    @property
    def mandatory(self) -> int:
        return sum(f.severity == "mandatory" for f in self.findings)

    @property
    def advisory(self) -> int:
        return len(self.findings) - self.mandatory

    @property
    def disabled(self) -> list[str]:
        return [rule.id for rule, level in self.rules if level == "disabled"]

    @property
    def exit_code(self) -> int:
        return 1 if self.mandatory else 0

    def source_of(self, finding: Finding) -> Source | None:
        return self.sources.get(finding.object_id)

    def summary_line(self) -> str:
        disabled = self.disabled
        return (f"{self.stack}: {self.mandatory} mandatory, {self.advisory} advisory findings "
                f"({len(self.rules)} rules over {self.rendered_objects} rendered + {self.extra_objects} extra objects"
                + (f"; disabled by the stack: {', '.join(disabled)}" if disabled else "") + ")")


# --- terminal ---------------------------------------------------------------------------------


def terminal_width() -> int:
    """The terminal's columns, held between 60 and 120 (a pipe reads as 100)."""
    return max(60, min(120, shutil.get_terminal_size((100, 24)).columns))


def format_blocks(findings: Sequence[Finding], sources: dict[str, Source] | None = None, width: int | None = None) -> str:
    """One block per finding: severity, rule and object on the first line, then the message and the hint wrapped
    to ``width``, nothing cut."""
    width = width or terminal_width()
    blocks = []
    for f in findings:
        source = (sources or {}).get(f.object_id)
        lines = [f"{f.severity.upper()}  {f.rule_id}  {f.object_id}"] + ([f"  at {source.file}:{source.line}"] if source else [])
        lines += textwrap.wrap(f.message, width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False,
                               break_long_words=False) or ["  "]
        lines += textwrap.wrap(f.hint, width, initial_indent="  hint: ", subsequent_indent="        ",
                               break_on_hyphens=False, break_long_words=False)
        blocks.append("\n".join(lines))
    return "".join(block + "\n\n" for block in blocks)


def format_assumed(assumed: dict[str, tuple[AddedLabel, ...]], sources: dict[str, Source] | None = None) -> str:
    """One block per extra manifest the cluster labels on create: what the rules assumed, and who adds it."""
    blocks = []
    for object_id, labels in assumed.items():
        source = (sources or {}).get(object_id)
        lines = [f"ASSUMED  {object_id}  (as the cluster labels it on create)"]
        lines += [f"  at {source.file}:{source.line}"] if source else []
        lines += [f"  {label.describe()}" for label in labels]
        blocks.append("\n".join(lines))
    return "".join(block + "\n\n" for block in blocks)


def to_text(report: CheckReport, width: int | None = None) -> str:
    lines = [format_assumed(report.assumed, report.sources) + format_blocks(report.findings, report.sources, width)
             + report.summary_line()]
    lines += [f"reviewed exception: {text}" for text in report.exceptions]
    return "\n".join(lines) + "\n"


# --- JSON -------------------------------------------------------------------------------------


def _location(report: CheckReport, finding: Finding) -> dict[str, Any] | None:
    source = report.source_of(finding)
    return {"file": source.file, "line": source.line} if source else None


def to_json(report: CheckReport) -> dict[str, Any]:
    """The ``trainyard.check/v1`` document (docs/policy.md, "Machine-readable output")."""
    return {
        "schema": CHECK_SCHEMA,
        "stack": report.stack,
        "stack_file": _uri(report, str(report.stack_file)),
        "ok": report.exit_code == 0,
        "exit_code": report.exit_code,
        "summary": {"mandatory": report.mandatory, "advisory": report.advisory, "rules": len(report.rules),
                    "rendered_objects": report.rendered_objects, "extra_objects": report.extra_objects,
                    "disabled_rules": report.disabled},
        "findings": [{"rule_id": f.rule_id, "severity": f.severity, "object": f.object_id, "message": f.message,
                      "hint": f.hint, "location": _location(report, f)} for f in report.findings],
        "reviewed_exceptions": list(report.exceptions),
        "assumed": [{"object": object_id, "label": label.key, "value": label.value, "added_by": label.added_by,
                     "reason": label.why, "location": _source_location(report.sources.get(object_id))}
                    for object_id, labels in report.assumed.items() for label in labels],
    }


def _source_location(source: Source | None) -> dict[str, Any] | None:
    return {"file": source.file, "line": source.line} if source else None


# --- SARIF 2.1.0 ------------------------------------------------------------------------------


def _uri(report: CheckReport, file: str) -> str:
    """A path relative to the project root where it lies under it (what code-scanning views resolve), else absolute."""
    path = Path(file).resolve()
    try:
        return path.relative_to(report.root.resolve()).as_posix()
    except ValueError:
        return path.as_uri()


def _logical(object_id: str) -> dict[str, Any]:
    if object_id == STACK_OBJECT:
        return {"fullyQualifiedName": STACK_OBJECT, "name": STACK_OBJECT, "kind": "module"}
    kind, _, rest = object_id.partition("/")
    return {"fullyQualifiedName": object_id, "name": rest.rsplit("/", 1)[-1], "kind": "object",
            "properties": {"kubernetesKind": kind}}


def to_sarif(report: CheckReport) -> dict[str, Any]:
    """One run of the tool ``trainyard``: every rule (id, description, hint as help, the stack's level) and one
    result per finding, located logically by the object and physically by its file and line where the object
    came from a file given on the command line (else the stack file, which declares it)."""
    index = {rule.id: n for n, (rule, _) in enumerate(report.rules)}
    rules = [{
        "id": rule.id,
        "name": "".join(part.capitalize() for part in rule.id.split("-")),
        "shortDescription": {"text": rule.description.split(". ")[0].rstrip(".") + "."},
        "fullDescription": {"text": rule.description},
        "help": {"text": rule.hint, "markdown": f"**Fix:** {rule.hint}\n\nSee docs/policy.md, rule `{rule.id}`."},
        "defaultConfiguration": {"level": SARIF_LEVEL[level], "enabled": level != "disabled"},
        "properties": {"severity": rule.severity, "stackLevel": level, "scope": "object" if rule.check_object else "stack",
                       **({"admission": rule.admission} if rule.admission else {})},
    } for rule, level in report.rules]
    results = []
    for f in report.findings:
        source = report.source_of(f)
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(report, source.file if source else
                                                                      str(report.stack_file))}}
        if source:
            physical["region"] = {"startLine": source.line}
        fingerprint = hashlib.sha256(f"{f.rule_id}\0{f.object_id}\0{f.message}".encode()).hexdigest()
        results.append({
            "ruleId": f.rule_id,
            "ruleIndex": index[f.rule_id],
            "level": SARIF_LEVEL[f.severity],
            "message": {"text": f"{f.object_id}: {f.message}"},
            "locations": [{"physicalLocation": physical, "logicalLocations": [_logical(f.object_id)]}],
            "partialFingerprints": {"trainyardFinding/v1": fingerprint},
        })
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "trainyard", "version": __version__, "semanticVersion": __version__,
                                "rules": rules}},
            "automationDetails": {"id": f"trainyard-check/{report.stack}/"},
            "invocations": [{"executionSuccessful": True, "exitCode": report.exit_code}],
            "results": results,
            "properties": {"stack": report.stack, "summary": report.summary_line(),
                           "assumed": [f"{object_id}: {label.describe()}" for object_id, labels in report.assumed.items()
                                       for label in labels]},
        }],
    }


# --- JUnit XML --------------------------------------------------------------------------------


def to_junit(report: CheckReport) -> str:
    """One testsuite for the stack, one testcase per rule: a ``<failure>`` per mandatory finding, advisory findings
    in ``<system-out>`` (they do not fail the gate), a disabled rule ``<skipped>``."""
    failures = report.mandatory
    suites = ET.Element("testsuites", name="trainyard check", tests=str(len(report.rules)), failures=str(failures),
                        errors="0")
    failed_rules = {f.rule_id for f in report.findings if f.severity == "mandatory"}
    suite = ET.SubElement(suites, "testsuite", name=f"trainyard check {report.stack}", tests=str(len(report.rules)),
                          failures=str(len(failed_rules)), errors="0", skipped=str(len(report.disabled)))
    for rule, level in report.rules:
        case = ET.SubElement(suite, "testcase", classname=f"trainyard.policy.{report.stack}", name=rule.id)
        if level == "disabled":
            ET.SubElement(case, "skipped", message="disabled by the stack (security.policy.severity)")
            continue
        mine = [f for f in report.findings if f.rule_id == rule.id]
        for f in (f for f in mine if f.severity == "mandatory"):
            source = report.source_of(f)
            failure = ET.SubElement(case, "failure", type=f.severity, message=f"{f.object_id}: {f.message}")
            failure.text = "\n".join([f"object: {f.object_id}", *([f"file: {source.file}:{source.line}"] if source else []),
                                      f"message: {f.message}", f"hint: {f.hint}"])
        advisory = [f for f in mine if f.severity == "advisory"]
        if advisory:
            ET.SubElement(case, "system-out").text = "\n".join(f"advisory: {f.object_id}: {f.message} (hint: {f.hint})"
                                                                for f in advisory)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
