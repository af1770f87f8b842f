"""Issue 28's UI, in a real JupyterLab and Chromium against a live kernel: a notebook defines a model in one cell
and profiles its training step under `%%neuron` (a long run name) in the next; then

- a click on an op box in the output's Timeline opens that op's details (not only Find → result);
- at the default output width nothing is clipped: every table of every tab fits the output, no cell's text is cut,
  the What if commands sit on one line with their buttons in a column of their own, the header's
  "Open in Neuron Profiler" stays on the title's line, and the panel does not repeat it;
- every op source shown reads `cell [N] line M` (or `file.py:L`), never an ipykernel temp path or `cell-N:M`;
- the hot path says a row's reason once per bound, and counts read "1 launch";
- a failing `%%neuron` cell's traceback starts with the user's frames (no studio frame), and `%neuron_show 99999`
  prints its message without a traceback;
- the Neuron Profiler panel has a launcher tile and a left-sidebar entry, and lists the runs its title names.

Screenshots: `test-artifacts/readable-*.png` (docs/issue-28/ holds the before/after pairs).
"""
from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
pytest.importorskip("ipykernel")
from conftest import ARTIFACTS, CHROMIUM, HERE, code_cell, lab_server, notebook, open_notebook  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

RUN_TIMEOUT_MS = 240_000
LONG_NAME = "adamw-gelu-mlp-baseline-with-a-long-descriptive-run-name-for-the-report"
SETUP = ("%load_ext neuron_studio\nimport torch\nimport torch.nn as nn\n\ntorch.manual_seed(0)\n"
         "model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to(\"neuron\")\n"
         "opt = torch.optim.AdamW(model.parameters())\n"
         "x = torch.randn(64, 256, device=\"neuron\")\ntarget = torch.randn(64, 256, device=\"neuron\")")
STEP = (f"%%neuron --name {LONG_NAME}\nopt.zero_grad(set_to_none=True)\n"
        "loss = nn.functional.mse_loss(model(x), target)\nloss.backward()\nopt.step()")
FAILING = "%%neuron\nwrong = torch.randn(3, 7, device=\"neuron\")\ny = model(wrong)"
MISSING = "%neuron_show 99999"
#: how an op source may read on screen
SOURCE_FORMAT = re.compile(r"^(cell \[\d+\] line \d+|[\w.\-]+\.py:\d+)$")


def _nb() -> str:
    return notebook([code_cell(f"c{i}", src) for i, src in enumerate([SETUP, STEP, FAILING, MISSING])])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("readable-root")
    (root / "readable.ipynb").write_text(_nb())
    # another notebook's run in the same folder's store: the panel of readable.ipynb must not list it as its own
    sys.path.insert(0, str(HERE.parent))
    from neuron_studio_lab import core

    store = core.run_store_module().RunStore(root / ".neuron_studio")
    rid = store.begin_run(cell_source="%%neuron\nother()", options={}, name="other-notebook", notebook="other.ipynb",
                          mode="eager", chip="trn2", backend="emulated")
    store.finish_run(rid, status="ok", summary=None)
    env = {"NEURON_STUDIO_BACKEND": "emulated", "PYTHONUNBUFFERED": "1"}
    with lab_server(root, tmp_path_factory.mktemp("readable-home"), env=env) as base:
        yield {"base": base, "root": root}


def _shot(page, name: str) -> None:  # noqa: ANN001
    page.screenshot(path=str(ARTIFACTS / f"readable-{name}.png"))


@pytest.fixture(scope="module")
def ran(lab: dict, page):  # noqa: ANN001, ANN201
    """The notebook run top to bottom (Run All stops at the failing cell: the last two run one by one)."""
    page.set_viewport_size({"width": 1280, "height": 900})
    open_notebook(page, lab["base"], "readable.ipynb", f"ns-read-{uuid.uuid4().hex[:8]}", kernel_timeout=120_000)
    done = """(n) => { const w = window.jupyterapp.shell.currentWidget;
                       const cells = w.content.widgets.slice(0, n);
                       return cells.every(c => c.model.executionCount !== null)
                              && w.sessionContext.session.kernel.status === 'idle'; }"""
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")    # stops at the failing cell
    page.wait_for_function(done, arg=3, timeout=RUN_TIMEOUT_MS)
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 3; }")
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
    page.wait_for_function(done, arg=4, timeout=RUN_TIMEOUT_MS)
    profile = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=60_000)
    return profile


