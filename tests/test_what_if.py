"""What-if advisor: the profile's own row is the profile; other rows agree with the model run directly and, where
the emulator can run the variant, with the variant's own profile."""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
import torch

from neuron_studio.profiler.analysis import what_if as wi
from neuron_studio.profiler.capture import profile
from neuron_studio.profiler.model import model_run
from neuron_studio.profiler.profile import Profile
from tests.models.blocks import TransformerBlock
from tests.training_steps import mlp_training_step, profile_mlp


@functools.cache
def _mlp(mode: str = "eager"):
    return profile_mlp(mode)


@functools.cache
def _block():
    """Inference of a transformer block in eager mode: its hot path suggests the RMSNorm kernel."""
    torch.manual_seed(0)
    model = TransformerBlock(128, 4).to("neuron")
    x = torch.randn(4, 128, 128, device="neuron")

    def step():
        with torch.no_grad():
            model(x)

    return profile(step, steps=2, warmup=1, mode="eager", chip="trn2")


def test_own_row_is_exactly_the_profile():
    prof = _mlp()
    df = prof.what_if()
    own = df[df["current"]]
    assert len(own) == 1
    r = own.iloc[0]
    assert (r["mode"], r["chip"]) == ("eager", "trn2")
    assert r["step_time_ns"] == prof.step_time_ns
    assert r["mfu"] == prof.mfu
    assert r["cost_per_1m_steps_usd"] == prof.cost().per_1m_steps_usd
    assert (r["step_time_low_ns"], r["step_time_high_ns"]) == (prof.summary.step_time_low_ns / prof.steps,
                                                               prof.summary.step_time_high_ns / prof.steps)
    assert r["step_time_low_ns"] < r["step_time_ns"] < r["step_time_high_ns"]
    # made by the Python API: the line is that call, in its own mode and chip (never `%%neuron` syntax)
    assert r["run"] == 'profile(step, mode="eager", chip="trn2", steps=2, warmup=1)'
    # and re-modeling the recorded ops in the profile's own mode and chip reproduces it exactly
    again = prof._remodel(prof.trace.ops, "eager", "trn2")
    assert (again.step_time_ns, again.mfu, again.cost_per_1m_steps_usd) == (
        prof.step_time_ns, prof.mfu, prof.cost().per_1m_steps_usd)


def test_every_mode_and_chip_once_with_the_run_line():
    df = _mlp().what_if(kernels=False, changes=False)
    assert sorted(zip(df["mode"], df["chip"])) == sorted((m, c) for m in ("eager", "adaptive", "compile")
                                                         for c in ("trn1", "trn2", "trn3"))
    for r in df.itertuples():
        assert r.run == f'profile(step, mode="{r.mode}", chip="{r.chip}", steps=2, warmup=1)'
        assert r.speedup == pytest.approx(_mlp().step_time_ns / r.step_time_ns)


def test_run_lines_take_the_form_the_profile_was_made_with():
    """A profile made by the Python API (a script, or a notebook calling `profile`) is told the API call, the form
    it can run as written: `profile(fn, ...)` naming its function, `with profile(...)`, a lambda as `lambda: ...`;
    a `%%neuron` cell (no `api_call`) its magic line; a `neuron-studio run` script its command line."""
    prof = _mlp()
    assert prof.trace.meta["api_call"] == {"fn": "step", "form": "call"}
    best = next(r for r in prof.advice() if r["kind"] == "mode")
    assert best["run"].startswith(f'profile(step, mode="{best["mode"]}", chip="trn2"')
    texts = [r.text for r in prof.step_breakdown().recommendations]
    assert texts and not any("%%neuron" in t for t in texts), texts
    assert wi.run_line("compile", "trn2", 5, 0, api_call={"fn": None, "form": "call"}) == (
        'profile(lambda: ..., mode="compile", chip="trn2", steps=5, warmup=0)')
    assert wi.run_line("compile", "trn1", 5, 2, api_call={"fn": None, "form": "with"}) == (
        'with profile(mode="compile", chip="trn1", warmup=2) as run:')
    assert wi.run_line("compile", "trn2", 5, 0) == "%%neuron --mode compile --chip trn2 --steps 5 --warmup 0"
    assert wi.run_line("compile", "trn2", 5, 0, ["python", "t.py"], {"fn": "f", "form": "call"}) == (
        "neuron-studio run --mode compile --chip trn2 --steps 5 --warmup 0 -- python t.py")
    # the with-form stamps how it was called too
    x = torch.randn(8, 8, device="neuron")
    with profile(mode="eager", chip="trn2") as run:
        (x @ x).sum()
        run.step()
    assert run.profile.trace.meta["api_call"] == {"fn": None, "form": "with"}
    assert run.profile.what_if(modes=["adaptive"], chips=["trn2"], kernels=False, changes=False).iloc[0]["run"] == (
        'with profile(mode="adaptive", chip="trn2") as run:')
    lam = profile(lambda: (x @ x).sum(), mode="eager", chip="trn2")
    assert lam.trace.meta["api_call"] == {"fn": None, "form": "call"}


