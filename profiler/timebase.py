"""Trace timestamps as integer nanoseconds, rebased on an origin before any float math.

Profilers write epoch timestamps (Neuron: epoch ns, ~1.7e18; kineto: epoch µs with ns fractions). float64 holds
integers exactly only up to 2**53 (~9.0e15): at 1.7e18 its spacing is 256 ns, so a 57 ns window becomes 0 ns
and a 128 ns one 256 ns. Every reader converts timestamps here, keeps them as int64, subtracts the origin in
integers and only then lets offsets (small, exact in float64) flow into the analyses.

Kineto writes microseconds with a nanosecond fraction on an epoch base (`1712195495519695.8`); a float64 holds
such a value only to 0.25 µs, so `scan_us_field` recovers the exact digits from the document's text and
`us_to_ns` converts values that float64 can still hold exactly.
"""
from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, Sequence

import numpy as np

__all__ = ["FLOAT_EXACT_LIMIT", "EXACT_US_LIMIT", "TimestampError", "to_int_ns", "rebase_ns", "seconds_to_ns",
           "us_to_ns", "scan_us_field", "needs_text"]

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

#: Below this magnitude (µs) `rint(us * 1000)` recovers a value written with ≤ 3 decimals exactly:
#: float64's relative error 2**-53, twice (parse, scale), stays under half a nanosecond up to 2**51 ns.
EXACT_US_LIMIT = float(2 ** 51) / 1000.0


def needs_text(values_us: np.ndarray) -> bool:
    """True when some value is beyond float64's exact range and not a whole number of µs."""
    if not len(values_us):
        return False
    big = np.abs(values_us) >= EXACT_US_LIMIT
    return bool(big.any()) and bool((values_us[big] != np.floor(values_us[big])).any())


def us_to_ns(values_us: np.ndarray) -> np.ndarray:
    """Float µs → int64 ns: whole µs as integers (exact below 2**53), the fraction rounded to ns (exact for
    ≤ 3 decimals below `EXACT_US_LIMIT`)."""
    v = np.asarray(values_us, dtype=np.float64)
    whole = np.floor(v)
    return whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000.0).astype(np.int64)


def scan_us_field(raw: bytes, key: str, parsed_us: np.ndarray) -> np.ndarray | None:
    """Exact ns of the `parsed_us` values (float64, as a JSON parser read them, in document order), using
    the decimal digits of every `"key": <number>` in `raw`; None when the text does not provably match.

    Only the fraction digits are read from the text: the whole microseconds then follow exactly from the
    float (its error, ≤ 0.125 µs below 2**52 µs, is under half a microsecond). The text matches when it holds
    exactly one such number per parsed value (a `key` nested elsewhere, or written differently, changes the
    count and the caller keeps the float values, saying so).
    """
    parsed = np.asarray(parsed_us, dtype=np.float64)
    if len(parsed) and np.abs(parsed).max() >= 2.0 ** 52:
        return None
    pattern = re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*-?[0-9]+(?:\.([0-9]*))?(?![0-9eE.])')
    fracs = pattern.findall(raw)
    if len(fracs) != len(parsed):
        return None
    if not fracs:
        return np.zeros(0, dtype=np.int64)
    digits = np.asarray(fracs, dtype="S3").view(np.uint8).reshape(-1, 3).astype(np.int64)
    digits = np.where(digits == 0, 0, digits - 48)
    frac_ns = digits[:, 0] * 100 + digits[:, 1] * 10 + digits[:, 2]
    mag = np.abs(parsed)
    whole_us = np.rint(mag - frac_ns / 1000.0).astype(np.int64)
    out = np.where(parsed < 0, -1, 1) * (whole_us * 1000 + frac_ns)
    long = np.flatnonzero(np.fromiter((len(f) > 3 for f in fracs), dtype=bool, count=len(fracs))) \
        if max(map(len, fracs)) > 3 else ()
    for i in long:                                # sub-ns digits: round half-even from the exact text
        d = Decimal("0." + fracs[i].decode("ascii")) * 1000
        f = int(d.to_integral_value(rounding=ROUND_HALF_EVEN))
        w = int(np.rint(mag[i] - float(d) / 1000.0))
        out[i] = (-1 if parsed[i] < 0 else 1) * (w * 1000 + f)
    return out
