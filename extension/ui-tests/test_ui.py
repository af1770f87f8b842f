"""The extension in a real JupyterLab and Chromium (Python playwright, system /usr/bin/chromium).

Run: `pytest extension/ui-tests -q` (needs `pip install playwright` and `apt-get install chromium`;
never `playwright install`). Screenshots go to `test-artifacts/`. This module needs no kernel: the
notebook's saved output holds the fixture payload (tests/fixtures/profile.json, from a real profile);
test_live.py runs a kernel.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import (  # noqa: E402
    ARTIFACTS, CHROMIUM, FIXTURES, HERE, REPO, TOKEN, code_cell, cursor, fmt_ns, fmt_pct, fmt_signed, fmt_usd,
    lab_server, notebook,
)

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

FIXTURE = FIXTURES / "profile.json"
sys.path.insert(0, str(FIXTURES))
from make_profile import CELL_BODY, CELL_MAGIC, HOSTILE  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from neuron_studio_lab import core  # noqa: E402


def _seed(root: Path) -> dict:
    """A notebook whose saved output is the profile payload, a store with two runs of that cell,
    a device trace for the second, and the kernel file the hot op links to."""
    import pyarrow as pa

    # the fixture's /REPO paths (sources, kernel files) point into this server root, holding copies
    payload = json.loads(FIXTURE.read_text().replace('"/REPO/', json.dumps(str(root) + "/")[:-1]))
    for rel in ["kernels/matmul.py", "tests/models/blocks.py"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    src = f"{CELL_MAGIC}\n{CELL_BODY}"
    first = store.begin_run(cell_source=src, options={}, name="warmup", notebook="02.ipynb",
                            mode="eager", chip="trn2", backend="emulated")
    earlier = dict(payload, run_id=first, name="warmup", mode="eager", step_time_ns=1_500_000, mfu=0.25)
    earlier["op_table"] = [dict(r, device_ns=r["device_ns"] * 2) for r in payload["op_table"]]
    store.finish_run(first, status="ok", summary=earlier, step_time_ns=1_500_000, mfu=0.25)
    second = store.begin_run(cell_source=src, options={}, name="train-step", notebook="02.ipynb",
                             mode="adaptive", chip="trn2", backend="emulated")
    payload["run_id"] = second
    store.finish_run(second, status="ok", summary=payload, step_time_ns=payload["step_time_ns"],
                     mfu=payload["mfu"])
    n = 500
    engines = ["tensor", "vector", "scalar", "gpsimd", "dma"]
    store.save_table(second, "device_ops", pa.table({
        "seq": pa.array(range(n), pa.int64()),
        "name": [HOSTILE if i % 7 == 0 else "aten::mm" for i in range(n)],
        "core": pa.array([i % 2 for i in range(n)], pa.int32()),
        "engine": [engines[i % 5] for i in range(n)],
        "start_ns": pa.array([i * 40 for i in range(n)], pa.int64()),
        "end_ns": pa.array([i * 40 + 100 for i in range(n)], pa.int64()),
        "flops": pa.array([1000] * n, pa.int64()),
        "bytes_read": pa.array([64] * n, pa.int64()),
        "bytes_written": pa.array([64] * n, pa.int64()),
        "bound": ["compute"] * n,
        "module": ["block.attn.q_proj"] * n,
        "source": ["cell-1:2"] * n,
    }))
    (root / "02.ipynb").write_text(notebook([code_cell("cell-1", src, payload, "<Profile train-step>",
                                                       extra={"text/html": "<b>HTML fallback</b>"})]))
    (root / "empty.ipynb").write_text(notebook([code_cell("e1", "x = 1")]))
    # recompiles as the summary carries them (profiler/recompile_causes.py): Dynamo's guard text is data
    recompiles = [
        {"graph": "frame0", "shape": "4x50x16, 16x16, 16", "cause": "shapes",
         "reason": "new input shapes (4x50x16, 16x16, 16; compiled before for 4x37x16, 16x16, 16)",
         "detail": "0/0: tensor 'x' size mismatch at index 1. expected 37, actual 50"},
        {"graph": "frame0", "shape": "4x50x16, 16x16, 16", "cause": "value",
         "reason": "a Python value changed with the same input shapes: n is no longer 3",
         "detail": f"0/1: n == 3  # {HOSTILE}"},
    ]
    (root / "recompiles.ipynb").write_text(notebook([code_cell(
        "cell-1", src, dict(payload, recompiles=recompiles, badges=dict(payload["badges"], recompiles=2)))]))
    # a measured profile (Neuron Explorer Parquet, no host events) as its payload would be saved in a notebook
    sys.path.insert(0, str(REPO / "tests"))
    from make_explorer_fixtures import write_explorer_fixture

    from neuron_studio.profiler.neuron_profile import load_neuron_profile

    measured = load_neuron_profile(write_explorer_fixture(root / "explorer-out")).to_summary()
    (root / "measured.ipynb").write_text(notebook([code_cell("cell-1", "prof", measured)]))
    return {"first": first, "second": second, "payload": payload, "measured": measured}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("lab-root")
    seeded = _seed(root)
    with lab_server(root, tmp_path_factory.mktemp("home")) as base:
        yield {"base": base, "root": root, **seeded}


def _status(page) -> str:  # noqa: ANN001
    return page.locator(".ns-StatusItem").inner_text()


@contextlib.contextmanager
def _saved_profile(lab: dict, page, path: str, workspace: str,  # noqa: ANN001 - a playwright Page
                   width: int | None = None) -> Iterator[tuple]:
    """(a fresh tab, the profile output saved in notebook `path`) at a window `width` wide; the tab is closed after
    (a tab of an earlier test holds edited documents that would ask before a reload)."""
    pg = page.context.new_page()
    try:
        if width is not None:
            pg.set_viewport_size({"width": width, "height": 900})
        pg.goto(f"{lab['base']}/lab/workspaces/{workspace}/tree/{path}?reset&token={TOKEN}")
        profile = pg.locator(".jp-OutputArea-output .ns-Profile")
        profile.wait_for(timeout=30_000)
        yield pg, profile
    finally:
        pg.close()


def test_renderer_panel_and_kernel_link(lab: dict, page) -> None:  # noqa: ANN001
    p = lab["payload"]
    page.goto(f"{lab['base']}/lab/workspaces/ns-ui/tree/02.ipynb?reset&token={TOKEN}")
    profile = page.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=30_000)

    # -- the MIME renderer, from the saved output of a real payload (no kernel needed) --
    text = profile.inner_text()
    cost = p["cost"]
    for expected in ["train-step", f"run #{lab['second']}", "mode: adaptive", "chip: trn2",
                     "backend: emulated", "modeled", "step time (modeled)", fmt_ns(p["step_time_ns"]),
                     fmt_pct(p["mfu"]), fmt_pct(p["mbu"]), "MFU (modeled)", "MBU (modeled)",
                     f"{fmt_signed(p['compare']['step_time_delta_pct'])} vs run #{p['compare']['run_id']}",
                     f"{p['badges']['fallbacks']} CPU fallbacks", f"{p['badges']['sync_points']} sync points",
                     "0 recompiles", "Cost per 1M steps (modeled)",
                     # a saved output from before the per-1M fields: the renderer converts its per-1,000 figures
                     f"trn2: {fmt_usd(cost.get('per_1m_steps_usd') or cost['per_1000_steps_usd'] * 1000)}",
                     f"H100: {fmt_usd(cost.get('h100_per_1m_steps_usd') or cost['h100_per_1000_steps_usd'] * 1000)}",
                     "launches/step", "Open in Neuron Profiler"]:
        assert expected in text, expected
    tabs = profile.locator(".ns-Tab").all_inner_texts()
    assert tabs == ["Summary", "Hot path", "Op table", "Fallbacks & syncs", "Timeline", "Memory", "Diff"]
    assert page.locator(".jp-OutputArea-output", has_text="HTML fallback").count() == 0  # rank 0 wins
    page.screenshot(path=str(ARTIFACTS / "01-renderer-summary.png"))

    profile.locator(".ns-Tab", has_text="Hot path").click()
    hot = profile.locator(".ns-TabPage[data-tab='Hot path']")
    assert HOSTILE in hot.inner_text()  # shown as text ...
    assert profile.locator("script").count() == 0  # ... never as markup
    assert hot.locator(".ns-SourceLink[data-source='cell-1:4']").count() == 1
    style = hot.locator(".ns-SourceLink").first.evaluate(
        "n => [getComputedStyle(n).textDecorationLine, getComputedStyle(n).cursor]")
    assert style == ["underline", "pointer"]  # looks like a link (JupyterLab's `a` reset is overridden)
    assert "cell [1] line 4" in hot.inner_text() and "blocks.py:41" in hot.inner_text()
    profile.locator(".ns-Tab", has_text="Op table").click()
    assert "aten::mm" in profile.locator(".ns-OpTable").inner_text()
    profile.locator(".ns-Tab", has_text="Timeline").click()
    assert profile.locator(".ns-SummaryTimeline rect").count() > 0
    profile.locator(".ns-Tab", has_text="Diff").click()
    assert f"vs run #{p['compare']['run_id']} warmup" in profile.inner_text()
    profile.locator(".ns-Tab", has_text="Fallbacks & syncs").click()
    assert "aten::_unique2" in profile.inner_text()
    syncs = profile.locator(".ns-SyncPoints")
    assert syncs.locator(".ns-SourceLink").count() == 2  # 4 sync points, 2 distinct (one per step)
    page.screenshot(path=str(ARTIFACTS / "02-renderer-fallbacks.png"))

    # -- a cell source jumps to the line of that cell (In [1]; its body starts after the %%neuron line) --
    syncs.locator(".ns-SourceLink[data-source='cell-1:4']").click()
    page.wait_for_selector(".jp-Cell.jp-mod-active[data-neuron-source='cell-1:4']", timeout=10_000)
    assert cursor(page) == {"path": "02.ipynb", "line": 4, "text": "v = loss.item()"}
    # -- a file source opens the file at the line --
    profile.locator(".ns-Tab", has_text="Hot path").click()
    hot.locator(".ns-SourceLink-file").first.click()
    page.wait_for_selector("[data-neuron-line='41'] .cm-content", timeout=15_000)
    blocks_41 = (REPO / "tests/models/blocks.py").read_text().splitlines()[40]
    assert cursor(page) == {"path": "tests/models/blocks.py", "line": 40, "text": blocks_41}

    # -- the status bar follows the active notebook's latest profile --
    page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: 'empty.ipynb'})")
    page.wait_for_function("document.querySelector('.ns-StatusItem').textContent === 'Neuron: —'")
    page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: '02.ipynb'})")
    page.wait_for_function(
        "document.querySelector('.ns-StatusItem').textContent === 'Neuron: emulated · trn2 · adaptive'")

    # -- the Neuron Profiler panel, opened on this run --
    profile.locator(".ns-OpenProfiler").click()
    panel = page.locator(".ns-ProfilerPanel")
    panel.wait_for()
    rows = panel.locator(".ns-RunRow")
    rows.first.wait_for()
    assert rows.count() == 2
    detail = panel.locator(".ns-Detail")
    detail.locator(".ns-Timeline").first.wait_for(timeout=15_000)
    assert f"train-step — #{lab['second']}" in detail.inner_text()
    assert detail.locator(".ns-TimelineBox .ns-Timeline rect").count() > 0
    ops_text = detail.locator(".ns-OpsPage").inner_text()
    assert HOSTILE in ops_text and "page 1 of 5 (500 ops)" in detail.locator(".ns-Pager").inner_text()
    detail.locator(".ns-Pager button", has_text="Next").click()
    page.wait_for_function("document.querySelector('.ns-Pager span').textContent.startsWith('page 2')")
    page.screenshot(path=str(ARTIFACTS / "03-profiler-panel.png"))

    # -- compare the two runs --
    panel.locator(f".ns-RunRow[data-run-id='{lab['first']}'] input").check()
    panel.locator(f".ns-RunRow[data-run-id='{lab['second']}'] input").check()
    panel.locator(".ns-Compare-button").click()
    compare = panel.locator(".ns-Compare")
    compare.wait_for()
    ctext = compare.inner_text()
    assert f"Compare #{lab['first']} → #{lab['second']}" in ctext
    assert fmt_signed((p["step_time_ns"] - 1_500_000) / 1_500_000 * 100) in ctext  # 1.5 ms -> this run
    assert fmt_signed((p["mfu"] - 0.25) * 100, " pts") in ctext  # MFU 25 % -> this run
    assert "aten::mm" in ctext
    page.screenshot(path=str(ARTIFACTS / "04-compare.png"))

    # -- a hot op's kernel link opens the file in the editor at the line --
    rows.nth(0).click()  # newest run first
    detail.locator(".ns-PanelHotPath .ns-KernelLink").first.wait_for()
    kernel = next(h["kernel"] for h in p["hot_ops"] if h["kernel"])
    detail.locator(".ns-PanelHotPath .ns-KernelLink").first.click()
    line = kernel["line"]
    page.wait_for_selector(f"[data-neuron-line='{line}'] .cm-content", timeout=15_000)
    assert page.locator(".lm-TabBar-tab.jp-mod-current", has_text="matmul.py").count() >= 1
    kernel_line = (REPO / "kernels/matmul.py").read_text().splitlines()[line - 1]
    assert cursor(page) == {"path": "kernels/matmul.py", "line": line - 1, "text": kernel_line}
    page.screenshot(path=str(ARTIFACTS / "05-kernel-editor.png"))

    # -- a source in the panel's hot path jumps to the cell of the run's notebook --
    panel_tab = page.locator(".lm-TabBar-tab", has_text="Neuron Profiler")
    panel_tab.click()
    page.evaluate("document.querySelectorAll('[data-neuron-source]').forEach(n => n.removeAttribute('data-neuron-source'))")
    detail.locator(".ns-PanelHotPath .ns-SourceLink[data-source='cell-1:5']").first.click()
    page.wait_for_selector(".jp-Cell.jp-mod-active[data-neuron-source='cell-1:5']", timeout=10_000)
    assert cursor(page) == {"path": "02.ipynb", "line": 5, "text": "u = torch.unique(ids)"}
    page.screenshot(path=str(ARTIFACTS / "06-cell-source.png"))

    assert page.errors == []  # type: ignore[attr-defined]


def test_measured_profile_says_what_it_was_measured_from(lab: dict, page) -> None:  # noqa: ANN001
    prov = lab["measured"]["provenance"]
    with _saved_profile(lab, page, "measured.ipynb", "ns-ui-measured") as (_, profile):
        note = profile.locator(".ns-Provenance").inner_text()
        assert note.startswith(f"Measured on Neuron hardware from {prov['measured_from']}.")
        assert "host time: not captured" in note and "host time" in prov["not_captured"]
        assert "step time (modeled)" not in profile.inner_text()


#: Per table matching the selector at the visible tab: its right edge past the output's, words broken across lines,
#: and names cut without an ellipsis or without their full text as the tooltip.
_TABLE_DEFECTS = """(p, selector) => {
    const out = p.closest('.jp-OutputArea-output') || p; const right = out.getBoundingClientRect().right + 1;
    const bad = [];
    for (const t of p.querySelectorAll(`.ns-TabPage:not([hidden]) ${selector}`)) {
        if (!t.offsetParent) continue;
        const r = t.getBoundingClientRect();
        if (r.right > right) bad.push(`table ends at ${Math.round(r.right)} > ${Math.round(right)}`);
        const walk = document.createTreeWalker(t.tBodies[0], NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
            if (n.parentElement.closest('.ns-Name')) continue;   // one line by construction, checked below
            for (const m of n.textContent.matchAll(/[^\\s\\-\\/]+/g)) {
                const range = document.createRange();
                range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
                const tops = new Set([...range.getClientRects()].map(q => Math.round(q.top)));
                if (tops.size > 1) bad.push(`"${m[0]}" broken across lines`);
            }
        }
        for (const tr of t.tBodies[0].rows) {
            if ((tr.textContent.match(/saves ~/g) || []).length > 1) bad.push(`"saves ~" twice in "${tr.cells[0].textContent}"`);
        }
        for (const nm of t.querySelectorAll('.ns-Name')) {
            const cs = getComputedStyle(nm);
            if (cs.whiteSpace !== 'nowrap' || cs.textOverflow !== 'ellipsis') bad.push(`name "${nm.textContent}" wraps`);
            if (nm.scrollWidth > nm.clientWidth + 1 && !nm.title.startsWith(nm.textContent))
                bad.push(`name "${nm.textContent}" cut without its full text as the tooltip`);
        }
    }
    return bad;
}"""


@pytest.mark.parametrize("width", [1280, 1024])
def test_hot_ops_fit_without_breaking_words(lab: dict, page, width: int) -> None:  # noqa: ANN001
    """Walk F3/F8: the hot ops table wrapped "comput|e", "memor|y", "aten::|mul" and clipped "Block.gat" at the
    output's edge. At the default output width (1280 px with the file browser) and a narrower one: the table fits,
    no word breaks across lines, a long name ends in an ellipsis with the full (escaped) name as its tooltip, and a
    kernel's saving is said once per row."""
    with _saved_profile(lab, page, "02.ipynb", f"ns-ui-hot-{width}", width) as (pg, profile):
        bad = {}
        for name in ("Summary", "Hot path"):
            profile.locator(".ns-Tab", has_text=name).click()
            pg.wait_for_timeout(300)
            assert profile.locator(".ns-TabPage:not([hidden]) table.ns-HotOps").count() == 1
            pg.screenshot(path=str(ARTIFACTS / f"hot-ops-{name.lower().replace(' ', '-')}-{width}.png"))
            found = profile.evaluate(_TABLE_DEFECTS, "table.ns-HotOps")
            if found:
                bad[name] = found[:6]
        hot = profile.locator(".ns-TabPage:not([hidden]) table.ns-HotOps")
        hostile = hot.locator(".ns-Name", has_text="<script>")
        assert hostile.count() == 1 and hostile.get_attribute("title").startswith(HOSTILE)   # text, not markup
        assert profile.locator("script").count() == 0
        assert bad == {}, bad


