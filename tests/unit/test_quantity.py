from fractions import Fraction

import pytest

from trainyard.quantity import canonical_quantity, format_quantity, parse_quantity


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
    assert format_quantity(Fraction(96), binary=False) == "96"
    assert format_quantity(Fraction(3, 2), binary=False) == "1500m"


# Rows of k8s.io/apimachinery pkg/api/resource quantity_test.go (v0.36.3) TestQuantityString and
# TestQuantityParseEmit that are exact at the milli: what Go's Quantity.String() writes.
GO_STRINGS = [
    (Fraction(2**30), True, "1Gi"), (Fraction(300 * 2**20), True, "300Mi"), (Fraction(6 * 1024), True, "6Ki"),
    (Fraction(1001 * 2**30), True, "1001Gi"), (Fraction(2**40), True, "1Ti"), (Fraction(5), True, "5"),
    (Fraction(1, 2), True, "500m"), (Fraction(10**9), False, "1G"), (Fraction(1, 1000), False, "1m"),
    (Fraction(80, 1000), False, "80m"), (Fraction(1080, 1000), False, "1080m"), (Fraction(300 * 10**6), False, "300M"),
    (Fraction(10**12), False, "1T"), (Fraction(1234567 * 10**6), False, "1234567M"),
    (Fraction(1234567, 1000), True, "1234567m"), (Fraction(3000), False, "3k"), (Fraction(1025), True, "1025"),
    (Fraction(0), False, "0"), (Fraction(0), True, "0"), (Fraction(1024, 1000), True, "1024m"),
]


@pytest.mark.parametrize(("value", "binary", "expect"), GO_STRINGS)
def test_format_writes_what_go_writes(value: Fraction, binary: bool, expect: str) -> None:
    assert format_quantity(value, binary=binary) == expect


@pytest.mark.parametrize(("given", "written"), [
    (8, "8"), (1000, "1k"), ("1000", "1k"), ("1024Mi", "1Gi"), ("1000M", "1G"), ("1.5Gi", "1536Mi"),
    ("0.5", "500m"), ("1500", "1500"), ("2000Ki", "2000Ki"), ("0Gi", "0"),
])
def test_canonical_quantity_follows_the_given_format(given: int | str, written: str) -> None:
    assert canonical_quantity(given) == written
