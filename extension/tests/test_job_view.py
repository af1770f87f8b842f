"""The job view's routes (`runs/<id>/job`, `runs/<id>/job/op`): a lane per rank on the aligned clock that keeps
every rank's compute time, collectives linked across ranks with the last arrival, the straggler marked, a rank
expanded to its host timeline (every op kept), op details by job id, bad requests, authentication.

The job is the benchmark's synthetic one (neuron_studio/testing/synthetic_job.py), imported as `neuron-studio import`
stores it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import tornado.httpclient

pytest_plugins = ("pytest_jupyter.jupyter_server",)

#: Imports and exports run `neuron-studio` in a child process (torch import, rank workers): on a loaded
#: 2-core machine a 3-rank job took 20 s.
CHILD_TIMEOUT_S = 300


@pytest.fixture
def job(jp_root_dir: Path, tmp_path: Path) -> dict:
    pytest.importorskip("neuron_studio.imported_runs", reason="the studio itself makes the job run")
    from neuron_studio.imported_runs import store_imported
    from neuron_studio.store import RunStore
    from neuron_studio.testing import synthetic_job as sj

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
    answer = await _get(jp_fetch, job["id"], "job", "op", path=job["path"], seq=lane["seq"][i], expand="1")
    op = answer["op"]
    assert op["rank"] == 1 and op["name"] == z["names"][lane["name"][i]] and answer["lane"] == "r1/thread0"
    folded = await _get(jp_fetch, job["id"], "job", "op", path=job["path"], seq=lane["seq"][i])
    assert folded["op"] == op and folded["lane"] == "rank1"
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


@pytest.mark.parametrize("parts", [("job",), ("job", "op"), ("job", "search"), ("perfetto",)])
async def test_job_routes_need_auth(jp_fetch, job, parts) -> None:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", job["id"], *parts, headers={"Authorization": ""},
                       params={"path": job["path"], "seq": "1"})
    assert info.value.code == 403


# -- search across ranks --------------------------------------------------------------------------------------


async def test_search_finds_an_op_on_every_rank_on_the_aligned_clock(jp_fetch, job) -> None:  # noqa: ANN001
    found = await _get(jp_fetch, job["id"], "job", "search", path=job["path"], q="ALLREDUCE_")
    n = job["spec"].collectives
    assert found["total"] == 3 * n and found["unsearched_ranks"] == []
    assert {r["name"] for r in found["results"]} == {"c10d::allreduce_"}
    assert [r["start"] for r in found["results"]] == sorted(r["start"] for r in found["results"])
    # each result is where the job view draws it: the same aligned time as that rank's arrival in the links
    w = await _get(jp_fetch, job["id"], "job", path=job["path"], width_px=400)
    arrivals = {(lane, a) for link in w["links"] for lane, a in zip(link["lanes"], link["arrival"])}
    assert all((r["lane"], r["start"]) in arrivals for r in found["results"])
    assert {r["lane"] for r in found["results"][:3]} == {"rank0", "rank1", "rank2"}
    # the op route reads a result back on the same clock
    first = found["results"][0]
    op = (await _get(jp_fetch, job["id"], "job", "op", path=job["path"], seq=first["seq"]))["op"]
    assert op["name"] == first["name"] and op["rank"] == first["rank"]
    assert op["start_ns"] - found["origin_ns"] == first["start"]


async def test_search_on_an_expanded_rank_names_its_lanes_and_limits(jp_fetch, job) -> None:  # noqa: ANN001
    mm = await _get(jp_fetch, job["id"], "job", "search", path=job["path"], q="aten::mm", expand="2", limit=5)
    ops = [job["store"].load_table(job["rid"], f"ops_r{p}").to_pandas() for p in range(3)]
    assert mm["total"] == sum(int((o["name"] == "aten::mm").sum()) for o in ops) > 5
    assert len(mm["results"]) == 5
    lanes = {r["rank"]: r["lane"] for r in mm["results"]}
    assert all(lane == (f"r{rank}/thread0" if rank == 2 else f"rank{rank}") for rank, lane in lanes.items())
    coll = await _get(jp_fetch, job["id"], "job", "search", path=job["path"], q="allreduce", expand="2")
    assert {r["lane"] for r in coll["results"] if r["rank"] == 2} == {"r2/collectives"}
    none = await _get(jp_fetch, job["id"], "job", "search", path=job["path"], q="no such op")
    assert none == {**none, "total": 0, "results": []}


async def test_bad_search_requests(jp_fetch, job) -> None:  # noqa: ANN001
    assert (await _error(jp_fetch, job["id"], "job", "search", path=job["path"], q=" "))[0] == 400
    assert (await _error(jp_fetch, job["id"], "job", "search", path=job["path"], q="mm", limit=0))[0] == 400
    code, text = await _error(jp_fetch, job["id"], "job", "search", path=job["path"], q="mm", expand="9")
    assert code == 400 and "rank(s) [9]" in text


# -- importing a job from the panel (`runs/import`) ------------------------------------------------------------


async def _post_import(jp_fetch, **body) -> dict:  # noqa: ANN001
    resp = await jp_fetch("neuron-studio", "runs", "import", method="POST", body=json.dumps(body),
                          request_timeout=CHILD_TIMEOUT_S)
    return json.loads(resp.body)


async def _import_error(jp_fetch, **body) -> tuple[int, str]:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", "import", method="POST", body=json.dumps(body),
                       request_timeout=CHILD_TIMEOUT_S)
    return info.value.code, json.loads(info.value.response.body)["message"]


@pytest.fixture
def traces_in_root(jp_root_dir: Path, job: dict) -> Path:
    """The job's per-rank traces again, now under the server root (where the panel can name them)."""
    from neuron_studio.testing import synthetic_job as sj

    return sj.write_job(jp_root_dir / "traces" / "job-1", job["spec"])[0].parent


