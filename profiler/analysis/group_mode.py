"""The most frequent value per group of a pandas groupby, without a Python call per group.

`groupby(...)[col].agg(lambda s: s.value_counts().index[0])` costs ~0.5 ms per group (a Series per group);
the op table and the hot path need it for every op name / op-module-source group of every summary.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["most_common"]


def most_common(grouped: Any, column: str, default: str) -> np.ndarray:
    """Per group of `grouped` (a DataFrameGroupBy), in its result order: the most frequent non-missing value of
    `column` as str, ties to the value seen first in the group (as `Series.value_counts().index[0]`); `default`
    for a group with no value."""
    codes = np.asarray(grouped.ngroup(), dtype=np.int64)
    out = np.full(grouped.ngroups, default, dtype=object)
    values = grouped.obj[column]
    vcodes, uniq = pd.factorize(values, use_na_sentinel=True)
    present = vcodes >= 0
    if not present.any():
        return out
    pos = np.flatnonzero(present)
    g, v = codes[present], vcodes[present].astype(np.int64)
    keys, first, counts = np.unique(g * len(uniq) + v, return_index=True, return_counts=True)
    kg, kv = keys // len(uniq), keys % len(uniq)
    order = np.lexsort((pos[first], -counts, kg))   # per group: most frequent, then first seen
    kg_sorted = kg[order]
    take = order[np.r_[True, kg_sorted[1:] != kg_sorted[:-1]]]
    out[kg[take]] = [str(x) for x in np.asarray(uniq, dtype=object)[kv[take]]]
    return out
