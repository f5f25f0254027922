"""How a value reads in a review line: compact, one line, with the delta of numbers.

``16 -> 24 (+8)``, ``unlimited -> 32``, ``(absent) -> {"port": 53}``. Long values are cut
with an ellipsis; the JSON output keeps them whole. A long string that changed is never cut at the
same place on both sides (which hid every change after the first 120 characters): both sides show a
window around the first character that differs, and say where it is.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any, Final

from trainyard.quantity import format_quantity, parse_quantity
from trainyard.review.changes import ABSENT
from trainyard.review.render import REDACTED

MAX_VALUE_CHARS: Final = 120
CONTEXT_CHARS: Final = 40  # characters shown before the first difference of a long changed string
_BARE = re.compile(r"^[A-Za-z0-9_./:@+=%-]+$")
_LOOKS_TYPED = re.compile(r"^(true|false|null|yes|no|~|-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?)$", re.IGNORECASE)


def compact(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """One line for any value; strings bare where that cannot be mistaken for another type."""
    if value is ABSENT:
        text = "(absent)"
    elif isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, int | float):
        text = str(value)
    elif value == REDACTED:
        text = REDACTED
    elif isinstance(value, str):
        bare = _BARE.match(value) and not _LOOKS_TYPED.match(value)
        text = value if bare else json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def delta(old: Any, new: Any) -> str:
    """`` (+8)`` between two integers (not booleans), else nothing."""
    if isinstance(old, int) and isinstance(new, int) and not isinstance(old, bool) and not isinstance(new, bool):
        return f" ({new - old:+d})"
    return ""


# Fields that hold a Kubernetes quantity, which the API machinery writes as a string ("8", "64Gi").
_QUANTITY_PATH = re.compile(
    r"(\.(nominalQuota|borrowingLimit|lendingLimit)|\.fairSharing\.weight|^spec\.hard\[[^\]]+\]"
    r"|\.resources\.(requests|limits)\[[^\]]+\])$")


def arrow(old: Any, new: Any, path: str = "") -> str:
    """``old -> new (+d)``, or just the value when it did not change.

    On a quantity field (``path``), quantities read bare and with their delta: ``"32" -> "40"``
    reads ``32 -> 40 (+8)``, ``28448Gi -> 30248Gi (+1800Gi)``.
    """
    if path and _QUANTITY_PATH.search(path):
        return _quantity_arrow(old, new)
    if old == new:
        return compact(old)
    if isinstance(old, str) and isinstance(new, str) and max(len(_whole(old)), len(_whole(new))) > MAX_VALUE_CHARS:
        return changed_text(old, new)
    return f"{compact(old)} -> {compact(new)}{delta(old, new)}"


def _whole(value: str) -> str:
    return compact(value, limit=len(value) * 6 + 2)  # longer than any JSON escaping of it


def changed_text(old: str, new: str) -> str:
    """Two long strings that differ, each as the part around the difference: ``…"x": "a"… -> …"x": "b"…
    (from character 812)``. The window starts CONTEXT_CHARS before the first differing character and
    ends CONTEXT_CHARS after the last one (the common tail is left out), cut to MAX_VALUE_CHARS."""
    first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    tail = 0
    while tail < min(len(old), len(new)) - first and old[len(old) - 1 - tail] == new[len(new) - 1 - tail]:
        tail += 1
    start = max(0, first - CONTEXT_CHARS)

    def window(text: str) -> str:
        end = min(len(text), len(text) - tail + CONTEXT_CHARS, start + MAX_VALUE_CHARS)
        body = json.dumps(text[start:end], ensure_ascii=False)
        return ("…" if start else "") + body + ("…" if end < len(text) else "")

    return f"{window(old)} -> {window(new)} (from character {first + 1})"


def _quantity_arrow(old: Any, new: Any) -> str:
    def parsed(value: Any) -> tuple[Fraction, bool] | None:
        if isinstance(value, bool) or not isinstance(value, int | str):
            return None
        try:
            return parse_quantity(value), isinstance(value, str) and value.strip()[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
        except ValueError:
            return None

    def text(value: Any) -> str:
        return str(value).strip() if parsed(value) else compact(value)

    if old == new:
        return text(old)
    before, after = parsed(old), parsed(new)
    suffix = ""
    if before and after and before[0] != after[0]:
        change = after[0] - before[0]
        try:
            suffix = f" ({'+' if change > 0 else '-'}{format_quantity(abs(change), binary=before[1] or after[1])})"
        except ValueError:
            suffix = ""
    return f"{text(old)} -> {text(new)}{suffix}"


def limit_text(value: int | None) -> str:
    """A Kueue borrowing or lending limit; unset means no limit."""
    return "unlimited" if value is None else str(value)


def limit_arrow(old: int | None, new: int | None) -> str:
    if old == new:
        return limit_text(old)
    suffix = delta(old, new) if old is not None and new is not None else ""
    return f"{limit_text(old)} -> {limit_text(new)}{suffix}"
