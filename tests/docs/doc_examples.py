"""The examples in README.md and docs/**/*.md, found by the convention of docs/doc-examples.md.

A ```bash block's ``trainyard ...`` lines are commands (run, exit 0 unless the block is marked
``<!-- doc-test: exit N ... -->``); a ```yaml block that is a Kubernetes object is a manifest, checked with
``trainyard check STACK FILE`` for the stack its ``<!-- doc-test: check STACK [exit N] -->`` marker names.
``<!-- doc-test: skip ... -->`` before either leaves it out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<text>.*?)\s*-->\s*$")
COMMAND = re.compile(r"^(?:\.venv/bin/)?trainyard\s")


@dataclass(frozen=True)
class Example:
    doc: Path
    line: int  # the fence's line in the doc
    kind: str  # "command" or "manifest"
    text: str  # the command line, or the manifest's YAML
    stack: str | None  # the stack a manifest is checked against
    exit_code: int

    @property
    def where(self) -> str:
        return f"{self.doc.as_posix()}:{self.line}"


class MarkerError(ValueError):
    """A marker that does not follow the convention, or a manifest without one."""


def _marker(text: str, start: int) -> str | None:
    """The doc-test marker on the last non-blank line before ``start``, if any."""
    before = [line for line in text[:start].splitlines() if line.strip()]
    match = MARKER.search(before[-1]) if before else None
    return match["text"] if match else None


def _exit_of(marker: str) -> int:
    match = re.search(r"\bexit\s+(\d+)", marker)
    return int(match[1]) if match else 0


def _is_object(body: str) -> bool:
    try:
        doc = yaml.safe_load(body)
    except yaml.YAMLError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str) and \
        isinstance(doc.get("metadata"), dict)


def examples_of(doc: Path, root: Path) -> list[Example]:
    text = doc.read_text(encoding="utf-8")
    out: list[Example] = []
    for fence in FENCE.finditer(text):
        lang, body = fence["lang"], fence["body"]
        line = text.count("\n", 0, fence.start()) + 1
        marker = _marker(text, fence.start())
        if marker is not None and marker.startswith("skip"):
            continue
        relative = doc.relative_to(root)
        if lang == "bash":
            if marker is not None and not marker.startswith("exit"):
                raise MarkerError(f"{relative}:{line}: a bash block takes `skip ...` or `exit N ...`, not {marker!r}")
            joined = re.sub(r"\\\n\s*", " ", body)
            for command in (raw.strip() for raw in joined.splitlines()):
                if COMMAND.match(command):
                    out.append(Example(relative, line, "command", command, None, _exit_of(marker or "")))
        elif lang == "yaml" and _is_object(body):
            match = re.match(r"check\s+(?P<stack>[\w./-]+)", marker or "")
            if match is None:
                raise MarkerError(f"{relative}:{line}: a Kubernetes manifest needs `<!-- doc-test: check STACK -->` "
                                  "(or `skip REASON`) on the line before its block")
            out.append(Example(relative, line, "manifest", body, match["stack"], _exit_of(marker or "")))
    return out


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
