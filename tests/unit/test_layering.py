"""The layering of ../shared/DESIGN.md, checked on the source: ``config/`` imports nothing from
``policy/``, ``manifests/`` or ``components/`` ("the arrows point one way: config -> manifests ->
components, and policy/review read manifests"), nor from ``review/`` or ``rehearsal/``, which sit
downstream of the manifests as well.

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING:``, relative, and
``importlib.import_module("...")`` with a literal name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainyard import policy_ids
from trainyard.policy.rules import RULES, RULES_BY_ID

PLATFORM = Path(__file__).resolve().parents[2] / "platform"
CONFIG = PLATFORM / "trainyard" / "config"

FORBIDDEN_FOR_CONFIG = (
    "trainyard.policy",
    "trainyard.manifests",
    "trainyard.components",
    "trainyard.review",
    "trainyard.rehearsal",
)

# (importing module, imported module) pairs that break the rule today and are tracked to be removed.
# Do not add to this set: move what config needs into config (or catalog) instead.
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()  # (module, import): none left; do not add to it


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. trainyard.config.security
    path: str  # relative to the project, e.g. platform/trainyard/config/security.py
    line: int
    target: str  # the imported module (or module.attribute for `from x import y`)
    statement: str

    def __str__(self) -> str:
        return f"{self.module} ({self.path}:{self.line}) imports {self.target}: {self.statement}"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every module (and ``module.name`` for from-imports) that the file at ``path`` imports, wherever it does."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    module = module_name(path, root)
    where = str(path.relative_to(root.parent))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def add(node: ast.stmt | ast.expr, targets: list[str]) -> None:
        statement = " ".join((ast.get_source_segment(source, node) or "").split())
        found.extend(Import(module, where, node.lineno, target, statement) for target in targets)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            add(node, [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            add(node, [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                add(node, [node.args[0].value])
    return found


def names_layer(target: str, layers: tuple[str, ...]) -> str | None:
    return next((layer for layer in layers if target == layer or target.startswith(layer + ".")), None)


def violations(package_dir: Path, root: Path, layers: tuple[str, ...]) -> list[Import]:
    """One entry per offending import statement (the first forbidden name it imports)."""
    result: dict[tuple[str, int], Import] = {}
    for path in sorted(package_dir.rglob("*.py")):
        for imp in imports_of(path, root):
            if names_layer(imp.target, layers):
                result.setdefault((imp.path, imp.line), imp)
    return list(result.values())


def _known(imp: Import) -> bool:
    return any(imp.module == module and (imp.target == target or imp.target.startswith(target + "."))
               for module, target in KNOWN_VIOLATIONS)


def test_config_imports_nothing_from_the_layers_downstream_of_it() -> None:
    assert any(CONFIG.glob("*.py")), CONFIG
    found = [imp for imp in violations(CONFIG, PLATFORM, FORBIDDEN_FOR_CONFIG) if not _known(imp)]
    report = "\n".join(f"  {imp}" for imp in found)
    print(report)
    assert not found, (
        "config/ may not import " + ", ".join(FORBIDDEN_FOR_CONFIG) + " (../shared/DESIGN.md):\n" + report
    )


def test_known_violations_still_exist() -> None:
    """A fixed exception leaves KNOWN_VIOLATIONS, so it cannot quietly come back."""
    found = {(imp.module, imp.target) for imp in violations(CONFIG, PLATFORM, FORBIDDEN_FOR_CONFIG) if _known(imp)}
    stale = {known for known in KNOWN_VIOLATIONS if not any(m == known[0] and t.startswith(known[1]) for m, t in found)}
    assert not stale, f"no longer imported, remove from KNOWN_VIOLATIONS: {sorted(stale)}"


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    package = tmp_path / "trainyard" / "config"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import trainyard.manifests.kueue\n"
        "from trainyard import components\n"
        "from ..review import diff\n"
        "if TYPE_CHECKING:\n"
        "    from trainyard.rehearsal.session import Session\n"
        "def f():\n"
        "    from trainyard.policy.rules import RULE_IDS\n"
        "    import importlib\n"
        "    return importlib.import_module('trainyard.policy.engine')\n",
        encoding="utf-8",
    )
    (package / "good.py").write_text(
        "from trainyard import catalog\n"
        "from trainyard.policy_ids import RULE_IDS\n"
        "from trainyard.config.model import Model\n"
        "from . import model\n"
        "import trainyard.manifests_notes\n",
        encoding="utf-8",
    )
    found = violations(package, tmp_path, FORBIDDEN_FOR_CONFIG)
    assert {imp.module for imp in found} == {"trainyard.config.bad"}
    assert sorted((imp.line, names_layer(imp.target, FORBIDDEN_FOR_CONFIG)) for imp in found) == [
        (2, "trainyard.manifests"),
        (3, "trainyard.components"),
        (4, "trainyard.review"),
        (6, "trainyard.rehearsal"),
        (8, "trainyard.policy"),
        (10, "trainyard.policy"),
    ]
    assert str(found[0]).endswith("imports trainyard.manifests.kueue: import trainyard.manifests.kueue")


def test_policy_ids_name_exactly_the_rules_of_the_catalogue() -> None:
    """config validates severity overrides against policy_ids.RULE_IDS; the rules are the truth."""
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert set(RULES_BY_ID) == policy_ids.RULE_IDS, (
        f"missing from policy_ids: {sorted(set(RULES_BY_ID) - policy_ids.RULE_IDS)}; "
        f"no such rule: {sorted(policy_ids.RULE_IDS - set(RULES_BY_ID))}"
    )


@pytest.mark.parametrize("forbidden", FORBIDDEN_FOR_CONFIG)
def test_the_forbidden_layers_exist(forbidden: str) -> None:
    """A renamed package would make its entry above check nothing."""
    path = PLATFORM / Path(*forbidden.split("."))
    assert path.is_dir() or path.with_suffix(".py").is_file(), forbidden
