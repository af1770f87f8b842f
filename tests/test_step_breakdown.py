"""Step-time breakdown: every category checked against sums computed independently of the analysis."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_studio.profiler.analysis import step_breakdown as sb
from neuron_studio.profiler.capture import profile
from neuron_studio.profiler.profile import Profile
from tests.training_steps import profile_mlp

PRIORITY = list(sb.CATEGORIES)


def _brute_force(window: tuple[int, int], intervals: dict[str, list[tuple[int, int]]]) -> dict[str, int]:
    """Classify every nanosecond of an integer window by the first category covering it (no numpy)."""
    out = {c: 0 for c in PRIORITY + ["idle"]}
    for t in range(window[0], window[1]):
        for c in PRIORITY:
            if any(s <= t < e for s, e in intervals.get(c, [])):
                out[c] += 1
                break
        else:
            out["idle"] += 1
    return out


_iv = st.tuples(st.integers(0, 120), st.integers(1, 40)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(PRIORITY), st.lists(_iv, max_size=6), max_size=len(PRIORITY)),
       st.lists(st.integers(0, 150), min_size=1, max_size=4, unique=True))
def test_windows_match_a_per_nanosecond_count(intervals, cuts):
    edges = sorted(set(cuts) | {0, 150})
    windows = np.array(list(zip(edges[:-1], edges[1:])), dtype=float)
    arr = {c: (np.array([s for s, _ in v], dtype=float), np.array([e for _, e in v], dtype=float))
           for c, v in intervals.items()}
    got = sb.breakdown_windows(windows, arr)
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        want = _brute_force((a, b), intervals)
        row = got.iloc[i]
        assert {c: round(float(row[c]), 6) for c in want} == {c: float(v) for c, v in want.items()}
        assert float(row[PRIORITY + ["idle"]].sum()) == pytest.approx(b - a, abs=1e-9)


def test_overlapping_engines_and_cores_count_once():
    # two cores computing at the same time and an engine overlap on one core: 0-10 and 5-15 -> 15 ns
    got = sb.breakdown_windows(np.array([[0.0, 30.0]]), {
        "compute": (np.array([0.0, 5.0, 2.0]), np.array([10.0, 15.0, 4.0])),
        "launch": (np.array([12.0]), np.array([20.0]))})
    r = got.iloc[0]
    assert (r["compute"], r["launch"], r["idle"]) == (15.0, 5.0, 10.0)


def test_an_op_after_the_step_time_is_an_error_not_a_bar():
    dev = pd.DataFrame({"start_ns": [0.0, 100.0], "end_ns": [90.0, 200.0], "launch_overhead_ns": [0.0, 0.0],
                        "engine": ["vector", "vector"]})
    tr = pd.DataFrame({"name": ["aten::add", "aten::mul"], "source": [None, None], "fallback": [None, None],
                       "sync": [None, None], "transfer": [None, None], "step": [0, 0]})
    with pytest.raises(sb.BreakdownError, match="after the step time"):
        sb.modeled_breakdown(dev, tr, steps=1, step_time_ns=150.0)
    bd, _ = sb.modeled_breakdown(dev, tr, steps=1, step_time_ns=200.0)
    assert (bd.part("compute").ns, bd.part("idle").ns) == (190.0, 10.0)


@functools.cache
def _eager_profile(dropout: float = 0.0, steps: int = 3):
    return profile_mlp(steps=steps, dropout=dropout, item=True)


def _independent(prof: Profile) -> dict[str, float]:
    """Single core, eager: ops run one after another, so each category is a plain sum over its rows."""
    d = prof.device_run.ops_frame()
    t = prof.trace.ops
    dur = d["end_ns"] - d["start_ns"]
    sync = t["sync"].notna()
    dev = d["engine"].isin(["tensor", "vector", "scalar", "gpsimd", "dma"]) & ~sync & t["transfer"].isna()
    n = prof.steps
    return {"compute": float((dur - d["host_mask_ns"])[dev].sum()) / n,
            "fallback": float(d["host_mask_ns"].sum() + dur[d["engine"] == "host"].sum()) / n,
            "sync": float(dur[sync].sum()) / n, "launch": float(d["launch_overhead_ns"].sum()) / n}


def test_eager_breakdown_adds_up_and_matches_plain_sums():
    prof = _eager_profile()
    bd = prof.step_breakdown()
    assert bd.basis == "modeled device time"
    parts = {p.key: p.ns for p in bd.parts}
    assert sum(parts.values()) == pytest.approx(prof.step_time_ns, rel=1e-12)
    assert bd.step_time_ns == pytest.approx(prof.step_time_ns, rel=1e-12)
    want = _independent(prof)
    for k, v in want.items():
        assert parts[k] == pytest.approx(v, rel=1e-9, abs=1e-6), k
    assert parts["idle"] == pytest.approx(0.0, abs=1e-6) and parts["collective"] == 0.0
    # one bar per profiled step, each adding up to its own window; the windows tile the run
    assert len(bd.per_step) == prof.steps
    cols = list(sb.CATEGORIES) + ["idle"]
    assert np.allclose(bd.per_step[cols].sum(axis=1), bd.per_step["step_ns"], rtol=1e-12)
    assert bd.per_step["step_ns"].sum() == pytest.approx(prof.summary.step_time_ns, rel=1e-12)
    assert parts["launch"] / prof.step_time_ns > 0.9
    rec = bd.recommendations[0]
    assert rec.category == "launch" and rec.tab == "optable"
    assert rec.text.startswith(f"{100 * parts['launch'] / prof.step_time_ns:.0f}% launch overhead")
    wi = prof.what_if(chips=["trn2"])
    speed = wi[wi["kind"] == "mode"].set_index("mode")["speedup"]
    assert speed["adaptive"] > 1 and speed["compile"] > 1
    # the fix is the advisor's first-ranked row (the same row the What if line names), with its line
    first = wi[wi["rank"] == 1].iloc[0]
    names = {"adaptive": "adaptive eager", "compile": "compile"}
    assert first["kind"] == "mode" and first["speedup"] == max(speed["adaptive"], speed["compile"])
    assert rec.text.endswith(f"→ {names[first['mode']]}: {first['run']} (predicted {first['speedup']:.1f}x faster: "
                             "What if tab)")
    assert set(rec.ops) <= set(prof.op_table()["key"])


def test_dropout_mask_drawn_on_the_host_is_a_cpu_fallback_named_with_its_line():
    prof = _eager_profile(dropout=0.5)
    bd = prof.step_breakdown()
    fb = bd.part("fallback")
    d = prof.device_run.ops_frame()
    assert fb.ns == pytest.approx(float(d["host_mask_ns"].sum()) / prof.steps) and fb.ns > 0
    rows = sb.modeled_rows(d, prof.trace.ops)["fallback"]
    assert set(rows.ops) == {"aten::native_dropout"}
    # above the threshold, the recommendation names the op and its source line, and links the op table
    # (a host-drawn mask is not a fallback op, so it has no row in the fallbacks table)
    forced = sb.BreakdownPart("fallback", fb.label, fb.ns, 0.5)
    recs = sb.recommend(sb.StepBreakdown(bd.basis, bd.step_time_ns, [forced], bd.per_step),
                        sb.modeled_rows(d, prof.trace.ops), mode="eager")
    from tests import training_steps

    lines = Path(training_steps.__file__).read_text().splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "loss = model(x)" in t)   # the step's forward call
    assert recs[0].text.startswith(f"50% CPU fallback in aten::native_dropout at training_steps.py:{line} ")
    assert (recs[0].tab, recs[0].ops) == ("optable", ["aten::native_dropout"])


def test_summary_carries_the_breakdown_that_adds_up():
    prof = _eager_profile()
    s = prof.to_summary()
    b = s["breakdown"]
    assert b["step_time_ns"] == pytest.approx(s["step_time_ns"], rel=1e-12)
    assert sum(p["ns"] for p in b["parts"]) == pytest.approx(s["step_time_ns"], rel=1e-12)
    for st_ in b["steps"]:
        assert sum(st_["parts"].values()) == pytest.approx(st_["step_ns"], rel=1e-12)
    assert b["recommendations"][0]["tab"] == "optable"


def test_measured_profile_says_what_it_cannot_separate():
    prof = _eager_profile()
    dev = prof.device_run.ops_frame().assign(launch_overhead_ns=0.0)
    bd, _ = sb.modeled_breakdown(dev, prof.trace.ops, steps=prof.steps, step_time_ns=prof.summary.step_time_ns,
                                 basis="measured device time", undetermined=sb.MEASURED_UNDETERMINED)
    launch = bd.part("launch")
    assert launch.ns is None and not launch.determined and "not separable" in launch.note
    assert sum(p.ns for p in bd.parts if p.ns is not None) == pytest.approx(bd.step_time_ns, rel=1e-12)


@pytest.mark.parametrize("name", ["synthetic_ddp_rank-0.json.gz", "trace_filter_sampled_rank-0.json.gz"])
def test_imported_gpu_trace_uses_measured_gpu_time_per_step(name):
    from tests import trace_truth as truth

    path = truth.path_of(name)          # the shared trace: skips (fails in CI) without shared/traces
    from neuron_studio.profiler.importers import read_trace

    prof = Profile.from_trace(read_trace(path))
    bd = prof.step_breakdown()
    assert bd.basis == "measured GPU time"
    doc = truth.load(name)
    assert bd.step_time_ns == pytest.approx(truth.mean_step_ns(doc), abs=1.0)
    for k in ("launch", "fallback", "sync"):
        p = bd.part(k)
        assert p.ns is None and p.note
    # compute per step window, from the raw JSON: union of compute kernels clipped to the window
    origin = int(prof.trace.meta["imported"]["origin_ns"])
    kernels = [(truth.ns(e["ts"]) - origin, truth.ns(e["ts"]) + truth.ns(e.get("dur", 0)) - origin)
               for e in truth.gpu_events(doc, truth._KERNEL) if truth.kernel_kind(e) == "compute"]
    assert kernels
    for r in bd.per_step.itertuples(index=False):
        clipped = [(max(s, int(r.start_ns)), min(e, int(r.end_ns))) for s, e in kernels]
        assert r.compute == truth._length(truth._union([(s, e) for s, e in clipped if e > s]))
        assert r.compute + r.collective + r.transfer + r.idle == pytest.approx(r.step_ns, rel=1e-12)


def _merged_length(intervals: list[tuple[float, float]]) -> float:
    """Plain-Python union length (sort, merge), independent of the numpy helpers."""
    total, cur = 0.0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (cur[1] - cur[0] if cur else 0.0)


def test_launches_overlap_engines_and_compute_counts_them_once():
    from tests.models.blocks import TransformerBlock

    torch.manual_seed(0)
    model = TransformerBlock(64, 4).to("neuron")
    x = torch.randn(2, 32, 64, device="neuron")
    # independent work on two engines in the same group: a compute-bound matmul (Tensor) and an exp (Scalar)
    # of another tensor; the block itself is one dependency chain of small memory-bound ops, which do not overlap
    w = torch.randn(1024, 1024, device="neuron")
    z = torch.randn(256, 1024, device="neuron")

    def step():
        with torch.no_grad():
            return model(x), w @ w, z.exp()   # returned: a compiled graph drops work whose result is unused

    # one compiled graph per step (an adaptive region always ends at its matmul, so mm and exp would not share a
    # launch there: TorchNeuron's rule)
    prof = profile(step, steps=2, warmup=1, mode="compile", chip="trn2")
    d = prof.device_run.ops_frame()
    t = prof.trace.ops
    dev = d["engine"].isin(["tensor", "vector", "scalar", "gpsimd", "dma"]) & t["sync"].isna() \
        & t["transfer"].isna() & t["fallback"].isna()
    iv = [(s + m, e) for s, e, m in zip(d["start_ns"][dev], d["end_ns"][dev], d["host_mask_ns"][dev]) if e > s + m]
    union = _merged_length(iv)
    summed = sum(e - s for s, e in iv)
    bd = prof.step_breakdown()
    assert bd.part("compute").ns == pytest.approx(union / prof.steps, rel=1e-9)
    assert sum(p.ns for p in bd.parts) == pytest.approx(prof.step_time_ns, rel=1e-12)
    assert summed > union * 1.01           # the model overlaps engines inside a group (issue 16) ...
    assert bd.part("compute").ns < summed / prof.steps    # ... and the bar does not count them twice


def test_compute_recommendation_names_the_ranked_change_never_an_unranked_kernel():
    from neuron_studio.profiler.analysis.hot_path import WHY, HotOp

    parts = [sb.BreakdownPart("compute", "engine compute", 80.0, 0.8)]
    bd = sb.StepBreakdown("modeled device time", 100.0, parts, pd.DataFrame())
    launchy = HotOp("aten::add", "m", None, 1, 50, 0.5, "launch", WHY["launch"], "vector")
    mm = HotOp("aten::mm", "m.fc", "train.py:42", 1, 40, 0.4, "memory", WHY["memory"], "tensor",
               kernels=[{"kernel": "matmul_kernel", "kind": "candidate", "saving_ns": 12.0}])
    kernel_row = {"variant": "matmul_kernel for aten::mm", "kind": "kernel", "mode": "eager", "kernel": "matmul_kernel",
                  "run": None, "speedup": 1.14}
    rec = sb.recommend(bd, {}, mode="eager", hot=[launchy, mm], advice=[kernel_row])[0]
    assert rec.text == ("80% engine compute, most in aten::mm at train.py:42 (memory-bound) → NKI kernel "
                        "matmul_kernel (predicted 1.1x faster: What if tab)")
    assert (rec.tab, rec.ops) == ("hot", ["aten::mm"])
    # a PyTorch change ranked above the kernel is named instead, with the line that applies it
    fused = {"variant": "AdamW(fused=True)", "kind": "code", "mode": "eager", "speedup": 2.7,
             "run": "opt = torch.optim.AdamW(model.parameters(), fused=True)", "addresses": ("launch", "compute")}
    rec = sb.recommend(bd, {}, mode="eager", hot=[launchy, mm], advice=[fused, kernel_row])[0]
    assert rec.text.endswith("→ AdamW(fused=True): opt = torch.optim.AdamW(model.parameters(), fused=True) "
                             "(predicted 2.7x faster: What if tab)")
    # the advisor ranked nothing: the general fix, not the hot path's unranked kernel candidate
    rec = sb.recommend(bd, {}, mode="eager", hot=[launchy, mm], advice=[])[0]
    assert rec.text.endswith("(memory-bound) → HBM traffic dominates; fuse with neighbours or keep data in SBUF")
    assert "matmul_kernel" not in rec.text


def test_launch_fix_without_a_ranked_row():
    assert sb._launch_fix("adaptive", True).startswith("fewer sync points and graph breaks")
    assert sb._launch_fix("eager", False) == "adaptive eager or compile"
    parts = [sb.BreakdownPart("launch", "launch overhead", 80.0, 0.8)]
    bd = sb.StepBreakdown("modeled device time", 100.0, parts, pd.DataFrame())
    compile_row = {"variant": "compile on trn2", "kind": "mode", "mode": "compile", "speedup": 3.0,
                   "run": "%%neuron --mode compile --chip trn2"}
    rec = sb.recommend(bd, {}, mode="eager", launches_per_step=40, advice=[compile_row])[0]
    assert rec.text == ("80% launch overhead (40 launches per step) → compile: %%neuron --mode compile --chip trn2 "
                        "(predicted 3.0x faster: What if tab)")