def test_another_chip_equals_the_profile_modeled_on_that_chip():
    prof = _mlp()
    r = prof.what_if(modes=["eager"], chips=["trn1"]).iloc[0]
    other = Profile.from_trace(prof.trace, chip="trn1")
    assert r["step_time_ns"] == pytest.approx(other.step_time_ns, rel=1e-12)
    assert r["mfu"] == pytest.approx(other.mfu, rel=1e-12)
    assert r["cost_per_1m_steps_usd"] == pytest.approx(other.cost().per_1m_steps_usd, rel=1e-12)
    assert r["basis"] == wi.EXACT


def _in_place_ops_per_step(prof) -> float:
    ops = prof.ops[prof.ops["kind"] == "device"]
    return float(ops["op"].str.split("::").str[-1].str.split(".").str[0].str.endswith("_").sum()) / prof.steps


def test_adaptive_prediction_matches_running_adaptive_on_the_emulator():
    predicted = _mlp("eager").what_if(modes=["adaptive"], chips=["trn2"]).iloc[0]
    measured = _mlp("adaptive")
    assert predicted["basis"] == wi.APPROX_GROUPING
    assert predicted["step_time_ns"] == pytest.approx(measured.step_time_ns, rel=1e-9)
    # TorchNeuron concatenates only up to each matmul and runs every in-place optimizer update alone, so adaptive
    # beats eager by launches saved, not 10x (the old model fused AdamW's in-place ops and claimed 14x)
    eager = _mlp("eager")
    assert predicted["step_time_ns"] < eager.step_time_ns
    assert measured.launches_per_step >= _in_place_ops_per_step(eager)


def test_compile_from_an_eager_trace_is_labelled_approximate_and_uses_graphs():
    prof = _mlp()
    r = prof.what_if(modes=["compile"], chips=["trn2"]).iloc[0]
    assert r["basis"] == wi.APPROX_GRAPHS
    graph = wi.synthetic_graphs(prof.trace.ops)
    # AdamW's in-place updates stay inside the graphs, as TorchNeuron's backend keeps input mutations in the NEFF
    # (backend.py @98154b86, keep_inference_input_mutations=True): no write-back copies are added
    with_copies, _ = wi.ops_for_mode(prof.trace.ops, "eager", "compile")
    assert len(with_copies) == len(prof.trace.ops) and (with_copies["graph"].to_numpy() == graph).all()
    want = model_run(with_copies, chip="trn2", mode="compile").summary.step_time_ns / prof.steps
    assert r["step_time_ns"] == pytest.approx(want, rel=1e-12)
    assert r["step_time_ns"] < prof.step_time_ns


def test_compile_prediction_against_running_compile_on_the_emulator():
    """What the approximation misses (host-side optimizer step counters, Dynamo's own breaks) only adds launches,
    so the prediction is below the run, but not far."""
    step = mlp_training_step()
    row = _mlp().what_if(modes=["compile"], chips=["trn2"]).iloc[0]
    predicted = row["step_time_ns"]
    ran = profile(step, steps=2, warmup=1, mode="compile", chip="trn2").step_time_ns
    assert 0.6 * ran < predicted <= ran
    assert row["step_time_low_ns"] <= ran <= row["step_time_high_ns"]      # the run falls inside the range


def test_compile_from_an_eager_trace_ranges_over_what_stays_on_chip():
    """Which intermediates a compiled graph keeps on chip is not known from an eager trace: the row's high end is
    the same graphs with every op's bytes through HBM (fusion_rule="none"), and the basis says so."""
    from neuron_studio.profiler.model import ModelConfig

    prof = _mlp()
    r = prof.what_if(modes=["compile"], chips=["trn2"]).iloc[0]
    ops, _ = wi.ops_for_mode(prof.trace.ops, "eager", "compile")
    chain = model_run(ops, chip="trn2", mode="compile").summary
    none = model_run(ops, chip="trn2", mode="compile", config=ModelConfig(fusion_rule="none")).summary
    assert none.step_time_high_ns > chain.step_time_high_ns
    assert r["step_time_high_ns"] == pytest.approx(none.step_time_high_ns / prof.steps, rel=1e-12)
    assert r["step_time_low_ns"] == pytest.approx(chain.step_time_low_ns / prof.steps, rel=1e-12)
    assert "high end moves every op's bytes through HBM" in r["basis"]
    # a run recorded in compile mode is its own graphs: no such widening
    own = profile(mlp_training_step(), steps=2, warmup=1, mode="compile", chip="trn2")
    mine = own.what_if(modes=["compile"], chips=["trn1"]).iloc[0]
    exact = model_run(own.trace.ops, chip="trn1", mode="compile").summary
    assert mine["step_time_high_ns"] == pytest.approx(exact.step_time_high_ns / own.steps, rel=1e-12)