def _outputs(page, index: int) -> list[dict]:  # noqa: ANN001
    return page.evaluate("""(i) => { const outs = window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs;
                                     const r = []; for (let k = 0; k < outs.length; k++) r.push(outs.get(k).toJSON());
                                     return r; }""", index)


def _tab(profile, name: str):  # noqa: ANN001, ANN202
    profile.locator(f".ns-TabBar .ns-Tab[data-tab='{name}']").click()
    return profile.locator(".ns-TabPage:not([hidden])")


def _clipped(profile) -> list[str]:  # noqa: ANN001
    """Tables wider than the output, and cells whose text is cut, in the visible tab of `profile`."""
    return profile.evaluate("""p => {
        const out = p.closest('.jp-OutputArea-output') || p; const right = out.getBoundingClientRect().right + 1;
        const bad = [];
        for (const t of p.querySelectorAll('.ns-TabPage:not([hidden]) table')) {
            if (!t.offsetParent) continue;
            const r = t.getBoundingClientRect();
            if (r.right > right) bad.push(`table ${t.className} ends at ${Math.round(r.right)} > ${Math.round(right)}`);
            for (const c of t.querySelectorAll('td, th')) {
                if (c.scrollWidth > c.clientWidth + 1) bad.push(`cell "${c.textContent.slice(0, 40)}" cut`);
            }
        }
        return bad;
    }""")


def test_click_on_an_op_box_opens_its_details(ran, page) -> None:  # noqa: ANN001
    viewer = _tab(ran, "Timeline").locator(".ns-TraceViewer")
    page.wait_for_function("v => v.hasAttribute('data-first-paint-ms')", arg=viewer.element_handle(), timeout=30_000)
    page.wait_for_timeout(800)
    stage = viewer.locator(".ns-TraceStage")
    stage.focus()
    for _ in range(3):
        page.keyboard.press("w")           # zoom in: single-op boxes
        page.wait_for_timeout(400)
    _shot(page, "timeline-zoomed")
    canvas = viewer.locator(".ns-TraceCanvas").bounding_box()
    labels = viewer.locator(".ns-TraceLabel")
    tooltip = viewer.locator(".ns-TraceTooltip")
    hit = None
    for k in range(labels.count()):
        top = labels.nth(k).evaluate("n => n.getBoundingClientRect().top")
        for frac in [i / 40 for i in range(4, 37)]:
            x, y = canvas["x"] + 150 + (canvas["width"] - 150) * frac, top + 8
            page.mouse.move(x, y)
            page.wait_for_timeout(30)
            if not tooltip.is_hidden() and "click for shapes" in tooltip.inner_text():
                hit = (x, y, tooltip.locator("b").inner_text())
                break
        if hit:
            break
    assert hit, "no single-op box found to click"
    page.mouse.click(hit[0], hit[1])
    box = viewer.locator(".ns-TraceDetailsBox")
    try:                                  # old code: nothing happened
        page.wait_for_function("b => b.childElementCount > 0", arg=box.element_handle(), timeout=10_000)
    finally:
        _shot(page, "timeline-click")
    details = viewer.locator(".ns-TraceDetails")
    assert details.count() == 1, box.inner_html()
    assert hit[2] in details.inner_text()
    source = details.locator("tr", has_text="Source").locator("td").inner_text()
    assert source == "—" or SOURCE_FORMAT.match(source), source