@pytest.mark.parametrize("width", [1280, 1024])
def test_memory_tables_fit_without_breaking_words(lab: dict, page, width: int) -> None:  # noqa: ANN001
    """As the hot ops: the Memory tab's tables (live at the peak, the chips, the levers, activations per module) broke
    "TransformerBlock.mlp.gat|e", "aten::sigm|oid", "optimizer_|state" mid-word. At the default output width and a
    narrower one: each table fits, no word breaks across lines, a long name (what, op, module, source) ends in an
    ellipsis with its full (escaped) text as the tooltip."""
    with _saved_profile(lab, page, "02.ipynb", f"ns-ui-mem-{width}", width) as (pg, profile):
        profile.locator(".ns-Tab", has_text="Memory").click()
        tab = profile.locator(".ns-TabPage[data-tab='Memory']")
        tab.locator(".ns-MemPeak").click()
        tab.locator(".ns-MemLive").wait_for(state="visible")
        pg.wait_for_timeout(300)
        pg.screenshot(path=str(ARTIFACTS / f"memory-tables-{width}.png"), full_page=True)
        tables = ["table.ns-MemLiveTable", "table.ns-MemChips", "table.ns-MemLevers", "table.ns-MemActs"]
        bad = {t: found[:6] for t in tables if (found := profile.evaluate(_TABLE_DEFECTS, t))}
        assert bad == {}, bad
        live = tab.locator(".ns-MemLiveTable")
        hostile = live.locator(".ns-Name", has_text="<script>")
        assert hostile.count() == 1 and hostile.get_attribute("title").startswith(HOSTILE)   # text, not markup
        assert live.locator(".ns-Name", has_text="TransformerBlock.mlp").count() > 0   # modules are names too
        assert profile.locator("script").count() == 0


