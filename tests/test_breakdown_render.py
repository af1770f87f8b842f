"""The breakdown and the what-if advisor as the renderers draw them: inline HTML, plain text, the CLI report."""
from __future__ import annotations

import functools
import re

import pytest
import torch
from markupsafe import escape

from neuron_studio.profiler.capture import profile
from neuron_studio.ui.html import profile_tabs, render_html
from neuron_studio.ui.text import render_text


@functools.cache
def _summary() -> dict:
    return _profile().to_summary()


def _profile():  # noqa: ANN202
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).to("neuron")
    x = torch.randn(4, 32, device="neuron")

    def step():
        model(x).pow(2).mean().backward()

    return profile(step, steps=2, warmup=1, mode="eager", chip="trn2")


def test_html_bar_segments_add_up_to_the_step_time_shown():
    s = _summary()
    h = render_html(s)
    bar = re.search(r"<div class='bdbar' data-step-ns='([^']+)'>(.*?)</div></div>", h)
    assert bar, "the mean bar is drawn"
    step = float(bar.group(1))
    assert step == pytest.approx(s["step_time_ns"], rel=1e-12)
    ns = [float(v) for v in re.findall(r"data-ns='([^']+)'", bar.group(2))]
    assert sum(ns) == pytest.approx(step, rel=1e-9)
    widths = [float(v) for v in re.findall(r"width:([0-9.]+)%", bar.group(2))]
    assert sum(widths) == pytest.approx(100.0, abs=0.01)
    # it comes before the tabs: at the top of the profile
    assert h.index("Where the step time goes") < h.index("class='tabs'")


def test_html_recommendation_opens_the_tab_holding_its_rows_and_marks_them():
    s = _summary()
    rec = s["breakdown"]["recommendations"][0]
    assert rec["tab"] == "optable" and rec["ops"]
    h = render_html(s)
    uid = re.search(r"id='(nstu[0-9a-f]+)'", h).group(1)
    labels = [t.label for t in profile_tabs(s)]
    m = re.search(r"<label class='reclink' for='([^']+)'>see the Op table rows</label>", h)
    assert m and m.group(1) == f"{uid}-t{labels.index('Op table')}"
    marked = re.findall(r"<tr class='just'[^>]*><td>([^<]+)</td>", h)
    op_rows = {r["op"] for r in s["op_table"]}
    assert set(marked) == set(rec["ops"]) & op_rows and marked


def test_html_what_if_tab_marks_the_current_row_with_the_profile_step():
    s = _summary()
    h = render_html(s)
    cur = re.findall(r"<tr class='cur[^']*' data-current='true' data-step-ns='([^']+)'>", h)
    assert [float(v) for v in cur] == [pytest.approx(s["step_time_ns"], rel=1e-12)]
    # a profile made by the Python API: its lines are that call (escaped in HTML), never `%%neuron` syntax
    assert str(escape('profile(step, mode="adaptive", chip="trn2", steps=2, warmup=1)')) in h
    assert "%%neuron --mode" not in h
    assert "What if" in [t.label for t in profile_tabs(s)]


def test_undetermined_categories_are_said_not_drawn_as_zero():
    s = _summary()
    s = {**s, "breakdown": {**s["breakdown"], "parts": [
        {**p, "ns": None, "share": None, "determined": False, "note": "not separable: measured op times"}
        if p["key"] == "launch" else p for p in s["breakdown"]["parts"]]}}
    h = render_html(s)
    assert "launch overhead not determined" in h and "not separable: measured op times" in h
    assert "data-key='launch'" not in h.split("class='bdsteps'")[0]
    assert "not determined: launch overhead" in render_text(s)


def test_text_names_the_parts_the_recommendation_and_the_best_variant():
    s = _summary()
    t = render_text(s)
    launch = next(p for p in s["breakdown"]["parts"] if p["key"] == "launch")
    assert f"launch overhead {launch['share'] * 100:.1f}%" in t
    assert "-> " + s["breakdown"]["recommendations"][0]["text"] in t
    best = next(r for r in s["what_if"]["rows"] if r["variant"] == s["what_if"]["best"])
    assert best["run"] in t


def test_a_what_if_re_modeled_from_some_steps_says_which_in_html_and_text(monkeypatch):
    """Above the summary's op limit the what-if comes from the first whole steps: the table and the text say so."""
    from neuron_studio.profiler.analysis import what_if

    prof = _profile()
    monkeypatch.setattr(what_if, "REMODEL_MAX_OPS", int(prof.trace.ops["step"].value_counts().min()))
    s = prof.to_summary()
    note = s["what_if"]["scope_note"]
    assert s["what_if"]["rows"] and "first 1 of the 2 profiled steps" in note
    h = render_html(s)
    assert f"<div class='muted wi-scope'>{escape(note)}</div>" in h
    assert h.index("wi-scope") < h.index("<table class='wi'>")     # above the rows it qualifies
    assert f"({note})" in render_text(s)
