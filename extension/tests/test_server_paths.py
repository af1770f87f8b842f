"""An imported run's traces reach the browser as paths relative to the server root (or, outside it, as file names),
never as absolute server paths: the run list, a run's detail (its cell source, options, a job's per-rank inputs, a
Neuron profile's "measured from" line and notes). The routes' authentication and allowed roots are unchanged.

The runs are stored as `neuron-studio import` stores them (`store_imported`), from traces the suite generates."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_studio_lab import core

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def imported(jp_root_dir: Path, tmp_path: Path) -> dict:
    """Four imported runs in work/.neuron_studio: one trace and a job folder under the server root, a trace
    outside it, and a Neuron Explorer profile folder under the root."""
    pytest.importorskip("neuron_studio.imported_runs", reason="the studio itself stores the runs")
    import sys

    from neuron_studio.imported_runs import store_imported
    from neuron_studio.store import RunStore
    from neuron_studio.testing import synthetic_job as sj

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from make_explorer_fixtures import write_explorer_fixture

    spec = sj.JobSpec(ranks=2, events_per_rank=400, launches_per_step=20, launches_per_collective=5)
    inside = sj.write_job(jp_root_dir / "traces" / "job-1", spec)
    outside = sj.write_job(tmp_path / "elsewhere" / "job-2", spec)
    profile = write_explorer_fixture(jp_root_dir / "profiles" / "explorer-out")
    nb_dir = jp_root_dir / "work"
    nb_dir.mkdir()
    (nb_dir / "t.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    store = RunStore(nb_dir / ".neuron_studio")
    runs = {
        "trace": store_imported(store, [inside[0]], workers=0)[0],
        "job": store_imported(store, [inside[0].parent], workers=0)[0],
        "outside": store_imported(store, [outside[1]], workers=0)[0],
        "profile": store_imported(store, [profile], workers=0)[0],
    }
    return {"path": "work/t.ipynb", "runs": runs, "store": store, "hidden": [str(jp_root_dir), str(tmp_path)]}


async def _get(jp_fetch, *parts: str, **params) -> tuple[str, dict]:  # noqa: ANN001
    resp = await jp_fetch("neuron-studio", *parts, params={k: str(v) for k, v in params.items()})
    body = resp.body.decode()
    return body, json.loads(body)


async def test_imported_runs_name_their_traces_relative_to_the_server_root(jp_fetch, imported) -> None:  # noqa: ANN001
    runs = imported["runs"]
    # the store holds the absolute paths it read (the CLI's own record; server side)
    assert imported["store"].get_run(runs["job"]).cell_source.startswith(imported["hidden"][0])
    body, listed = await _get(jp_fetch, "runs", path=imported["path"])
    assert not [h for h in imported["hidden"] if h in body], body[:2000]
    rows = {r["id"]: r for r in listed["runs"]}
    assert rows[runs["trace"]]["cell_source"] == "traces/job-1/rank-0.pt.trace.json"
    assert rows[runs["job"]]["cell_source"] == "traces/job-1"
    assert rows[runs["outside"]]["cell_source"] == "rank-1.pt.trace.json"      # outside the root: the file name
    assert rows[runs["profile"]]["cell_source"] == "profiles/explorer-out"
    for key, rid in runs.items():
        body, detail = await _get(jp_fetch, "runs", str(rid), path=imported["path"])
        assert not [h for h in imported["hidden"] if h in body], (key, body[:2000])
        run = detail["run"]
        assert run["cell_source"] == rows[rid]["cell_source"]
        assert all(not Path(p).is_absolute() for p in run["options"]["imported"]), run["options"]
    _, job = await _get(jp_fetch, "runs", str(runs["job"]), path=imported["path"])
    assert [i["path"] for i in job["run"]["summary"]["ranks_analysis"]["inputs"]] == [
        "traces/job-1/rank-0.pt.trace.json", "traces/job-1/rank-1.pt.trace.json"]
    _, prof = await _get(jp_fetch, "runs", str(runs["profile"]), path=imported["path"])
    assert "profiles/explorer-out" in prof["run"]["summary"]["provenance"]["measured_from"]


def test_shown_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (root / "link").symlink_to(tmp_path / "out")
    assert core.shown_path(root, str(root / "a" / "x.json")) == "a/x.json"
    assert core.shown_path(root, f"{root}/a/../a/x.json") == "a/x.json"
    assert core.shown_path(root, str(root)) == "."
    assert core.shown_path(root, str(tmp_path / "out" / "y.json")) == "y.json"       # outside: the file name only
    assert core.shown_path(root, str(root / "link" / "y.json")) == "link/y.json"     # as the user named it under root
    assert core.shown_path(root, "rel/z.json") == "rel/z.json"                       # relative: as given
