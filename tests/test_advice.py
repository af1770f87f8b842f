"""PyTorch-first advice: each one-line change is a what-if row re-modeled from the recorded ops, its prediction checked
against running the change; one ranking names the change in both the breakdown's verdict and the What if line;
kernel candidates only where they can help; costs readable."""
from __future__ import annotations

import re

import numpy as np

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import neuron_studio  # noqa: E402,F401
from neuron_studio.profiler.analysis import what_if as wi  # noqa: E402
from neuron_studio.profiler.analysis.hot_path import can_change  # noqa: E402
from neuron_studio.profiler.capture import profile  # noqa: E402
from neuron_studio.profiler.summary_numbers import usd_text  # noqa: E402
from neuron_studio.ui.formatting import fmt_usd  # noqa: E402
from neuron_studio.ui.html import render_html  # noqa: E402
from neuron_studio.ui.text import render_text  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_shell_namespace():
    """Cells these tests run in the shared test shell leave models and tensors on the device in its namespace;
    emptied after each test, so later tests in the same process (memory peaks, e.g. test_memory_sharding)
    do not count them."""
    yield
    import gc

    from IPython.testing import globalipapp

    globalipapp.get_ipython().reset(new_session=False)
    gc.collect()


def _adamw_step(fused: bool, mode: str):
    """The README's first example: an MLP whose step the AdamW update dominates."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), fused=fused)
    x = torch.randn(32, 512, device="neuron")

    def step():
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    return profile(step, steps=2, warmup=1, mode=mode, chip="trn2")


def _fp32_matmuls(autocast: bool, mode: str):
    """FP32 compute-bound work: wide linears on a large batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to("neuron")
    x = torch.randn(512, 1024, device="neuron")

    def step():
        with torch.autocast("neuron", dtype=torch.bfloat16, enabled=autocast):
            y = model(x)
        y.float().pow(2).mean().backward()

    return profile(step, steps=1, warmup=1, mode=mode, chip="trn2")


@pytest.mark.parametrize("mode", ["eager", "adaptive"])
def test_fused_optimizer_row_predicts_running_it_fused(mode: str) -> None:
    prof = _adamw_step(False, mode)
    df = prof.what_if(chips=["trn2"])
    row = df[df["variant"] == "fused AdamW"].iloc[0]
    assert row["kind"] == "code" and "fused=True" in row["run"] and pd.notna(row["rank"])
    ran = _adamw_step(True, mode)
    assert "aten::_fused_adamw_" in set(ran.trace.ops["name"])
    # the rewrite is the op sequence a fused step records: the re-modeled step is the fused run's, not a guess
    assert row["step_time_ns"] == pytest.approx(ran.step_time_ns, rel=0.02)
    assert row["step_time_ns"] < prof.step_time_ns
    # a run that is already fused gets no such row
    assert "fused AdamW" not in set(ran.what_if(chips=["trn2"])["variant"])


def test_fused_optimizer_row_of_a_first_step_keeps_the_state_creation() -> None:
    """An optimizer's first step creates its state; a fused one does too (and its step counters on the device): the
    re-modeled first step is the fused first step's, not a steady-state step's."""
    def first_step(fused: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64)).to("neuron")
        opt = torch.optim.AdamW(model.parameters(), fused=fused)
        x = torch.randn(8, 64, device="neuron")

        def step():
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()

        return profile(step, steps=1, warmup=0, mode="eager", chip="trn2")

    prof = first_step(False)
    row = prof.what_if(chips=["trn2"]).set_index("variant").loc["fused AdamW"]
    ran = first_step(True)
    assert (ran.trace.ops["name"] == "aten::zeros_like").sum() == (prof.trace.ops["name"] == "aten::zeros_like").sum() > 0
    assert row["step_time_ns"] == pytest.approx(ran.step_time_ns, rel=0.02)


def test_adamw_dominated_step_is_told_the_pytorch_line_before_any_kernel() -> None:
    prof = _adamw_step(False, "adaptive")
    first = prof.step_breakdown().recommendations[0]
    assert "fused AdamW" in first.text and "fused=True" in first.text
    assert "NKI kernel" not in first.text and "fused_adam" not in first.text
    s = prof.to_summary()
    assert s["what_if"]["best"] == "fused AdamW"
    # the hot path's optimizer rows cite the PyTorch change first
    opt_rows = [h for h in s["hot_ops"] if h["module"].startswith("optimizer.")]
    assert opt_rows and all(h["change"]["variant"] == "fused AdamW" for h in opt_rows)
    text = render_text(s)
    assert "first: fused AdamW" in text and text.index("first: fused AdamW") < text.index("fused_adam")


