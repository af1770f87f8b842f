"""The step-time breakdown and the what-if advisor in a real JupyterLab and Chromium: inline (the MIME renderer
of a saved notebook output) and in the Neuron Profiler panel. The payload is a real profile's summary."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import ARTIFACTS, CHROMIUM, HERE, TOKEN, code_cell, fmt_ns, lab_server, notebook  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

sys.path.insert(0, str(HERE.parent))
from neuron_studio_lab import core  # noqa: E402

CELL = "%%neuron --steps 3 --name bd\nloss = model(x).pow(2).mean(); loss.backward(); loss.item()"


def _payload() -> dict:
    """An eager run of a small MLP (launch-bound: the breakdown recommends adaptive eager or compile), its what-if
    re-modeled from its first two steps (the summary's op limit set to theirs, as for a run of 50,000+ ops)."""
    import torch

    import neuron_studio  # noqa: F401 - registers the neuron device
    from neuron_studio.profiler.analysis import what_if
    from neuron_studio.profiler.capture import profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
    x = torch.randn(4, 32, device="neuron")

    def step():
        loss = model(x).pow(2).mean()
        loss.backward()
        loss.item()

    prof = profile(step, steps=3, warmup=1, mode="eager", chip="trn2")
    limit = what_if.REMODEL_MAX_OPS
    what_if.REMODEL_MAX_OPS = int(prof.trace.ops["step"].value_counts().sort_index().iloc[:2].sum())
    try:
        payload = json.loads(json.dumps(prof.to_summary()))
    finally:
        what_if.REMODEL_MAX_OPS = limit
    assert payload["what_if"]["scope_note"] and len(payload["what_if"]["remodeled_steps"]) == 2
    return payload


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("bd-root")
    payload = _payload()
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    run = store.begin_run(cell_source=CELL, options={}, name="bd", notebook="bd.ipynb", mode="eager", chip="trn2",
                          backend="emulated")
    payload["run_id"] = run
    store.finish_run(run, status="ok", summary=payload, step_time_ns=payload["step_time_ns"], mfu=payload["mfu"])
    (root / "bd.ipynb").write_text(notebook([code_cell("c1", CELL, payload, "<Profile bd>")]))
    with lab_server(root, tmp_path_factory.mktemp("bd-home")) as base:
        yield {"base": base, "root": root, "payload": payload}


def _check_breakdown(view, payload: dict) -> None:  # noqa: ANN001
    """The mean bar's segments add up to the step time the view shows; each step's bar to its step."""
    bd = view.locator(".ns-Breakdown")
    bd.wait_for(timeout=60_000)
    step_shown = view.locator(".ns-Metric", has_text="step time").locator(".ns-Metric-value").inner_text()
    assert step_shown == fmt_ns(payload["step_time_ns"])
    mean = bd.locator(".ns-BreakdownBar-mean")
    seg_ns = [float(x) for x in mean.locator(".ns-BreakdownSeg").evaluate_all(
        "els => els.map(e => e.getAttribute('data-ns'))")]
    assert float(mean.get_attribute("data-step-ns")) == pytest.approx(payload["step_time_ns"], rel=1e-12)
    assert sum(seg_ns) == pytest.approx(payload["step_time_ns"], rel=1e-9)
    assert f"{step_shown} per step" in bd.locator(".ns-BreakdownHead").inner_text()
    # the drawn widths fill the bar (the segments are the whole step, nothing left over or beyond)
    widths = mean.evaluate("b => [...b.children].reduce((s, c) => s + c.getBoundingClientRect().width, 0)")
    inner = mean.evaluate("b => b.clientWidth")
    assert widths == pytest.approx(inner, abs=1.5)
    steps = bd.locator(".ns-BreakdownBar-step")
    assert steps.count() == len(payload["breakdown"]["steps"]) == payload["steps"]
    for i in range(steps.count()):
        bar = steps.nth(i)
        ns = [float(x) for x in bar.locator(".ns-BreakdownSeg").evaluate_all(
            "els => els.map(e => e.getAttribute('data-ns'))")]
        assert sum(ns) == pytest.approx(float(bar.get_attribute("data-step-ns")), rel=1e-9)


def _check_recommendation_and_advisor(view, payload: dict) -> None:  # noqa: ANN001
    rec = payload["breakdown"]["recommendations"][0]
    assert rec["tab"] == "optable"
    link = view.locator(".ns-Rec", has_text=rec["text"]).locator(".ns-RecLink")
    link.click()
    active = view.locator(".ns-TabBar .ns-Tab.ns-mod-active")
    assert active.inner_text() == "Op table"
    marked = view.locator(".ns-TabBody .ns-OpTable tbody tr.ns-mod-justified")
    assert marked.count() > 0
    names = [marked.nth(i).locator("td").first.inner_text() for i in range(marked.count())]
    assert set(names) == set(rec["ops"]) & {r["op"] for r in payload["op_table"]}
    assert marked.first.is_visible()
    # the What if tab: the row for this profile's mode and chip is the profile's step time
    view.locator(".ns-TabBar .ns-Tab", has_text="What if").click()
    # which profiled steps the rows were re-modeled from, above them
    assert view.locator(".ns-WhatIf .ns-WhatIfScope").inner_text() == payload["what_if"]["scope_note"]
    cur = view.locator(".ns-WhatIfTable tbody tr[data-current='true']")
    assert cur.count() == 1
    cells = cur.locator("td")
    assert (cur.get_attribute("data-mode"), cur.get_attribute("data-chip")) == (payload["mode"], payload["chip"])
    assert cells.nth(1).inner_text() == fmt_ns(payload["step_time_ns"])
    assert float(cur.get_attribute("data-step-ns")) == payload["step_time_ns"]
    best = view.locator(".ns-WhatIfTable tbody tr.ns-mod-best")
    best_run = view.locator(".ns-WhatIfTable tbody tr.ns-mod-best-run")    # its command, on the line under it
    # the payload was made by the Python API: its command is that call, never `%%neuron` syntax
    assert best.count() == 1 and best_run.count() == 1 and 'profile(step, mode="' in best_run.inner_text()
    assert "%%neuron --mode" not in view.locator(".ns-WhatIfTable").inner_text()
    # a profile not run from a notebook %%neuron cell (here the Python API) has no Insert buttons, and says why
    assert view.locator("button.ns-InsertRun").count() == 0
    assert "Insert needs a profile of a %%neuron cell in a notebook" in view.locator(".ns-NoInsertNote").inner_text()


def test_breakdown_and_advisor_inline_and_in_the_panel(lab: dict, page) -> None:  # noqa: ANN001
    p = lab["payload"]
    page.goto(f"{lab['base']}/lab/workspaces/ns-bd/tree/bd.ipynb?reset&token={TOKEN}")
    view = page.locator(".jp-OutputArea-output .ns-Profile")
    view.wait_for(timeout=30_000)
    _check_breakdown(view, p)
    page.screenshot(path=str(ARTIFACTS / "20-breakdown-inline.png"))
    _check_recommendation_and_advisor(view, p)
    page.screenshot(path=str(ARTIFACTS / "21-what-if-inline.png"))
    # the Neuron Profiler panel's run detail draws the same
    view.locator(".ns-OpenProfiler").click()
    detail = page.locator(".ns-ProfilerPanel .ns-Detail .ns-Profile")
    detail.wait_for(timeout=60_000)   # the machine may be busy: the run's detail is a server round trip
    _check_breakdown(detail, p)
    _check_recommendation_and_advisor(detail, p)
    page.screenshot(path=str(ARTIFACTS / "22-breakdown-panel.png"))
    assert page.errors == []  # type: ignore[attr-defined]


def test_html_fallback_recommendation_opens_its_tab(lab: dict, page) -> None:  # noqa: ANN001
    """The self-contained HTML (other frontends, `neuron-studio report`): no script; the recommendation's label
    switches to the op table, where its rows are marked."""
    from neuron_studio.ui.html import render_html

    p = lab["payload"]
    out = lab["root"] / "report.html"
    out.write_text(f"<!doctype html><html><body>{render_html(p)}</body></html>")
    pg = page.context.new_page()
    pg.goto(out.as_uri())
    bar = pg.locator(".bdbar").first
    ns = [float(x) for x in bar.locator(".seg").evaluate_all("els => els.map(e => e.getAttribute('data-ns'))")]
    assert sum(ns) == pytest.approx(p["step_time_ns"], rel=1e-9)
    pg.locator("label.reclink").first.click()
    rows = pg.locator(".pane tr.just")
    assert rows.count() > 0 and rows.first.is_visible()
    assert pg.locator("script").count() == 0
    pg.close()
