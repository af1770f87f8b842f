"""An imported GPU trace (torch.profiler, ROCm MI250, from ../shared/traces) in a real JupyterLab and Chromium:
the notebook output and the Neuron Profiler panel both show the measured GPU breakdown and the same job
modeled on Trainium. No kernel needed: the run is stored with `neuron_studio.imported_runs.store_imported`
and the notebook's saved output holds its summary."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import ARTIFACTS, CHROMIUM, REPO, TOKEN, code_cell, fmt_ns, fmt_pct, lab_server, notebook  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

sys.path.insert(0, str(REPO / "tests"))
import shared_data  # noqa: E402  (tests/shared_data.py: skips without the traces, fails in CI)

TRACE = shared_data.require("traces", module_level=True) / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from neuron_studio.imported_runs import store_imported
    from neuron_studio.store import RunStore

    root = tmp_path_factory.mktemp("lab-imported")
    run_id, summary = store_imported(RunStore(root / ".neuron_studio"), [TRACE])
    cell = code_cell("imp-1", "!neuron-studio import amd_trace.json.gz", summary, "<Profile imported>")
    (root / "imported.ipynb").write_text(notebook([cell]))
    with lab_server(root, tmp_path_factory.mktemp("home-imported")) as base:
        yield {"base": base, "run_id": run_id, "summary": summary}


def _check_gpu_tabs(view, s: dict) -> None:  # noqa: ANN001
    g = s["gpu"]
    v = g["vs_trainium"]
    view.locator(".ns-Tab", has_text="GPU (measured)").click()
    measured = view.locator(".ns-TabPage[data-tab='GPU (measured)']").inner_text()
    assert f"compute {fmt_ns(g['temporal']['compute_ns'])} ({fmt_pct(g['temporal']['compute_share'])})" in measured
    assert g["kernels"][0]["name"][:40] in measured
    view.locator(".ns-Tab", has_text="GPU → Trainium").click()
    page_text = view.locator(".ns-TabPage[data-tab='GPU → Trainium']").inner_text()
    assert f"{v['chip']} step (modeled)" in page_text and fmt_ns(v["trainium_step_ns"]) in page_text
    assert fmt_ns(v["gpu_step_ns"]) in page_text
    assert v["ops"][0]["op"] in page_text and "no hourly price known" in page_text


def test_imported_gpu_trace_in_notebook_and_panel(lab: dict, page) -> None:  # noqa: ANN001
    s = lab["summary"]
    page.goto(f"{lab['base']}/lab/workspaces/ns-imp/tree/imported.ipynb?reset&token={TOKEN}")
    profile = page.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=30_000)
    text = profile.inner_text()
    assert "backend: imported" in text and "emulated" not in text
    assert TRACE.name in text
    tabs = profile.locator(".ns-Tab").all_inner_texts()
    assert "GPU (measured)" in tabs and "GPU → Trainium" in tabs
    _check_gpu_tabs(profile, s)
    page.screenshot(path=str(ARTIFACTS / "10-imported-gpu-vs-trainium.png"))

    profile.locator(".ns-OpenProfiler").click()
    panel = page.locator(".ns-ProfilerPanel")
    panel.wait_for()
    # the imported run belongs to no notebook: listed by default, in its own group, and the label says so
    panel.locator(".ns-PathLabel:not(:empty)").wait_for(timeout=15_000)
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "13-panel-run-list.png"))      # docs/issue-28: before/after the fix
    row = panel.locator(f".ns-RunGroup[data-group='unowned'] .ns-RunRow[data-run-id='{lab['run_id']}']")
    row.wait_for(timeout=15_000)
    assert "imported trace" in row.inner_text()
    # the run list fits the panel (an imported trace's long path does not push Status/Step/MFU past its edge)
    right = panel.evaluate("p => p.getBoundingClientRect().right")
    assert panel.locator(".ns-RunList").evaluate("t => t.getBoundingClientRect().right") <= right + 1
    assert "1 run with no notebook" in panel.locator(".ns-PathLabel").inner_text()
    assert panel.locator(".ns-RunGroupHead").all_inner_texts() == [
        "This notebook (imported.ipynb): no runs yet", "Imported traces, scripts and jobs (no notebook) · 1"]
    row.click()
    detail = panel.locator(".ns-Detail")
    detail.locator(".ns-Tab", has_text="GPU → Trainium").wait_for(timeout=15_000)
    _check_gpu_tabs(detail, s)
    page.screenshot(path=str(ARTIFACTS / "11-panel-gpu-vs-trainium.png"))
    assert page.errors == []  # type: ignore[attr-defined]