@pytest.mark.parametrize("mode", ["eager", "adaptive"])
def test_bf16_autocast_row_predicts_running_under_autocast(mode: str) -> None:
    prof = _fp32_matmuls(False, mode)
    df = prof.what_if(chips=["trn2"])
    row = df[df["variant"] == "bf16 autocast"].iloc[0]
    assert row["run"] == 'with torch.autocast("neuron", dtype=torch.bfloat16):'
    ran = _fp32_matmuls(True, mode)
    assert ran.trace.ops.loc[ran.trace.ops["name"] == "aten::addmm", "input_dtypes"].str.contains("bfloat16").all()
    # autocast's casting rules over the recorded storages: the casts and BF16 propagation, not a flat factor
    assert row["step_time_ns"] == pytest.approx(ran.step_time_ns, rel=0.10)
    casts = [c for c in prof.code_changes() if c.key == "autocast_bf16"][0].ops
    assert (casts["name"] == "aten::_to_copy").sum() > 0


def _fp32_training_step(autocast: bool, steps: int, mode: str):
    """FP32 matmuls and an AdamW step that writes the weights after each backward."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to("neuron")
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256, device="neuron")

    def step():
        with torch.autocast("neuron", dtype=torch.bfloat16, enabled=autocast):
            y = model(x)
        y.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    return profile(step, steps=steps, warmup=1, mode=mode, chip="trn2")


def _downcasts(ops: pd.DataFrame) -> int:
    return int(((ops["name"] == "aten::_to_copy") & (ops["input_dtypes"] == "float32")
                & (ops["output_dtypes"] == "bfloat16")).sum())


@pytest.mark.parametrize("mode", ["eager", "adaptive"])
def test_bf16_autocast_row_casts_the_weights_again_every_step(mode: str) -> None:
    """autocast's cast cache lives for one autocast block (cleared when it exits), and the optimizer rewrites the
    weights: a step under autocast casts each weight again. The re-modeled step is the same whether 1 or 3 steps
    were profiled, and casts what the run under autocast casts."""
    one, three = _fp32_training_step(False, 1, mode), _fp32_training_step(False, 3, mode)
    predicted = [p.what_if(chips=["trn2"]).set_index("variant").loc["bf16 autocast", "step_time_ns"] for p in (one, three)]
    assert predicted[1] == pytest.approx(predicted[0], rel=1e-9)
    ran = _fp32_training_step(True, 3, mode)
    rewritten = [c for c in three.code_changes() if c.key == "autocast_bf16"][0].ops
    assert _downcasts(rewritten) == _downcasts(ran.trace.ops) > 0
    assert predicted[1] == pytest.approx(ran.step_time_ns, rel=0.10)


def test_bf16_autocast_row_casts_the_weights_again_in_each_micro_batch() -> None:
    """Gradient accumulation: each micro-batch's forward pass is its own autocast block, whose exit clears the cast
    cache, so the weights are cast once per micro-batch, not once per step; as the run under autocast does."""
    def accumulating(autocast: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to("neuron")
        opt = torch.optim.AdamW(model.parameters())
        xs = [torch.randn(64, 256, device="neuron") for _ in range(2)]

        def step():
            for x in xs:
                with torch.autocast("neuron", dtype=torch.bfloat16, enabled=autocast):
                    y = model(x)
                y.float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()

        return profile(step, steps=2, warmup=1, mode="eager", chip="trn2")

    prof, ran = accumulating(False), accumulating(True)
    rewritten = [c for c in prof.code_changes() if c.key == "autocast_bf16"][0].ops
    assert _downcasts(rewritten) == _downcasts(ran.trace.ops) > 0
    row = prof.what_if(chips=["trn2"]).set_index("variant").loc["bf16 autocast"]
    assert row["step_time_ns"] == pytest.approx(ran.step_time_ns, rel=0.10)


def test_fp32_compute_bound_step_is_told_autocast_before_any_kernel() -> None:
    prof = _fp32_matmuls(False, "adaptive")
    rec = prof.step_breakdown().recommendations[0]
    # the reason is what autocast acts on: the FP32 matmuls' share of the step, at their line
    assert rec.category == "compute" and re.search(r"the FP32 matmuls/convolutions take \d+% of the step", rec.text)
    assert "bf16 autocast" in rec.text and "torch.autocast" in rec.text and "NKI kernel" not in rec.text
    assert prof.to_summary()["what_if"]["best"] == "bf16 autocast"


def test_host_sync_row_removes_the_items_from_the_step() -> None:
    w = torch.randn(64, 64, device="neuron")

    def step():
        total = 0.0
        for _ in range(4):
            total += (w @ w).relu().sum().item()     # a host sync per iteration

    prof = profile(step, steps=2, warmup=1, mode="adaptive", chip="trn2")
    row = prof.what_if(chips=["trn2"]).set_index("variant").filter(like="no host sync", axis=0).iloc[0]
    assert row["kind"] == "code" and "item()" in row["run"]
    change = [c for c in prof.code_changes() if c.key == "host_syncs"][0]
    assert not change.ops["sync"].isin(["item", "to_host", "print"]).any()
    assert row["step_time_ns"] < prof.step_time_ns


def test_compile_is_not_advised_when_shapes_are_not_static() -> None:
    x = torch.randn(256, 64, device="neuron")
    lin = torch.nn.Linear(64, 64).to("neuron")

    def step():
        y = lin(x)
        y[y > 0].sum()                       # boolean masking: a data-dependent output shape

    prof = profile(step, steps=2, warmup=1, mode="eager", chip="trn2")
    df = prof.what_if(chips=["trn2"])
    comp = df[(df["mode"] == "compile") & (df["kind"] == "mode")].iloc[0]
    assert not comp["advisable"] and pd.isna(comp["rank"])
    assert comp["why_not"].startswith("shapes are not static: data-dependent output shapes")
    assert all("compile" not in r.text for r in prof.step_breakdown().recommendations)


def test_one_ranking_breaks_ties_one_way() -> None:
    """Two rows shown at the same speedup (1.7x): the smaller change ranks first, in every view."""
    rows = pd.DataFrame([
        {"variant": "compile on trn2", "kind": "mode", "mode": "compile", "speedup": 1.74, "advisable": True},
        {"variant": "adaptive on trn2", "kind": "mode", "mode": "adaptive", "speedup": 1.66, "advisable": True},
        {"variant": "matmul_kernel for aten::mm", "kind": "kernel", "mode": "eager", "speedup": 1.7, "advisable": True},
        {"variant": "fused AdamW", "kind": "code", "mode": "eager", "speedup": 1.04, "advisable": True},
        {"variant": "eager on trn3", "kind": "chip", "mode": "eager", "speedup": 3.0, "advisable": False},
    ])
    rank = wi.rank_rows(rows)
    assert rank.iloc[:3].tolist() == [2, 1, 3]
    assert pd.isna(rank.iloc[3]) and pd.isna(rank.iloc[4])     # under MIN_SPEEDUP; another chip


def test_breakdown_verdict_and_what_if_line_name_the_same_change() -> None:
    for prof in (_adamw_step(False, "eager"), _adamw_step(False, "adaptive"), _fp32_matmuls(False, "eager")):
        s = prof.to_summary()
        best = next(r for r in s["what_if"]["rows"] if r["variant"] == s["what_if"]["best"])
        assert best["rank"] == 1
        first = s["breakdown"]["recommendations"][0]["text"]
        assert best["run"] in first
        text = render_text(s)
        assert f"what if (modeled, approximate): {best['variant']}" in text
        assert f"<b>{best['variant']}</b>" in render_html(s)


def test_kernel_candidate_only_where_it_can_change_the_bound() -> None:
    op_kernel = {"kernel": "matmul_kernel", "kind": "candidate", "pattern": "aten::mm"}
    module_kernel = {"kernel": "rmsnorm_kernel", "kind": "candidate", "pattern": "RMSNorm"}
    assert not can_change(op_kernel, "aten::mm", "launch")          # one launch replaces one launch
    assert can_change(op_kernel, "aten::mm", "compute") and can_change(op_kernel, "aten::mm", "memory")
    assert can_change(module_kernel, "aten::mul", "launch")          # many launches become one
    assert can_change({"kind": "runs_as", "pattern": "aten::mm"}, "aten::mm", "launch")
    # on a launch-bound eager step no single-op kernel is offered, and no saving exceeds the time it replaces
    w = torch.randn(16, 16, device="neuron")
    prof = profile(lambda: torch.addmm(w, w, w).relu(), steps=2, mode="eager", chip="trn2")
    for h in prof.hot_path():
        for k in h.kernels:
            if h.bound == "launch" and k["kind"] == "candidate":
                assert not str(k.get("pattern", "")).startswith("aten::")
            if k.get("saving_ns") is not None:
                assert 0 < k["saving_ns"] <= k["replaces_ns"]


def test_module_kernel_saving_is_shown_against_the_module_time() -> None:
    from tests.models.blocks import TransformerBlock

    torch.manual_seed(0)
    net = TransformerBlock(128, 4).to("neuron")
    x = torch.randn(4, 128, 128, device="neuron")
    with torch.no_grad():
        prof = profile(lambda: net(x), steps=2, mode="eager", chip="trn2")
    s = prof.to_summary()
    mod = [h["kernel"] for h in s["hot_ops"] if h["kernel"] and str(h["kernel"].get("scope")).startswith("module")]
    assert mod
    for k in mod:
        assert k["saving_ns"] <= k["replaces_ns"]
    assert "of the module&#39;s" in render_html(s) and "of the module's" in render_text(s, top=20)


@pytest.mark.parametrize("value,text", [(0.000084631, "$0.0000846"), (0.0007972, "$0.000797"), (0.1325, "$0.133"),
                                        (2.4, "$2.40"), (1234.5, "$1,230"), (0.0, "$0")])
def test_dollars_have_three_significant_digits_never_zeros_or_exponents(value: float, text: str) -> None:
    assert usd_text(value) == text == fmt_usd(value)


def test_summary_costs_are_per_million_steps_and_readable() -> None:
    prof = _adamw_step(False, "eager")
    s = prof.to_summary()
    assert s["cost"]["per_1m_steps_usd"] == pytest.approx(prof.cost().per_step_usd * 1e6)
    for out in (render_text(s), render_html(s)):
        assert "$0.0000" not in out and not re.search(r"\$\d[\d.]*e-?\d", out)
        assert "1M steps" in out
    rows = s["what_if"]["rows"]
    assert all(r["cost_per_1m_steps_usd"] > 0.001 for r in rows)     # readable at 3 significant digits


def test_headline_shows_the_range_and_its_driver_calibration_in_a_footnote() -> None:
    prof = _adamw_step(False, "eager")
    s = prof.to_summary()
    text = render_text(s)
    head = text.splitlines()[1]
    assert head.startswith("  step time (modeled):") and "range" in head and "launch cost per NEFF" in head
    assert "±" not in text and "Calibration" not in head and "model error" not in text
    note = s["calibration_note"]
    assert "Calibration: trn2" in text and "uncertainty" in note and "step-time range" in note
    html = render_html(s)
    assert "±" not in html and "range from launch cost per NEFF" in html
    assert "MFU (modeled)" in html and "host time/step (measured)" in html and "Engine utilization (modeled)" in html


def test_no_tracker_jargon_in_user_output() -> None:
    prof = _adamw_step(False, "eager")
    s = prof.to_summary()
    for out in (render_text(s), render_html(s)):
        assert not re.search(r"\bissue \d+", out) and "project default" not in out


def test_a_lever_that_adds_bytes_is_not_a_lever() -> None:
    """Autocast on a step with no optimizer and a small batch adds its BF16 copies to the peak: modeled, said as 'no
    help here', never listed as a lever with a negative saving."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to("neuron")
    x, t = torch.randn(64, 256, device="neuron"), torch.randn(64, 256, device="neuron")
    prof = profile(lambda: torch.nn.functional.mse_loss(m(x), t).backward(), steps=1, warmup=1)
    fc = prof.memory_forecast("trn2")
    assert fc.levers and all(lv.saving_bytes > 0 for lv in fc.levers)
    assert fc.no_help and all(lv.saving_bytes <= 0 for lv in fc.no_help)
    s = prof.to_summary()
    f = s["memory"]["forecast"]
    assert all(lv["saving_bytes"] > 0 for lv in f["levers"]) and f["no_help"][0]["adds_bytes"] > 0
    html = render_html(s)
    assert "No help here (modeled)" in html and "−" not in html.split("No help here")[0].split("Levers")[-1]


