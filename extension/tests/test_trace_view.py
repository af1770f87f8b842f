"""The trace viewer's routes: level-of-detail boxes lose no op and keep every lane's busy time, op details,
search, bad windows, authentication; and the engine timeline has no "none" row."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tornado.httpclient

from neuron_studio_lab import core

pytest_plugins = ("pytest_jupyter.jupyter_server",)

HOSTILE = "<img src=x onerror=alert(1)>"
ENGINES = ["tensor", "vector", "scalar", "gpsimd", "dma", "none"]


def _ops(n: int = 5000, seed: int = 1) -> pa.Table:
    """n ops on 2 cores: random engines (some on none, zero-length), 1-5,000 ns, overlapping within an engine
    now and then; every 50th op is an all-reduce (a collective); two host threads launching with a cost."""
    rng = np.random.default_rng(seed)
    dur = rng.integers(1, 5000, n)
    start = np.cumsum(rng.integers(0, 600, n)) + 10**12
    engine = np.array(ENGINES)[rng.integers(0, len(ENGINES), n)]
    dur[engine == "none"] = 0
    names = np.array([f"aten::op{i % 37}" for i in range(n)], dtype=object)
    names[::50] = "c10d::allreduce_"
    engine[::50] = "dma"
    names[7] = HOSTILE
    engine[7] = "tensor"
    launch = np.where(rng.random(n) < 0.3, rng.integers(100, 2000, n), 0)
    return pa.table({
        "seq": np.arange(n, dtype=np.int64) + 100,
        "name": pa.array(names.tolist(), pa.string()),
        "core": pa.array(rng.integers(0, 2, n), pa.int32()),
        "engine": pa.array(engine.tolist()),
        "start_ns": start.astype(np.int64),
        "end_ns": (start + dur).astype(np.int64),
        "flops": np.full(n, 1000, dtype=np.int64),
        "bytes_read": np.full(n, 64, dtype=np.int64),
        "bytes_written": np.full(n, 32, dtype=np.int64),
        "bound": pa.array(["compute"] * n),
        "module": pa.array([f"layers.{i % 4}.mlp" for i in range(n)]),
        "source": pa.array([f"train.py:{40 + i % 7}" for i in range(n)]),
        "thread": pa.array(np.where(np.arange(n) < n // 2, 11, 22), pa.int64()),
        "step": pa.array(np.arange(n) * 3 // n + 1, pa.int32()),
        "launch_ns": pa.array(launch, pa.int64()),
        "input_shapes": pa.array(["8x64;64x128"] * n),
        "output_shapes": pa.array(["8x128"] * n),
    })


@pytest.fixture
def run(jp_root_dir: Path) -> dict:
    nb_dir = jp_root_dir / "work"
    nb_dir.mkdir()
    (nb_dir / "t.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    store = core.run_store_module().RunStore(nb_dir / ".neuron_studio")
    rid = store.begin_run(cell_source="step()", options={}, name="r", notebook="t.ipynb", mode="eager",
                          chip="trn2", backend="emulated")
    store.finish_run(rid, status="ok", summary=None, step_time_ns=1, mfu=0.1)
    table = _ops()
    store.save_table(rid, "device_ops", table)
    return {"path": "work/t.ipynb", "id": str(rid), "table": table.to_pandas()}


async def _get(jp_fetch, *parts: str, **params):  # noqa: ANN001, ANN202
    resp = await jp_fetch("neuron-studio", "runs", *parts, params={k: str(v) for k, v in params.items()})
    return json.loads(resp.body)


def _lane_rows(df, lane_id: str):  # noqa: ANN001, ANN202
    """The raw ops a lane should hold, by the rules the module documents."""
    coll = df["name"].str.startswith("c10d::")
    if lane_id.startswith("host/"):
        launched = df[df["launch_ns"] > 0]
        thread = list(dict.fromkeys(launched["thread"]))[int(lane_id.split("/")[1])]
        sub = launched[launched["thread"] == thread]
        return sub.assign(start_ns=sub["start_ns"] - sub["launch_ns"], end_ns=sub["start_ns"])
    core_, track = lane_id.removeprefix("core").split("/")
    on_core = df[df["core"] == int(core_)]
    if track == "collective":
        return on_core[coll[on_core.index] & (on_core["engine"] != "none")]
    return on_core[(on_core["engine"] == track) & ~coll[on_core.index]]


@pytest.mark.parametrize("window", [None, (0.0, 0.001), (0.3, 0.31), (0.5, 0.9), (0.999, 1.2)])
@pytest.mark.parametrize("width", [16, 300, 2000])
async def test_boxes_keep_every_op_and_the_busy_time(jp_fetch, run, window, width) -> None:  # noqa: ANN001
    df = run["table"]
    lo_run, hi_run = int(df["start_ns"].min() - df["launch_ns"].max()), int(df["end_ns"].max())
    params = {"path": run["path"], "width_px": width}
    if window is not None:
        span = hi_run - lo_run
        params |= {"start_ns": lo_run + int(window[0] * span), "end_ns": lo_run + int(window[1] * span)}
    data = await _get(jp_fetch, run["id"], "trace", **params)
    lo, hi, origin = data["start_ns"], data["end_ns"], data["origin_ns"]
    ids = [lane["id"] for lane in data["lanes"]]
    assert ids == ["host/0", "host/1"] + [f"core{c}/{t}" for c in (0, 1)
                                          for t in ("tensor", "vector", "scalar", "gpsimd", "dma", "collective")]
    for lane in data["lanes"]:
        raw = _lane_rows(df, lane["id"])
        s, e = raw["start_ns"].to_numpy(), raw["end_ns"].to_numpy()
        inside = (s < hi) & ((e > lo) | (s >= lo))
        assert sum(lane["count"]) == int(inside.sum()), lane["id"]  # no op lost, none counted twice
        clipped = np.maximum(np.minimum(e, hi) - np.maximum(s, lo), 0)[inside]
        assert sum(lane["busy"]) == int(clipped.sum()), lane["id"]  # busy time preserved per lane and window
        assert lane["total"] == len(raw)
        # a single-op box is that op: its seq, its name, its exact times
        by_seq = raw.set_index("seq")
        for i in np.flatnonzero(np.array(lane["seq"]) >= 0)[:50]:
            op = by_seq.loc[lane["seq"][i]]
            assert data["names"][lane["name"][i]] == op["name"]
            assert (lane["start"][i] + origin, lane["end"][i] + origin) == (op["start_ns"], op["end_ns"])
            assert lane["count"][i] == 1
        # boxes in time order, each at least as long as nothing; they stay few
        assert lane["start"] == sorted(lane["start"]) and all(e >= s for s, e in zip(lane["start"], lane["end"]))
        assert len(lane["count"]) <= 3 * width + 1
    # ops on no engine (views) are on no lane
    assert sum(lane["total"] for lane in data["lanes"] if lane["kind"] == "device") == int((df["engine"] != "none").sum())
    assert [s["step"] for s in data["steps"]] == [1, 2, 3]


async def test_zoomed_in_every_op_is_its_own_box(jp_fetch, run) -> None:  # noqa: ANN001
    df = run["table"]
    op = df[df["name"] == "aten::op3"].iloc[0]
    data = await _get(jp_fetch, run["id"], "trace", path=run["path"], width_px=1000,
                      start_ns=int(op["start_ns"]) - 50, end_ns=int(op["end_ns"]) + 50)
    lane = next(lane for lane in data["lanes"] if lane["id"] == f"core{op['core']}/{op['engine']}")
    assert int(op["seq"]) in lane["seq"]
    assert all(c == 1 for c in lane["count"])


async def test_op_details_and_search(jp_fetch, run) -> None:  # noqa: ANN001
    detail = await _get(jp_fetch, run["id"], "trace", "op", path=run["path"], seq=107)
    assert detail["op"]["name"] == HOSTILE  # verbatim: the client escapes
    assert detail["op"]["input_shapes"] == "8x64;64x128" and detail["op"]["output_shapes"] == "8x128"
    assert detail["op"]["module"] == "layers.3.mlp" and detail["op"]["source"] == "train.py:40"
    df = run["table"]
    assert detail["lane"] == f"core{df.loc[7, 'core']}/tensor"
    assert (detail["host_lane"] is not None) == bool(df.loc[7, "launch_ns"] > 0)

    found = await _get(jp_fetch, run["id"], "trace", "search", path=run["path"], q="ALLREDUCE", limit=5)
    expected = df[df["name"] == "c10d::allreduce_"].sort_values("start_ns", kind="stable")
    assert found["total"] == len(expected)
    assert [r["seq"] for r in found["results"]] == expected["seq"].head(5).tolist()
    assert all(r["lane"].endswith("/collective") for r in found["results"])
    assert (await _get(jp_fetch, run["id"], "trace", "search", path=run["path"], q="no such op"))["total"] == 0


async def _error(jp_fetch, *parts: str, **params) -> tuple[int, str]:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", *parts, params={k: str(v) for k, v in params.items()})
    return info.value.code, json.loads(info.value.response.body)["message"]


@pytest.mark.parametrize("params,message", [
    ({"width_px": 0}, "width_px must be between 16 and 8192"),
    ({"width_px": 10**6}, "width_px must be between 16 and 8192"),
    ({"width_px": "wide"}, "'width_px' must be an integer"),
    ({"start_ns": 500, "end_ns": 500}, "end_ns must be greater than start_ns"),
    ({"start_ns": 900, "end_ns": 100}, "end_ns must be greater than start_ns"),
    ({"start_ns": "1e9"}, "'start_ns' must be an integer"),
])
async def test_bad_windows_are_400_with_a_message(jp_fetch, run, params, message) -> None:  # noqa: ANN001
    code, text = await _error(jp_fetch, run["id"], "trace", path=run["path"], **params)
    assert code == 400 and message in text


async def test_bad_op_and_search_requests(jp_fetch, run) -> None:  # noqa: ANN001
    assert (await _error(jp_fetch, run["id"], "trace", "op", path=run["path"]))[0] == 400
    assert (await _error(jp_fetch, run["id"], "trace", "op", path=run["path"], seq=10**9))[0] == 404
    assert (await _error(jp_fetch, run["id"], "trace", "search", path=run["path"], q=" "))[0] == 400
    assert (await _error(jp_fetch, run["id"], "trace", "search", path=run["path"], q="op", limit=0))[0] == 400
    assert (await _error(jp_fetch, "999", "trace", path=run["path"]))[0] == 404
    assert (await _error(jp_fetch, run["id"], "trace", path="../outside.ipynb"))[0] == 403


@pytest.mark.parametrize("parts", [("trace",), ("trace", "op"), ("trace", "search")])
async def test_trace_routes_need_auth(jp_fetch, run, parts) -> None:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", "runs", run["id"], *parts, headers={"Authorization": ""},
                       params={"path": run["path"], "seq": "107", "q": "op"})
    assert info.value.code == 403


async def test_engine_timeline_has_no_none_row(jp_fetch, run) -> None:  # noqa: ANN001
    """Ops on no engine (views) are not a track: the panel drew them as an empty "none" row."""
    data = await _get(jp_fetch, run["id"], "timeline", path=run["path"], bins=10)
    assert list(data["engines"]) == ["tensor", "vector", "scalar", "gpsimd", "dma"]


@pytest.mark.parametrize("width", [16, 300, 4000])
async def test_region_lanes_draw_every_launched_region_with_what_ended_it(jp_fetch, run, jp_root_dir, width) -> None:  # noqa: ANN001
    """An adaptive/compile run's regions table: each core's "Launch regions" lane before its engines, every
    region in one box, the regions the user's code ended counted in every box, a one-region box's details."""
    df = run["table"]
    rng = np.random.default_rng(5)
    rows = []
    for c in (0, 1):
        on = df[df["core"] == c].sort_values("start_ns")
        bounds = [0, *np.sort(rng.choice(np.arange(1, len(on)), 40, replace=False)).tolist(), len(on)]
        starts = on["start_ns"].to_numpy()
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            part = on.iloc[a:b]   # regions on a core follow each other: each ends where the next starts
            end = int(starts[b]) if b < len(on) else int(on["end_ns"].max())
            rows.append({"core": c, "start_ns": int(starts[a]), "end_ns": end,
                         "step": int(part["step"].iloc[0]), "n_ops": len(part), "launches": 1,
                         "first_op": part["name"].iloc[0], "last_op": part["name"].iloc[-1],
                         "ended_by": f"in-place aten::add_ at {HOSTILE}:{k}" if k % 3 == 0 else "closed by matmul",
                         "fix": "write `x = x + y`" if k % 3 == 0 else ""})
    regions = pa.Table.from_pylist(rows)
    store = core.run_store_module().RunStore(jp_root_dir / "work" / ".neuron_studio")
    store.save_table(int(run["id"]), "regions", regions)
    data = await _get(jp_fetch, run["id"], "trace", path=run["path"], width_px=width)
    ids = [lane["id"] for lane in data["lanes"]]
    assert ids.index("core0/regions") + 1 == ids.index("core0/tensor")
    assert ids.index("core1/regions") + 1 == ids.index("core1/tensor")
    table = regions.to_pandas()
    for c in (0, 1):
        lane = data["lanes"][ids.index(f"core{c}/regions")]
        mine = table[table["core"] == c]
        assert lane["kind"] == "regions" and lane["label"] == f"NC{c} Launch regions" and lane["total"] == len(mine)
        assert sum(lane["count"]) == len(mine) and sum(lane["split"]) == int((mine["fix"] != "").sum())
        assert all(s == -1 for s in lane["seq"])                    # no op: the viewer never asks for op details
        for r, n, s, e in zip(lane["region"], lane["count"], lane["start"], lane["end"]):
            if n == 1:
                row, info = table.iloc[r], data["regions"][str(r)]
                assert (s + data["origin_ns"], e + data["origin_ns"]) == (row["start_ns"], row["end_ns"])
                assert (info["ended_by"], info["fix"], info["n_ops"]) == (row["ended_by"], row["fix"], row["n_ops"])
            else:
                assert r == -1
