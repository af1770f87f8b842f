"""Trace timestamps as integer nanoseconds, rebased on an origin before any float math.

Profilers write epoch timestamps (Neuron: epoch ns, ~1.7e18; kineto: epoch µs with ns fractions). float64 holds
integers exactly only up to 2**53 (~9.0e15): at 1.7e18 its spacing is 256 ns, so a 57 ns window becomes 0 ns
and a 128 ns one 256 ns. Every reader converts timestamps here, keeps them as int64, subtracts the origin in
integers and only then lets offsets (small, exact in float64) flow into the analyses.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Sequence

import numpy as np

__all__ = ["FLOAT_EXACT_LIMIT", "TimestampError", "to_int_ns", "rebase_ns", "seconds_to_ns"]

FLOAT_EXACT_LIMIT = 2 ** 53        # above this a float64 timestamp has already lost nanoseconds


class TimestampError(ValueError):
    """A timestamp that is not a finite number (names the field and the first bad row)."""


def _one(v: Any, scale: int) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise TypeError
    if isinstance(v, (int, np.integer)):
        return int(v) * scale
    if isinstance(v, str):
        return int((Decimal(v.strip()) * scale).to_integral_value())
    if isinstance(v, Decimal):
        return int((v * scale).to_integral_value())
    f = float(v)                       # a float is taken at its exact binary value (precision already spent)
    if not np.isfinite(f):
        raise ValueError
    return int((Decimal(f) * scale).to_integral_value())


def to_int_ns(values: Sequence[Any] | np.ndarray, *, what: str = "timestamp", unit_ns: int = 1) -> np.ndarray:
    """Values (ints, integer arrays, decimal strings, floats) in units of `unit_ns` ns -> int64 nanoseconds.

    Integers and decimal strings convert exactly ("1700000000000000.123" µs with unit_ns=1000 ->
    1700000000000000123 ns); an int64 array is returned as is (no float round trip). Raises `TimestampError`
    naming `what` and the row of the first value that is missing or not a finite number."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False) * np.int64(unit_ns)
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = _one(v, unit_ns)
        except (TypeError, ValueError, InvalidOperation, OverflowError):
            raise TimestampError(f"{what}[{i}] is {v!r}, not a finite number") from None
    return out


def rebase_ns(ns: np.ndarray, origin: int | None = None) -> tuple[np.ndarray, int]:
    """(ns - origin, origin) in int64; origin defaults to the smallest value (0 for an empty array)."""
    ns = np.asarray(ns, dtype=np.int64)
    if origin is None:
        origin = int(ns.min()) if len(ns) else 0
    return ns - np.int64(origin), int(origin)


def seconds_to_ns(seconds: float) -> float:
    """A duration in seconds (Neuron's Summary unit) -> ns, via its shortest decimal form: 0.213808050051 s ->
    213808050.051 ns exactly as written, not 213808050.05099997."""
    return float(Decimal(repr(float(seconds))) * 1_000_000_000)