def test_a_rerun_cell_keeps_its_memory_categories_and_peak(tmp_path) -> None:  # noqa: ANN001
    """Tutorial 01 run twice in one kernel: the first run's `loss` still holds its model's parameters and gradients
    (through its graph) when the setup cell builds a new model; they are not the step's input batch, and the step's
    peak is the same as the first time, with the released bytes said in a note."""
    from IPython.testing import globalipapp

    from neuron_studio.session import session

    shell = globalipapp.get_ipython()
    session().use_store(tmp_path)
    shell.run_line_magic("load_ext", "neuron_studio")
    setup = ("import torch, torch.nn as nn\ntorch.manual_seed(0)\n"
             "model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to('neuron')\n"
             "x = torch.randn(64, 256, device='neuron')\ntarget = torch.randn(64, 256, device='neuron')\n")
    cell = "%%neuron --name first-step\nloss = nn.functional.mse_loss(model(x), target)\nloss.backward()"
    try:
        peaks = []
        for _ in range(2):
            assert shell.run_cell(setup).success
            res = shell.run_cell(cell)
            assert res.success, res.error_in_exec
            peaks.append(res.result.memory_peak().attrs)
        first, second = peaks
        assert second["peak_bytes"] == first["peak_bytes"]
        assert second["by_category"] == first["by_category"]
        assert second["by_category"]["input"] == 2 * 64 * 256 * 4 and second["by_category"]["gradient"] > 0
        notes = res.result.summary_payload["memory"]["notes"]
        assert any(re.match(r"not counted: 4\.\d+ MiB held from before this cell ran", n) for n in notes), notes
    finally:
        session().use_store(None)
        shell.reset(new_session=False)


