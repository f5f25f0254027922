"""Reading a stack file into a ``PlatformConfig``, with errors a person can act on.

Every failure becomes a ``ConfigError`` naming the file, the field path inside it
(``trainyard:platform.tenants[2].quotas[0].flavor``), the line where that field is,
and the reason. The CLI prints these and exits 2; nothing reaches Pulumi.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainyard import yamlio
from trainyard.config.model import FieldError, PlatformConfig

CONFIG_KEY = "trainyard:platform"
STACKS_DIR = "stacks"
# Limits on the YAML itself, far above any real stack: nesting, and the size aliases expand to
# (anchors referring to anchors grow exponentially: "a billion laughs").
MAX_DEPTH = 32
MAX_EXPANDED_NODES = 200_000
MAX_STACK_BYTES = 16 * 2**20
# Fields a stack may still carry from an earlier Trainyard, with why they went (path without list indexes).
REMOVED_FIELDS: dict[tuple[str, ...], str] = {
    ("tenants", "storage"): (
        "removed: the tenant ResourceQuota no longer limits PVC storage or count. JobSet v0.12.0 re-creates a "
        "TrainJob's shared PVC on every reconcile and the quota admission charges each refused create, so a "
        "storage quota stalls the job; tenants cannot create PVCs, and an approved runtime's claims bound "
        "their storage (docs/components/tenants.md, 'Storage'). Delete this field"),
}
YamlLoader: type[yaml.SafeLoader] = yamlio.SafeLoader


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str
    line: int | None = None

    def render(self, file: str) -> str:
        where = f"{file}:{self.line}" if self.line else file
        return f"{where}: {self.path}: {self.reason}"


class ConfigError(Exception):
    """A stack file that cannot be used, with every problem found in it."""

    def __init__(self, file: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = problems
        super().__init__("\n".join(p.render(file) for p in problems))


def stack_path(stack: str, root: Path | None = None) -> Path:
    """``prod`` means ``stacks/Pulumi.prod.yaml`` under the project root; anything with a / or .yaml is a path."""
    if "/" in stack or stack.endswith((".yaml", ".yml")):
        return Path(stack)
    base = root if root is not None else project_root()
    return base / STACKS_DIR / f"Pulumi.{stack}.yaml"


def project_root() -> Path:
    """The directory holding Pulumi.yaml: the working directory or one of its parents, else the package's repo."""
    for candidate in (Path.cwd(), *Path.cwd().parents):
        if (candidate / "Pulumi.yaml").is_file():
            return candidate
    return Path(__file__).resolve().parents[3]


