"""Why a compiled graph compiled again: the one classification (profiler/recompile_causes.py) from Dynamo's guard
failures, carried by every view (trace table, summary, HTML, advice, porting report). On the emulated device."""
from __future__ import annotations

import pandas as pd
import pytest
import torch
from markupsafe import escape

from neuron_studio import profile
from neuron_studio.profiler.analysis.porting_report import porting_report
from neuron_studio.profiler.recompile_causes import (SHAPES, classify_recompile, fill_causes,
                                                    parse_guard_failure)
from neuron_studio.profiler.trace import Trace

SCALE = 2.0   # a global the compiled step reads: Dynamo guards on its value


def _step(lin: torch.nn.Module, x: torch.Tensor):
    def step():
        return (lin(x) * SCALE).sum()
    return step


def _recommendations(prof) -> list[str]:
    return [r.text for r in prof.step_breakdown().recommendations if r.category == "recompile"]


def test_a_new_shape_recompile_says_shapes_and_advises_padding() -> None:
    torch._dynamo.reset()
    lin = torch.nn.Linear(16, 16).to("neuron")
    batches = iter([torch.randn(4, t, 16, device="neuron") for t in (37, 50, 61)])

    @torch.compiler.disable
    def next_batch():
        return next(batches)

    prof = profile(lambda: lin(next_batch()).sum(), steps=3, warmup=0, mode="compile", chip="trn2")
    rc = prof.recompiles()
    assert len(rc) == 2 and list(rc["cause"]) == [SHAPES, SHAPES]
    assert rc["reason"][0].startswith("new input shapes (4x50x16, 16x16, 16; compiled before for 4x37x16, 16x16, "
                                      "16); tensor 'input ___stack1' dimension 1 was 37, now 50")
    assert "size mismatch at index 1. expected 37, actual 50" in rc["detail"][0]   # Dynamo's own text, kept
    recs = _recommendations(prof)
    assert len(recs) == 1 and recs[0].startswith("2 recompiles (a new input shape each) → pad dimension 1")
    report = {i.topic: i for i in porting_report(prof).items}
    assert report["dynamic_shapes"].severity == "error" and "recompiles" not in report


@pytest.mark.parametrize("change, cause, words", [
    ("global", "global", "global SCALE is no longer 2.0"),
    ("grad_mode", "grad_mode", "torch.no_grad()"),
])
def test_an_equal_shape_recompile_names_its_cause_and_not_shapes(change: str, cause: str, words: str) -> None:
    global SCALE
    torch._dynamo.reset()
    lin = torch.nn.Linear(16, 16).to("neuron")
    x = torch.randn(4, 16, device="neuron")
    step = _step(lin, x)
    SCALE = 2.0
    first = profile(step, steps=1, warmup=0, mode="compile", chip="trn2")
    assert len(first.trace.compiles) == 1 and not first.trace.compiles["recompile"].any()
    try:
        if change == "global":
            SCALE = 3.0
            prof = profile(step, steps=2, warmup=0, mode="compile", chip="trn2")
        else:
            with torch.no_grad():
                prof = profile(step, steps=2, warmup=0, mode="compile", chip="trn2")
    finally:
        SCALE = 2.0
    rc = prof.recompiles()
    assert len(rc) == 1, rc
    r = rc.iloc[0]
    assert r["shapes"] == first.trace.compiles["shapes"][0]          # the same input shapes
    assert r["cause"] == cause and words in r["reason"]
    assert "shape" not in r["reason"].replace("the same input shapes", "")
    assert r["detail"].startswith(f"{first.trace.compiles['compile_id'][0]}: ")   # Dynamo's guard text
    # advice: what keeps the cause from changing, never padding or dynamic dimensions
    recs = _recommendations(prof)
    assert len(recs) == 1 and recs[0].startswith("1 recompile with unchanged input shapes")
    assert "pad" not in recs[0] and "dynamic" not in recs[0]
    assert ("pass it in as a tensor" if cause == "global" else "once per grad mode") in recs[0]
    report = {i.topic: i for i in porting_report(prof).items}
    assert report["dynamic_shapes"].severity == "ok"
    assert report["recompiles"].severity == "warning" and r["reason"] in report["recompiles"].details[0]
    assert prof._compile_why_not() is None and prof._recompiling_compiles() is None
    # every view carries the same classification: summary (JupyterLab extension), HTML
    s = prof.to_summary()
    assert s["recompiles"] == [{"graph": r["graph_key"], "shape": r["shapes"], "cause": cause,
                                "reason": r["reason"], "detail": r["detail"]}]
    page = prof._repr_mimebundle_()["text/html"]
    assert str(escape(r["reason"])) in page and str(escape(r["detail"])) in page   # Dynamo's text, escaped
    assert "new input shapes" not in page


