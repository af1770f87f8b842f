"""The extension against a LIVE kernel: a copy of notebooks/01_getting_started.ipynb runs up to its first
`%%neuron` cell on the emulated device, then the rendered profile, the Neuron Profiler panel and a
`cell-<In>:<line>` source are checked in Chromium. Two cells appended to the copy then profile a hand-written
RMSNorm (six small launches a fused NKI kernel replaces: a genuine kernel candidate on the hot path) and the
panel's kernel link opens the NKI kernel at its `def` line. Screenshots: `test-artifacts/live_*.png`.

Run: `pytest extension/ui-tests -q` (see test_ui.py for the requirements).
"""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
pytest.importorskip("ipykernel")
from conftest import (  # noqa: E402
    ARTIFACTS, CHROMIUM, REPO, assert_line_in_view, code_cell, cursor, doc_screenshot, lab_server, open_notebook,
)

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

NOTEBOOK = REPO / "notebooks" / "01_getting_started.ipynb"
RUN_TIMEOUT_MS = 120_000
# a step whose hot path has a kernel that can change its bound: an RMSNorm written as six small eager ops
RMSNORM_DEF = """class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, h):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

norm = RMSNorm(1024).to("neuron")
h = torch.randn(64, 1024, device="neuron")"""
RMSNORM_RUN = "%%neuron --name rmsnorm-step\ny = norm(h)"


@pytest.fixture(scope="module")
def live_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("live-root")
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    nb = json.loads((root / NOTEBOOK.name).read_text())
    nb["cells"] += [code_cell("live-rmsnorm-def", RMSNORM_DEF), code_cell("live-rmsnorm-run", RMSNORM_RUN)]
    (root / NOTEBOOK.name).write_text(json.dumps(nb))
    env = {"NEURON_STUDIO_BACKEND": "emulated", "PYTHONUNBUFFERED": "1"}
    with lab_server(root, tmp_path_factory.mktemp("live-home"), env=env) as base:
        yield {"base": base, "root": root, "path": NOTEBOOK.name}


