"""Kubernetes resource quantities: parse to exact numbers, format back canonically.

Only the forms Trainyard's config accepts: plain integers/decimals, decimal SI suffixes
(k, M, G, T, P, E, m) and binary suffixes (Ki ... Ei).
Ref: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction | int] = {
    "m": Fraction(1, 1000), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_PATTERN = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


def parse_quantity(value: int | str) -> Fraction:
    """Exact value of a quantity; ValueError with the accepted forms on anything else."""
    if isinstance(value, bool):
        raise ValueError("a quantity is a number or a string like '64Gi', not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a quantity must not be negative")
        return Fraction(value)
    match = _PATTERN.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 8, 500m, 64Gi, 1.5T)")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    factor: Fraction | int = _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return number * factor


def format_quantity(value: Fraction, *, binary: bool) -> int | str:
    """Canonical form: an int when whole and not memory-like, else the largest exact suffix."""
    if value.denominator == 1 and not binary:
        return int(value)
    if binary:
        for suffix, factor in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            scaled = value / factor
            if scaled.denominator == 1 and scaled >= 1:
                return f"{int(scaled)}{suffix}"
        if value.denominator == 1:
            return str(int(value))
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    raise ValueError(f"{value} cannot be written exactly as a quantity")
