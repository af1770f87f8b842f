"""Trace timestamps as exact integer nanoseconds.

Kineto keeps integer nanoseconds and writes microseconds with a nanosecond fraction, often on an epoch base
(`1712195495519695.8`). A float64 holds such a value only to 0.25 µs, so parsing it as a float and then
subtracting the origin moves events by up to ~190 ns: children end after their parents and nesting breaks.
Here the decimal text itself is turned into integers, and floats are used only after the origin is gone.

- `us_to_ns(values)`: JSON numbers (µs) → int64 ns, exact whenever float64 can be exact for them.
- `scan_us_field(raw, key, parsed)`: exact ns of values a JSON parser already read as floats, from the
  document's decimal text (used only when that text provably holds exactly those values).
- `relative_ns(abs_ns, origin)`: int64 subtraction (the only safe order: integers first, floats after).
"""
from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np

__all__ = ["us_to_ns", "scan_us_field", "relative_ns", "needs_text", "EXACT_US_LIMIT"]

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


def relative_ns(abs_ns: np.ndarray, origin: int) -> np.ndarray:
    """Integer ns relative to `origin` (int64 arithmetic: no rounding)."""
    return np.asarray(abs_ns, dtype=np.int64) - np.int64(origin)
