"""Every view of an imported torch.profiler trace says what it rests on: ops recorded without shapes are
ranked by what was measured (op table included), CPU-only gloo traces get a measured host breakdown and no
"GPU step", the backward pass is found without `evaluate_function` ranges, device kinds are named as they are,
custom op names survive (escaped when rendered), a summary-only Neuron profile has no timeline to draw, and an
`X` event without `dur` is refused.

The traces are built here, event by event, so a plain clone tests every rule; the real traces recorded by
others (../shared/traces) check the backward rule on a 2021 kineto trace when they are present.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from neuron_studio.profiler.importers import read_trace_bytes, trace_from_chrome
from neuron_studio.profiler.profile import Profile
from neuron_studio.profiler.trace import TraceFormatError


def _x(name: str, cat: str, ts: float, dur: float, tid: int | str = 1, pid: int = 1, **args) -> dict:
    ev = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "pid": pid}
    if args:
        ev["args"] = args
    return ev


def _launch(op: str, kernel: str, ts: float, op_dur: float, k_ts: float, k_dur: float, corr: int,
            kernel_cat: str = "kernel", runtime_cat: str = "cuda_runtime") -> list[dict]:
    """An op (no "Input Dims": recorded without shapes), its launch call and the kernel it launched."""
    return [_x(op, "cpu_op", ts, op_dur), _x("cudaLaunchKernel", runtime_cat, ts + 1, 2, correlation=corr),
            _x(kernel, kernel_cat, k_ts, k_dur, tid=7, pid=0, correlation=corr, device=0, stream=7)]


def _no_shapes_gpu_trace(kernel_cat: str = "kernel", runtime_cat: str = "cuda_runtime") -> dict:
    """One step: aten::mm launches 230 µs of GPU work, the all-reduce 100 µs, aten::add 50 µs."""
    evs = [_x("ProfilerStep#1", "user_annotation", 0, 1000)]
    evs += _launch("aten::mm", "gemm_kernel", 10, 20, 100, 230, 1, kernel_cat, runtime_cat)
    evs += _launch("c10d::allreduce_", "ncclDevKernel_AllReduce", 40, 20, 340, 100, 2, kernel_cat, runtime_cat)
    evs += _launch("aten::add", "add_kernel", 70, 20, 450, 50, 3, kernel_cat, runtime_cat)
    return {"traceEvents": evs}


def _profile(doc: dict, name: str = "t.json") -> Profile:
    return Profile.from_trace(trace_from_chrome(doc, name=name))


# -- ops without shapes: every view measured first ----------------------------------------------------------

def test_op_table_without_shapes_ranks_by_measured_gpu_time():
    """Old code: the table ranked by modeled device time, which only the collective had (share 100%)."""
    p = _profile(_no_shapes_gpu_trace())
    t = p.op_table()
    assert t.attrs["basis"] == "measured GPU time"
    assert list(t["key"]) == ["aten::mm", "c10d::allreduce_", "aten::add"]
    assert list(t["measured_ns"]) == [230_000, 100_000, 50_000]
    assert t["share"].iloc[0] == pytest.approx(230 / 380)
    s = p.to_summary()
    assert s["op_table_basis"] == "measured GPU time"
    first = s["op_table"][0]
    assert first["op"] == "aten::mm" and first["measured_ns"] == 230_000
    # the model's columns rest on ops it could not size: left empty, never shown as figures
    assert all(r["device_ns"] is None and r["flops"] is None for r in s["op_table"])
    from neuron_studio.ui.html import render_html

    page = render_html(s)           # the inline output says what it ranks by, and shows the measured column
    assert "Ranked by measured GPU time" in page and "GPU/step (measured)" in page


def test_timeline_of_a_trace_without_shapes_says_its_device_lanes_are_not_the_ops_time():
    """Old code: the Timeline tab drew the modeled device lanes of unsized ops (launch costs alone) as if they were
    the ops' time, with no word that the ops were never sized."""
    from neuron_studio.ui.html import render_html

    s = _profile(_no_shapes_gpu_trace()).to_summary()
    tv = s["trace_view"]
    assert tv is not None and tv["lanes"]
    assert "recorded without input shapes" in tv["note"] and "measured GPU time" in tv["note"]
    page = render_html(s)
    assert "ns-trace-unsized" in page and "not the time the ops took" in page
    evs = [_x("aten::mm", "cpu_op", 0, 10, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})]
    sized = _profile({"traceEvents": evs}).to_summary()
    assert sized["trace_view"] is not None and "note" not in sized["trace_view"]
    assert "ns-trace-unsized" not in render_html(sized)