def test_memory_tab_and_forecast_tell_one_story_for_a_scaled_replica(tmp_path) -> None:  # noqa: ANN001
    """Tutorial 06: a replica profiled with `--memory-scale`: the cell's Memory tab gives the full model's verdict,
    the same as `prof.memory_forecast()` and `memory_forecast(scale=...)`, not the replica's 'fits'."""
    from IPython.testing import globalipapp

    from neuron_studio.session import session

    shell = globalipapp.get_ipython()
    session().use_store(tmp_path)
    shell.run_line_magic("load_ext", "neuron_studio")
    try:
        assert shell.run_cell("import torch\nK = 40\nw = torch.randn(256, 256, device='neuron', requires_grad=True)\n"
                              "x = torch.randn(64, 256, device='neuron')\n").success
        res = shell.run_cell("%%neuron --name replica --memory-scale {K**2}\n(x @ w).relu().sum().backward()")
        assert res.success, res.error_in_exec
        prof = res.result
        assert prof.trace.meta["memory_scale"] == 1600.0
        f = prof.summary_payload["memory"]["forecast"]
        fc = prof.memory_forecast()
        assert fc.scale == 1600.0 and fc.peak_bytes == prof.memory_forecast(scale=1600).peak_bytes
        assert f["fits"] == fc.fits and f["summary_line"] == fc.summary_line()
        assert "x1600 (scaled from the captured run)" in f["summary_line"]
        assert prof.memory_forecast(scale=1.0).fits and prof.memory_peak().attrs["peak_bytes"] * 1600 > 0
        bad = shell.run_cell("%%neuron --memory-scale 0\nx.sum()")
        assert not bad.success and "--memory-scale must be > 0" in str(bad.error_in_exec or bad.error_before_exec)
    finally:
        session().use_store(None)
        shell.reset(new_session=False)


