from decimal import Decimal

import pytest

from schemas.quantities import cpu_milli, gpu_share_milli, memory_mib, parse_quantity, percent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", 500),
        ("2", 2000),
        (2, 2000),
        ("1.5", 1500),
        (0.25, 250),
        ("2e0", 2000),
    ],
)
def test_cpu_quantities_become_milli_cores(text: object, expected: int) -> None:
    assert cpu_milli(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("32Gi", 32 * 1024), ("512Mi", 512), ("1Ti", 1024 * 1024), ("1G", 954), (1048576, 1), ("1k", 1)],
)
def test_memory_quantities_become_mib_rounded_up(text: object, expected: int) -> None:
    assert memory_mib(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("500m", 500), (0.5, 500), ("50%", 500), ("1", 1000), ("0.01", 10)]
)
def test_gpu_shares_in_milli_decimal_or_percent_agree(text: object, expected: int) -> None:
    assert gpu_share_milli(text) == expected


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5.2", "", "10Q", True, None, float("nan")])
def test_malformed_quantities_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


@pytest.mark.parametrize("bad", ["0", "1.5", "150%", "0.0001"])
def test_a_gpu_share_must_lie_within_one_gpu_and_whole_milli(bad: object) -> None:
    with pytest.raises(ValueError):
        gpu_share_milli(bad)


def test_sub_milli_cpu_is_refused_rather_than_rounded() -> None:
    with pytest.raises(ValueError, match="finer than 1m"):
        cpu_milli("0.0005")


def test_percent_accepts_suffix_and_bounds() -> None:
    assert percent("50%") == 50
    assert percent(100) == 100
    with pytest.raises(ValueError):
        percent(0)


def test_binary_and_decimal_suffixes_differ() -> None:
    assert parse_quantity("1Ki") == Decimal(1024)
    assert parse_quantity("1k") == Decimal(1000)
