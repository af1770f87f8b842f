"""Host sync points in a real JupyterLab and Chromium: the MIME renderer and the Neuron Profiler panel show the
summary's grouped list (one row per place, count and host time per step) as it is, the same for a step profiled
once and three times; a summary stored before version 2 (one row per occurrence) shows the same places."""
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

sys.path.insert(0, str(HERE.parents[1]))
from tests.models.host_syncs import PLACES, two_sync_places  # noqa: E402

CELL = "%%neuron --name syncs\nfor i in range(20):\n    x[i].item()\nprint(x[:2])"
HEAD = ["Op", "Reason", "Source", "Module", "Count/step"]


def _payload(steps: int) -> dict:
    """20 `.item()` per step at one line and one `print(tensor)` at the next, profiled `steps` times."""
    return json.loads(json.dumps(two_sync_places(steps, chip="trn2").to_summary()))


def _version_1(p: dict) -> dict:
    """`p` as a studio before version 2 stored it: every occurrence of every profiled step, no sync times."""
    occurrences = [{"op": s["op"], "reason": s["reason"], "source": s["source"], "module": s["modules"][0]}
                   for s in p["sync_places"]["places"] for _ in range(round(s["count"] * p["steps"]))]
    return {k: v for k, v in p.items() if k != "sync_places"} | {"version": 1, "sync_points": occurrences}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("sync-root")
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    payloads = {"one": _payload(1), "three": _payload(3)}
    payloads["old"] = _version_1(payloads["three"])
    cells = []
    for key, p in payloads.items():
        run = store.begin_run(cell_source=CELL, options={}, name=f"syncs-{key}", notebook="syncs.ipynb",
                              mode="eager", chip="trn2", backend="emulated")
        p["run_id"] = run
        store.finish_run(run, status="ok", summary=p, step_time_ns=p["step_time_ns"], mfu=p["mfu"])
        cells.append(code_cell(f"c-{key}", CELL, p, f"<Profile syncs-{key}>"))
    (root / "syncs.ipynb").write_text(notebook(cells))
    with lab_server(root, tmp_path_factory.mktemp("sync-home")) as base:
        yield {"base": base, "payloads": payloads}


def _sync_rows(view) -> tuple[list[str], list[list[str]]]:  # noqa: ANN001 - a playwright Locator
    """The Fallbacks & syncs tab's sync table of a profile view: its headers and each row's cells."""
    view.locator(".ns-TabBar .ns-Tab", has_text="Fallbacks & syncs").click()
    table = view.locator(".ns-TabBody .ns-SyncPoints")
    table.wait_for(timeout=30_000)
    head = table.locator("thead th").all_inner_texts()
    rows = table.locator("tbody tr")
    return head, [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())]


def _expected(p: dict) -> list[list[str]]:
    """The rows the summary lists, as the renderer writes them (source as its label, counts per step)."""
    from neuron_studio.profiler.vocabulary import source_label

    return [[s["op"], s["reason"], source_label(s["source"]), ", ".join(s["modules"]),
             f"{s['count']:,.0f}" if s["count"] == int(s["count"]) else f"{s['count']:.1f}"]
            for s in p["sync_places"]["places"]]


def test_the_renderer_and_the_panel_show_one_row_per_place(lab: dict, page) -> None:  # noqa: ANN001
    one, three = lab["payloads"]["one"], lab["payloads"]["three"]
    page.goto(f"{lab['base']}/lab/workspaces/ns-sync/tree/syncs.ipynb?reset&token={TOKEN}")
    views = page.locator(".jp-OutputArea-output .ns-Profile")
    views.nth(2).wait_for(timeout=60_000)
    shown = {key: _sync_rows(views.nth(i)) for i, key in enumerate(("one", "three", "old"))}
    # one row per place, 20 and 1 per step, at 1 and at 3 profiled steps; the host time per step, labelled modeled
    assert [r[4] for r in _expected(one)] == [str(n) for _, _, n in PLACES] and _expected(one) == _expected(three)
    for key, p in (("one", one), ("three", three)):
        head, rows = shown[key]
        assert head == HEAD + ["Host time/step (modeled)"]
        assert [r[:5] for r in rows] == _expected(p)
        assert [r[5] for r in rows] == [fmt_ns(s["time_ns"]) for s in p["sync_places"]["places"]]
    # a saved output of a version-1 summary: the same places, no time column (version 1 kept none), and it says so
    head, rows = shown["old"]
    assert (head, rows) == (HEAD, _expected(three))
    assert "Host time per step not determined" in views.nth(2).inner_text()
    page.screenshot(path=str(ARTIFACTS / "30-sync-places-inline.png"))

    # the Neuron Profiler panel's run detail (the stored summary, fetched from the server) shows the same rows
    views.nth(0).locator(".ns-OpenProfiler").click()
    detail = page.locator(".ns-ProfilerPanel .ns-Detail .ns-Profile")
    detail.wait_for(timeout=60_000)
    assert _sync_rows(detail) == shown["one"]
    page.screenshot(path=str(ARTIFACTS / "31-sync-places-panel.png"))
    # ... and a run stored before version 2 shows its places too (counted per step from its occurrences)
    old_run = lab["payloads"]["old"]["run_id"]
    page.locator(f".ns-ProfilerPanel .ns-RunRow[data-run-id='{old_run}']").click()
    page.locator(".ns-ProfilerPanel .ns-Detail", has_text=f"#{old_run}").locator(".ns-Profile").wait_for(
        timeout=60_000)
    assert _sync_rows(page.locator(".ns-ProfilerPanel .ns-Detail .ns-Profile")) == shown["old"]
    assert page.errors == []  # type: ignore[attr-defined]