def test_a_host_round_trip_cast_is_not_called_a_dropout_mask() -> None:
    from neuron_studio.profiler.analysis import step_breakdown as sb

    parts = [sb.BreakdownPart("fallback", "CPU fallbacks & host round trips", 35.0, 0.35)]
    bd = sb.StepBreakdown("modeled device time", 100.0, parts, pd.DataFrame())
    rows = {"fallback": sb.RowCategories(np.array([0.0]), np.array([35.0]), np.array(["aten::_to_copy"], dtype=object),
                                         np.array(["cell-2:19"], dtype=object))}
    rec = sb.recommend(bd, rows, mode="eager", fallback_reasons={"aten::_to_copy": "host_round_trip_cast"}, advice=[])[0]
    assert "64-bit cast" in rec.text and "dropout" not in rec.text
    rows["fallback"] = sb.RowCategories(np.array([0.0]), np.array([35.0]),
                                        np.array(["aten::native_dropout"], dtype=object), np.array([None], dtype=object))
    rec = sb.recommend(bd, rows, mode="eager", fallback_reasons={"aten::native_dropout": "host_rng_mask"}, advice=[])[0]
    assert "random mask is drawn on the host" in rec.text


def test_recompiles_are_told_to_pad_to_buckets_with_the_line() -> None:
    from neuron_studio.profiler.analysis import step_breakdown as sb

    rec = sb.recompile_recommendation(["2x50x128;128;384x128", "2x61x128;128;384x128", "2x45x128;128;384x128"], 60e9)
    assert rec.text.startswith("3 recompiles (a new input shape each) → pad dimension 1 of the input (seen as 50, "
                               "61, 45) to a few bucket lengths: x = F.pad(x, (0, 0, 0, -x.shape[1] % 32))")
    assert rec.text.endswith("each costs ~60 s of compile time (modeled, not in the step time)")
    # inputs already at bucket lengths (tutorial 03's bucketed cell: 64 then 32) are not told to pad again
    done = sb.recompile_recommendation(["2x32x128;128;384x128"], 60e9, None,
                                       ["2x64x128;128;384x128", "2x32x128;128;384x128"])
    assert "already at bucket lengths (64, 32)" in done.text and "F.pad" not in done.text
    # the padding line pads exactly that dimension to the bucket
    x = torch.randn(2, 50, 128)
    assert torch.nn.functional.pad(x, (0, 0, 0, -x.shape[1] % 32)).shape == (2, 64, 128)

    torch._dynamo.reset()
    lin = torch.nn.Linear(128, 128).to("neuron")
    batches = iter([torch.randn(2, t, 128, device="neuron") for t in (37, 50, 61, 45, 64, 29, 37, 50)])

    @torch.compiler.disable
    def next_batch():
        return next(batches)

    prof = profile(lambda: lin(next_batch()).sum(), steps=5, warmup=0, mode="compile", chip="trn2")
    if not len(prof.recompiles()):
        pytest.skip("this torch build did not recompile per shape (dynamic shapes assumed)")
    recs = prof.step_breakdown().recommendations
    # the advisor's first row pads to buckets: its recommendation leads and names the row
    assert recs[0].category == "recompile" and "x = F.pad(x, (0, 0, 0, -x.shape[1] % 32))" in recs[0].text
    assert "pad to buckets of 32 (5 → 1 compile)" in recs[0].text


