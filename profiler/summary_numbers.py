"""Numbers in the JSON summary blocks: a figure is a finite float or null, never NaN or a string."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_float", "usd_text"]


def finite_float(v: Any) -> float | None:
    """`v` as a finite float; None when it is missing, not a number, NaN or infinite."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def usd_text(v: float) -> str:
    """Dollars to 3 significant digits in plain decimals ($0.0608, $1.25, $1,230): never `$0.0000` (costs are per
    million steps so they are not that small) and never scientific notation; "not available" for a missing figure
    (NaN: e.g. no H100 comparison for a measured run)."""
    if not math.isfinite(v):
        return "not available"
    if v == 0:
        return "$0"
    r = float(f"{abs(v):.3g}")
    decimals = max(0, 2 - math.floor(math.log10(r)))
    return f"{'-' if v < 0 else ''}${r:,.{decimals}f}"
