"""Launch-region boundaries where a reader looks (issue 26): the timeline's launch-region lane (inline HTML and
the JupyterLab viewer's data, from the analysis, never computed by a renderer), the op table's "ends regions"
column with the fix under it, and the studio's own step-end sync never blamed on the user's code."""
from __future__ import annotations

import re
from html import unescape

import pytest
import torch

import neuron_studio  # noqa: F401 - registers the device
from neuron_studio.profiler.analysis import trace_lod
from neuron_studio.profiler.analysis.trace_overview import region_table
from neuron_studio.profiler.capture import profile
from neuron_studio.ui.html import render_html


def _step_with_in_place():  # noqa: ANN202
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(8, 32, device="neuron")

    def step() -> None:
        y = m(x)
        y += 1                                   # the user's in-place op: it ends the region before it
        y.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    return step


@pytest.fixture(scope="module")
def runs() -> dict:
    step = _step_with_in_place()
    return {mode: profile(step, steps=2, warmup=1, mode=mode) for mode in ("eager", "adaptive", "compile")}


def _lane(tv: dict, label: str) -> dict:
    return next(lane for lane in tv["lanes"] if lane["label"] == label)


@pytest.mark.parametrize("mode", ["adaptive", "compile"])
def test_overview_draws_every_launched_region_with_what_ended_it(runs: dict, mode: str) -> None:
    prof = runs[mode]
    reg = prof.fusion_regions()
    tv = prof.to_summary()["trace_view"]
    labels = [lane["label"] for lane in tv["lanes"]]
    # the core's region lane sits just above its engine lanes
    assert labels.index("NC0 Launch regions") + 1 == labels.index(next(x for x in labels if x.startswith("NC0 ")
                                                                       and x != "NC0 Launch regions"))
    lane = _lane(tv, "NC0 Launch regions")
    assert lane["kind"] == "regions" and lane["total"] == len(reg)
    assert sum(lane["count"]) == len(reg)                             # every region in a box, none twice
    assert sum(lane["split"]) == int((reg["fix"] != "").sum())        # every region the user's code ended
    singles = [(r, s, e) for r, c, s, e in zip(lane["region"], lane["count"], lane["start"], lane["end"]) if c == 1]
    assert singles
    for r, s, e in singles:
        row, info = reg.iloc[r], tv["regions"][str(r)]
        assert (info["n_ops"], info["first_op"], info["last_op"], info["ended_by"], info["fix"]) == (
            row["n_ops"], row["first_op"], row["last_op"], row["ended_by"], row["fix"])
        assert (s + tv["origin_ns"], e + tv["origin_ns"]) == (int(row["start_ns"]), int(row["end_ns"]))


def test_the_users_in_place_op_is_marked_with_its_line_and_fix(runs: dict) -> None:
    prof = runs["adaptive"]
    reg = prof.fusion_regions()
    user = reg[(reg["boundary_op"] == "aten::add_") & reg["boundary_source"].str.endswith(
        f"test_region_boundaries.py:{_line_of('y += 1')}")]
    assert len(user) == prof.steps
    assert user["fix"].str.contains("this `x += y` splits the region: write `x = x + y`", regex=False).all()
    # AdamW's in-place updates: the optimizer's fix, not "write x = x + y" in the user's optimizer call
    opt = reg[(reg["reason"] == "in_place") & ~reg.index.isin(user.index)]
    assert len(opt) and opt["fix"].str.contains("fused=True", regex=False).all()
    s = prof.to_summary()
    html = unescape(render_html(s))
    titles = re.findall(r"data-split='1'><title>([^<]*)</title>", html)
    assert any("aten::add_" in t and "write `x = x + y`" in t and f":{_line_of('y += 1')}" in t for t in titles)
    assert "NC0 Launch regions" in html and "ends regions/step" in html
    assert "Where your code ends launch regions" in html
    # the user's line once; the optimizer's in-place updates (AdamW's foreach ops: torch picks the foreach
    # implementation for any PrivateUse1 device, TorchNeuron's included) each with the optimizer's fix
    line = f":{_line_of('y += 1')}"
    users = [d for d in s["region_splits"] if d["op"] == "aten::add_" and d["source"].endswith(line)]
    assert len(users) == 1 and users[0]["per_step"] == 1
    optimizer = [d for d in s["region_splits"] if d not in users]
    assert {d["op"] for d in optimizer} == set(opt["boundary_op"])
    assert all("fused=True" in d["fix"] and "x = x + y" not in d["fix"] for d in optimizer)
    row = next(r for r in s["op_table"] if r["op"] == "aten::add_")
    assert row["region_splits"] == pytest.approx(user.shape[0] / prof.steps + len(opt[opt["boundary_op"] == "aten::add_"])
                                                 / prof.steps)