def test_bucketing_is_a_ranked_what_if_row_that_predicts_running_it_padded() -> None:
    """Recompiles of a compiled step: the row re-models each step at its padded length (the padded step's work is
    in its time) and counts the compiles at the bucket shapes; running the step padded confirms both."""
    import torch.nn.functional as F

    lengths = (37, 50, 61, 45, 29, 70)

    def run(pad: bool):
        torch._dynamo.reset()
        torch.manual_seed(0)
        lin = torch.nn.Linear(128, 256).to("neuron")
        batches = iter([torch.randn(2, t, 128, device="neuron") for t in lengths])

        @torch.compiler.disable
        def next_batch():
            x = next(batches)
            return F.pad(x, (0, 0, 0, -x.shape[1] % 32)) if pad else x

        return profile(lambda: lin(next_batch()).relu().sum(), steps=len(lengths), warmup=0, mode="compile",
                       chip="trn2")

    prof = run(False)
    if not len(prof.recompiles()):
        pytest.skip("this torch build did not recompile per shape (dynamic shapes assumed)")
    df = prof.what_if(chips=["trn2"])
    own = df[df["current"]].iloc[0]
    row = df[df["variant"].str.startswith("pad to buckets of 32")].iloc[0]
    assert own["compiles"] == 6 and row["compiles"] == 3                    # 64, 64, 64, 64, 32, 96
    assert row["variant"] == "pad to buckets of 32 (6 → 3 compiles)" and row["kind"] == "code"
    assert row["run"] == "x = F.pad(x, (0, 0, 0, -x.shape[1] % 32))" and row["rank"] == 1
    assert prof.to_summary()["what_if"]["best"] == row["variant"]
    # re-modeled from the first two steps only (a run above the summary's op limit), the row still counts the padded
    # compiles over every profiled step: the count is the run's, not the re-modeled steps'
    per_step = prof.trace.ops["step"].value_counts().sort_index()
    part = prof.what_if(chips=["trn2"], max_ops=int(per_step.iloc[:2].sum()))
    assert part.attrs["remodeled_steps"] == tuple(int(k) for k in per_step.index[:2])
    assert row["variant"] in set(part["variant"])
    padded = run(True)
    assert len(padded.trace.compiles) == row["compiles"]
    # padding costs step time: the re-modeled step is the padded run's, not the unpadded one's
    assert row["step_time_ns"] == pytest.approx(padded.step_time_ns, rel=0.05)
    assert row["step_time_ns"] > own["step_time_ns"]


