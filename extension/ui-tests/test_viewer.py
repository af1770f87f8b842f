"""The trace viewer in a real JupyterLab and Chromium: zoom (wheel, drag, keyboard) changes the visible range
and the axis ticks, hover shows an op, a click shows its shapes, module and source and the source and kernel
links open the files at their lines, search finds an op; the profile output's Timeline tab (saved notebook)
and the inline HTML (no extension) work too."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import (  # noqa: E402
    ARTIFACTS, CHROMIUM, FIXTURES, HERE, REPO, TOKEN, code_cell, cursor, lab_server, notebook,
)

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

sys.path.insert(0, str(HERE.parent))
from neuron_studio_lab import core, trace_view  # noqa: E402

HOSTILE = "<img src=x onerror=alert(1)>"
TARGET = "aten::special_op"  # one op of its name: search finds exactly it
N = 3000


def _ops():  # noqa: ANN202
    """N ops on 2 cores and the five engines, 100-400 ns each; two host threads launching a third of them."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(3)
    start = np.cumsum(rng.integers(50, 300, N)) + 10**9
    dur = rng.integers(100, 400, N)
    names = [HOSTILE if i % 50 == 0 else "aten::mm" if i % 3 else "aten::add" for i in range(N)]
    names[1234] = TARGET
    launch = np.where(np.arange(N) % 3 == 0, 120, 0)
    return pa.table({
        "seq": pa.array(np.arange(N), pa.int64()), "name": names,
        "core": pa.array(np.arange(N) % 2, pa.int32()),
        "engine": [["tensor", "vector", "scalar", "gpsimd", "dma"][i % 5] for i in range(N)],
        "start_ns": pa.array(start, pa.int64()), "end_ns": pa.array(start + dur, pa.int64()),
        "flops": pa.array([10**6] * N, pa.int64()), "bytes_read": pa.array([64] * N, pa.int64()),
        "bytes_written": pa.array([64] * N, pa.int64()), "bound": ["compute"] * N,
        "module": [f"block.{i % 4}.mlp" for i in range(N)],
        "source": [f"train.py:{10 + i % 20}" for i in range(N)],
        "thread": pa.array(np.where(np.arange(N) % 2 == 0, 7, 9), pa.int64()),
        "step": pa.array(np.arange(N) * 3 // N + 1, pa.int32()),
        "launch_ns": pa.array(launch, pa.int64()),
        "input_shapes": [f"{8 + i % 3}x64;64x128" for i in range(N)],
        "output_shapes": [f"{8 + i % 3}x128" for i in range(N)],
    })


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("viewer-root")
    (root / "train.py").write_text("".join(f"line_{i} = {i}\n" for i in range(1, 41)))
    (root / "kernels").mkdir()
    shutil.copy(REPO / "kernels" / "matmul.py", root / "kernels" / "matmul.py")
    payload = json.loads((FIXTURES / "profile.json").read_text())
    payload["hot_ops"] = [{"op": TARGET, "module": "block.1.mlp", "source": "train.py:14", "device_ns": 100,
                           "share": 0.5, "bound": "compute", "engine": "tensor", "count": 1,
                           "kernel": {"name": "matmul_kernel", "kind": "candidate", "file": str(root / "kernels/matmul.py"),
                                      "line": 3, "saving_ns": 10, "scope": "op"}}]
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    rid = store.begin_run(cell_source="%%neuron\nstep()", options={}, name="viewer", notebook="v.ipynb",
                          mode="eager", chip="trn2", backend="emulated")
    payload["run_id"] = rid
    store.save_table(rid, "device_ops", _ops())
    (root / "v.ipynb").write_text("{}")
    payload["trace_view"] = trace_view.trace_window(str(root), "v.ipynb", rid, start_ns=None, end_ns=None,
                                                    width_px=800)
    store.finish_run(rid, status="ok", summary=payload, step_time_ns=payload["step_time_ns"], mfu=payload["mfu"])
    (root / "v.ipynb").write_text(notebook([code_cell("c1", "%%neuron\nstep()", payload, "<Profile viewer>")]))
    with lab_server(root, tmp_path_factory.mktemp("home")) as base:
        yield {"base": base, "root": root, "run": rid, "payload": payload}


def _view(viewer) -> tuple[int, int, str]:  # noqa: ANN001
    return (int(viewer.get_attribute("data-view-start")), int(viewer.get_attribute("data-view-end")),
            viewer.get_attribute("data-ticks"))


def _wait_view_change(page, viewer, before: tuple) -> tuple:  # noqa: ANN001
    page.wait_for_function("([v, s, e]) => v.getAttribute('data-view-start') !== s || "
                           "v.getAttribute('data-view-end') !== e",
                           arg=[viewer.element_handle(), str(before[0]), str(before[1])], timeout=10_000)
    return _view(viewer)


def _open_panel_on_run(page, lab: dict, workspace: str, *, await_open: bool):  # noqa: ANN001, ANN202
    """Open the Neuron Profiler panel on the test run in a fresh workspace; the viewer's locator. With
    `await_open` False the command is not awaited (it resolves only once the panel has loaded)."""
    page.goto(f"{lab['base']}/lab/workspaces/{workspace}?reset&token={TOKEN}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                           "'neuron-studio:open-profiler')", timeout=60_000)
    call = "window.jupyterapp.commands.execute('neuron-studio:open-profiler', {path: 'v.ipynb', runId: rid})"
    script = f"([rid]) => {call}.then(() => null)" if await_open else f"([rid]) => {{ void {call}; return null; }}"
    page.evaluate(script, [lab["run"]])
    viewer = page.locator(".ns-PanelTrace .ns-TraceViewer")
    viewer.wait_for(timeout=30_000)
    return viewer


def test_panel_viewer_zoom_hover_click_search(lab: dict, page) -> None:  # noqa: ANN001
    page.goto(f"{lab['base']}/lab/workspaces/ns-viewer/tree/v.ipynb?reset&token={TOKEN}")
    page.locator(".jp-OutputArea-output .ns-Profile").wait_for(timeout=60_000)  # the notebook is open
    page.evaluate("([rid]) => window.jupyterapp.commands.execute('neuron-studio:open-profiler', "
                  "{path: 'v.ipynb', runId: rid}).then(() => null)", [lab["run"]])
    viewer = page.locator(".ns-PanelTrace .ns-TraceViewer")
    viewer.wait_for(timeout=30_000)
    page.wait_for_function("() => /boxes/.test(document.querySelector('.ns-PanelTrace .ns-TraceStatus').textContent)",
                           timeout=30_000)
    labels = viewer.locator(".ns-TraceLabel").all_inner_texts()
    assert labels == ["Host thread 1 · launches", "Host thread 2 · launches"] + [
        f"NC{c} {e}" for c in (0, 1) for e in ("Tensor", "Vector", "Scalar", "GpSimd", "DMA")]
    whole = _view(viewer)
    assert whole[0] <= 0 and whole[1] > 0 and len(whole[2].split("|")) >= 3
    page.screenshot(path=str(ARTIFACTS / "viewer-01-whole-run.png"))

    # wheel: zoom in around the pointer -> a narrower range, other ticks
    canvas = viewer.locator(".ns-TraceCanvas")
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 60)
    for _ in range(5):
        page.mouse.wheel(0, -300)
    zoomed = _wait_view_change(page, viewer, whole)
    page.wait_for_timeout(300)
    zoomed = _view(viewer)
    assert zoomed[1] - zoomed[0] < (whole[1] - whole[0]) * 0.8
    assert zoomed[2] != whole[2]  # the axis ticks changed with the range
    # drag: pan right-to-left moves the window later in time, same span
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 60)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + 60, steps=5)
    page.mouse.up()
    panned = _wait_view_change(page, viewer, zoomed)
    assert panned[0] > zoomed[0]
    assert abs((panned[1] - panned[0]) - (zoomed[1] - zoomed[0])) <= 2
    # keyboard: W zooms in (half the span), D pans, F shows the whole run again
    viewer.locator(".ns-TraceStage").focus()
    page.keyboard.press("w")
    keyed = _wait_view_change(page, viewer, panned)
    assert keyed[1] - keyed[0] == pytest.approx((panned[1] - panned[0]) / 2, rel=0.02)
    page.keyboard.press("d")
    moved = _wait_view_change(page, viewer, keyed)
    assert moved[0] > keyed[0]
    page.keyboard.press("f")
    fitted = _wait_view_change(page, viewer, moved)
    assert fitted[1] - fitted[0] == pytest.approx(whole[1] - whole[0], rel=0.01)

    # search finds the one op of that name, and a click on the result zooms to it and shows its details
    viewer.locator(".ns-TraceSearch").fill("special_op")
    viewer.locator(".ns-TraceSearch").press("Enter")
    result = viewer.locator(".ns-TraceResult")
    result.first.wait_for(timeout=10_000)
    assert result.count() == 1 and "1 op matches" in viewer.locator(".ns-TraceResultCount").inner_text()
    result.first.locator("a").click()
    details = viewer.locator(".ns-TraceDetails[data-seq='1234']")
    details.wait_for(timeout=10_000)
    text = details.inner_text()
    for expected in [TARGET, "NC0 DMA", "9x64;64x128", "9x128", "block.2.mlp", "train.py:24", "matmul_kernel"]:
        assert expected in text, expected
    page.wait_for_timeout(600)  # the zoomed window's boxes arrive
    page.screenshot(path=str(ARTIFACTS / "viewer-02-op.png"))

    # hover: the op is in the middle of the view, on its lane
    label = viewer.locator(".ns-TraceLabel", has_text="NC0 DMA")
    lane_top = label.evaluate("n => n.getBoundingClientRect().top")
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, lane_top + 8)
    tooltip = viewer.locator(".ns-TraceTooltip")
    page.wait_for_function("t => !t.hidden", arg=tooltip.element_handle(), timeout=10_000)
    assert TARGET in tooltip.inner_text() and "NC0 DMA" in tooltip.inner_text()

    # a launch links to its op: flows are drawn at this zoom
    assert int(viewer.get_attribute("data-flows")) > 0

    # the source link opens train.py at the op's line; the kernel link opens the kernel at its line
    details.locator(".ns-SourceLink").click()
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === 'train.py'; }", timeout=15_000)
    page.wait_for_timeout(500)
    assert cursor(page) == {"path": "train.py", "line": 23, "text": "line_24 = 24"}
    page.evaluate("window.jupyterapp.commands.execute('neuron-studio:open-profiler', {path: 'v.ipynb'})"
                  ".then(() => null)")
    details.locator(".ns-KernelLink").click()
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === 'kernels/matmul.py'; }", timeout=15_000)
    page.wait_for_timeout(500)
    assert cursor(page)["line"] == 2
    assert not page.errors  # type: ignore[attr-defined]