def test_op_table_with_shapes_stays_modeled():
    evs = [_x("aten::mm", "cpu_op", 0, 10, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})]
    t = _profile({"traceEvents": evs}).op_table()
    assert t.attrs["basis"] == "modeled device time" and "measured_ns" not in t.columns


# -- CPU-only traces and gloo collectives ---------------------------------------------------------------------

def _gloo_cpu_trace(steps: int = 4) -> dict:
    """A CPU-only DDP step over gloo: the main thread runs aten ops and enqueues the all-reduce; gloo's
    thread runs `gloo:all_reduce` (no device, no shapes)."""
    evs, t = [], 0
    for k in range(steps):
        evs += [_x(f"ProfilerStep#{k}", "user_annotation", t, 1000, tid=1),
                _x("aten::mm", "cpu_op", t + 10, 300, tid=1),
                _x("c10d::allreduce_", "cpu_op", t + 320, 20, tid=1),
                _x("gloo:all_reduce", "cpu_op", t + 340, 500, tid=2)]
        t += 1000
    return {"traceEvents": evs}


def test_cpu_only_gloo_trace_has_a_measured_host_breakdown_and_no_gpu_step():
    from neuron_studio.profiler.analysis.gpu_vs_trainium import NoDeviceActivity

    p = _profile(_gloo_cpu_trace())
    assert "gloo:all_reduce" in set(p.trace.ops["name"])            # old code: not an op (no `ns::`)
    assert p.trace.meta["imported"]["device_kind"] is None
    bd = p.step_breakdown()
    assert bd.basis == "measured host time"
    assert bd.step_time_ns == pytest.approx(1_000_000)              # old code: a modeled 0
    assert bd.part("collective").ns == pytest.approx(520_000)       # allreduce_ enqueue + gloo's range
    assert bd.part("compute").ns == pytest.approx(300_000) and bd.part("compute").label == "host ops"
    assert bd.part("idle").ns == pytest.approx(180_000)
    assert not bd.part("launch").determined
    with pytest.raises(NoDeviceActivity, match="no GPU activity"):
        p.gpu_vs_trainium()
    s = p.to_summary()
    assert s["gpu"] is None and s["step_time_ns"] is None
    assert any("CPU-only" in w for w in s["warnings"])
    assert s["op_table"][0]["op"] == "gloo:all_reduce" and s["op_table_basis"] == "measured host time"
    from neuron_studio.ui.html import render_html

    assert "step time (measured host time)" in render_html(s)        # the headline is the measured step


# -- backward phase -----------------------------------------------------------------------------------------

def test_backward_phase_from_backward_ops_and_the_autograd_thread():
    """2021 kineto: no `autograd::engine::evaluate_function` ranges; backward runs on the autograd engine's
    thread (here tid 2), where AccumulateGrad's `aten::add_` is no `*_backward` op but still backward."""
    evs = [_x("ProfilerStep#1", "cpu_op", 0, 1000, tid=1),
           _x("aten::conv2d", "cpu_op", 10, 50, tid=1),
           _x("aten::relu", "cpu_op", 70, 10, tid=1),
           _x("aten::convolution_backward", "cpu_op", 100, 80, tid=2),
           _x("aten::add_", "cpu_op", 200, 5, tid=2),
           _x("aten::threshold_backward.default", "cpu_op", 300, 5, tid=1)]
    ops = trace_from_chrome({"traceEvents": evs}).ops.set_index("name")
    assert ops.loc["aten::conv2d", "phase"] == "forward" and ops.loc["aten::relu", "phase"] == "forward"
    assert ops.loc["aten::convolution_backward", "phase"] == "backward"
    assert ops.loc["aten::add_", "phase"] == "backward"
    assert ops.loc["aten::threshold_backward.default", "phase"] == "backward"