def test_recompiles_show_their_cause_with_dynamos_guard_text_as_text(lab: dict, page) -> None:  # noqa: ANN001
    with _saved_profile(lab, page, "recompiles.ipynb", "ns-rc") as (pg, profile):
        assert "2 recompiles" in profile.inner_text()
        profile.locator(".ns-Tab", has_text="Fallbacks & syncs").click()
        rows = profile.locator(".ns-Recompiles tbody tr")
        assert rows.count() == 2
        assert [rows.nth(i).locator(".ns-RecompileReason").get_attribute("data-cause") for i in range(2)] == [
            "shapes", "value"]
        value = rows.nth(1)
        assert "n is no longer 3" in value.inner_text() and "new input shapes" not in value.inner_text()
        details = value.locator("details")
        assert details.count() == 1 and "Dynamo's guard failures" in details.locator("summary").inner_text()
        details.locator("summary").click()
        assert HOSTILE in details.locator("pre").inner_text()     # Dynamo's text shown as text ...
        assert profile.locator("script").count() == 0              # ... never as markup
        pg.screenshot(path=str(ARTIFACTS / "recompiles.png"))


def _fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= div:
            return f"{float(f'{n / div:.3g}'):g} {unit}"
    return f"{round(n)} B"


def _check_memory_tab(root, page, m: dict) -> None:  # noqa: ANN001
    root.locator(".ns-Tab", has_text="Memory").click()
    tab = root.locator(".ns-TabPage[data-tab='Memory']")
    text = tab.inner_text()
    assert m["forecast"]["summary_line"] in text
    # one filled area per category present over the step, the peak marked
    present = [c for c in m["categories"] if max(m["timeline"][c]) > 0]
    assert tab.locator(".ns-MemArea polygon").count() == len(present)
    for c in m["categories"]:
        assert f"{_fmt_bytes(m['by_category'][c])}" in tab.locator(".ns-MemLegend").inner_text()
    live = tab.locator(".ns-MemLive")
    assert not live.is_visible()
    tab.locator(".ns-MemPeak").click()                 # click the peak: what is live there
    live.wait_for(state="visible")
    assert live.locator("tbody tr").count() == len(m["live"])
    assert HOSTILE in live.inner_text() and root.locator("script").count() == 0
    assert _fmt_bytes(m["live"][0]["nbytes"]) in live.locator("tbody tr").first.inner_text()
    assert tab.locator(".ns-MemChips tbody tr").count() == len(m["forecast"]["chips"])
    levers = tab.locator(".ns-MemLevers tbody tr")
    assert levers.count() == len(m["forecast"]["levers"])
    assert m["forecast"]["levers"][0]["title"] in levers.first.inner_text()


