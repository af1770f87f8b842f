"""Shared by the importers: the internal error that carries a reason, and the DataFrame builder."""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["BadTrace", "frame_of", "series"]


class BadTrace(Exception):
    """Internal: a reason; `read_trace*` prefixes the file name and raises TraceFormatError."""


def frame_of(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame({c: series(np.asarray(v)) for c, v in cols.items()}, copy=False)


def series(a: np.ndarray) -> pd.Series:
    # object stays object: pandas would otherwise infer its Arrow string dtype, which rejects lone surrogates
    return pd.Series(a, dtype=object, copy=False) if a.dtype == object else pd.Series(a, copy=False)