def test_eager_runs_draw_no_region_lane(runs: dict) -> None:
    """Eager launches every op: a region lane would repeat the ops; the overview has none."""
    prof = runs["eager"]
    assert region_table(prof) is None
    tv = prof.to_summary()["trace_view"]
    assert not [lane for lane in tv["lanes"] if lane["kind"] == "regions"] and tv["regions"] == {}


@pytest.mark.parametrize("mode", ["adaptive", "compile"])
def test_the_studios_step_end_sync_is_a_step_end_not_the_users_split(runs: dict, mode: str) -> None:
    prof = runs[mode]
    table = prof.op_table().set_index("key")
    if "neuron::synchronize" in table.index:
        assert table.loc["neuron::synchronize", "region_splits"] == 0
    reg = prof.fusion_regions(launched_only=False)
    studio = reg[reg["boundary_op"] == "neuron::synchronize"]
    assert len(studio) and (studio["reason"] == "step_end").all() and (studio["fix"] == "").all()
    assert not [d for d in prof.to_summary()["region_splits"] if d["op"] == "neuron::synchronize"]


def test_merged_region_boxes_count_the_splits_inside_them() -> None:
    """At a coarse width regions merge; each box still says how many regions in it the user's code ended."""
    import numpy as np

    starts = np.arange(0, 1000, 10, dtype=np.int64)
    split = np.zeros(starts.size, dtype=bool)
    split[[3, 4, 50, 99]] = True
    lanes = trace_lod.build_region_lanes(cores=np.zeros(starts.size), starts=starts, ends=starts + 10, split=split)
    (lane,) = lanes.lanes
    for width in (16, 100, 4000):
        boxes = trace_lod.lane_boxes(lane, 0, 1000, 1000 / width)
        js = trace_lod.region_boxes_json(lane, boxes, 0, lanes.split_ends[lane.id])
        assert sum(js["count"]) == starts.size and sum(js["split"]) == 4
        for r, c, k in zip(js["region"], js["count"], js["split"]):
            assert (r >= 0) == (c == 1) and (k == int(split[r]) if c == 1 else True)


def _line_of(text: str) -> int:
    src = open(__file__, encoding="utf-8").read().splitlines()
    return next(i + 1 for i, line in enumerate(src) if line.strip().startswith(text))


def test_a_stored_run_keeps_its_regions_for_the_viewer(runs: dict, tmp_path) -> None:  # noqa: ANN001
    from neuron_studio.session import save_profile
    from neuron_studio.store import RunStore

    store = RunStore(tmp_path / "s")
    for mode, prof in runs.items():
        rid = store.begin_run(cell_source="step()", options={}, mode=mode, chip="trn2", backend="emulated")
        save_profile(store, rid, prof)
        if mode == "eager":
            assert "regions" not in store.list_tables(rid)
            continue
        stored = store.load_table(rid, "regions").to_pandas()
        assert tuple(stored.columns) == trace_lod.REGION_COLUMNS
        assert stored.equals(region_table(prof).reset_index(drop=True))
