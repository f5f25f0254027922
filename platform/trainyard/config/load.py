"""Reading a stack file into a ``PlatformConfig``, with errors a person can act on.

Every failure becomes a ``ConfigError`` naming the file, the field path inside it
(``trainyard:platform.tenants[2].quotas[0].flavor``), the line where that field is,
and the reason. The CLI prints these and exits 2; nothing reaches Pulumi.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainyard.config.model import FieldError, PlatformConfig

CONFIG_KEY = "trainyard:platform"
STACKS_DIR = "stacks"


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
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(shown, [Problem("(file)", "no such stack file")]) from None
    except OSError as exc:
        raise ConfigError(shown, [Problem("(file)", f"cannot read: {exc.strerror}")]) from None
    return parse_stack_text(text, shown)


def parse_stack_text(text: str, file: str) -> PlatformConfig:
    try:
        document = yaml.safe_load(text)
        root_node = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(file, [Problem("(yaml)", f"not valid YAML: {reason}", line)]) from None
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
    try:
        return PlatformConfig.model_validate(data)
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
            if error["type"] == "extra_forbidden":
                reason = "unknown field (not part of the stack schema; check the spelling)"
            elif error["type"] == "missing":
                reason = "required field is missing"
            loc = tuple(part for part in loc if not _is_union_tag(part))
            problems.append(Problem(_format_path(loc), reason, _line_of(root_node, loc)))
        raise ConfigError(file, problems) from None


def _is_union_tag(part: str | int) -> bool:
    # pydantic adds the member type of a union (e.g. 'int', 'str', 'function-after[...]') to loc.
    return isinstance(part, str) and (part in {"int", "str"} or part.startswith("function-"))


def _format_path(loc: tuple[str | int, ...]) -> str:
    out = CONFIG_KEY
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
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
