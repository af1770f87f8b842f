"""The trace viewer's data from a real profile: the stored viewer columns, the summary's overview (no op
lost, launches lead to their device ops), and the inline HTML's static trace (ticks, steps, escaped tooltips)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from neuron_studio.profiler.analysis import trace_lod
from neuron_studio.profiler.capture import profile
from neuron_studio.profiler.profile_summary import profile_summary
from neuron_studio.session import save_profile
from neuron_studio.store import RunStore
from neuron_studio.ui.html import render_html
from neuron_studio.ui.trace_html import nice_ticks

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def prof():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
    x = torch.randn(4, 32, device="neuron")
    return profile(lambda: model(x).pow(2).mean().backward(), steps=3, warmup=1, mode="eager")


@pytest.fixture(scope="module")
def summary(prof):
    return profile_summary(prof)


def test_stored_device_ops_carry_the_viewer_columns(prof, tmp_path):
    store = RunStore(tmp_path / ".neuron_studio")
    rid = store.begin_run(cell_source="x", options={}, mode="eager", chip="trn2", backend="emulated")
    save_profile(store, rid, prof)
    dev = store.load_table(rid, "device_ops").to_pandas().set_index("seq")
    host = prof.trace.ops.set_index("seq")
    assert {"thread", "step", "launch_ns", "input_shapes", "output_shapes"} <= set(dev.columns)
    assert (dev["thread"] == host.loc[dev.index, "thread"]).all()
    assert (dev["step"] == host.loc[dev.index, "step"]).all()
    assert (dev["output_shapes"] == host.loc[dev.index, "output_shapes"].fillna("").astype(str)).all()
    launch = prof.ops.set_index("seq")["launch_ns"].fillna(0).astype("int64")
    assert (dev["launch_ns"] == launch.loc[dev.index]).all()
    assert (dev["launch_ns"] > 0).any()  # eager: ops launch one by one


def test_overview_keeps_every_device_op_on_its_lane(prof, summary):
    tv = summary["trace_view"]
    ops = prof.ops
    device = ops[ops["engine"] != "none"]
    lanes = {lane["id"]: lane for lane in tv["lanes"]}
    for (core, engine), group in device.groupby(["core", "engine"]):
        lane = lanes[f"core{core}/{engine}"]
        assert lane["total"] == len(group) == sum(lane["count"])
        assert sum(lane["busy"]) == int((group["device_end_ns"] - group["device_start_ns"]).sum())
    assert sum(lane["total"] for lane in tv["lanes"] if lane["kind"] == "device") == len(device)
    assert [s["step"] for s in tv["steps"]] == sorted(prof.trace.ops["step"].unique().tolist())


def test_overview_launches_end_where_their_device_op_starts(prof, summary):
    """The host lanes hold each launch [device start - launch cost, device start): a flow's two ends."""
    tv = summary["trace_view"]
    by_seq = prof.ops.set_index("seq")
    host = [lane for lane in tv["lanes"] if lane["kind"] == "host"]
    assert host
    checked = 0
    for lane in host:
        for start, end, seq in zip(lane["start"], lane["end"], lane["seq"]):
            if seq < 0:
                continue
            op = by_seq.loc[seq]
            assert end + tv["origin_ns"] == op["device_start_ns"]
            assert end - start == int(op["launch_ns"])
            checked += 1
    assert checked > 0
    details = tv["ops"]
    seq = next(s for lane in tv["lanes"] if lane["kind"] == "device" for s in lane["seq"] if s >= 0)
    host_op = prof.trace.ops.set_index("seq").loc[seq]
    assert details[str(seq)]["output_shapes"] == str(host_op["output_shapes"])


def test_lane_boxes_merge_only_below_a_pixel():
    starts = np.array([0, 10, 20, 1000, 1010, 5000], dtype=np.int64)
    ends = starts + np.array([5, 5, 5, 600, 5, 5])
    lane = trace_lod.Lane("l", "l", "device", 0, "tensor", starts, ends, np.arange(6), 600)
    boxes = trace_lod.lane_boxes(lane, 0, 6000, px_ns=50.0)
    # three tiny ops 5 ns apart merge; the 600 ns op is its own box; the op inside it and the last stay apart
    assert boxes.counts.tolist() == [3, 1, 1, 1]
    assert boxes.rows.tolist() == [-1, 3, 4, 5]
    assert boxes.busy.tolist() == [15, 600, 5, 5]
    wide = trace_lod.lane_boxes(lane, 0, 6000, px_ns=2.0)  # a pixel is 2 ns: every op is its own box
    assert wide.counts.tolist() == [1] * 6
    with pytest.raises(trace_lod.WindowError, match="end_ns must be greater"):
        trace_lod.check_window(10, 10, 100)


def test_nice_ticks():
    assert nice_ticks(10_000) == [0, 2000, 4000, 6000, 8000, 10000]
    assert nice_ticks(7) == [0, 2, 4, 6]  # 7/6 rounds up to a step of 2


def test_inline_timeline_is_a_static_trace_with_ticks_steps_and_tooltips(summary):
    page = render_html(summary)
    pane = page[page.index("data-ns-trace='static'"):]
    pane = pane[:pane.index("</div>")]
    lanes = [lane["label"] for lane in summary["trace_view"]["lanes"]]
    assert re.findall(r"<text class='ns-lane'[^>]*>([^<]*)</text>", pane) == [
        label.replace("·", "·") for label in lanes]
    ticks = re.findall(r"<text class='ns-tick'[^>]*>([^<]*)</text>", pane)
    assert len(ticks) >= 4 and ticks[0] == "0 ns"
    assert re.findall(r"<text class='ns-step'[^>]*>([^<]*)</text>", pane) == [
        f"step {s['step']}" for s in summary["trace_view"]["steps"]]
    titles = re.findall(r"<title>([^<]*)</title>", pane)
    assert any(t.startswith("aten::addmm · NC0 Tensor") and "shapes" in t for t in titles)
    assert "<script" not in page
    assert "Perfetto" in pane and "zoom" in pane
    # each op's source in the one source format (`cell [N] line L` / `file.py:L`), never as captured
    from neuron_studio.profiler.vocabulary import source_label

    sources = {d["source"] for d in summary["trace_view"]["ops"].values() if isinstance(d, dict) and d.get("source")}
    assert sources and any(source_label(s) in t for s in sources for t in titles)
    text = " ".join(titles)
    assert not re.search(r"cell-\d+:\d+", text) and not any(s in text for s in sources if "/" in s)


def test_inline_trace_escapes_op_names_and_sources(summary):
    import copy

    hostile = copy.deepcopy(summary)
    tv = hostile["trace_view"]
    tv["names"] = [HOSTILE for _ in tv["names"]]
    tv["lanes"][0]["label"] = HOSTILE
    for d in tv["ops"].values():
        d["source"] = HOSTILE
        d["module"] = "</svg><script>alert(1)</script>"
    page = render_html(hostile)
    assert HOSTILE not in page and "<script>alert(1)" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
