from fractions import Fraction

import pytest

from trainyard.quantity import format_quantity, parse_quantity


@pytest.mark.parametrize(("text", "value"), [(8, 8), ("500m", Fraction(1, 2)), ("64Gi", 64 * 2**30), ("1.5k", 1500)])
def test_parse_quantity(text: int | str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["64 Gi", "-1", "1e3x", True])
def test_parse_rejects_what_kubernetes_would_not_take(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)  # type: ignore[arg-type]


def test_format_picks_the_largest_exact_binary_suffix() -> None:
    assert format_quantity(Fraction(2048 * 2**30), binary=True) == "2Ti"
    assert format_quantity(Fraction(1800 * 2**30), binary=True) == "1800Gi"
    assert format_quantity(Fraction(96), binary=False) == 96
    assert format_quantity(Fraction(3, 2), binary=False) == "1500m"
