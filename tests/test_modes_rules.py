"""The modes as TorchNeuron runs them (issue 26): adaptive regions by its concatenation rules, per-step figures
that do not depend on how many steps were profiled, compile mode that shows only the user's program, and one
classification of every op shared by every view."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import warnings

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neuron_studio  # noqa: F401 - registers the device
from neuron_studio.device.events import OpEvent
from neuron_studio.profiler.model import model_run
from neuron_studio.profiler.model.adaptive_regions import is_in_place_name, is_matmul_family

# ----------------------------------------------------------------------------------------- model properties
_OPS = ("aten::mm", "aten::addmm", "aten::mul", "aten::add", "aten::gelu", "aten::add_", "aten::mul_",
        "aten::view", "aten::sum")


def _op(seq: int, name: str, step: int, graph: int = -1) -> dict:
    shape = (64, 64)
    ins = (shape, shape, shape) if name == "aten::addmm" else (shape, shape)
    e = OpEvent(seq=seq, name=name, overload="default", start_ns=seq * 100, end_ns=seq * 100 + 50, thread=0,
                device_index=0, input_shapes=ins, input_dtypes=("float32",) * len(ins), output_shapes=(shape,),
                output_dtypes=("float32",), is_view=name == "aten::view", graph=graph)
    row = {f.name: getattr(e, f.name) for f in dataclasses.fields(e)}
    row["step"] = step
    return row


def _program(names: list[str], steps: int, *, compiled: bool = False) -> pd.DataFrame:
    rows = []
    for k in range(steps):
        for i, nm in enumerate(names):
            rows.append(_op(k * 1000 + i + 1, nm, k, graph=k if compiled else -1))
    return pd.DataFrame(rows)


programs = st.lists(st.sampled_from(_OPS), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=programs, steps=st.integers(1, 5), mode=st.sampled_from(["eager", "adaptive", "compile"]))
def test_per_step_time_does_not_depend_on_the_number_of_steps(names: list[str], steps: int, mode: str) -> None:
    """The old model fused across step boundaries: 18.9 / 11.4 / 7.6 µs per step for 1 / 2 / 4 identical steps."""
    compiled = mode == "compile"
    one = model_run(_program(names, 1, compiled=compiled), mode=mode).summary
    many = model_run(_program(names, steps, compiled=compiled), mode=mode).summary
    assert many.step_time_ns / steps == pytest.approx(one.step_time_ns, rel=1e-9)
    assert many.launches == steps * one.launches


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=programs, steps=st.integers(1, 3))
def test_adaptive_launches_at_least_in_place_ops_plus_matmul_regions(names: list[str], steps: int) -> None:
    run = model_run(_program(names, steps), mode="adaptive")
    in_place = sum(is_in_place_name(n) for n in names) * steps
    matmuls = sum(is_matmul_family(n) for n in names) * steps
    assert run.summary.launches >= max(in_place + (1 if matmuls else 0) * steps, matmuls)
    # every region ends at a matmul, an in-place op, a host wait or a step end: never across steps
    step_of = {int(s): int(k) for s, k in zip(run.ops["seq"], _program(names, steps)["step"])}
    assert all(step_of[g.first_seq] == step_of[g.last_seq] for g in run.groups)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=programs, steps=st.integers(1, 3))
def test_one_graph_is_no_slower_than_adaptive_which_is_no_slower_than_eager(names: list[str], steps: int) -> None:
    """A program compiled as one graph per step with nothing outside it: compile <= adaptive <= eager."""
    t = {m: model_run(_program(names, steps, compiled=m == "compile"), mode=m).summary.step_time_ns
         for m in ("eager", "adaptive", "compile")}
    assert t["compile"] <= t["adaptive"] * (1 + 1e-9) and t["adaptive"] <= t["eager"] * (1 + 1e-9)


# -------------------------------------------------------------------------------------- on the emulator
def _mlp_sgd():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)   # no state: every step does the same work
    x = torch.randn(16, 64, device="neuron")

    def step():
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


@pytest.mark.parametrize("mode", ["eager", "adaptive", "compile"])
def test_profiled_per_step_time_is_the_same_for_1_3_and_10_steps_with_and_without_warmup(mode: str) -> None:
    from neuron_studio import profile

    torch._dynamo.reset()
    step = _mlp_sgd()
    got = {(n, w): profile(step, steps=n, warmup=w, mode=mode, host_events=False).step_time_ns
           for n, w in ((1, 1), (3, 1), (10, 1), (3, 0))}
    ref = got[(1, 1)]
    for key, v in got.items():
        assert v == pytest.approx(ref, rel=1e-9), key


def test_profile_compile_compiles_the_function_and_never_labels_eager_ops_compile() -> None:
    from neuron_studio import profile

    torch._dynamo.reset()
    step = _mlp_sgd()
    comp = profile(step, steps=2, warmup=1, mode="compile", host_events=False)
    eager = profile(step, steps=2, warmup=1, mode="eager", host_events=False)
    assert (comp.trace.ops["graph"] >= 0).any()
    assert comp.launches_per_step < eager.launches_per_step
    assert comp.step_time_ns != eager.step_time_ns


class _Shell:
    def __init__(self, ns: dict) -> None:
        self.user_ns = ns

    def transform_cell(self, s: str) -> str:
        return s


def test_compile_cell_prints_nothing_of_the_studio_and_lists_graph_breaks_at_the_users_line(caplog) -> None:
    from neuron_studio.runner import CellRun, run_cell

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 32)).to("neuron")
    ns = {"model": model, "x": torch.randn(8, 32, device="neuron"),
          "opt": torch.optim.AdamW(model.parameters(), lr=1e-3)}
    body = "loss = model(x).pow(2).mean()\nloss.backward()\nprint('user line')\nopt.step()\nopt.zero_grad()\n"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        prof = run_cell(_Shell(ns), CellRun(source=body, mode="compile", steps=2, warmup=1))
    studio = ("neuron_studio", "memory_capture", "_note", "_get_sequence_nr", "will be ignored", "recompile_limit")
    printed = out.getvalue() + err.getvalue() + "\n".join(str(x.message) for x in w)
    printed += "\n".join(r.getMessage() for r in caplog.records if r.levelno >= 30)
    assert not any(s in printed for s in studio), printed
    assert out.getvalue().count("user line") == 3      # the user's own print still reaches the cell
    gb = prof.graph_breaks()
    assert len(gb) and all(re.fullmatch(r"cell \[\d+\] line \d+", src) for src in gb["source"]), gb["source"].tolist()
    assert any(src.endswith(" line 3") and "print" in reason for src, reason in zip(gb["source"], gb["reason"])), gb.to_dict("records")
    assert all(src.startswith("cell-") for src in prof.graph_breaks(as_captured=True)["source"])
    assert not any("neuron_studio" in s or "profiler/" in s for s in gb["source"])
    # AdamW's updates run inside the optimizer graph (TorchNeuron keeps input mutations in the NEFF): no eager
    # write-back copies outside it
    outside = prof.trace.ops[(prof.trace.ops["graph"] < 0) & (prof.trace.ops["name"] == "aten::copy_")]
    assert len(outside) == 0


def test_in_place_update_splits_the_region_at_the_users_line() -> None:
    from neuron_studio import profile

    w = torch.randn(64, 64, device="neuron")
    x = torch.randn(64, 64, device="neuron")

    def step():
        y = x @ w
        y += 1            # splits the region: y = y + 1 would not
        z = y.relu() @ w
        return z

    prof = profile(step, steps=2, warmup=1, mode="adaptive", host_events=False)
    reg = prof.fusion_regions()
    split = reg[reg["reason"] == "in_place"]
    assert len(split) and (split["boundary_op"] == "aten::add_").all()
    assert split["boundary_source"].str.contains("test_modes_rules.py").all()
    assert split["fix"].str.contains("x = x + y", regex=False).all()
    assert set(reg["step"]) == {prof.trace.ops["step"].min(), prof.trace.ops["step"].max()}
    table = prof.op_table().set_index("key")
    assert table.loc["aten::add_", "region_splits"] > 0 and table.loc["aten::mm", "region_splits"] == 0


def test_one_classification_dropout_and_item_agree_across_views() -> None:
    """GPT-2 with dropout: the breakdown's host part, cpu_fallbacks(), the hot path and the op table all read
    the same kind; an .item() is a sync, not "memory"-bound."""
    from neuron_studio import profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Dropout(0.1), torch.nn.Linear(256, 256))
    model = model.to("neuron")
    x = torch.randn(64, 256, device="neuron")

    def step():
        return model(x).sum().item()

    prof = profile(step, steps=2, warmup=1, mode="eager", host_events=False)
    ops = prof.ops
    kind = dict(zip(ops["op"], ops["kind"]))
    assert kind["aten::native_dropout"] == "host_round_trip"
    assert kind["aten::_local_scalar_dense"] == "sync" and kind["aten::addmm"] == "device"
    fb = prof.cpu_fallbacks()
    assert "aten::native_dropout" in set(fb["op"]) and set(fb["kind"]) <= {"host_fallback", "host_round_trip"}
    host_part = prof.step_breakdown().part("fallback").ns
    assert (host_part > 0) == (len(fb) > 0)
    bound = dict(zip(ops["op"], ops["bound"]))
    assert bound["aten::_local_scalar_dense"] == "sync" and bound["aten::native_dropout"] == "host"
    hot = {h.op: h for h in prof.hot_path(top_share=1.0, max_ops=50)}
    assert hot["aten::native_dropout"].bound == "host"
    d = prof.device_run.ops_frame()
    idle = ((d["compute_ns"] == 0) & (d["memory_ns"] == 0)).to_numpy()
    assert not ops.loc[idle, "bound"].isin(["compute", "memory"]).any()   # no engine time, no bytes: not compute
    table = prof.op_table().set_index("key")
    assert table.loc["aten::native_dropout", "kind"] == "host_round_trip"


def test_the_adaptive_switches_are_honoured_and_offered_as_what_if(monkeypatch) -> None:
    from neuron_studio import profile

    w = torch.randn(32, 32, device="neuron")
    x = torch.randn(32, 32, device="neuron")

    def step():
        y = x @ w
        for _ in range(6):
            y = y * 1.01
        y += 1
        return y @ w

    base = profile(step, steps=1, warmup=1, mode="adaptive", host_events=False)
    small = base.fusion_regions(buffer_limit=2)
    assert (small["reason"] == "buffer_limit").any() and len(small) > len(base.fusion_regions())
    no_skip = base.fusion_regions(skip_intermediate=False)
    assert not (no_skip["reason"] == "in_place").any()
    monkeypatch.setenv("TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT", "2")
    env = profile(step, steps=1, warmup=1, mode="adaptive", host_events=False)
    assert env.trace.meta["adaptive_switches"] == {"adaptive_buffer_limit": 2}
    assert env.device_run.config.adaptive_buffer_limit == 2 and env.launches_per_step == len(small)


def test_compile_breakdown_names_the_launches_outside_the_graphs() -> None:
    from neuron_studio import profile

    torch._dynamo.reset()
    w = torch.randn(32, 32, device="neuron")

    def step():
        y = w @ w
        torch._dynamo.graph_break()
        return (y * 2) @ w

    prof = profile(step, steps=2, warmup=1, mode="compile", host_events=False)
    gb = prof.graph_breaks()
    assert len(gb) and gb["source"].str.contains("test_modes_rules.py").all()
    inside = prof.ops[prof.ops["launch"]]["graph"] >= 0
    assert inside.all()   # both halves are graphs: no eager launch, no note
    assert not any("outside the compiled graphs" in n for n in prof.step_breakdown().notes)


def test_compiled_selective_scan_is_not_modeled_slower_than_eager() -> None:
    """Its compiled step used to record twice the eager op count (AdamW write-backs and decomposed copies, each an
    eager launch) and was modeled 3x slower than eager; as TorchNeuron compiles it, the graphs hold the work."""
    from neuron_studio import profile
    from tests.models.selective_scan import SelectiveScanModel

    torch.manual_seed(0)
    m = SelectiveScanModel(8, 4).to("neuron")
    x = torch.randn(2, 16, 8, device="neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def step():
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    t = {}
    for mode in ("eager", "adaptive", "compile"):
        torch._dynamo.reset()
        p = profile(step, steps=2, warmup=1, mode=mode, chip="trn1", host_events=False)
        t[mode] = p.step_time_ns
        if mode == "compile":
            # nearly every op that does work ran inside a graph (views launch nothing: AOTAutograd's runtime
            # detaches a compiled graph's outputs outside it, as on any device)
            work = p.ops[p.ops["kind"] != "view"]
            assert (work["graph"] >= 0).mean() > 0.95
    assert t["compile"] < t["adaptive"] < t["eager"]


def test_compiled_input_mutations_are_written_in_place_without_a_copy() -> None:
    """TorchNeuron's backend removes an input mutation's `copy_` and aliases the new value's output buffer to the
    input (fx/passes/functionalize_copy_inplace_result.py @98154b86): a compiled AdamW step records no copy into
    its parameters or optimizer state (they cost a memory-bound op each: tutorial 02's compiled step was modeled
    2.13 ms, 1.88 ms without them), and the parameters still end as CPU eager leaves them."""
    import copy

    from neuron_studio import profile

    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    m = copy.deepcopy(ref).to("neuron")
    x_cpu = torch.randn(4, 16)
    x = x_cpu.to("neuron")
    opts = [torch.optim.AdamW(ref.parameters(), lr=1e-2), torch.optim.AdamW(m.parameters(), lr=1e-2)]

    def step_of(model, data, opt):  # noqa: ANN001, ANN202
        def step() -> None:
            model(data).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return step

    prof = profile(step_of(m, x, opts[1]), steps=2, warmup=1, mode="compile", host_events=False)
    for _ in range(3):
        step_of(ref, x_cpu, opts[0])()
    ops = prof.trace.ops
    in_graph = ops[ops["graph"] >= 0]
    assert len(in_graph) and not (in_graph["name"] == "aten::copy_").any()
    for a, b in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_a_graph_break_inside_an_installed_library_is_reported_at_the_users_line(tmp_path, monkeypatch) -> None:
    """A break in a third-party package (transformers' logging call in GPT-2's forward) is listed at the user's
    line that called into it, with the library's own file:line in the reason."""
    import importlib
    import os
    import sys

    from neuron_studio import modes, profile

    lib = tmp_path / "site"
    lib.mkdir()
    (lib / "fakelib_26.py").write_text("import torch\n\n\ndef forward(x):\n    y = x * 2\n"
                                       "    torch._dynamo.graph_break()\n    return y + 1\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setattr(modes, "_LIBRARY", (os.path.join(str(lib), ""),))
    fakelib = importlib.import_module("fakelib_26")
    torch._dynamo.reset()
    w = torch.randn(8, 8, device="neuron")

    def step():
        return fakelib.forward(w @ w)     # the user's line

    prof = profile(step, steps=1, warmup=1, mode="compile", host_events=False)
    gb = prof.graph_breaks()
    sys.modules.pop("fakelib_26", None)
    line = next(i + 1 for i, text in enumerate(open(__file__, encoding="utf-8").read().splitlines())
                if text.strip().startswith("return fakelib.forward"))
    assert len(gb) == 1 and gb["source"].iloc[0].endswith(f"test_modes_rules.py:{line}")
    assert gb["reason"].iloc[0].endswith("(in fakelib_26.py:6)")