def _edge_label(page, viewer, edge: str, name: str, visible: tuple[float, float]) -> dict:  # noqa: ANN001
    """Wait until the box named `name` is cut by the view's `edge` ("left"/"right") with `visible` (min, max) px
    of it in view and its label is drawn; that label as the viewer publishes it (`data-edge-labels`)."""
    handle = page.wait_for_function("""([v, edge, name, lo, hi]) => {
        const all = JSON.parse(v.getAttribute('data-edge-labels') || '[]');
        return all.find(l => l.name === name && (edge === 'left' ? l.boxStart < 0 : l.boxEnd > l.viewWidth)
          && Math.min(l.boxEnd, l.viewWidth) - Math.max(l.boxStart, 0) >= lo
          && Math.min(l.boxEnd, l.viewWidth) - Math.max(l.boxStart, 0) <= hi) || null;
    }""", arg=[viewer.element_handle(), edge, name, *visible], timeout=10_000)
    return handle.json_value()


def _assert_in_visible_part(label: dict) -> None:
    """The label is the box's name or its prefix and an ellipsis, drawn inside the box's part in view."""
    name, text = label["name"], label["text"]
    assert text == name or (text.endswith("…") and len(text) > 1 and name.startswith(text[:-1])), label
    lo, hi = max(label["boxStart"], 0), min(label["boxEnd"], label["viewWidth"])
    assert lo < label["x"] and label["x"] + label["width"] <= hi + 0.01, label


