"""most_common: the vectorised per-group mode equals pandas' value_counts per group (ties, missing values,
missing group keys), as the op table and the hot path used to compute it."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_studio.profiler.analysis.group_mode import most_common

_KEYS = st.sampled_from(["a", "b", "c", None])
_VALUES = st.sampled_from(["compute", "memory", "launch", None])


def _by_value_counts(s: pd.Series, default: str) -> str:
    vc = s.value_counts()
    return str(vc.index[0]) if len(vc) else default


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_KEYS, _KEYS, _VALUES), min_size=1, max_size=40))
def test_equals_value_counts_per_group(rows):
    df = pd.DataFrame(rows, columns=["k1", "k2", "v"])
    for keys in ("k1", ["k1", "k2"]):
        g = df.groupby(keys, sort=False, dropna=False)
        want = g["v"].agg(lambda s: _by_value_counts(s, "none")).tolist()
        assert most_common(g, "v", "none").tolist() == want


def test_ties_go_to_the_value_seen_first_in_the_group():
    df = pd.DataFrame({"k": ["x", "y", "x", "y", "x", "y"],
                       "v": ["memory", "compute", "compute", "memory", "launch", None]})
    g = df.groupby("k", sort=False)
    assert most_common(g, "v", "").tolist() == ["memory", "compute"]


def test_a_group_without_values_gets_the_default():
    df = pd.DataFrame({"k": ["x", "y"], "v": [np.nan, "compute"]})
    assert most_common(df.groupby("k", sort=False), "v", "none").tolist() == ["none", "compute"]
