"""Diff of two profiles: per op and per engine time deltas, new and removed ops."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["ProfileDiff", "diff_tables", "SAME_WITHIN_PCT"]

SAME_WITHIN_PCT = 1.0  # an op whose time moved by less than this (percent) is reported as "same"


@dataclass
class ProfileDiff:
    ops: pd.DataFrame          # key, before_ns, after_ns, delta_ns, change_pct, status (same/new/removed)
    engines: pd.DataFrame      # engine, before_ns, after_ns, delta_ns, change_pct
    step_time_before_ns: float
    step_time_after_ns: float

    @property
    def step_time_change_pct(self) -> float:
        return _pct(self.step_time_before_ns, self.step_time_after_ns)


def _pct(a: float, b: float) -> float:
    return float("nan") if a == 0 else (b - a) / a * 100.0


def diff_tables(before: pd.DataFrame, after: pd.DataFrame, *, key: str = "key",
                value: str = "per_step_device_ns") -> pd.DataFrame:
    a = before[[key, value]].rename(columns={value: "before_ns"})
    b = after[[key, value]].rename(columns={value: "after_ns"})
    m = a.merge(b, on=key, how="outer")
    new, removed = m["before_ns"].isna(), m["after_ns"].isna()
    m[["before_ns", "after_ns"]] = m[["before_ns", "after_ns"]].fillna(0.0)
    m["delta_ns"] = m["after_ns"] - m["before_ns"]
    with np.errstate(divide="ignore", invalid="ignore"):
        m["change_pct"] = np.where(m["before_ns"] > 0, m["delta_ns"] / m["before_ns"] * 100.0, np.nan)
    moved = m["change_pct"].abs() >= SAME_WITHIN_PCT
    m["status"] = np.select([new, removed, moved & (m["delta_ns"] < 0), moved & (m["delta_ns"] > 0)],
                            ["new", "removed", "faster", "slower"], default="same")
    return m.sort_values("delta_ns", key=np.abs, ascending=False).reset_index(drop=True)
