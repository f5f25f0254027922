"""Helm post-renderer: drop every CustomResourceDefinition from a chart's output.

Trainyard declares each controller's CRDs itself (verified against the upstream blob SHA,
applied first, retained and protected; ``manifests/crds.py``). ``skipCrds`` only skips a
chart's ``crds/`` directory, and some charts render their CRDs as ordinary templates with no
switch (Kueue 0.19.2: ``templates/crd/*.yaml``), so the same CRD would be applied twice,
by two field managers. Every chart is therefore installed through this filter, which
leaves the CRDs to Trainyard. ``tests/charts`` renders every chart through it and checks
that each CRD it drops is one Trainyard declares, with the same spec.

Helm's post-renderer contract: the rendered manifests arrive on stdin, the ones to
install leave on stdout. The kept documents are passed through byte for byte.
Ref: https://helm.sh/docs/topics/advanced/#post-rendering;
pulumi-kubernetes provider/pkg/provider/helm/v4/chart.go (``postRenderer`` -> ``postrender.NewExec``).

Run as ``python -m trainyard.post_render``; it imports nothing but PyYAML, so it starts fast.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from trainyard import yamlio

DROPPED_KINDS = frozenset({"CustomResourceDefinition"})

# A YAML document separator line ("---", optionally followed by a comment or spaces).
_SEPARATOR = re.compile(r"^---(?:[ \t].*)?$", re.MULTILINE)


def split_documents(text: str) -> list[str]:
    """The YAML documents of a multi-document stream, as text, without their separators."""
    return [part for part in _SEPARATOR.split(text) if part.strip()]


def _kind(document: str) -> Any:
    parsed = yamlio.safe_load(document)
    return parsed.get("kind") if isinstance(parsed, dict) else None


def keep(document: str) -> bool:
    return _kind(document) not in DROPPED_KINDS


def filter_manifests(text: str) -> str:
    """The stream without the documents Trainyard owns elsewhere; kept documents are unchanged."""
    return "".join(_with_separator(doc) for doc in split_documents(text) if keep(doc))


def _with_separator(document: str) -> str:
    return f"---{document}" if document.startswith("\n") else f"---\n{document}"


def command() -> tuple[str, list[str]]:
    """The post-renderer as helm runs it: this interpreter (it has Trainyard and PyYAML) and this module."""
    return sys.executable, ["-m", "trainyard.post_render"]


def main() -> int:
    sys.stdout.write(filter_manifests(sys.stdin.read()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