def test_host_sync_row_names_its_line_in_the_one_source_format(tmp_path) -> None:  # noqa: ANN001
    from IPython.testing import globalipapp

    from neuron_studio.session import session

    shell = globalipapp.get_ipython()
    session().use_store(tmp_path)
    shell.run_line_magic("load_ext", "neuron_studio")
    try:
        assert shell.run_cell("import torch\nw = torch.randn(64, 64, device='neuron')\n").success
        res = shell.run_cell("%%neuron --mode adaptive --name items\ntotal = 0.0\nfor _ in range(4):\n"
                             "    total += (w @ w).relu().sum().item()")
        assert res.success, res.error_in_exec
        row = res.result.what_if(chips=["trn2"]).set_index("variant").filter(like="no host sync", axis=0).iloc[0]
        assert "total += (w @ w).relu().sum().item()" in row["run"]
        assert re.fullmatch(r"at cell \[\d+\] line 3", row["where"]), row["where"]
    finally:
        session().use_store(None)
        shell.reset(new_session=False)


def test_fused_optimizer_row_inserts_a_cell_that_runs_it_fused(tmp_path) -> None:  # noqa: ANN001
    """The fused-optimizer row of a `%%neuron` cell is a cell change: its cell rebuilds the cell's optimizer fused
    once (the body runs --warmup + --steps times) and runs the step; running that cell records the fused step the
    row predicted."""
    from IPython.testing import globalipapp

    from neuron_studio.session import session

    shell = globalipapp.get_ipython()
    session().use_store(tmp_path)
    shell.run_line_magic("load_ext", "neuron_studio")
    try:
        assert shell.run_cell(
            "import torch\ntorch.manual_seed(0)\n"
            "model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))"
            ".to('neuron')\nopt = torch.optim.AdamW(model.parameters(), lr=3e-4)\n"
            "x = torch.randn(32, 512, device='neuron')\n").success
        res = shell.run_cell("%%neuron --mode adaptive --steps 2 --name adamw-step\n"
                             "loss = model(x).pow(2).mean()\nloss.backward()\nopt.step()\nopt.zero_grad()")
        assert res.success, res.error_in_exec
        prof = res.result
        row = prof.what_if(chips=["trn2"]).set_index("variant").loc["fused AdamW"]
        assert row["run"] == "opt = torch.optim.AdamW(model.parameters(), lr=0.0003, fused=True)"
        cell = row["cell"]
        assert cell.splitlines()[0] == f"%%neuron --mode adaptive --steps 2 --name adamw-step-fused --compare {prof.run_id}"
        assert "    opt = torch.optim.AdamW(model.parameters(), lr=0.0003, fused=True)" in cell.splitlines()
        assert cell.endswith("loss = model(x).pow(2).mean()\nloss.backward()\nopt.step()\nopt.zero_grad()")
        ran = shell.run_cell(cell)
        assert ran.success, ran.error_in_exec
        fused = ran.result
        assert shell.user_ns["opt"].defaults["fused"] is True
        names = fused.trace.ops["name"]
        assert (names == "aten::_fused_adamw_").sum() == 2                      # one fused update per profiled step
        assert not fused.trace.ops["name"].str.contains("addcdiv").any()
        assert row["step_time_ns"] == pytest.approx(fused.step_time_ns, rel=0.02)
        # a compiled cell gets the line only (its body is one traced function, not run once per step)
        from neuron_studio.profiler.analysis.code_changes import _fused_cell

        opts = {"opt": {"class": "AdamW", "constructor": "torch.optim.AdamW(model.parameters(), fused=True)"}}
        assert _fused_cell("AdamW", opts, {"source": "%%neuron --mode compile\nopt.step()"}, 1) is None
        assert _fused_cell("AdamW", opts, {"source": "%%neuron --mode eager\nopt.step()"}, 1) is not None
    finally:
        session().use_store(None)
        shell.reset(new_session=False)


