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


_DECIMAL_SUFFIX = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def format_quantity(value: Fraction, *, binary: bool) -> str:
    """The string the Kubernetes API machinery writes for ``value``: ``Quantity.String()``.

    A controller that decodes an object into Go types and writes it back (Kueue's ClusterQueue
    webhook does) rewrites every quantity in this form, so rendering any other form (the number
    ``8`` for ``"8"``, ``"1000"`` for ``"1k"``) makes every later ``pulumi up`` propose a change.
    ``binary`` is the format the value is given in (a ``Ki``...``Ei`` suffix); as in Go, a binary
    value below 1024 or with a fraction is written in decimal SI.
    Ref: k8s.io/apimachinery pkg/api/resource quantity.go CanonicalizeBytes, amount.go
    int64Amount.AsCanonicalBytes / AsCanonicalBase1024Bytes (v0.36.3).
    """
    if value < 0:
        raise ValueError("a quantity must not be negative")
    if value == 0:
        return "0"
    if binary and value >= 1024 and value.denominator == 1:
        amount, power = int(value), 0
        while amount % 1024 == 0 and power < 6:
            amount, power = amount // 1024, power + 1
        return f"{amount}{_BINARY_SUFFIX[power]}"
    milli = value * 1000
    if milli.denominator != 1:
        raise ValueError(f"{value} cannot be written exactly as a quantity")
    # Decimal SI: all factors of ten into the exponent, then down to a multiple of three.
    amount, exponent = int(milli), -3
    while amount % 10 == 0:
        amount, exponent = amount // 10, exponent + 1
    amount, exponent = amount * 10 ** (exponent % 3), exponent - exponent % 3
    if exponent in _DECIMAL_SUFFIX:
        return f"{amount}{_DECIMAL_SUFFIX[exponent]}"
    return f"{amount}e{exponent}"


def canonical_quantity(value: int | str) -> str:
    """``value`` (as the config gives it) in the form the API machinery writes it back.

    Its format follows its suffix, as in Go's ParseQuantity: binary for ``Ki``...``Ei``, decimal SI otherwise.
    """
    binary = isinstance(value, str) and value.strip()[-2:] in _BINARY
    return format_quantity(parse_quantity(value), binary=binary)