def test_zoomed_edge_labels_sit_in_the_visible_part_of_cut_boxes(lab: dict, page) -> None:  # noqa: ANN001
    """Zoomed in, a box cut by the view's left or right edge shows its name from the edge inward (shortened to a
    prefix and an ellipsis only when the visible part is too narrow), never outside the box or the view."""
    page = page.context.new_page()
    page.errors = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))  # type: ignore[attr-defined]
    page.on("dialog", lambda d: page.errors.append(f"dialog: {d.message}"))  # type: ignore[attr-defined]
    viewer = _open_panel_on_run(page, lab, "ns-viewer-edges", await_open=True)
    page.wait_for_function("v => v.hasAttribute('data-source-paint-ms')", arg=viewer.element_handle(), timeout=30_000)
    stage = viewer.locator(".ns-TraceStage")
    canvas = viewer.locator(".ns-TraceCanvas")

    def reveal_and_zoom() -> None:
        """The op in the middle of the view, 4/9 of its width (search, result, then W twice)."""
        viewer.locator(".ns-TraceSearch").fill("special_op")
        viewer.locator(".ns-TraceSearch").press("Enter")
        viewer.locator(".ns-TraceResult a").first.click()
        viewer.locator(".ns-TraceDetails[data-seq='1234']").wait_for(timeout=10_000)
        stage.focus()
        for _ in range(2):
            before = _view(viewer)
            page.keyboard.press("w")
            _wait_view_change(page, viewer, before)

    def drag(dx: float) -> None:
        box = canvas.bounding_box()
        y = box["y"] + 60  # on a lane (a drag pans; it is no click, the pointer moves)
        page.mouse.move(box["x"] + box["width"] / 2, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + dx, y, steps=4)
        page.mouse.up()

    # D twice pans the op (at 28-72% of the view) to -12..32%: cut by the left edge, its whole name fits
    reveal_and_zoom()
    for _ in range(2):
        page.keyboard.press("d")
    left = _edge_label(page, viewer, "left", TARGET, (100, 10_000))
    _assert_in_visible_part(left)
    assert left["text"] == TARGET and left["x"] < 10  # from the edge inward, whole
    page.screenshot(path=str(ARTIFACTS / "viewer-03-left-edge-label.png"))
    # dragged left until 40 px of it are in view: a prefix and an ellipsis, still starting at the edge
    drag(-(left["boxEnd"] - 40))
    narrow = _edge_label(page, viewer, "left", TARGET, (30, 50))
    _assert_in_visible_part(narrow)
    assert narrow["text"] != TARGET and narrow["text"].endswith("…") and narrow["x"] < 10

    # A twice pans it to 68-112%: cut by the right edge, the label starts in the box and ends inside the view
    reveal_and_zoom()
    for _ in range(2):
        page.keyboard.press("a")
    right = _edge_label(page, viewer, "right", TARGET, (100, 10_000))
    _assert_in_visible_part(right)
    assert right["text"] == TARGET and right["x"] > right["boxStart"]
    drag(right["viewWidth"] - right["boxStart"] - 40)
    narrow = _edge_label(page, viewer, "right", TARGET, (30, 50))
    _assert_in_visible_part(narrow)
    assert narrow["text"] != TARGET and narrow["text"].endswith("…")
    # every cut box on every lane (the hostile names too: canvas text, never markup) follows the same layout
    for label in json.loads(viewer.get_attribute("data-edge-labels")):
        _assert_in_visible_part(label)
    assert not page.errors  # type: ignore[attr-defined]
    page.close()


