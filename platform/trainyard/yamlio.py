"""YAML parsing for the whole project: libyaml's C parser where PyYAML was built with it (the PyPI wheels
for Linux and macOS are), the pure-Python one otherwise. Same documents either way; the C parser is ~10x
faster, which is most of what parsing the runtime files and upstream CRDs costs a render."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | bytes) -> Any:
    """``yaml.safe_load``, with the C parser when available."""
    return yaml.load(stream, Loader=SafeLoader)  # noqa: S506 - a SafeLoader (C or pure Python)


def safe_load_all(stream: str | bytes) -> Iterator[Any]:
    """``yaml.safe_load_all``, with the C parser when available."""
    return yaml.load_all(stream, Loader=SafeLoader)