@pytest.mark.parametrize("width", [1280, 1024])
def test_every_tab_fits_the_output_width(ran, page, width: int) -> None:  # noqa: ANN001
    """The default output width: JupyterLab at 1280 px with the file browser open (≈ 860 px of output), and a
    smaller 1024 px window (≈ 600 px)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_timeout(400)
    bad = {}
    for name in ("Summary", "Hot path", "Op table", "What if", "Memory"):
        _tab(ran, name)
        page.wait_for_timeout(200)
        ran.scroll_into_view_if_needed()
        _shot(page, f"tab-{name.lower().replace(' ', '-')}{'' if width == 1280 else f'-{width}'}")
        found = _clipped(ran)
        if found:
            bad[name] = found[:5]
    page.set_viewport_size({"width": 1280, "height": 900})
    assert not bad, bad


def test_what_if_commands_on_one_line_buttons_in_their_own_column(ran, page) -> None:  # noqa: ANN001
    page_ = _tab(ran, "What if")
    rows = page_.locator(".ns-WhatIfTable tbody tr")
    assert rows.count() >= 3
    for i in range(rows.count()):
        row = rows.nth(i)
        code = row.locator("code")
        if not code.count():
            continue
        lines = code.evaluate("c => Math.round(c.getBoundingClientRect().height / parseFloat(getComputedStyle(c).lineHeight || 14))")
        assert lines <= 1, (code.inner_text(), lines)
        buttons = row.locator("button")
        cells = {b.evaluate("b => [...b.closest('tr').children].indexOf(b.closest('td'))") for b in buttons.all()}
        code_cell = code.evaluate("c => [...c.closest('tr').children].indexOf(c.closest('td'))")
        assert code_cell not in cells, "buttons share the command's cell"
        # one line, or (a narrow output) one button per line: never a line and a half
        tops = [round(b.bounding_box()["y"]) for b in buttons.all()]
        assert len(set(tops)) in (1, len(tops)), f"buttons wrap unevenly: {tops}"


def test_header_keeps_open_in_profiler_on_the_title_line(ran, page) -> None:  # noqa: ANN001
    title = ran.locator(".ns-Title")
    assert LONG_NAME in title.inner_text()
    button = ran.locator(".ns-OpenProfiler")
    t, b = title.bounding_box(), button.bounding_box()
    assert b["y"] < t["y"] + t["height"], "the button dropped below the title"


def test_one_source_format_everywhere(ran, page) -> None:  # noqa: ANN001
    shown = []
    for name in ("Hot path", "Memory"):
        tab = _tab(ran, name)
        page.wait_for_timeout(200)
        shown += [s.strip() for s in tab.locator(".ns-SourceLink, .ns-Source").all_inner_texts() if s.strip()]
    assert shown, "no source shown"
    wrong = [s for s in shown if not SOURCE_FORMAT.match(s)]
    assert not wrong, wrong


def test_hot_path_reasons_once_and_launch_counts(ran, page) -> None:  # noqa: ANN001
    tab = _tab(ran, "Hot path")
    reasons = [li for li in tab.locator(".ns-Why li").all_inner_texts()]
    sentences = [r.split(": ", 1)[-1] for r in reasons]
    assert len(sentences) == len(set(sentences)), reasons
    text = ran.inner_text()
    assert not re.search(r"\b1 launches\b", text)


def test_failing_cell_traceback_starts_with_user_frames(ran, page) -> None:  # noqa: ANN001
    outs = _outputs(page, 2)
    err = [o for o in outs if o.get("output_type") == "error"]
    assert err, outs
    tb = "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line) for line in err[0]["traceback"])
    assert "y = model(wrong)" in tb
    assert "neuron_studio" not in tb.split("y = model(wrong)")[0], tb   # no studio frame before the user's line
    assert "runner.py" not in tb and "magics.py" not in tb, tb
    _shot(page, "traceback")


def test_neuron_show_missing_run_prints_no_traceback(ran, page) -> None:  # noqa: ANN001
    outs = _outputs(page, 3)
    text = json.dumps(outs)
    assert "99999" in text
    assert "Traceback" not in text and "RunNotFound" not in text.replace("no run", ""), text


def test_profiler_panel_from_launcher_and_sidebar(ran, page, lab) -> None:  # noqa: ANN001
    page.evaluate("window.jupyterapp.commands.execute('launcher:create').then(() => null)")
    tile = page.locator(".jp-LauncherCard", has_text="Neuron Profiler")
    tile.first.wait_for(timeout=10_000)
    _shot(page, "launcher")
    tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[title*='Neuron']")
    assert tab.count() == 1, "no left-sidebar entry"
    tab.click()
    side = page.locator(".ns-Sidebar")
    side.wait_for(timeout=10_000)
    side.locator(".ns-SidebarOpen").click()
    panel = page.locator(".ns-ProfilerPanel")
    panel.wait_for(timeout=15_000)
    page.locator(".ns-ProfilerPanel .ns-RunRow").first.wait_for(timeout=15_000)
    _shot(page, "panel")
    label = panel.locator(".ns-PathLabel").inner_text()
    assert "readable.ipynb" in label
    notebooks = set(panel.locator(".ns-RunRow").evaluate_all("rs => rs.map(r => r.getAttribute('data-notebook'))"))
    assert notebooks and all(n.endswith("readable.ipynb") for n in notebooks), notebooks   # not other.ipynb
    panel.locator(".ns-RunRow").first.click()
    panel.locator(".ns-Profile").wait_for(timeout=30_000)
    assert panel.locator(".ns-OpenProfiler").count() == 0      # the panel does not offer to open itself


def test_fused_optimizer_row_inserts_and_runs_its_cell(ran, page) -> None:  # noqa: ANN001
    """The fused-optimizer row is a cell change: Insert & run (not only Copy) adds the profiled cell rebuilding `opt`
    fused once, below the profiled cell, and runs it: the new run's step has the fused update and is faster."""
    page.set_viewport_size({"width": 1280, "height": 900})
    # the notebook in front (an earlier test left the Neuron Profiler panel there)
    page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: 'readable.ipynb'})")
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " return !!w && !!w.context && w.context.path === 'readable.ipynb'; }", timeout=15_000)
    tab = _tab(ran, "What if")
    row = tab.locator(".ns-WhatIfTable tbody tr[data-variant='fused AdamW']")
    row.wait_for(timeout=15_000)
    predicted = float(row.get_attribute("data-step-ns"))
    _shot(page, "what-if-fused")
    n = page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets.length")
    row.locator("button.ns-InsertRun[data-run='true']").click()
    page.wait_for_function("n => window.jupyterapp.shell.currentWidget.content.widgets.length === n", arg=n + 1,
                           timeout=15_000)
    src = page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets[2].model.sharedModel.getSource()")
    lines = src.splitlines()
    assert lines[0].startswith(f"%%neuron --name {LONG_NAME}-fused --compare "), lines[0]
    assert lines[1].startswith('if not opt.defaults.get("fused"):')
    assert lines[2] == "    opt = torch.optim.AdamW(model.parameters(), fused=True)"
    assert src.endswith(STEP.split("\n", 1)[1])
    out = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output .ns-Profile")
    out.wait_for(timeout=RUN_TIMEOUT_MS)
    row.locator(".ns-InsertStatus", has_text="Inserted below the profiled cell and run").wait_for(timeout=30_000)
    payload = next(o["data"]["application/vnd.neuron-studio.profile+json"] for o in _outputs(page, 2)
                   if "application/vnd.neuron-studio.profile+json" in o.get("data", {}))
    first = next(o["data"]["application/vnd.neuron-studio.profile+json"] for o in _outputs(page, 1)
                 if "application/vnd.neuron-studio.profile+json" in o.get("data", {}))
    assert "aten::_fused_adamw_" in {r["op"] for r in payload["op_table"]}
    assert payload["step_time_ns"] < first["step_time_ns"]
    # the row predicted this run (a first step of the rebuilt optimizer: its state is created, as the profiled one's)
    assert payload["step_time_ns"] == pytest.approx(predicted, rel=0.05)
    out.scroll_into_view_if_needed()
    _shot(page, "fused-inserted-and-run")