def test_synthetic_graphs_break_at_syncs_fallbacks_phases_and_steps():
    t = pd.DataFrame({
        "name": ["aten::mm", "aten::add", "aten::_local_scalar_dense", "aten::mul", "aten::mm", "aten::add",
                 "aten::unique", "aten::add", "aten::mm"],
        "sync": [None, None, "item", None, None, None, None, None, None],
        "fallback": [None] * 6 + ["data-dependent"] + [None, None],
        "transfer": [None, None, "d2h", None, None, None, None, None, None],
        "device_index": [0] * 9,
        "step": [0, 0, 0, 0, 0, 0, 0, 0, 1],
        "phase": ["forward", "forward", "forward", "forward", "backward", "backward", "backward", "backward",
                  "forward"],
    })
    assert wi.synthetic_graphs(t).tolist() == [0, 0, -1, 1, 2, 2, -1, 3, 4]


def test_kernel_rows_subtract_the_hot_path_saving_once_per_scope():
    prof = _block()
    df = prof.what_if(chips=["trn2"])
    krows = df[df["kernel"].notna()]
    assert len(krows), "the block's hot path has NKI kernel candidates"
    # independently: the hot path's savings per kernel, a module-level match counted once per module
    want: dict[str, dict] = {}
    for h in prof.hot_path():
        for k in h.kernels:
            if k.get("saving_ns") and k["kind"] == "candidate":   # a kernel that already runs is no swap
                key = (h.op, h.module) if k.get("scope") == "op" else k["scope"]
                want.setdefault(k["kernel"], {})[key] = k["saving_ns"] / prof.steps
    assert set(krows["kernel"]) == set(want)
    for r in krows.itertuples():
        saving = sum(want[r.kernel].values())
        assert r.step_time_ns == pytest.approx(prof.step_time_ns - saving, rel=1e-12)
        assert r.cost_per_1m_steps_usd == pytest.approx(
            prof.cost().per_1m_steps_usd * r.step_time_ns / prof.step_time_ns, rel=1e-12)
        assert (r.mode, r.chip, r.basis) == ("eager", "trn2", wi.APPROX_KERNEL)
    rms = krows[krows["kernel"] == "rmsnorm_kernel"]
    assert rms.iloc[0]["run"].startswith('kernels.use(model, "rmsnorm")')


def test_bad_requests_are_typed_errors():
    with pytest.raises(wi.WhatIfError, match="trn9"):
        _mlp().what_if(chips=["trn9"])
    with pytest.raises(wi.WhatIfError, match="turbo"):
        _mlp().what_if(modes=["turbo"])


def test_summary_what_if_block_has_the_current_row_and_the_best_variant():
    prof = _mlp()
    s = prof.to_summary()
    rows = s["what_if"]["rows"]
    cur = [r for r in rows if r["current"]]
    assert len(cur) == 1 and cur[0]["step_time_ns"] == s["step_time_ns"]
    best = min((r for r in rows if not r["current"] and r["chip"] == "trn2"), key=lambda r: r["step_time_ns"])
    assert s["what_if"]["best"] == best["variant"]
    assert np.isfinite([r["step_time_ns"] for r in rows]).all()


def _ops_per_step(prof) -> dict[int, int]:
    return {int(k): int(v) for k, v in prof.trace.ops["step"].value_counts().sort_index().items()}


def test_summary_re_models_the_first_whole_steps_within_the_op_limit(monkeypatch):
    """A run above the summary's op limit is re-modeled from its first whole steps, says which, and gives the
    figures re-modeling every step gives (the MLP's steps are the same step)."""
    from neuron_studio.profiler import breakdown_summary

    prof = _mlp()
    per_step = _ops_per_step(prof)
    first = min(per_step)
    assert len(per_step) == prof.steps == 2
    monkeypatch.setattr(wi, "REMODEL_MAX_OPS", per_step[first])          # one step fits, both do not
    block = breakdown_summary.what_if_block(prof)
    assert block["note"] is None and block["remodeled_steps"] == [first]
    assert (f"first 1 of the 2 profiled steps (trace step {first}: {per_step[first]:,} ops" in block["scope_note"]
            and "prof.what_if() re-models all 2" in block["scope_note"])
    every = prof.what_if().set_index("variant")       # on request: every step
    assert every.attrs["remodeled_steps"] == () and every.attrs["scope_note"] is None
    assert {r["variant"] for r in block["rows"]} == set(every.index)
    for r in block["rows"]:
        e = every.loc[r["variant"]]
        assert r["step_time_ns"] == pytest.approx(e["step_time_ns"], rel=1e-9), r["variant"]
        assert r["mfu"] == pytest.approx(e["mfu"], rel=1e-9) and r["rank"] == (None if pd.isna(e["rank"]) else e["rank"])


