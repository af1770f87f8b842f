"""The what-if advisor's "Insert & run" / "Insert" against a LIVE kernel in JupyterLab and Chromium: a notebook runs
tutorial 01's MLP step under `%%neuron`; a row's button puts the row's cell right below the profiled cell (which stays
as it was), selects it and runs it, and the run measures what the row predicted. An edited profiled cell makes the
button say why instead; the Neuron Profiler panel's advisor inserts into the open notebook too.
Screenshots: `test-artifacts/insert_*.png`.
"""
from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
pytest.importorskip("ipykernel")
from conftest import (  # noqa: E402
    ARTIFACTS, CHROMIUM, PROFILE_MIME, code_cell, fmt_ns, lab_server, notebook, open_notebook,
)

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

RUN_TIMEOUT_MS = 180_000
SETUP = ("%load_ext neuron_studio\nimport torch\nimport torch.nn as nn\n\ntorch.manual_seed(0)\n"
         "model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to(\"neuron\")\n"
         "x = torch.randn(64, 256, device=\"neuron\")\ntarget = torch.randn(64, 256, device=\"neuron\")")
# tutorial 01's step; its gradients reset first, so that every run of the cell starts from the same state
BODY = ("model.zero_grad(set_to_none=True)\nloss = nn.functional.mse_loss(model(x), target)\nloss.backward()")
CELL = f"%%neuron --name first-step\n{BODY}"


def _nb() -> str:
    return notebook([code_cell("setup", SETUP), code_cell("profiled", CELL),
                     {"cell_type": "markdown", "id": "after", "metadata": {}, "source": "The cell after."}])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("insert-root")
    (root / "variant.ipynb").write_text(_nb())
    env = {"NEURON_STUDIO_BACKEND": "emulated", "PYTHONUNBUFFERED": "1"}
    with lab_server(root, tmp_path_factory.mktemp("insert-home"), env=env) as base:
        yield {"base": base, "root": root}


def _sources(page) -> list[str]:  # noqa: ANN001
    return page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets"
                         ".map(c => c.model.sharedModel.getSource())")


def _payload(page, index: int) -> dict | None:  # noqa: ANN001
    return page.evaluate(
        """([i, mime]) => {
            const w = window.jupyterapp.shell.widgets('main');
            let nb = null;
            for (const x of w) { if (x.context && x.context.path === 'variant.ipynb') nb = x; }
            const outs = nb.content.widgets[i].model.outputs;
            for (let k = 0; k < outs.length; k++) { const d = outs.get(k).data[mime]; if (d) return d; }
            return null;
        }""", [index, PROFILE_MIME])


def _row(profile, variant: str):  # noqa: ANN001
    profile.locator(".ns-TabBar .ns-Tab[data-tab='What if']").click()
    row = profile.locator(f".ns-WhatIfTable tbody tr[data-variant='{variant}']")
    row.wait_for(timeout=15_000)
    return row