async def test_a_folder_and_a_glob_import_as_the_same_job(jp_fetch, job, traces_in_root) -> None:  # noqa: ANN001
    done = await _post_import(jp_fetch, path=job["path"], target="traces/job-1/")
    assert done["ranks"] == 3 and done["name"] == "job-1" and done["store"] == "work/.neuron_studio"
    rec = job["store"].get_run(done["run_id"])
    assert rec.backend == "imported" and rec.ranks == 3 and rec.notebook is None
    # the same job report as the API's import of the same files
    assert rec.summary["ranks_analysis"]["straggler"] == job["summary"]["ranks_analysis"]["straggler"]
    runs = json.loads((await jp_fetch("neuron-studio", "runs", params={"path": job["path"]})).body)["runs"]
    assert done["run_id"] in [r["id"] for r in runs]
    w = await _get(jp_fetch, str(done["run_id"]), "job", path=job["path"], width_px=400)
    assert [lane["id"] for lane in w["lanes"]] == ["rank0", "rank1", "rank2"] and w["job"]["straggler"] == 1
    glob_run = await _post_import(jp_fetch, path=job["path"], target="traces/job-1/rank-*.pt.trace.json",
                                  name="-by <glob>")    # a name that looks like an option, and HTML
    assert glob_run["ranks"] == 3 and glob_run["name"] == "-by <glob>"
    again = job["store"].get_run(glob_run["run_id"]).summary["ranks_analysis"]
    assert again["straggler"] == rec.summary["ranks_analysis"]["straggler"]


async def test_import_targets_stay_inside_the_server_root(jp_fetch, job, traces_in_root, tmp_path) -> None:  # noqa: ANN001
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for target in ("../elsewhere", "../*/x.json", "traces/../../elsewhere", "traces/../../*"):
        code, text = await _import_error(jp_fetch, path=job["path"], target=target)
        assert code == 403, (target, text)
    # a leading '/' means the server root, as for every path the panel sends
    assert await _import_error(jp_fetch, path=job["path"], target="/etc") == (404, "no such file or folder: /etc")
    (traces_in_root / "rank-9.pt.trace.json").symlink_to(outside / "secret.json")  # a link out of the root
    code, text = await _import_error(jp_fetch, path=job["path"], target="traces/job-1")
    assert code == 403 and "rank-9.pt.trace.json links outside" in text
    code, _ = await _import_error(jp_fetch, path=job["path"], target="traces/job-1/rank-*")
    assert code == 403
    assert job["store"].list_runs() == job["store"].list_runs()[-1:]   # nothing was imported


async def test_import_says_what_is_wrong_with_the_target(jp_fetch, job, jp_root_dir) -> None:  # noqa: ANN001
    assert (await _import_error(jp_fetch, path=job["path"], target="traces/none/"))[0] == 404
    assert (await _import_error(jp_fetch, path=job["path"], target="traces/*.nothing"))[0] == 404
    assert (await _import_error(jp_fetch, path=job["path"]))[0] == 400
    assert (await _import_error(jp_fetch, target="traces/"))[0] == 400
    bad = jp_root_dir / "traces" / "<img src=x onerror=alert(1)>.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("{not json")
    code, text = await _import_error(jp_fetch, path=job["path"], target="traces/<img src=x onerror=alert(1)>.json")
    assert code == 400 and "<img src=x onerror=alert(1)>.json" in text          # the CLI's own message, naming the file
    assert str(jp_root_dir) not in text                                           # server paths stay put
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", "import", method="POST", body="[1, 2]")
    assert info.value.code == 400


# -- the whole job for Perfetto --------------------------------------------------------------------------------


async def test_the_job_downloads_as_one_aligned_trace_for_perfetto(jp_fetch, job) -> None:  # noqa: ANN001
    import gzip

    resp = await jp_fetch("neuron-studio", "runs", job["id"], "perfetto", params={"path": job["path"]},
                          request_timeout=CHILD_TIMEOUT_S)
    assert resp.headers["Content-Type"] == "application/gzip"
    assert f"neuron-studio-run-{job['id']}.json.gz" in resp.headers["Content-Disposition"]
    trace = json.loads(gzip.decompress(resp.body))
    meta = trace["metadata"]["neuron_studio_job"]
    assert meta["ranks"] == [0, 1, 2] and meta["straggler"] == 1 and meta["alignment"] is not None
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"rank 0", "rank 1 (straggler)", "rank 2"}
    ops = job["store"].load_table(job["rid"], "ops_r1").to_pandas()
    assert sum(1 for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == 1) == len(ops)
    flows = [e for e in trace["traceEvents"] if e.get("ph") in ("s", "t", "f")]
    assert len(flows) == 3 * job["spec"].collectives      # each collective linked through the three ranks
    # made once: a second download is the same file, not a second export
    kept = job["store"].table_path(job["rid"], "ops").parent / "perfetto-trace.json.gz"
    stamp = kept.stat().st_mtime_ns
    again = await jp_fetch("neuron-studio", "runs", job["id"], "perfetto", params={"path": job["path"]})
    assert again.body == resp.body and kept.stat().st_mtime_ns == stamp