def test_backward_phase_from_a_named_autograd_thread():
    evs = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "pt_autograd_0"}},
           _x("aten::mm", "cpu_op", 0, 10, tid=1), _x("aten::mm", "cpu_op", 20, 10, tid=5)]
    ops = trace_from_chrome({"traceEvents": evs}).ops
    assert dict(zip(ops["thread"], ops["phase"])) == {1: "forward", 5: "backward"}


# -- device kinds -----------------------------------------------------------------------------------------------

def test_mtia_trace_is_named_mtia_not_gpu():
    p = _profile(_no_shapes_gpu_trace(kernel_cat="mtia_ccp_events", runtime_cat="mtia_runtime"))
    assert p.device_kind == "MTIA"
    g = p.gpu_vs_trainium()
    assert g.device_kind == "MTIA" and "GPU" not in " ".join(g.notes)
    s = p.to_summary()
    assert s["gpu"]["device_kind"] == "MTIA" and s["gpu"]["vs_trainium"]["device_kind"] == "MTIA"
    assert _profile(_no_shapes_gpu_trace()).device_kind == "GPU"


# -- custom op names ---------------------------------------------------------------------------------------------

def test_custom_op_names_are_kept_and_escaped_when_rendered():
    """Old code: an op not named `ns::identifier(.overload)` vanished from every table."""
    from neuron_studio.ui.html import render_html

    names = ["mylib::<b>fused</b>", "mylib::rope-v2", "aten::mm"]
    evs = [_x(n, "cpu_op", 10 * i, 5, **{"Input Dims": [[8, 8]], "Input type": ["float"]})
           for i, n in enumerate(names)]
    evs.append(_x("torch::autograd::AccumulateGrad", "cpu_op", 100, 5))     # a wrapper node, still not an op
    p = _profile({"traceEvents": evs})
    assert sorted(p.trace.ops["name"]) == sorted(names)
    page = render_html(p.to_summary())
    assert "mylib::&lt;b&gt;fused&lt;/b&gt;" in page and "<b>fused" not in page


# -- summary-only Neuron profile ---------------------------------------------------------------------------------

def test_summary_only_neuron_profile_says_timeline_not_captured(tmp_path: Path):
    from neuron_studio.profiler.neuron_profile import load_neuron_profile
    from neuron_studio.ui.html import render_html

    f = tmp_path / "summary.json"
    f.write_text(json.dumps({"total_time": 1e-3, "vector_engine_active_time": 9.65e-4,
                             "instance_type": "trn2.48xlarge"}))
    s = load_neuron_profile(f).to_summary()
    assert s["timeline"] is None                                     # old code: all-zero bins
    assert s["timeline_note"].startswith("timeline not captured")
    assert s["timeline_note"] in s["warnings"]
    assert "timeline not captured" in render_html(s)


# -- X events without dur ----------------------------------------------------------------------------------------

def test_x_event_without_dur_is_an_error_in_every_reader():
    evs = [_x("aten::mm", "cpu_op", 0, 10), {"ph": "X", "name": "aten::add", "cat": "cpu_op", "ts": 20, "tid": 1,
                                             "pid": 1}]
    doc = {"traceEvents": evs}
    with pytest.raises(TraceFormatError, match=r"event 1: .*has no \"dur\""):
        trace_from_chrome(doc, name="t.json")
    for data in (json.dumps(doc).encode(), gzip.compress(json.dumps(doc).encode())):
        with pytest.raises(TraceFormatError, match=r"has no \"dur\""):
            read_trace_bytes(data, name="t.json")


# -- the real 2021 trace, when present ---------------------------------------------------------------------------

def test_backward_ops_of_a_2021_trace_are_backward():
    import shared_data
    from neuron_studio.profiler.importers import read_trace

    folder = shared_data.require("traces")          # skips on a plain clone (fails in CI without the data)
    ops = read_trace(folder / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz").ops
    bw = ops["name"].str.split(".").str[0].str.endswith("_backward")
    assert bw.sum() > 900 and (ops.loc[bw, "phase"] == "backward").all()       # old code: all "forward"
    autograd_thread = set(ops.loc[bw, "thread"])
    assert len(autograd_thread) == 1
    on_it = ops["thread"].isin(autograd_thread)
    assert (ops.loc[on_it, "phase"] == "backward").all() and (ops.loc[~on_it & ~bw, "phase"] == "forward").all()