def load_stack(stack: str | Path, root: Path | None = None) -> PlatformConfig:
    """Load and validate a stack by name or path; raises ConfigError."""
    path = stack if isinstance(stack, Path) else stack_path(stack, root)
    shown = _display(path)
    try:
        if path.stat().st_size > MAX_STACK_BYTES:
            raise ConfigError(shown, [Problem("(file)", f"larger than {MAX_STACK_BYTES // 2**20} MiB: not a stack file")])
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(shown, [Problem("(file)", "no such stack file")]) from None
    except OSError as exc:
        raise ConfigError(shown, [Problem("(file)", f"cannot read: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(shown, [Problem("(file)", f"not UTF-8 text (byte {exc.start})")]) from None
    return parse_stack_text(text, shown)


def parse_yaml(text: str, file: str) -> tuple[Any, yaml.Node | None]:
    """The document and its node tree (for line numbers); ConfigError on anything a stack file cannot be.

    One parse (libyaml where available) gives both. Refused besides invalid YAML: duplicate keys
    (YAML keeps the last silently, so a repeated ``gpus:`` would hide the first), anchors that
    refer to themselves or expand beyond reason, nesting deeper than any stack needs, and values
    JSON cannot carry (dates, binary, non-string keys, NaN), which is what Pulumi hands over.
    """
    loader = YamlLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_nodes(node, file)
        document = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(file, [Problem("(yaml)", f"not valid YAML: {reason}", line)]) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(file, [Problem("(yaml)", f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    return document, node


def _check_nodes(root: yaml.Node, file: str) -> None:
    problem = yaml_shape_problem(root)
    if problem is not None:
        raise ConfigError(file, [problem])


def yaml_shape_problem(root: yaml.Node, max_depth: int = MAX_DEPTH) -> Problem | None:
    """Duplicate keys, cycles, depth and expanded size of a node graph (aliases share nodes), as a Problem."""
    expanded: dict[int, int] = {}
    for node, depth, state in _walk(root):
        line = node.start_mark.line + 1
        if depth > max_depth:
            return Problem("(yaml)", f"nested deeper than {max_depth} levels", line)
        if state == "cycle":
            return Problem("(yaml)", "an alias refers to the node that contains it", line)
        if state == "leave":
            expanded[id(node)] = 1 + sum(expanded[id(child)] for child in _children(node))
            if expanded[id(node)] > MAX_EXPANDED_NODES:
                return Problem("(yaml)", f"expands to more than {MAX_EXPANDED_NODES} values (anchors and aliases)", line)
        if state == "enter" and isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        return Problem("(yaml)", f"duplicate key {key.value!r} (YAML would keep only the last one)",
                                       key.start_mark.line + 1)
                    seen.add(key.value)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _walk(root: yaml.Node) -> Iterator[tuple[yaml.Node, int, str]]:
    """Depth-first without recursion: (node, depth, 'enter' | 'leave' | 'cycle'); shared nodes are entered once."""
    done: set[int] = set()
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            yield node, depth, "leave"
            continue
        if id(node) in on_path:
            yield node, depth, "cycle"
            continue
        if id(node) in done:
            continue
        on_path.add(id(node))
        yield node, depth, "enter"
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in reversed(_children(node)))


def parse_stack_text(text: str, file: str) -> PlatformConfig:
    document, root_node = parse_yaml(text, file)
    if not isinstance(document, Mapping):
        raise ConfigError(file, [Problem("(file)", "a stack file is a mapping with a 'config' key")])
    config = document.get("config")
    if not isinstance(config, Mapping) or CONFIG_KEY not in config:
        raise ConfigError(file, [Problem("config", f"missing the key {CONFIG_KEY!r}")])
    platform = config[CONFIG_KEY]
    if isinstance(platform, Mapping) and "value" in platform and len(platform) == 1:
        platform = platform["value"]  # Pulumi's explicit {value: ...} form
    return validate_platform(platform, file, root_node)


def validate_platform(data: Any, file: str, root_node: yaml.Node | None = None) -> PlatformConfig:
    """Validate the value of ``trainyard:platform`` (as Pulumi hands it over, or read from a file)."""
    if isinstance(data, Mapping) and "secure" in data and len(data) == 1:
        raise ConfigError(file, [Problem(CONFIG_KEY, "the platform config must not be a secret value")])
    problems = [Problem(_format_path(loc), reason, _line_of(root_node, loc)) for loc, reason in _non_json(data)]
    if problems:
        raise ConfigError(file, problems[:20])
    try:
        # Strict, from JSON: a number is not a boolean and a boolean not a number ("yes", 1 and "8" are
        # refused where the model means a bool or an int), arrays fill tuples. JSON is also what
        # Pulumi hands the program, so the file and the engine see one validation.
        return PlatformConfig.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            loc: tuple[str | int, ...] = tuple(error["loc"])
            reason = error["msg"]
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, FieldError):
                loc, reason = loc + cause.path, cause.reason
            elif reason.startswith("Value error, "):
                reason = reason.removeprefix("Value error, ")
            loc = tuple(part for part in loc if not _is_union_tag(part))
            if error["type"] == "extra_forbidden":
                reason = REMOVED_FIELDS.get(tuple(p for p in loc if isinstance(p, str)),
                                            "unknown field (not part of the stack schema; check the spelling)")
            elif error["type"] == "missing":
                reason = "required field is missing"
            problems.append(Problem(_format_path(loc), reason, _line_of(root_node, loc)))
        raise ConfigError(file, problems) from None


def _non_json(data: Any) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, reason) for every value in ``data`` that JSON cannot carry exactly."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    yield (*loc, str(key)), f"keys are strings; quote {key!r}"
                else:
                    stack.append(((*loc, key), item))
        elif isinstance(value, list | tuple):
            stack.extend(((*loc, i), item) for i, item in enumerate(value))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                yield loc, "text with an unpaired surrogate (an escape like \\ud800) is not UTF-8"
        elif isinstance(value, float) and not math.isfinite(value):
            yield loc, f"{value} is not a number a stack can use"
        elif isinstance(value, datetime.date | datetime.datetime):
            yield loc, f"YAML read {value.isoformat()} as a date; quote it if it is text"
        elif not (value is None or isinstance(value, str | int | float | bool)):
            yield loc, f"a {type(value).__name__} value (YAML tag) is not a stack value"


def _is_union_tag(part: str | int) -> bool:
    # pydantic adds the member type of a union (e.g. 'int', 'str', 'function-after[...]') to loc.
    return isinstance(part, str) and (part in {"int", "str"} or part.startswith("function-"))


_PLAIN_KEY = re.compile(r"^[A-Za-z_][-A-Za-z0-9_]*$")


def _format_path(loc: tuple[str | int, ...]) -> str:
    out = CONFIG_KEY
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            # A key that is not a plain name (empty, spaces, tabs, a label key) is shown quoted.
            out += f".{part}" if _PLAIN_KEY.match(part) else f"[{json.dumps(part)}]"
    return out


def _line_of(root: yaml.Node | None, loc: tuple[str | int, ...]) -> int | None:
    """1-based line of the deepest node of ``loc`` found under config.trainyard:platform."""
    if root is None:
        return None
    node: yaml.Node | None = root
    best: int | None = None
    for key in ("config", CONFIG_KEY, *loc):
        node = _child(node, key)
        if node is None:
            break
        best = node.start_mark.line + 1
    return best


def _child(node: yaml.Node | None, key: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == key:
                found: yaml.Node = v
                return found
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        item: yaml.Node = node.value[key]
        return item
    return None


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
