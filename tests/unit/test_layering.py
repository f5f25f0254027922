"""The layering of the package, checked on the source: data flows one way, and no module imports back.

``stack file -> config -> manifests -> components -> policy / review / rehearsal``: each module sits in
one layer of ``LAYERS`` (lowest first; docs/architecture.md, "Layers") and imports only modules of
its own layer or of a lower one, and no trainyard modules import each other in a circle, whatever
the layers. ``config/`` in particular imports nothing from ``policy/``, ``manifests/``,
``components/``, ``review/`` or ``rehearsal/`` (../shared/DESIGN.md).

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING:``, relative, and
``importlib.import_module("...")`` with a literal name. An import names the module it loads:
``from trainyard.manifests import kueue`` imports ``trainyard.manifests.kueue``, ``from
trainyard.manifests import render_platform`` the package ``trainyard.manifests`` (a package's own
``__init__`` runs before any of its modules, which is not counted as an import of it).

Run as a script, it prints the graph's figures (circles and upward imports, with names) for a
``platform`` directory: ``python tests/unit/test_layering.py [PLATFORM_DIR]``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PLATFORM = Path(__file__).resolve().parents[2] / "platform"
CONFIG = PLATFORM / "trainyard" / "config"

# The layers, lowest first. A module is in the layer of the longest prefix that names it (a prefix names
# a module and everything under it). A module may import its own layer and the layers before it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Leaf knowledge every layer reads: the bill of materials, quantities, YAML, rule ids, the image
    # references and lock the builders pin images with, the disk cache of derived CRD forms, the Helm
    # post-renderer (a program helm runs) and the programs shipped into Jobs (they import nothing).
    ("base", ("trainyard", "trainyard.catalog", "trainyard.quantity", "trainyard.yamlio", "trainyard.policy_ids",
              "trainyard.derived_cache", "trainyard.post_render", "trainyard.provisioning",
              "trainyard.supply.reference", "trainyard.supply.lock")),
    ("config", ("trainyard.config",)),
    ("manifests", ("trainyard.manifests",)),
    # A stack in its project (loaded, rendered), and the rendered stack checked against upstream: strict
    # schemas (schemas) and the real charts rendered with helm (charts).
    ("stack", ("trainyard.project", "trainyard.schemas", "trainyard.chart_mirror", "trainyard.charts",
               "trainyard.chart_probes")),
    ("components", ("trainyard.components",)),
    # Rules over manifests; the images a chart release composes are read the same way.
    ("policy", ("trainyard.policy", "trainyard.supply.chart_images")),
    ("review", ("trainyard.review",)),
    # Workflows over a rendered stack: the bill of materials and image lock, promotion, the rehearsal.
    # Deploying to a site's own backend and cluster (deploy).
    ("workflows", ("trainyard.supply", "trainyard.serving", "trainyard.rehearsal", "trainyard.deploy")),
    # The command line: `trainyard` and the extension modules that register its subcommands.
    ("cli", ("trainyard.cli", "trainyard.policy.cli", "trainyard.review.cli", "trainyard.review.charts_cli",
             "trainyard.supply.cli", "trainyard.serving.cli", "trainyard.rehearsal.cli",
             "trainyard.deploy.cli")),
)

FORBIDDEN_FOR_CONFIG = (
    "trainyard.policy",
    "trainyard.manifests",
    "trainyard.components",
    "trainyard.review",
    "trainyard.rehearsal",
)


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
    """Every module (``module.name`` for from-imports) that the file at ``path`` imports, wherever it does."""
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
            add(node, [base if alias.name == "*" else f"{base}.{alias.name}" for alias in node.names])
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


# --- the whole graph -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Graph:
    modules: frozenset[str]
    edges: Mapping[str, tuple[tuple[str, Import], ...]]  # importing module -> (imported module, the import)

    def targets(self, module: str) -> set[str]:
        return {target for target, _ in self.edges.get(module, ())}


def resolve(target: str, modules: Iterable[str]) -> str | None:
    """The module an import target loads: the longest module name that is ``target`` or a prefix of it."""
    known = set(modules)
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def import_graph(root: Path = PLATFORM, package: str = "trainyard") -> Graph:
    files = {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    edges: dict[str, list[tuple[str, Import]]] = {}
    for module, path in files.items():
        for imp in imports_of(path, root):
            if imp.target != package and not imp.target.startswith(package + "."):
                continue
            target = resolve(imp.target, files)
            if target is not None and target != module:
                edges.setdefault(module, []).append((target, imp))
    return Graph(frozenset(files), {m: tuple(e) for m, e in edges.items()})


def cycles(graph: Graph) -> list[list[str]]:
    """The import circles: every strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: a deep import chain must not hit the recursion limit
        work = [(start, iter(sorted(graph.targets(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.targets(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(found)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> tuple[int, str] | None:
    """(position, name) of the module's layer: the one with the longest prefix naming it."""
    best: tuple[int, int, str] | None = None
    for position, (name, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), position, name)
    return None if best is None else (best[1], best[2])


def upward_imports(graph: Graph, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[Import]:
    """Every import statement that reaches from a module into a higher layer (one per statement and target)."""
    found: dict[tuple[str, int, str], Import] = {}
    for module, edges in sorted(graph.edges.items()):
        own = layer_of(module, layers)
        for target, imp in edges:
            theirs = layer_of(target, layers)
            if own is not None and theirs is not None and theirs[0] > own[0]:
                found.setdefault((imp.path, imp.line, target), imp)
    return sorted(found.values(), key=lambda imp: (imp.path, imp.line, imp.target))


def report(root: Path = PLATFORM) -> str:
    graph = import_graph(root)
    circles = cycles(graph)
    upward = upward_imports(graph)
    lines = [f"{len(graph.modules)} modules, {sum(len(e) for e in graph.edges.values())} imports of trainyard modules",
             f"{len(circles)} import circles ({sum(map(len, circles))} modules in them)"]
    lines += [f"  {len(circle)}: {', '.join(circle)}" for circle in circles]
    lines.append(f"{len(upward)} imports into a higher layer")
    for imp in upward:
        own, theirs = layer_of(imp.module), layer_of(resolve(imp.target, graph.modules) or "")
        lines.append(f"  [{own[1] if own else '?'} -> {theirs[1] if theirs else '?'}] {imp}")
    unplaced = sorted(m for m in graph.modules if layer_of(m) is None)
    if unplaced:
        lines.append(f"not in any layer: {', '.join(unplaced)}")
    return "\n".join(lines)


# --- the tests ----------------------------------------------------------------------------------------


def test_no_trainyard_modules_import_each_other_in_a_circle() -> None:
    circles = cycles(import_graph())
    assert not circles, "import circles (split out what both sides need, lower down):\n" + "\n".join(
        f"  {', '.join(circle)}" for circle in circles)


def test_no_module_imports_a_higher_layer() -> None:
    found = upward_imports(import_graph())
    assert not found, "imports into a higher layer (LAYERS; docs/architecture.md, \"Layers\"):\n" + "\n".join(
        f"  {imp}" for imp in found)


def test_every_module_sits_in_a_layer() -> None:
    graph = import_graph()
    assert all(layer_of(module) is not None for module in graph.modules)
    # Only the root prefix places a module by default: every top-level module and package is listed by name.
    tops = {".".join(module.split(".")[:2]) for module in graph.modules if module.count(".") >= 1}
    listed = {prefix for _, prefixes in LAYERS for prefix in prefixes}
    assert sorted(tops - listed) == [], "place these in LAYERS (and docs/architecture.md)"


@pytest.mark.parametrize("prefix", sorted({prefix for _, prefixes in LAYERS for prefix in prefixes}))
def test_every_layer_prefix_names_a_module(prefix: str) -> None:
    """A renamed module would make its entry in LAYERS place nothing."""
    path = PLATFORM / Path(*prefix.split("."))
    assert path.is_dir() or path.with_suffix(".py").is_file(), prefix


def test_config_imports_nothing_from_the_layers_downstream_of_it() -> None:
    assert any(CONFIG.glob("*.py")), CONFIG
    found = violations(CONFIG, PLATFORM, FORBIDDEN_FOR_CONFIG)
    report_lines = "\n".join(f"  {imp}" for imp in found)
    assert not found, (
        "config/ may not import " + ", ".join(FORBIDDEN_FOR_CONFIG) + " (../shared/DESIGN.md):\n" + report_lines
    )


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


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_circle_through_a_function_or_type_checking_import_is_found(tmp_path: Path) -> None:
    _write(tmp_path, {
        "trainyard/__init__.py": "",
        "trainyard/a.py": "from trainyard.b import thing\n",
        "trainyard/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainyard.c import C\n",
        "trainyard/c.py": "def f():\n    from trainyard import a\n",
        "trainyard/pkg/__init__.py": "from trainyard.pkg.leaf import x\n",
        "trainyard/pkg/leaf.py": "from trainyard.pkg import other\n",  # a sibling module, not the package
        "trainyard/pkg/other.py": "",
    })
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["trainyard.a", "trainyard.b", "trainyard.c"]]
    assert graph.targets("trainyard.pkg.leaf") == {"trainyard.pkg.other"}


def test_an_import_into_a_higher_layer_is_found(tmp_path: Path) -> None:
    _write(tmp_path, {
        "trainyard/__init__.py": "",
        "trainyard/config/__init__.py": "",
        "trainyard/config/model.py": "def f():\n    from trainyard.manifests.meta import Manifest\n",
        "trainyard/manifests/__init__.py": "",
        "trainyard/manifests/meta.py": "from trainyard.config import model\n",
    })
    found = upward_imports(import_graph(tmp_path))
    assert [(imp.module, imp.line, imp.target) for imp in found] == [
        ("trainyard.config.model", 2, "trainyard.manifests.meta.Manifest")]


def test_docs_list_the_layers_in_this_order() -> None:
    """docs/architecture.md, "Layers", is the table of LAYERS: the same layers, lowest first."""
    text = (PLATFORM.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    assert rows[1:] == [name for name, _ in LAYERS]  # the first row is the table's header


def test_the_most_specific_prefix_places_a_module() -> None:
    assert layer_of("trainyard.supply.lock") == layer_of("trainyard.catalog")
    assert layer_of("trainyard.supply.bom") == layer_of("trainyard.rehearsal.session")
    assert layer_of("trainyard.review.cli") == layer_of("trainyard.cli")
    order = [name for name, _ in LAYERS]
    assert order.index("config") < order.index("manifests") < order.index("components") < order.index("policy")


def test_policy_ids_name_exactly_the_rules_of_the_catalogue() -> None:
    """config validates severity overrides against policy_ids.RULE_IDS; the rules are the truth."""
    from trainyard import policy_ids
    from trainyard.policy.rules import RULES, RULES_BY_ID

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


if __name__ == "__main__":
    print(report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else PLATFORM))