def test_live_kernel_profile_panel_and_navigation(live_lab: dict, page) -> None:  # noqa: ANN001
    open_notebook(page, live_lab["base"], live_lab["path"], f"ns-live-{uuid.uuid4().hex[:8]}", kernel_timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "live_01-opened.png"))

    # -- run every cell up to and including the first %%neuron cell --
    neuron_cell = page.evaluate(
        """async () => {
            const app = window.jupyterapp;
            const nb = app.shell.currentWidget.content;
            const idx = nb.widgets.findIndex(
                c => c.model.type === 'code' && c.model.sharedModel.getSource().startsWith('%%neuron'));
            nb.activeCellIndex = idx;
            nb.deselectAll();
            await app.commands.execute('notebook:run-all-above');
            nb.activeCellIndex = idx;
            nb.deselectAll();
            await app.commands.execute('notebook:run-cell');
            return idx;
        }"""
    )
    assert neuron_cell > 0
    cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(neuron_cell)
    profile = cell.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=RUN_TIMEOUT_MS)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", state="attached",
                           timeout=RUN_TIMEOUT_MS)
    count = page.evaluate(
        f"window.jupyterapp.shell.currentWidget.content.widgets[{neuron_cell}].model.executionCount")
    assert isinstance(count, int) and count >= 1

    # -- the custom renderer drew the live payload (not the HTML fallback) --
    assert cell.locator(".nstu").count() == 0
    text = profile.inner_text()
    for expected in ["first-step", "mode: eager", "chip: trn2", "backend: emulated", "modeled",
                     "step time (modeled)", "MFU", "MBU", "launches/step", "Engine utilization", "Hot ops",
                     "Open in Neuron Profiler"]:
        assert expected in text, expected
    engines = profile.locator(".ns-Engines .ns-Bar").evaluate_all("ns => ns.map(n => n.dataset.engine)")
    assert engines == ["tensor", "vector", "scalar", "gpsimd", "dma"]
    step = profile.locator(".ns-Metric", has_text="step time").locator(".ns-Metric-value").inner_text()
    assert step.endswith(("ns", "µs", "ms", " s")) and step != "—"
    assert page.locator(".ns-StatusItem").inner_text() == "Neuron: emulated · trn2 · eager"
    run_id = int(profile.locator(".ns-RunId").inner_text().removeprefix("run #"))
    cell.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "live_02-profile.png"))
    doc_screenshot(cell, "profile-output.png")     # the README's picture of a profile output

    # -- the Neuron Profiler panel on this notebook's store; open the run --
    page.evaluate("window.jupyterapp.commands.execute('neuron-studio:open-profiler')")
    panel = page.locator(".ns-ProfilerPanel")
    row = panel.locator(f".ns-RunRow[data-run-id='{run_id}']")
    row.wait_for(timeout=15_000)
    assert "first-step" in row.inner_text() and "ok" in row.inner_text()
    row.click()
    detail = panel.locator(".ns-Detail")
    detail.locator(".ns-TimelineBox .ns-Timeline").wait_for(timeout=15_000)
    assert f"first-step — #{run_id}" in detail.inner_text()
    hot = detail.locator(".ns-PanelHotPath")
    hot.wait_for()
    page.screenshot(path=str(ARTIFACTS / "live_03-profiler-panel.png"))

    # -- a source `cell-<In>:<line>` in the panel's hot path: the cell becomes active, cursor on the line --
    page.locator(".lm-TabBar-tab", has_text="Neuron Profiler").click()
    source = hot.locator(".ns-SourceLink-cell").first
    src = source.get_attribute("data-source")
    named, body_line = (int(x) for x in src.removeprefix("cell-").split(":"))
    # In [count], or count + 1: under IPython >= 9 the runner names the running cell one past its In number
    # (execution_count is incremented before the cell runs); the extension resolves both to this cell
    assert named in (count, count + 1), (src, count)
    source.click()
    active = page.locator(f".jp-Cell.jp-mod-active[data-neuron-source='{src}']")
    active.wait_for(timeout=15_000)
    cell_source = page.evaluate(
        f"window.jupyterapp.shell.currentWidget.content.widgets[{neuron_cell}].model.sharedModel.getSource()")
    assert cell_source.startswith("%%neuron")
    pos = cursor(page)
    assert pos["path"] == live_lab["path"]
    assert pos["line"] == body_line  # 0-based editor line = body line (the %%neuron line comes first)
    assert pos["text"] == cell_source.splitlines()[body_line]
    assert page.evaluate("window.jupyterapp.shell.currentWidget.content.activeCellIndex") == neuron_cell
    page.screenshot(path=str(ARTIFACTS / "live_04-cell-source.png"))

    # -- a step with a genuine kernel candidate: the appended RMSNorm cells --
    rms_cell = page.evaluate(
        """async () => {
            const app = window.jupyterapp;
            const nb = app.shell.currentWidget.content;
            const idx = nb.widgets.findIndex(c => c.model.sharedModel.getSource().startsWith('%%neuron --name rmsnorm-step'));
            for (const i of [idx - 1, idx]) {
                nb.activeCellIndex = i;
                nb.deselectAll();
                await app.commands.execute('notebook:run-cell');
            }
            return idx;
        }"""
    )
    rms = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(rms_cell)
    rms_profile = rms.locator(".jp-OutputArea-output .ns-Profile")
    rms_profile.wait_for(timeout=RUN_TIMEOUT_MS)
    rms_id = int(rms_profile.locator(".ns-RunId").inner_text().removeprefix("run #"))
    page.locator(".lm-TabBar-tab", has_text="Neuron Profiler").click()
    panel.locator(".ns-Refresh").click()
    rms_row = panel.locator(f".ns-RunRow[data-run-id='{rms_id}']")
    rms_row.wait_for(timeout=15_000)
    rms_row.click()
    detail.locator(f"h3", has_text=f"rmsnorm-step — #{rms_id}").wait_for(timeout=15_000)
    hot = detail.locator(".ns-PanelHotPath")
    hot.wait_for(timeout=15_000)
    page.screenshot(path=str(ARTIFACTS / "live_05-rmsnorm-panel.png"))

    # -- the hot op's kernel link: the installed kernel (outside the server root) opens read-only at its def line,
    # the whole line in view --
    link = hot.locator(".ns-KernelLink", has_text="rmsnorm_kernel").first
    file, line = link.get_attribute("data-file"), int(link.get_attribute("data-line"))
    assert Path(file).name == "rmsnorm.py"
    assert Path(file).read_text().splitlines()[line - 1].startswith("def rmsnorm_kernel(")
    link.click()
    viewer = page.locator(f".jp-MainAreaWidget[data-neuron-line='{line}']")
    viewer.wait_for(timeout=15_000)
    current = viewer.locator(".ns-SourceLine.ns-mod-current")
    assert current.get_attribute("data-line") == str(line)
    assert Path(file).read_text().splitlines()[line - 1] in current.inner_text()
    assert page.locator(".lm-TabBar-tab.jp-mod-current", has_text=f"{Path(file).stem}").count() >= 1
    assert_line_in_view(page, f".jp-MainAreaWidget[data-neuron-line='{line}'] .ns-SourceViewBox", ".ns-mod-current")
    page.screenshot(path=str(ARTIFACTS / "live_06-kernel-source.png"))

    assert page.errors == []  # type: ignore[attr-defined]
