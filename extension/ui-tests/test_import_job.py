"""Importing a job from the Neuron Profiler panel in a real JupyterLab and Chromium: "Import traces…" takes a
folder of per-rank traces (the server runs `neuron-studio import` on it), the job's timeline opens with the
straggler marked, search finds a collective on every rank and opens it, "Download for Perfetto" saves the
whole job as one aligned trace, and a bad import says what was wrong without rendering the file's name as
HTML. The job is the benchmark's synthetic one (neuron_studio/testing/synthetic_job.py); no kernel needed."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import ARTIFACTS, CHROMIUM, TOKEN, lab_server  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

HOSTILE = "<img src=x onerror=alert(1)>.json"
#: An import runs `neuron-studio import` in a child process (torch, rank workers); slow on a loaded machine.
IMPORT_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from neuron_studio.testing import synthetic_job as sj

    spec = sj.JobSpec(ranks=3, events_per_rank=3000, launches_per_step=100, launches_per_collective=25,
                      straggler=1, straggler_extra_us=20.0)
    root = tmp_path_factory.mktemp("lab-import")
    sj.write_job(root / "traces" / "job-7", spec)
    (root / "traces" / HOSTILE).write_text("{not a trace")
    notebook = {"cells": [], "nbformat": 4, "nbformat_minor": 5,
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
    (root / "job.ipynb").write_text(json.dumps(notebook))
    with lab_server(root, tmp_path_factory.mktemp("home-import")) as base:
        yield {"base": base, "spec": spec, "root": root}


def _shown(where) -> str:  # noqa: ANN001 - a playwright Locator
    """Everything `where` shows a user: its text and every tooltip in it."""
    return where.evaluate("n => [n.innerText, ...[...n.querySelectorAll('[title]')].map(e => e.title)].join('\\n')")


def test_import_a_job_folder_search_it_and_download_it_for_perfetto(lab: dict, page) -> None:  # noqa: ANN001
    page.goto(f"{lab['base']}/lab/workspaces/ns-import/tree/job.ipynb?reset&token={TOKEN}")
    page.locator(".jp-NotebookPanel").wait_for(timeout=30_000)
    page.evaluate("() => window.jupyterapp.commands.execute('neuron-studio:open-profiler')")
    panel = page.locator(".ns-ProfilerPanel")
    panel.locator(".ns-Import-button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("input").fill("traces/job-7/")
    dialog.locator(".jp-mod-accept").click()
    assert "Importing traces/job-7/" in panel.locator(".ns-Message").inner_text()

    job = panel.locator(".ns-JobTrace")
    job.locator(".ns-TraceLabel-straggler").wait_for(timeout=IMPORT_TIMEOUT_MS)
    assert job.locator(".ns-TraceLabel").all_inner_texts() == ["▸ rank 0", "▸ rank 1 · straggler", "▸ rank 2"]
    row = panel.locator(".ns-RunGroup[data-group='unowned'] .ns-RunRow.ns-mod-selected")   # no notebook's run
    assert row.locator(".ns-Ranks").inner_text() == "3 ranks" and "job-7" in row.inner_text()
    assert "imported job (3 ranks)" in row.inner_text()
    assert panel.locator(".ns-DetailHeader h3").inner_text().startswith("job-7")
    # the run's traces said relative to the server root, never its absolute server path (text or tooltip)
    assert row.locator(".ns-CellPreview").inner_text().endswith("traces/job-7")
    assert panel.locator(".ns-CellSource").inner_text() == "traces/job-7"
    assert str(lab["root"]) not in _shown(panel)

    # search across the ranks: every rank's allreduce, earliest first, each opening its op
    job.locator(".ns-TraceSearch").fill("allreduce")
    job.locator(".ns-TraceSearch").press("Enter")
    count = job.locator(".ns-TraceResultCount")
    count.wait_for(timeout=30_000)
    n = 3 * lab["spec"].collectives
    assert count.inner_text().startswith(f"{n} ops match “allreduce”")
    results = job.locator(".ns-TraceResult")
    assert results.count() == min(n, 20)
    assert {t.split(" at ")[0] for t in results.all_inner_texts()[:3]} == {
        "c10d::allreduce_ rank 0", "c10d::allreduce_ rank 1 · straggler", "c10d::allreduce_ rank 2"}
    results.first.locator("a").click()
    details = job.locator(".ns-TraceDetails")
    details.wait_for(timeout=30_000)
    assert "c10d::allreduce_" in details.inner_text()
    page.screenshot(path=str(ARTIFACTS / "13-panel-import-job-search.png"))

    # the whole job for Perfetto, as one file
    with page.expect_download(timeout=IMPORT_TIMEOUT_MS) as info:
        panel.locator(".ns-PerfettoExport").click()
    download = info.value
    assert download.suggested_filename.endswith(".json.gz")
    trace = json.loads(gzip.decompress(Path(download.path()).read_bytes()))
    meta = trace["metadata"]["neuron_studio_job"]
    assert meta["ranks"] == [0, 1, 2] and meta["straggler"] == 1
    assert sum(1 for e in trace["traceEvents"] if e.get("ph") == "s") == lab["spec"].collectives
    panel.locator(".ns-PerfettoNote", has_text="Downloaded").wait_for()

    # the sidebar lists the imported job without a server path either
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[title*='Neuron']").click()
    side = page.locator(".ns-Sidebar")
    side.locator(".ns-SidebarUnowned .ns-SidebarRun").first.wait_for(timeout=15_000)
    assert "job-7" in side.inner_text() and str(lab["root"]) not in _shown(side)
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_bad_import_says_why_and_renders_the_name_as_text(lab: dict, page) -> None:  # noqa: ANN001
    if "/workspaces/ns-import" not in page.url:   # run alone; else the same page (leaving it asks to confirm)
        page.goto(f"{lab['base']}/lab/workspaces/ns-import/tree/job.ipynb?reset&token={TOKEN}")
        page.locator(".jp-NotebookPanel").wait_for(timeout=30_000)
    page.evaluate("() => window.jupyterapp.commands.execute('neuron-studio:import-traces', "
                  "{target: 'traces/<img*.json'})")
    message = page.locator(".ns-ProfilerPanel .ns-Message", has_text="Could not import")
    message.wait_for(timeout=IMPORT_TIMEOUT_MS)
    text = message.inner_text()
    assert HOSTILE in text and "invalid JSON" in text          # the trace's name, as text
    assert page.locator(".ns-ProfilerPanel img[src='x']").count() == 0
    outside = page.evaluate("() => window.jupyterapp.commands.execute('neuron-studio:import-traces', "
                            "{target: '../*'})")
    assert outside is None
    panel_message = page.locator(".ns-ProfilerPanel .ns-Message", has_text="outside the server root")
    panel_message.wait_for(timeout=30_000)
    assert page.errors == []  # type: ignore[attr-defined]