def test_panel_draws_the_stored_overview_until_the_server_answers(lab: dict, page) -> None:  # noqa: ANN001
    """The panel's first paint does not wait for the server to read the run's table: it draws the overview
    stored in the run's summary (the same lanes, coarser boxes, said so in the status), then the server's
    whole-run answer replaces it. The panel's op list (which reads the table too) waits for that answer."""
    page = page.context.new_page()
    timeline_requests: list = []
    page.on("request", lambda r: timeline_requests.append(r.url) if "/timeline?" in r.url else None)
    page.errors = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))  # type: ignore[attr-defined]
    held: list = []
    page.route("**/neuron-studio/runs/*/trace?*", lambda route: held.append(route))  # no answer until released
    # not awaited: the command resolves once the panel has loaded, i.e. after the held answer
    viewer = _open_panel_on_run(page, lab, "ns-viewer-overview", await_open=False)
    page.wait_for_function("v => v.hasAttribute('data-first-paint-ms')", arg=viewer.element_handle(), timeout=30_000)
    overview = lab["payload"]["trace_view"]
    overview_boxes = sum(len(lane["start"]) for lane in overview["lanes"])
    status = viewer.locator(".ns-TraceStatus").inner_text()
    assert viewer.get_attribute("data-from") == "overview" and not viewer.get_attribute("data-source-paint-ms")
    assert f"{overview_boxes:,} boxes" in status and "overview" in status and "loading" in status, status
    assert viewer.locator(".ns-TraceLabel").count() == len(overview["lanes"])
    assert len(held) == 1 and "start_ns" not in held[0].request.url  # the whole run, asked for at once
    page.wait_for_timeout(3500)  # longer than the panel waits for a hidden viewer
    assert timeline_requests == []  # the visible viewer is loading: the op list waits for it
    for route in held:
        route.continue_()
    page.unroute("**/neuron-studio/runs/*/trace?*")
    page.wait_for_function("v => v.hasAttribute('data-source-paint-ms')", arg=viewer.element_handle(),
                           timeout=30_000)
    status = viewer.locator(".ns-TraceStatus").inner_text()
    assert viewer.get_attribute("data-from") == "source" and "overview" not in status, status
    answer = trace_view.trace_window(str(lab["root"]), "v.ipynb", lab["run"], start_ns=None, end_ns=None,
                                     width_px=int(held[0].request.url.split("width_px=")[1].split("&")[0]))
    assert f"{sum(len(lane['start']) for lane in answer['lanes']):,} boxes" in status
    page.locator(".ns-ProfilerPanel .ns-OpsBox table").first.wait_for(timeout=30_000)
    assert len(timeline_requests) == 1
    assert not page.errors  # type: ignore[attr-defined]
    page.close()