def test_insert_and_run_measures_the_prediction(lab: dict, page) -> None:  # noqa: ANN001
    t0 = time.monotonic()
    open_notebook(page, lab["base"], "variant.ipynb", f"ns-ins-{uuid.uuid4().hex[:8]}", kernel_timeout=60_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    profile = cells.nth(1).locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=RUN_TIMEOUT_MS)
    run_id = int(profile.locator(".ns-RunId").inner_text().removeprefix("run #"))

    # the breakdown's best-variant line names the What if table's best row and has the same buttons
    best = profile.locator(".ns-BestVariant")
    named = re.search(r"\b(eager|adaptive|compile) on (trn\d)\b", best.inner_text())
    assert named is not None and best.locator("button.ns-InsertRun").count() == 2
    assert "ns-mod-best" in (_row(profile, f"{named[1]} on {named[2]}").get_attribute("class") or "")
    profile.locator(".ns-TabBar .ns-Tab[data-tab='Summary']").click()

    # -- "Insert & run" on the adaptive row: a new cell right below the profiled cell, selected, run --
    row = _row(profile, "adaptive on trn2")
    predicted = float(row.get_attribute("data-step-ns"))
    low, high = float(row.get_attribute("data-low-ns")), float(row.get_attribute("data-high-ns"))
    assert low < predicted < high
    page.screenshot(path=str(ARTIFACTS / "insert_01-what-if.png"))
    row.locator("button.ns-InsertRun[data-run='true']").click()
    expected = f"%%neuron --name first-step-adaptive-trn2 --mode adaptive --chip trn2 --compare {run_id}\n{BODY}"
    page.wait_for_function("n => window.jupyterapp.shell.currentWidget.content.widgets.length === n", arg=4,
                           timeout=15_000)
    assert _sources(page) == [SETUP, CELL, expected, "The cell after."]   # the profiled cell is untouched
    assert page.evaluate("window.jupyterapp.shell.currentWidget.content.activeCellIndex") == 2
    new_profile = cells.nth(2).locator(".jp-OutputArea-output .ns-Profile")
    new_profile.wait_for(timeout=RUN_TIMEOUT_MS)
    row.locator(".ns-InsertStatus", has_text="Inserted below the profiled cell and run").wait_for(timeout=30_000)
    ran = _payload(page, 2)
    assert ran is not None and (ran["mode"], ran["chip"], ran["name"]) == ("adaptive", "trn2", "first-step-adaptive-trn2")
    # the run measures (on the emulator: models from the ops it ran) what the row predicted, inside its range
    assert low <= ran["step_time_ns"] <= high
    assert ran["step_time_ns"] == pytest.approx(predicted, rel=1e-6)
    assert ran["compare"]["run_id"] == run_id       # and its output diffs against the profiled run
    # ... with the row's prediction beside what the run measured
    note = new_profile.locator(".ns-Metric", has_text="step time").locator(".ns-Metric-note").inner_text()
    assert f"vs run #{run_id} · predicted {fmt_ns(predicted)} (within its range)" in note
    new_profile.locator(".ns-TabBar .ns-Tab[data-tab='Diff']").click()
    said = new_profile.locator(".ns-Prediction").inner_text()
    assert said.startswith(f"predicted {fmt_ns(predicted)} by run {run_id}'s What if (adaptive on trn2, range ")
    assert f"this run: {fmt_ns(ran['step_time_ns'])}, within the range, 1.00× the prediction" in said
    new_profile.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "insert_02-inserted-and-run.png"))

    # -- "Insert" only: below the profiled cell again, not run --
    row = _row(profile, "compile on trn1")
    row.locator("button.ns-InsertRun[data-run='false']").click()
    page.wait_for_function("n => window.jupyterapp.shell.currentWidget.content.widgets.length === n", arg=5,
                           timeout=15_000)
    src = _sources(page)
    assert src[2] == (f"%%neuron --name first-step-compile-trn1 --mode compile --chip trn1 --compare {run_id}\n{BODY}")
    assert src[3] == expected and src[1] == CELL
    assert page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets[2].model.executionCount") is None

    # -- the profiled cell edited: the button says why, inserts nothing, Copy is still there --
    page.evaluate("s => window.jupyterapp.shell.currentWidget.content.widgets[1].model.sharedModel.setSource(s)",
                  CELL.replace("mse_loss", "l1_loss"))
    profile = cells.nth(1).locator(".jp-OutputArea-output .ns-Profile")
    row = _row(profile, "eager on trn3")
    row.locator("button.ns-InsertRun[data-run='false']").click()
    status = row.locator(".ns-InsertStatus.ns-mod-error")
    status.wait_for(timeout=15_000)
    assert "was edited after this run" in status.inner_text() and "copy the line" in status.inner_text()
    assert len(_sources(page)) == 5
    assert row.locator("button.ns-CopyRun").is_visible()
    page.screenshot(path=str(ARTIFACTS / "insert_03-edited.png"))
    page.evaluate("s => window.jupyterapp.shell.currentWidget.content.widgets[1].model.sharedModel.setSource(s)", CELL)

    # -- from the Neuron Profiler panel: the run's notebook is open, so the row's cell goes below the profiled cell --
    page.evaluate("window.jupyterapp.commands.execute('neuron-studio:open-profiler', {path: 'variant.ipynb'})")
    panel = page.locator(".ns-ProfilerPanel")
    panel.locator(f".ns-RunRow[data-run-id='{run_id}']").click()
    detail = panel.locator(".ns-Detail .ns-Profile").first
    detail.wait_for(timeout=30_000)
    row = _row(detail, "eager on trn1")
    row.locator("button.ns-InsertRun[data-run='false']").click()
    # the notebook comes to the front (the panel is hidden behind it) with the new cell active
    row.locator(".ns-InsertStatus", has_text="Inserted below the profiled cell").wait_for(state="attached",
                                                                                         timeout=15_000)
    assert page.evaluate("window.jupyterapp.shell.currentWidget.context.path") == "variant.ipynb"
    src = page.evaluate(
        """() => { for (const x of window.jupyterapp.shell.widgets('main')) {
                if (x.context && x.context.path === 'variant.ipynb')
                    return x.content.widgets.map(c => c.model.sharedModel.getSource()); } }""")
    assert src[1] == CELL and len(src) == 6
    assert src[2] == f"%%neuron --name first-step-eager-trn1 --mode eager --chip trn1 --compare {run_id}\n{BODY}"
    page.screenshot(path=str(ARTIFACTS / "insert_04-from-panel.png"))

    # -- the notebook closed: the panel's button says so and inserts nothing --
    page.evaluate(
        """() => { for (const x of window.jupyterapp.shell.widgets('main')) {
                if (x.context && x.context.path === 'variant.ipynb') { x.context.model.dirty = false; x.dispose(); } }
            window.jupyterapp.shell.activateById('neuron-studio-profiler'); }""")
    row = _row(detail, "compile on trn2")
    row.locator("button.ns-InsertRun[data-run='true']").click()
    status = row.locator(".ns-InsertStatus.ns-mod-error")
    status.wait_for(timeout=15_000)
    assert "variant.ipynb is not open" in status.inner_text() and "copy the line" in status.inner_text()
    assert page.evaluate("window.jupyterapp.shell.currentWidget.id") == "neuron-studio-profiler"
    assert not page.errors, page.errors  # type: ignore[attr-defined]
    print(f"insert-variant browser test: {time.monotonic() - t0:.1f} s")
