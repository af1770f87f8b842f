"""Numbers in the JSON summary blocks: a figure is a finite float or null, never NaN or a string."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_float"]


def finite_float(v: Any) -> float | None:
    """`v` as a finite float; None when it is missing, not a number, NaN or infinite."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
