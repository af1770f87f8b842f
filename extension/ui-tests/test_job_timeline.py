"""A many-rank job in a real JupyterLab and Chromium: the Neuron Profiler panel's job timeline shows a lane per
rank on the aligned clock (the straggler marked), links each collective across the ranks, and expands a rank
to its host timeline when its name is clicked. The job is the benchmark's synthetic one
(neuron_studio/testing/synthetic_job.py), imported as `neuron-studio import DIR` stores it; no kernel needed."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import ARTIFACTS, CHROMIUM, TOKEN, code_cell, lab_server, notebook  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from neuron_studio.imported_runs import store_imported
    from neuron_studio.store import RunStore
    from neuron_studio.testing import synthetic_job as sj

    spec = sj.JobSpec(ranks=3, events_per_rank=3000, launches_per_step=100, launches_per_collective=25,
                      straggler=1, straggler_extra_us=20.0)
    jobdir = tmp_path_factory.mktemp("job-traces")
    sj.write_job(jobdir, spec)
    root = tmp_path_factory.mktemp("lab-job")
    run_id, summary = store_imported(RunStore(root / ".neuron_studio"), [jobdir], workers=0)
    (root / "job.ipynb").write_text(notebook([code_cell("job-1", "!neuron-studio import traces/", summary,
                                                        "<Profile job>")]))
    with lab_server(root, tmp_path_factory.mktemp("home-job")) as base:
        yield {"base": base, "run_id": run_id, "spec": spec, "summary": summary}


def test_job_timeline_in_the_panel(lab: dict, page) -> None:  # noqa: ANN001
    page.goto(f"{lab['base']}/lab/workspaces/ns-job/tree/job.ipynb?reset&token={TOKEN}")
    profile = page.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=30_000)
    assert "Ranks (3)" in profile.locator(".ns-Tab").all_inner_texts()
    # the Ranks tab puts waits per profiled step (the steps every rank recorded), said in the text
    profile.locator(".ns-Tab", has_text="Ranks (3)").click()
    section = profile.locator(".ns-RanksSection")
    section.wait_for(timeout=15_000)
    steps = lab["summary"]["ranks_analysis"]["steps"]["per_step"]
    assert steps and "Waited/step" in section.locator("th").all_inner_texts()
    assert re.search(rf"Straggler: rank 1 — the other ranks wait [\d.]+ [µm]?s per step \(over {steps} steps\)",
                     section.locator(".ns-Straggler").inner_text())
    profile.locator(".ns-OpenProfiler").click()
    panel = page.locator(".ns-ProfilerPanel")
    panel.wait_for()
    row = panel.locator(f".ns-RunGroup[data-group='unowned'] .ns-RunRow[data-run-id='{lab['run_id']}']")
    row.wait_for(timeout=15_000)              # a job belongs to no notebook: listed by default
    assert "imported job (3 ranks)" in row.inner_text()
    row.click()
    job = panel.locator(".ns-JobTrace")
    job.locator(".ns-TraceLabel-straggler").wait_for(timeout=30_000)
    labels = job.locator(".ns-TraceLabel").all_inner_texts()
    assert labels == ["▸ rank 0", "▸ rank 1 · straggler", "▸ rank 2"]
    viewer = job.locator("[data-links]")
    viewer.wait_for(timeout=15_000)
    assert int(viewer.get_attribute("data-links")) > 0            # collectives linked across the ranks
    status = job.locator(".ns-TraceStatus").inner_text()
    assert "3 ranks" in status and "straggler: rank 1" in status
    job.locator(".ns-TraceLabel[data-rank='0']").first.click()
    job.locator(".ns-TraceLabel", has_text="rank 0 · host thread 1").wait_for(timeout=30_000)
    labels = job.locator(".ns-TraceLabel").all_inner_texts()
    assert labels[:2] == ["▾ rank 0 · host thread 1", "▾ rank 0 · collectives"] and "▸ rank 2" in labels
    page.screenshot(path=str(ARTIFACTS / "12-panel-job-timeline.png"))
    job.locator(".ns-TraceLabel[data-rank='0']").first.click()        # folds back
    job.locator(".ns-TraceLabel", has_text="▸ rank 0").wait_for(timeout=30_000)
    assert page.errors == []  # type: ignore[attr-defined]
