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
    assert "TransformerBlock.attn" in set(ex.table.value["key"]) or "(backward)" in set(ex.table.value["key"])
    ex.engine.value = ["tensor"]
    ex.by.value = "op"
    assert set(ex.table.value["engine"]) == {"tensor"}
    import panel as pn

    assert pn.config.inline is True               # panel resources inlined: nothing loads from a CDN
