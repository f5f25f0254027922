"""The controllers' build graph (tools/controllers, docs/tools.md "The controllers' build graph"): the wrapper module
``tools/build.sh`` builds Kueue, JobSet, Trainer, kwok, CloudNativePG, the barman-cloud plugin and prometheus-operator
in must hold exactly the pins the script keeps, or a changed pin would build the old version (``graph_check`` stops
such a build too; this says it in review, before anything is built)."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

GRAPH = ROOT / "tools" / "controllers"


def _graph() -> list[tuple[str, str, str, str]]:
    listed = subprocess.run([str(ROOT / "tools" / "build.sh"), "--graph"], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    rows = [tuple(line.split()) for line in listed.splitlines() if line.strip()]
    assert rows and all(len(row) == 4 for row in rows), listed
    return rows  # type: ignore[return-value]


def _block(gomod: str, directive: str) -> list[str]:
    lines: list[str] = []
    for block in re.findall(rf"^{directive} \(\n(.*?)^\)", gomod, re.M | re.S):
        lines += [line.split("//")[0].strip() for line in block.splitlines() if line.split("//")[0].strip()]
    lines += [m.strip() for m in re.findall(rf"^{directive} ([^(\n][^\n]*)$", gomod, re.M)]
    return lines


def test_the_graph_builds_every_package_build_sh_names_and_nothing_else() -> None:
    tools = set(_block((GRAPH / "go.mod").read_text(), "tool"))
    assert tools == {package for _, _, package, _ in _graph()}


def test_the_graph_requires_each_controller_at_the_version_build_sh_pins() -> None:
    gomod = (GRAPH / "go.mod").read_text()
    required = dict(line.split()[:2] for line in _block(gomod, "require"))
    gosum = (GRAPH / "go.sum").read_text().splitlines()
    for tool, _, _, pinned in _graph():
        module, version = pinned.split("@")
        assert required.get(module) == version, \
            f"{tool}: go.mod requires {module} {required.get(module)}, build.sh pins {version}"
        assert any(line.startswith(f"{module} {version} h1:") for line in gosum), f"{tool}: go.sum has no {module} {version}"


def test_the_graph_replaces_nothing() -> None:
    """Upstream replace directives hold only inside their own modules; one here would swap a library under every
    controller at once (gen-gomod.sh requires prometheus-operator's nested modules at its tag instead)."""
    assert not re.search(r"^replace\b", (GRAPH / "go.mod").read_text(), re.M)
