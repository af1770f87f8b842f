"""Notebook rendering: explorer widgets, plotly figures, offline assets."""
from __future__ import annotations

import pytest
import torch

from neuron_studio.profiler.capture import profile
from tests.models.blocks import TransformerBlock


@pytest.fixture(scope="module")
def prof():
    torch.manual_seed(0)
    m = TransformerBlock(32, 2).to("neuron")
    x = torch.randn(2, 8, 32, device="neuron")
    return profile(lambda: m(x).sum().backward(), steps=2, mode="eager")


def test_timeline_figure_has_a_track_per_core_engine(prof):
    fig = prof.timeline_figure()
    names = {t.name for t in fig.data}
    assert {"tensor", "vector"} <= names
    total = sum(len(t.x) for t in fig.data)
    assert total == int(((prof.ops["device_ns"] > 0) & (prof.ops["engine"] != "none")).sum())
    assert "modeled" in fig.layout.title.text


def test_roofline_figure_points_match_analysis(prof):
    fig = prof.roofline_figure()
    assert len(fig.data[1].x) == len(prof.roofline())


def test_explorer_filters_and_is_offline(prof):
    ex = prof.explore()
    full = ex.table.value
    ex.text.value = "mm"
    filtered = ex.table.value
    assert 0 < len(filtered) < len(full) and filtered["key"].str.contains("mm").all()
    ex.by.value = "module"
    keys = set(ex.table.value["key"])
    assert any(k.startswith("TransformerBlock.") and not k.endswith("(backward)") for k in keys)
    assert any(k.startswith("TransformerBlock.") and k.endswith(" (backward)") for k in keys)  # backward → module
    ex.engine.value = ["tensor"]
    ex.by.value = "op"
    assert set(ex.table.value["engine"]) == {"tensor"}
    import panel as pn

    assert pn.config.inline is True               # panel resources inlined: nothing loads from a CDN


def test_multi_rank_summary_gets_a_ranks_tab_in_html_and_text():
    from neuron_studio.ui.html import render_html
    from neuron_studio.ui.text import render_text

    block = {"ranks": [{"rank": 0, "step_time_ns": 1e6, "wait_ns": 6e8}, {"rank": 1, "step_time_ns": 1.6e9}],
             "straggler": {"rank": 1, "op": "c10d::allreduce_<x>", "caused_wait_ns": 6e8, "compute_before_ns": 7e8,
                           "others_compute_before_ns": 1e8, "op_before": "aten::mm"},
             "slowest_collective": {"op": "c10d::allreduce_", "index": 0, "bytes": 4096, "span_ns": 6e8,
                                    "last_rank": 1},
             "collectives": []}
    s = {"run_id": 3, "mode": "eager", "chip": "trn2", "backend": "emulated", "modeled": True, "engines": [],
         "ranks": 2, "ranks_analysis": block}
    html = render_html(s)
    assert "Ranks (2)" in html and "Straggler: rank 1" in html
    assert "c10d::allreduce_&lt;x&gt;" in html and "allreduce_<x>" not in html
    text = render_text(s)
    assert "straggler: rank 1" in text and "600 ms" in text
    assert "Ranks (" not in render_html({**s, "ranks_analysis": None})