def test_a_fused_optimizer_verdict_cites_the_optimizers_ops_not_a_model_op() -> None:
    """Engine compute is the largest category and its largest engine-bound op is a model op (the SwiGLU backward
    mul); the first-ranked change is fused AdamW: the reason names what that change acts on (the optimizer's ops,
    their share of the step, the optimizer.step() line), never the model op."""
    from neuron_studio.profiler.analysis import step_breakdown as bdm
    from neuron_studio.profiler.analysis.hot_path import HotOp

    parts = [bdm.BreakdownPart("compute", "engine compute", 510.0, 0.51),
             bdm.BreakdownPart("launch", "launch overhead", 400.0, 0.40),
             bdm.BreakdownPart("idle", "idle", 90.0, 0.09)]
    bd = bdm.StepBreakdown("modeled device time", 1000.0, parts, pd.DataFrame())
    hot = [HotOp("aten::mul", "Block.mlp (backward)", "cell-32:38", 1, 300, 0.3, "memory", "memory-bound: ...",
                 "vector")]
    fused = {"variant": "fused AdamW", "kind": "code", "mode": "eager", "speedup": 1.4,
             "run": "opt = torch.optim.AdamW(model.parameters(), fused=True)", "where": "where opt is built",
             "addresses": ("launch", "compute"), "acts_on": "the AdamW optimizer's ops",
             "scope": {"share": 0.382, "ns": 382.0, "launches": 48.0, "source": "cell-33:3"},
             "target_ops": ["aten::addcdiv_", "aten::lerp_"]}
    empty = bdm.RowCategories(np.zeros(0), np.zeros(0), np.zeros(0, dtype=object), np.zeros(0, dtype=object))
    recs = bdm.recommend(bd, {k: empty for k in bdm.CATEGORIES}, mode="eager", launches_per_step=76, hot=hot,
                         advice=[fused])
    first = recs[0]
    assert first.category == "compute" and "fused AdamW" in first.text
    # the share counts the optimizer's launches, and says so beside the category's own share of the same step
    assert first.text.startswith("51% engine compute; the AdamW optimizer's ops take 38% of the step, their 48 launches "
                                 "included, at cell [33] line 3 → fused AdamW"), first.text
    assert "aten::mul" not in first.text and "cell [32]" not in first.text
    assert first.ops == ["aten::addcdiv_", "aten::lerp_"]           # the rows it highlights are the optimizer's
    # no launches (a compiled step's ops launch with their graph) or no source line: nothing said of them
    quiet = dict(fused, scope={"share": 0.382, "ns": 382.0, "launches": 0.0, "source": None})
    text = bdm.recommend(bd, {k: empty for k in bdm.CATEGORIES}, mode="eager", hot=hot, advice=[quiet])[0].text
    assert "the AdamW optimizer's ops take 38% of the step → fused AdamW" in text, text
    # without a code change the category still names its largest engine-bound op
    plain = bdm.recommend(bd, {k: empty for k in bdm.CATEGORIES}, mode="eager", launches_per_step=76, hot=hot)
    assert "most in aten::mul at cell [32] line 38 (memory-bound)" in plain[0].text


def test_fused_optimizer_scope_is_the_optimizers_share_of_the_modeled_step() -> None:
    prof = _adamw_step(False, "eager")
    row = next(r for r in prof.advice() if r["variant"] == "fused AdamW")
    opt = prof.ops[prof.ops["module"] == "optimizer.AdamW"]
    scope = row["scope"]
    assert row["acts_on"] == "the AdamW optimizer's ops"
    # eager: one op at a time, each with its launch; the optimizer's ops and launches per step, as the model has them
    per_step = (opt["device_ns"].sum() + opt["launch_ns"].sum()) / prof.steps
    assert scope["ns"] == pytest.approx(per_step, rel=1e-6)
    assert scope["share"] == pytest.approx(per_step / prof.step_time_ns, rel=1e-6)
    assert scope["launches"] == pytest.approx(opt["launch"].sum() / prof.steps)
    assert scope["source"] == opt["source"].mode().iloc[0]        # the opt.step() line
    recs = [r.text for r in prof.step_breakdown().recommendations if "fused AdamW" in r.text]
    assert all("the AdamW optimizer's ops take" in t and "most in" not in t for t in recs)