def test_zoom_frames_repaint_the_viewer_not_the_panel(lab: dict, page) -> None:  # noqa: ANN001
    """A zoom/pan frame changes the canvas, the range and maybe the status: the viewer is a layer of its own,
    so the browser repaints it, not the whole Neuron Profiler panel around it (its summary, tables and op
    list: tens of ms a frame with software raster). Read from Chromium's own paint events (CDP tracing)."""
    page = page.context.new_page()
    viewer = _open_panel_on_run(page, lab, "ns-viewer-paint", await_open=True)
    page.wait_for_function("v => v.hasAttribute('data-source-paint-ms')", arg=viewer.element_handle(), timeout=30_000)
    page.locator(".ns-ProfilerPanel .ns-OpsBox table").first.wait_for(timeout=30_000)  # the panel is complete
    page.wait_for_timeout(500)
    cdp = page.context.new_cdp_session(page)
    events: list = []
    done: list = []
    cdp.on("Tracing.dataCollected", lambda p: events.extend(p["value"]))
    cdp.on("Tracing.tracingComplete", lambda p: done.append(True))
    cdp.send("Tracing.start", {"categories": "devtools.timeline,disabled-by-default-devtools.timeline",
                               "transferMode": "ReportEvents"})
    box = viewer.locator(".ns-TraceCanvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 3, box["y"] + 60)
    view = _view(viewer)
    for _ in range(4):
        page.mouse.wheel(0, -200)
        view = _wait_view_change(page, viewer, view)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + 60, steps=4)
    page.mouse.up()
    _wait_view_change(page, viewer, view)
    page.wait_for_timeout(300)
    cdp.send("Tracing.end")
    page.wait_for_function("() => new Promise(r => setTimeout(() => r(true), 50))")
    for _ in range(100):
        if done:
            break
        page.wait_for_timeout(100)
    painted = [e["args"]["data"].get("nodeName", "") for e in events
               if e.get("name") == "Paint" and "data" in e.get("args", {})]
    assert any("ns-Trace" in n for n in painted), painted  # the frames were painted and recorded
    assert not [n for n in painted if "ns-ProfilerPanel" in n or "jp-MainAreaWidget" in n], painted
    page.close()


