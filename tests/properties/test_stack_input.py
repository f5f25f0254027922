"""Property: no stack file makes ``trainyard validate``, ``render`` or ``check`` raise.

Every example starts from one of the real stacks and mutates it, at a path taken from the
document itself or from the config model's JSON schema (so a section added to the model is
mutated without touching this file): a value of the wrong type, size or range, a missing
key, a duplicated list entry, an unknown key; or the YAML text itself (tabs, invalid UTF-8,
truncation, several documents, anchors and aliases, deep nesting, non-mapping documents).
The outcome is exit 0 (or 1 for findings of ``check``), or exit 2 with an error that names
the file and the field, never a traceback.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, STACKS, needs_crds
from tests.properties.cli_run import assert_clean, run
from trainyard.config.model import PlatformConfig

Path_ = tuple[str | int, ...]
BASES = {name: yaml.safe_load((ROOT / "stacks" / f"Pulumi.{name}.yaml").read_text())["config"]["trainyard:platform"]
         for name in STACKS}

# Values that have broken, or nearly broken, a stack loader somewhere: wrong types, YAML 1.1
# booleans in disguise, the edges of int32/int64, floats that are not numbers, security-weakening
# strings, unicode and sizes.
TRICKY = st.sampled_from([
    "", " ", "\t", "yes", "no", "on", "off", "true", "null", "~", "0", "-1", "8", "1e3", "0x10", "0o17", "1_000",
    "8Gi", "-8Gi", "1.5", "1e400", ".inf", "*", "/", "docker.io", "docker.io/", "registry.example.com",
    "registry.example.com.evil.io/", "0.0.0.0/0", "::/0", "169.254.169.254/32", "10.0.0.0/8", "system:authenticated",
    "system:masters", "kube-system", "a" * 64, "a" * 300, "x" * 5000, "ünïcödé", "名前", "\u202e", "\x00", "a/b",
    "default/", "/svc", "${generated:x}", "<redacted>", "-n", "--help", "{{ .Values }}", "2024-01-01",
])
NUMBERS = st.one_of(
    st.integers(min_value=-10, max_value=10), st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**53 + 1, 2**63, 2**64,
                                                               10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
)
SCALARS = st.one_of(st.none(), NUMBERS, TRICKY, st.text(max_size=30))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                           max_size=4), max_leaves=12)


def document_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from document_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from document_paths(item, (*path, index))


def schema_paths() -> list[Path_]:
    """Every field of the config model, lists entered at index 0 (new sections are included as they land)."""
    schema = PlatformConfig.model_json_schema()
    defs = schema.get("$defs", {})
    out: list[Path_] = []

    def walk(node: dict[str, Any], path: Path_, seen: frozenset[str]) -> None:
        for option in [node, *node.get("anyOf", []), *node.get("allOf", [])]:
            ref = option.get("$ref")
            if ref:
                name = ref.rsplit("/", 1)[-1]
                if name not in seen:
                    walk(defs[name], path, seen | {name})
            if option.get("type") == "array" and isinstance(option.get("items"), dict):
                walk(option["items"], (*path, 0), seen)
            for key, prop in option.get("properties", {}).items():
                out.append((*path, key))
                walk(prop, (*path, key), seen)

    walk(schema, (), frozenset())
    return out


SCHEMA_PATHS = schema_paths()


def container_at(doc: Any, path: Path_) -> Any:
    for part in path:
        in_dict = isinstance(doc, dict) and isinstance(part, str) and part in doc
        in_list = isinstance(doc, list) and isinstance(part, int) and part < len(doc)
        if not (in_dict or in_list):
            return None
        doc = doc[part]
    return doc


@st.composite
def mutated_stacks(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    base = draw(st.sampled_from(STACKS))
    doc = copy.deepcopy(BASES[base])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["set", "set", "schema", "schema", "delete", "duplicate", "unknown"]))
        if kind == "schema":
            path = draw(st.sampled_from(SCHEMA_PATHS))
            parent = container_at(doc, path[:-1])
            if isinstance(parent, dict):
                parent[path[-1]] = draw(VALUES)
            continue
        path = draw(st.sampled_from([p for p in document_paths(doc) if p]))
        parent = container_at(doc, path[:-1])
        key = path[-1]
        if kind == "set":
            parent[key] = draw(VALUES)
        elif kind == "delete":
            del parent[key]
        elif kind == "duplicate" and isinstance(parent, list):
            parent.insert(int(key), copy.deepcopy(parent[int(key)]))
        elif kind == "unknown" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(SCALARS)
    return base, doc


def stack_text(platform: Any) -> str:
    return yaml.safe_dump({"config": {"trainyard:platform": platform}}, allow_unicode=True, sort_keys=False)


def run_on_file(command: str, content: str | bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="trainyard-prop-") as tmp:
        file = Path(tmp) / "Pulumi.prop.yaml"
        if isinstance(content, bytes):
            file.write_bytes(content)
        else:
            file.write_text(content, encoding="utf-8", errors="surrogatepass")
        argv = [command, str(file), *(["--out", str(Path(tmp) / "out")] if command == "render" else [])]
        outcome = run(argv)
        assert_clean(outcome, (0, 1, 2) if command == "check" else (0, 2))
        if outcome.code == 2 and outcome.err.startswith("error: invalid stack"):
            assert "Pulumi.prop.yaml" in outcome.err


@needs_crds
@given(mutated_stacks())
def test_validate_never_raises_on_a_mutated_stack(case: tuple[str, dict[str, Any]]) -> None:
    run_on_file("validate", stack_text(case[1]))


@needs_crds
@pytest.mark.parametrize("command", ["render", "check"])
@given(case=mutated_stacks())
def test_render_and_check_never_raise_on_a_mutated_stack(command: str, case: tuple[str, dict[str, Any]]) -> None:
    run_on_file(command, stack_text(case[1]))


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines)


@st.composite
def mutated_texts(draw: st.DrawFn) -> str | bytes:
    text = (ROOT / "stacks" / f"Pulumi.{draw(st.sampled_from(STACKS))}.yaml").read_text()
    at = draw(st.integers(min_value=0, max_value=len(text)))
    lines = text.splitlines(keepends=True)
    line = draw(st.integers(min_value=0, max_value=len(lines) - 1))
    edits: dict[str, Callable[[], str | bytes]] = {
        "tab": lambda: text[:at] + "\t" + text[at:],
        "bytes": lambda: text[:at].encode() + draw(st.binary(min_size=1, max_size=8)) + text[at:].encode(),
        "truncate": lambda: text[:at],
        "two-documents": lambda: text + "---\n" + text,
        "duplicate-line": lambda: "".join(lines[:line + 1] + lines[line:]),
        "undefined-alias": lambda: text.replace("gpus_per_node: 8", "gpus_per_node: *nowhere", 1),
        "self-alias": lambda: text.replace("    gpu_pools:\n", "    gpu_pools: &pools\n      - *pools\n", 1),
        "bomb": lambda: text.replace(
            "    environment:", "    " + _bomb(draw(st.integers(min_value=2, max_value=9))).replace("\n", "\n    ")
            + "\n    environment:", 1),
        "deep": lambda: text.replace("    cohorts:", "    cohorts: " + _nested(draw(st.integers(10, 2000)))
                                     + "\n    x_cohorts:", 1),
        "directive": lambda: "%YAML 1.1\n---\n" + text,
        "bom": lambda: "\ufeff" + text,
        "crlf": lambda: text.replace("\n", "\r\n"),
    }
    return edits[draw(st.sampled_from(sorted(edits)))]()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@needs_crds
@given(mutated_texts())
def test_validate_never_raises_on_odd_yaml(content: str | bytes) -> None:
    run_on_file("validate", content)


@needs_crds
@given(st.one_of(
    st.sampled_from(["", "[]", "42", "null", "config: 5", "config:\n  trainyard:platform: [1]\n",
                     "config:\n  trainyard:platform: {value: {secure: x}}\n", "config:\n  trainyard:platform:\n",
                     "config:\n  trainyard:platform: {secure: AAAA}\n", "!!python/object:os.system x\n",
                     "config: !!binary aGVsbG8=\n", "? [a, b]\n: c\n", "config: {1: 2}\n", "---\n---\n"]),
    st.text(max_size=200), st.binary(max_size=200),
))
def test_validate_never_raises_on_documents_that_are_not_stacks(content: str | bytes) -> None:
    run_on_file("validate", content)
