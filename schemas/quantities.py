"""Kubernetes-style resource quantities: ``500m`` CPU, ``32Gi`` memory, ``50%`` of a GPU.

Parsed into the integer units the core uses: milli-CPU, MiB and milli-GPU.  The suffixes follow
the Kubernetes ``resource.Quantity`` format: decimal ``k M G T P E`` and binary ``Ki Mi Gi Ti Pi Ei``,
``m`` for milli, and plain or exponent numbers (``1.5``, ``2e3``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "m": Decimal("0.001"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^\s*([+]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?\s*$"
)


def parse_quantity(value: object) -> Decimal:
    """A quantity as an exact decimal number of base units (cores, bytes, GPUs)."""
    if isinstance(value, bool):
        raise ValueError("a quantity cannot be a boolean")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite quantity")
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"expected a quantity such as '500m', '2' or '32Gi', got {type(value).__name__}")
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: '500m', '2', '1.5', '32Gi')")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    factor = Decimal(_BINARY[suffix]) if suffix in _BINARY else _DECIMAL[suffix]
    return base * factor


def cpu_milli(value: object) -> int:
    """CPU cores as milli-cores; ``'500m'`` -> 500, ``2`` -> 2000.  Sub-milli precision is refused."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value * 1000
    milli = parse_quantity(value) * 1000
    if milli != milli.to_integral_value():
        raise ValueError(f"{value!r} is finer than 1m CPU")
    return int(milli)


def memory_mib(value: object) -> int:
    """Memory as MiB, rounded up: ``'32Gi'`` -> 32768, ``'1G'`` -> 954, bare integers are bytes."""
    raw = parse_quantity(value)
    return math.ceil(raw / Decimal(2**20))


def gpu_share_milli(value: object) -> int:
    """A share of one GPU as milli-GPU: ``'500m'``, ``0.5`` and ``'50%'`` are all 500."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = Decimal(value.strip()[:-1])
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a percentage") from None
        milli = pct * 10
    else:
        milli = parse_quantity(value) * 1000
    if milli != milli.to_integral_value():
        raise ValueError(f"{value!r} is finer than 1 milli-GPU")
    if not 0 < milli <= 1000:
        raise ValueError(f"a GPU share must be more than 0 and at most one GPU, got {value!r}")
    return int(milli)


def percent(value: object) -> int:
    """An integer percentage 1..100, written ``50`` or ``'50%'``."""
    text = str(value).strip().removesuffix("%")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a percentage") from None
    if number != number.to_integral_value() or not 1 <= number <= 100:
        raise ValueError(f"a percentage must be a whole number from 1 to 100, got {value!r}")
    return int(number)


# Stored as integers in the core's units; serialised back as unambiguous quantity strings so a
# message survives a round trip (a bare 8000 would read back as 8000 cores).
CpuMilli = Annotated[int, BeforeValidator(cpu_milli), PlainSerializer(lambda v: f"{v}m", return_type=str)]
MemoryMiB = Annotated[int, BeforeValidator(memory_mib), PlainSerializer(lambda v: f"{v}Mi", return_type=str)]
GpuShareMilli = Annotated[
    int, BeforeValidator(gpu_share_milli), PlainSerializer(lambda v: f"{v}m", return_type=str)
]
Percent = Annotated[int, BeforeValidator(percent)]
