"""The job view's routes (`runs/<id>/job`, `runs/<id>/job/op`): a lane per rank on the aligned clock that keeps
every rank's compute time, collectives linked across ranks with the last arrival, the straggler marked, a rank
expanded to its host timeline (every op kept), op details by job id, bad requests, authentication.

The job is the benchmark's synthetic one (benchmarks/synthetic_job.py), imported as `neuron-studio import`
stores it."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import tornado.httpclient

pytest_plugins = ("pytest_jupyter.jupyter_server",)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"neuron_studio_lab": True},
                          "allow_unauthenticated_access": False}}


@pytest.fixture(autouse=True)
def _no_store_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_STUDIO_STORE", raising=False)


def _synthetic_job():
    spec = importlib.util.spec_from_file_location("synthetic_job", ROOT / "benchmarks" / "synthetic_job.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["synthetic_job"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def job(jp_root_dir: Path, tmp_path: Path) -> dict:
    pytest.importorskip("neuron_studio.imported_runs", reason="the studio itself makes the job run")
    from neuron_studio.imported_runs import store_imported
    from neuron_studio.store import RunStore

    sj = _synthetic_job()
    spec = sj.JobSpec(ranks=3, events_per_rank=3000, launches_per_step=100, launches_per_collective=25,
                      straggler=1, straggler_extra_us=20.0)
    sj.write_job(tmp_path / "job", spec)
    nb_dir = jp_root_dir / "work"
    nb_dir.mkdir()
    (nb_dir / "t.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    store = RunStore(nb_dir / ".neuron_studio")
    rid, summary = store_imported(store, [tmp_path / "job"], workers=0)
    return {"path": "work/t.ipynb", "id": str(rid), "store": store, "rid": rid, "spec": spec, "summary": summary}


async def _get(jp_fetch, *parts: str, **params):  # noqa: ANN001, ANN202
    resp = await jp_fetch("neuron-studio", "runs", *parts, params={k: str(v) for k, v in params.items()})
    return json.loads(resp.body)


async def test_a_lane_per_rank_keeps_its_compute_time_and_links_every_collective(jp_fetch, job) -> None:  # noqa: ANN001
    w = await _get(jp_fetch, job["id"], "job", path=job["path"], width_px=400)
    assert [lane["id"] for lane in w["lanes"]] == ["rank0", "rank1", "rank2"]
    assert [lane["straggler"] for lane in w["lanes"]] == [False, True, False]
    assert w["lanes"][1]["label"] == "rank 1 · straggler" and w["job"]["straggler"] == 1
    act = job["store"].load_table(job["rid"], "job_activity").to_pandas()
    for lane in w["lanes"]:           # the whole run: every busy ns of the rank's bins is in its boxes
        assert sum(lane["busy"]) == int(act.loc[act["rank"] == lane["rank"], "compute_ns"].sum())
    n = job["spec"].collectives
    assert w["links_in_window"] == n and len(w["links"]) == n
    assert all(link["last_lane"] == "rank1" and len(link["arrival"]) == 3 for link in w["links"])
    # arrivals are on the aligned clock: the straggler's is the latest of each instance
    assert all(link["arrival"][1] == max(link["arrival"]) for link in w["links"])


async def test_an_expanded_rank_shows_every_host_op(jp_fetch, job) -> None:  # noqa: ANN001
    w = await _get(jp_fetch, job["id"], "job", path=job["path"], width_px=400, expand="1")
    ids = [lane["id"] for lane in w["lanes"]]
    assert ids == ["rank0", "r1/thread0", "r1/collectives", "rank2"]
    ops = job["store"].load_table(job["rid"], "ops_r1").to_pandas()
    detail = [lane for lane in w["lanes"] if lane["kind"] == "rank-detail"]
    assert sum(sum(lane["count"]) for lane in detail) == len(ops)
    assert all(link["lanes"][1] == "r1/collectives" for link in w["links"])
    # zoomed in, one-op boxes carry an id the op route answers with the rank's row on the aligned clock
    lo = w["origin_ns"] + 100_000
    z = await _get(jp_fetch, job["id"], "job", path=job["path"], width_px=1000, expand="1", start_ns=lo,
                   end_ns=lo + 100_000)
    lane = next(lane for lane in z["lanes"] if lane["id"] == "r1/thread0")
    i = next(i for i, s in enumerate(lane["seq"]) if s >= 0)
    op = (await _get(jp_fetch, job["id"], "job", "op", path=job["path"], seq=lane["seq"][i]))["op"]
    assert op["rank"] == 1 and op["name"] == z["names"][lane["name"][i]]
    assert op["start_ns"] - z["origin_ns"] == lane["start"][i]


async def _error(jp_fetch, *parts: str, **params) -> tuple[int, str]:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", *parts, params={k: str(v) for k, v in params.items()})
    return info.value.code, json.loads(info.value.response.body)["message"]


async def test_bad_job_requests(jp_fetch, job) -> None:  # noqa: ANN001
    code, text = await _error(jp_fetch, job["id"], "job", path=job["path"], expand="7")
    assert code == 400 and "rank(s) [7]" in text
    code, text = await _error(jp_fetch, job["id"], "job", path=job["path"], expand="one")
    assert code == 400 and "comma-separated" in text
    assert (await _error(jp_fetch, job["id"], "job", "op", path=job["path"]))[0] == 400
    assert (await _error(jp_fetch, job["id"], "job", "op", path=job["path"], seq=(9 << 32) + 1))[0] == 404
    assert (await _error(jp_fetch, job["id"], "job", path=job["path"], width_px=0))[0] == 400


@pytest.mark.parametrize("parts", [("job",), ("job", "op")])
async def test_job_routes_need_auth(jp_fetch, job, parts) -> None:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", job["id"], *parts, headers={"Authorization": ""},
                       params={"path": job["path"], "seq": "1"})
    assert info.value.code == 403