def test_output_timeline_tab_is_the_viewer(lab: dict, page) -> None:  # noqa: ANN001
    page = page.context.new_page()  # the other test's page may hold a notebook with unsaved changes
    page.errors = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))  # type: ignore[attr-defined]
    held: list = []
    page.route("**/neuron-studio/runs/*/trace?*", lambda route: held.append(route))  # no answer until released
    page.goto(f"{lab['base']}/lab/workspaces/ns-viewer-out/tree/v.ipynb?reset&token={TOKEN}")
    profile = page.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=30_000)
    profile.locator(".ns-Tab", has_text="Timeline").click()
    viewer = profile.locator(".ns-TraceViewer")
    # the output's overview at once, the stored run's answer (asked for at once) when the server gives it
    page.wait_for_function("v => v.hasAttribute('data-first-paint-ms')", arg=viewer.element_handle(), timeout=30_000)
    assert viewer.get_attribute("data-from") == "overview" and len(held) == 1
    for route in held:
        route.continue_()
    page.unroute("**/neuron-studio/runs/*/trace?*")
    page.wait_for_function("v => v.getAttribute('data-from') === 'source'", arg=viewer.element_handle(),
                           timeout=30_000)
    page.wait_for_function("v => /boxes/.test(v.querySelector('.ns-TraceStatus').textContent)",
                           arg=viewer.element_handle(), timeout=30_000)
    before = _view(viewer)
    viewer.locator(".ns-TraceStage").focus()
    page.keyboard.press("w")
    after = _wait_view_change(page, viewer, before)
    assert after[1] - after[0] < before[1] - before[0]
    assert profile.locator("img").count() == 0
    assert not page.errors  # type: ignore[attr-defined]
    page.close()


def test_inline_html_static_trace(lab: dict, page) -> None:  # noqa: ANN001
    """Without the extension (GitHub, nbviewer, VS Code): the static SVG trace with tooltips and a note."""
    from neuron_studio.ui.html import render_html

    payload = dict(lab["payload"])
    page = page.context.new_page()  # a blank page, not the JupyterLab one (its timers would touch removed nodes)
    page.errors = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))  # type: ignore[attr-defined]
    page.set_content(f"<html><body>{render_html(payload)}</body></html>")
    page.locator("label", has_text="Timeline").click()
    trace = page.locator("[data-ns-trace='static']")
    assert trace.is_visible()
    lanes = trace.locator("text.ns-lane").all_text_contents()
    assert lanes[:2] == ["Host thread 1 · launches", "Host thread 2 · launches"] and "NC1 DMA" in lanes
    assert trace.locator("text.ns-tick").count() >= 4
    assert trace.locator("text.ns-step").all_text_contents() == ["step 1", "step 2", "step 3"]
    titles = trace.locator("rect.ns-box title").all_text_contents()
    assert any("ops merged" in t for t in titles)
    assert "Perfetto" in trace.inner_text() and "JupyterLab" in trace.inner_text()
    assert page.locator("img").count() == 0 and not page.errors  # type: ignore[attr-defined]
    page.close()
