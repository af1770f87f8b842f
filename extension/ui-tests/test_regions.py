"""Launch-region boundaries in a real JupyterLab and Chromium (issue 26): an adaptive-eager run profiled by the
studio and stored as a cell run is opened in the Neuron Profiler panel; its trace draws each core's "Launch
regions" lane above the engines, the region the user's `y += 1` ended is drawn in the split colour, and hovering
it says what ended it, at which line, and the fix."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import ARTIFACTS, CHROMIUM, TOKEN, code_cell, lab_server, notebook  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

#: The viewer's colour of a region the user's code ended (viewer.ts SPLIT_COLOR).
SPLIT_RGB = (0xD8, 0x1B, 0x60)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    import torch

    import neuron_studio  # noqa: F401 - registers the device
    from neuron_studio.profiler.capture import profile
    from neuron_studio.session import save_profile
    from neuron_studio.store import RunStore

    root = tmp_path_factory.mktemp("regions-root")
    src = root / "train.py"
    src.write_text("import torch\n\ndef step(m, opt, x):\n    y = m(x)\n    y += 1\n"
                   "    y.pow(2).mean().backward()\n    opt.step()\n    opt.zero_grad()\n")
    ns: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)   # noqa: S102 - the test's own step, at its file's lines
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(8, 32, device="neuron")
    prof = profile(lambda: ns["step"](m, opt, x), steps=2, warmup=1, mode="adaptive")
    store = RunStore(root / ".neuron_studio")
    rid = store.begin_run(cell_source="%%neuron --mode adaptive\nstep(m, opt, x)", options={}, name="regions",
                          notebook="r.ipynb", mode="adaptive", chip="trn2", backend="emulated")
    save_profile(store, rid, prof)
    summary = prof.to_summary(run_id=rid, name="regions", notebook="r.ipynb")
    store.finish_run(rid, status="ok", summary=summary, step_time_ns=int(summary["step_time_ns"]), mfu=summary["mfu"])
    (root / "r.ipynb").write_text(notebook([code_cell("c1", "%%neuron --mode adaptive\nstep(m, opt, x)", summary,
                                                      "<Profile regions>")]))
    regions = prof.fusion_regions()
    user = regions[regions["boundary_source"].fillna("").str.endswith("train.py:5")]
    assert len(user) == 2, regions[["boundary_op", "boundary_source"]]
    # the viewer's times are relative to the run's origin on the device clock, as the server answers them
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from neuron_studio_lab import trace_view

    origin = trace_view.trace_window(str(root), "r.ipynb", rid, start_ns=None, end_ns=None, width_px=100)["origin_ns"]
    with lab_server(root, tmp_path_factory.mktemp("home")) as base:
        yield {"base": base, "run": rid, "user": user.iloc[-1], "n_regions": len(regions), "origin": origin}


def test_panel_trace_draws_the_region_the_users_in_place_op_ended(lab: dict, page) -> None:  # noqa: ANN001
    page.goto(f"{lab['base']}/lab/workspaces/ns-regions?reset&token={TOKEN}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                           "'neuron-studio:open-profiler')", timeout=60_000)
    page.evaluate("([rid]) => window.jupyterapp.commands.execute('neuron-studio:open-profiler', "
                  "{path: 'r.ipynb', runId: rid}).then(() => null)", [lab["run"]])
    viewer = page.locator(".ns-PanelTrace .ns-TraceViewer")
    viewer.wait_for(timeout=30_000)
    page.wait_for_function("v => v.getAttribute('data-from') === 'source'", arg=viewer.element_handle(),
                           timeout=30_000)
    labels = viewer.locator(".ns-TraceLabel").all_inner_texts()
    assert "NC0 Launch regions" in labels
    assert labels.index("NC0 Launch regions") + 1 == labels.index("NC0 Tensor")
    title = viewer.locator(".ns-TraceLabel", has_text="NC0 Launch regions").get_attribute("title")
    assert f"{lab['n_regions']:,} launched regions" in title

    # the region of step 2's `y += 1`: where it is on the canvas, from the view's range
    start, end = int(viewer.get_attribute("data-view-start")), int(viewer.get_attribute("data-view-end"))
    user = lab["user"]
    mid = (user["start_ns"] + user["end_ns"]) / 2 - lab["origin"]
    viewer.locator(".ns-TraceCanvas").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    canvas = viewer.locator(".ns-TraceCanvas").bounding_box()
    x = canvas["x"] + (mid - start) / (end - start) * canvas["width"]
    lane_top = viewer.locator(".ns-TraceLabel", has_text="NC0 Launch regions").evaluate(
        "n => n.getBoundingClientRect().top")
    y = lane_top + 8
    rgb = page.evaluate("([x, y]) => { const c = document.querySelector('.ns-PanelTrace .ns-TraceCanvas');"
                        " const r = c.getBoundingClientRect(); const s = c.width / r.width;"
                        " return Array.from(c.getContext('2d').getImageData(Math.round((x - r.left) * s),"
                        " Math.round((y - r.top) * s), 1, 1).data).slice(0, 3); }", [x, y])
    assert all(abs(a - b) <= 40 for a, b in zip(rgb, SPLIT_RGB)), rgb     # drawn in the split colour
    page.mouse.move(x - 30, y + 40)
    page.mouse.move(x, y, steps=5)
    tooltip = viewer.locator(".ns-TraceTooltip")
    page.wait_for_function("t => !t.hidden", arg=tooltip.element_handle(), timeout=10_000)
    text = tooltip.inner_text()
    viewer.screenshot(path=str(ARTIFACTS / "regions-01-split.png"))
    assert "launch region: 1 ops (aten::add_)" in text, text
    assert "in-place aten::add_" in text and "train.py:5" in text, text
    assert "this `x += y` splits the region: write `x = x + y`" in text, text
    assert not page.errors  # type: ignore[attr-defined]