def test_under_the_op_limit_the_summarys_what_if_re_models_every_step_unscaled():
    """A run within the limit takes the every-step path: the same frame, to the bit, as `prof.what_if()`."""
    prof = _mlp()
    assert len(prof.trace.ops) <= wi.REMODEL_MAX_OPS
    inline = prof.what_if(max_ops=wi.REMODEL_MAX_OPS)
    assert inline.attrs["remodeled_steps"] == () and inline.attrs["scope_note"] is None
    pd.testing.assert_frame_equal(inline, prof.what_if(), check_exact=True)


def test_summary_names_a_step_too_large_to_re_model_inline(monkeypatch):
    from neuron_studio.profiler import breakdown_summary

    prof = _mlp()
    one = _ops_per_step(prof)[min(_ops_per_step(prof))]
    monkeypatch.setattr(wi, "REMODEL_MAX_OPS", one - 1)
    block = breakdown_summary.what_if_block(prof)
    assert block["rows"] == [] and "prof.what_if()" in block["note"]
    assert f"is {one:,} ops, more than the {one - 1:,} the summary re-models" in block["note"]
    assert prof.advice() is None
    assert len(prof.what_if()) > 1          # on request it still re-models every step


def test_summary_cannot_take_apart_steps_the_trace_does_not_mark(monkeypatch):
    """Ops not marked with the profiled steps (one step number for two steps): no whole step can be re-modeled
    apart, and the note says so rather than re-modeling a part of a step."""
    from neuron_studio.profiler import breakdown_summary
    from neuron_studio.profiler.profile import Profile
    from neuron_studio.profiler.trace import Trace

    src = _mlp().trace
    trace = Trace(ops=src.ops.assign(step=np.int32(1)), meta=dict(src.meta), host=src.host, compiles=src.compiles,
                  memory=src.memory)
    prof = Profile.from_trace(trace)
    monkeypatch.setattr(wi, "REMODEL_MAX_OPS", len(trace.ops) - 1)
    block = breakdown_summary.what_if_block(prof)
    assert block["rows"] == [] and "marked with 1 step number(s) for its 2 profiled step(s)" in block["note"]


def test_measured_profile_rows_are_scaled_and_other_modes_refused(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from make_explorer_fixtures import write_explorer_fixture

    from neuron_studio.profiler.neuron_profile import load_neuron_profile

    prof = load_neuron_profile(write_explorer_fixture(tmp_path / "x"))
    df = prof.what_if(kernels=False)
    assert set(df["mode"]) == {prof.summary.mode}
    own = df[df["current"]].iloc[0]
    assert own["step_time_ns"] == prof.step_time_ns and own["basis"] == wi.MEASURED
    # another chip: measured x (modeled on that chip / modeled on the profiled chip)
    other = df[(~df["current"])].iloc[0]
    m_own = prof._remodel(prof.trace.ops, prof.summary.mode, prof.summary.chip).step_time_ns
    m_other = prof._remodel(prof.trace.ops, prof.summary.mode, other["chip"]).step_time_ns
    assert other["step_time_ns"] == pytest.approx(prof.step_time_ns * m_other / m_own, rel=1e-12)
    assert other["basis"] == wi.SCALED
    others = [m for m in ("eager", "adaptive", "compile") if m != prof.summary.mode]
    with pytest.raises(wi.WhatIfError, match="measured in"):
        prof.what_if(modes=others)


def test_a_profile_of_an_unknown_chip_has_no_variants_and_says_why(tmp_path):
    import dataclasses
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from make_explorer_fixtures import write_explorer_fixture

    from neuron_studio.profiler.neuron_profile import load_neuron_profile

    prof = load_neuron_profile(write_explorer_fixture(tmp_path / "x"))
    prof.device_run = dataclasses.replace(prof.device_run,
                                          summary=dataclasses.replace(prof.device_run.summary, chip="unknown"))
    with pytest.raises(wi.WhatIfError, match="'unknown'"):
        prof.what_if()
    block = prof.to_summary()["what_if"]
    assert block["rows"] == [] and "'unknown'" in block["note"]