def test_real_torchneuron_compiles_are_logged_with_the_same_classification(monkeypatch) -> None:
    """On real TorchNeuron the `neuron` backend defers to TorchNeuron's (`torch_neuronx.neuron_dynamo_backend.
    backend.neuron_backend`, stood in for here) and still logs each compile with its cause, computed the same way."""
    import sys
    import types

    from neuron_studio import device
    from neuron_studio.profiler.trace import COMPILE_COLUMNS

    calls = []
    mod = types.ModuleType("torch_neuronx.neuron_dynamo_backend.backend")
    mod.neuron_backend = lambda gm, example_inputs, **kw: calls.append(len(example_inputs)) or gm.forward
    for name in ("torch_neuronx", "torch_neuronx.neuron_dynamo_backend"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    reg = device.registry()
    monkeypatch.setattr(reg, "backend", "real")
    torch._dynamo.reset()
    start = len(reg.compile_log)
    f = torch.compile(lambda x, n: (x * n).relu().sum(), backend="neuron", dynamic=False)
    x = torch.randn(4, 4)
    for n in (2, 2, 3):
        f(x, n)
    f(torch.randn(6, 4), 3)
    c = pd.DataFrame(reg.compile_log[start:], columns=list(COMPILE_COLUMNS))
    assert len(calls) == 3 and list(c["cause"]) == ["first", "value", SHAPES]
    assert c["reason"][1] == "a Python value changed with the same input shapes: n is no longer 2"
    assert c["detail"][1].startswith("0/0: n == 2") and c["compile_id"].tolist() == ["0/0", "0/1", "0/2"]


def test_guard_texts_are_put_in_words() -> None:
    """Dynamo's reason strings (torch 2.13's wording, as TORCH_LOGS=recompiles prints them) -> cause and words."""
    shapes = "4x4, 4, 2x4"
    earlier = {"0/0": shapes}
    cases = {
        "0/0: tensor 'x' dtype mismatch. expected Float, actual Double": ("dtype", "compiled for Float, now Double"),
        "0/0: tensor 'x' stride mismatch at index 0. expected 4, actual 1": ("strides", "other strides"),
        "0/0: tensor 'x' requires_grad mismatch. expected requires_grad=0": ("requires_grad", "is now True"),
        "0/0: GLOBAL_STATE changed: autocast(cpu)_enabled ": ("autocast", "autocast(cpu)_enabled"),
        "0/0: GLOBAL_STATE changed: deterministic_algorithms ": ("deterministic", "use_deterministic_algorithms"),
        "0/0: G['m']._modules['1'].training == True      # return F.dropout(...)  # dropout.py:73 in forward":
            ("training", "G['m']._modules['1'] was switched to eval()"),
        "0/0: len(xs) == 2      # return sum(xs)  # t.py:3 in f": ("length", "len(xs) is no longer 2"),
        "0/0: n == 3      # return x * n  # t.py:3 in f\nUser stack trace:\n  File \"t.py\", line 3": (
            "value", "n is no longer 3"),
        "0/0: Duplicate tensors found: [\"x\", \"y\"]": ("aliasing", "are the same tensor"),
        "0/0: ___check_obj_id(opt, 140000)": ("object", "opt is a different object"),
        "0/0: expected type of 'mod._parameters['bias']' to be a tensor type, ' but found <class 'NoneType'>": (
            "type", "mod._parameters['bias'] has a different type"),
        "0/0: something torch adds later": ("guard", "something torch adds later"),
    }
    for text, (cause, words) in cases.items():
        c = classify_recompile([text], shapes, earlier)
        assert (c.cause, c.detail) == (cause, text) and words in c.reason and "new input shapes" not in c.reason, c
    assert parse_guard_failure("0/3: n == 3      # x * n  # t.py:3 in f").guard == "n == 3"
    # a size guard on a tensor that is not a graph input, with the inputs' shapes unchanged, is not "new shapes"
    c = classify_recompile(["0/0: tensor 'w' size mismatch at index 0. expected 2, actual 5"], shapes, earlier)
    assert c.cause == "guard" and "unchanged" in c.reason
    # shapes no earlier compile had: shapes, whatever guard Dynamo reported first
    c = classify_recompile(["0/0: GLOBAL_STATE changed: grad_mode "], "4x4, 4, 5x4", earlier)
    assert c.cause == SHAPES and c.reason.startswith("new input shapes (4x4, 4, 5x4; compiled before for 4x4, 4, 2x4)")
    # several earlier compiles: the one with the call's shapes is the closer one; a global-state failure (checked
    # first by Dynamo) yields to another guard's
    c = classify_recompile(["0/2: GLOBAL_STATE changed: grad_mode ",
                            "0/1: tensor 'x' stride mismatch at index 0. expected 4, actual 1",
                            "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 5"],
                           "4x4, 4, 5x4", {"0/0": shapes, "0/1": "4x4, 4, 5x4", "0/2": "4x4, 4, 5x4"})
    assert c.cause == "strides"
    # no reason from Dynamo and the same shapes: said so, never "new input shapes"
    c = classify_recompile([], shapes, earlier)
    assert c.cause == "unknown" and "new input shapes" not in c.reason


def test_a_trace_recorded_before_causes_is_classified_from_its_shapes() -> None:
    """Old stored traces' compiles tables (no cause/detail/compile_id) load; a recompile with shapes seen before is
    not called a new shape, whatever its stored reason said."""
    old = pd.DataFrame({"graph_key": ["frame0", "frame0", "frame0"], "shapes": ["2x4", "5x4", "2x4"],
                        "reason": ["first compile", "new input shapes (5x4); static shapes: ...",
                                   "new input shapes (2x4); static shapes: ..."],
                        "compile_ns": [1, 2, 3], "recompile": [False, True, True]})
    tr = Trace(ops=_no_ops(), compiles=old)
    c = tr.compiles
    assert list(c["cause"]) == ["first", SHAPES, "unknown"]
    assert "new input shapes" not in c["reason"][2] and list(c["compile_id"]) == ["", "", ""]
    assert fill_causes(c) is c


def _no_ops() -> pd.DataFrame:
    from neuron_studio.profiler.trace import OPS_COLUMNS

    return pd.DataFrame({k: pd.Series([], dtype=v) for k, v in OPS_COLUMNS.items()})