def test_memory_tab_inline_in_the_panel_and_in_the_html(lab: dict, page) -> None:  # noqa: ANN001
    m = lab["payload"]["memory"]
    # a fresh tab: the previous test leaves edited documents whose "leave page?" prompt would block a reload
    page = page.context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(f"{lab['base']}/lab/workspaces/ns-mem/tree/02.ipynb?reset&token={TOKEN}")
    profile = page.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=30_000)
    assert f"peak memory" in profile.inner_text() and _fmt_bytes(m["peak_bytes"]) in profile.inner_text()
    _check_memory_tab(profile, page, m)
    page.screenshot(path=str(ARTIFACTS / "07-memory-tab.png"))
    # the same tab in the Neuron Profiler panel's run detail
    profile.locator(".ns-OpenProfiler").click()
    detail = page.locator(".ns-ProfilerPanel .ns-Detail")
    detail.locator(".ns-Profile").wait_for(timeout=15_000)
    _check_memory_tab(detail.locator(".ns-Profile"), page, m)
    page.screenshot(path=str(ARTIFACTS / "08-memory-panel.png"))
    # the self-contained HTML (other frontends, `neuron-studio report`): the tab and the peak link, no script
    from neuron_studio.ui.html import render_html

    out = lab["root"] / "report.html"
    out.write_text(f"<!doctype html><html><body>{render_html(lab['payload'])}</body></html>")
    page = page.context.new_page()  # leaving the lab page would prompt about its edited documents
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(out.as_uri())
    page.locator("label", has_text="Memory").click()
    pane = page.locator(".mem")
    assert m["forecast"]["summary_line"] in pane.inner_text()
    assert pane.locator("svg.memarea polygon").count() > 0
    page.locator("a.mempeak").click()
    assert page.evaluate("location.hash").endswith("-live")
    assert HOSTILE in pane.locator(".memlive").inner_text() and page.locator("script").count() == 0
    assert errors == []
