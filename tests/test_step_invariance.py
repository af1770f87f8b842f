"""Every per-step figure a profile's summary shows is the same whether 1 or 3 steps were profiled (the developers'
guide: never a figure that changes with how it was measured). Each profile gets a fresh model and optimizer and
the same warm-up, so both record the same steady-state step.

The comparison walks the whole summary, so a figure added later is held to it too. Left out, each for a reason:
measured host times (they vary run to run), the run's identity and step count, the timelines (drawn over the
profiled span, which is 3 steps long) and positions in them, and the per-step breakdown list (compared step by
step instead). Tolerance: the model gives each op a whole number of ns, and an op's time varies by a few ns
between steps, so a time may differ by `NS_PER_OP` per op in it; every other figure agrees to 1e-6.
"""
from __future__ import annotations

import gc
import math
import re
from typing import Any, Callable

import pytest
import torch

from neuron_studio.profiler import breakdown_summary
from neuron_studio.profiler.analysis import what_if
from neuron_studio.profiler.capture import profile
from neuron_studio.profiler.profile import Profile
from tests.models.blocks import TransformerBlock

#: A per-step modeled time may differ by this much per op in it (whole-ns per op, varying between steps).
NS_PER_OP = 3.0
REL = 1e-6
#: The two profiles compared: the same step profiled this many times.
STEPS = (1, 3)
#: Keys that are not per-step figures: the run's identity, measured host times, the timelines drawn over the
#: profiled span (positions and event counts in them), the list of each step's breakdown.
SKIP = {"run_id", "steps", "steps_total", "host_time_ns", "host_ns", "timeline", "trace_view", "index", "events"}
#: Lists whose rows are matched by what they are, not by position (ties may order rows differently).
ROW_KEYS: dict[str, Callable[[dict], Any]] = {
    "hot_ops": lambda r: (r["op"], r["module"], r["source"]),
    "op_table": lambda r: r["op"],
    "fallbacks": lambda r: (r["op"], r["reason"]),
    "places": lambda r: (r["op"], r["reason"], r["source"]),   # sync_places.places
    "rows": lambda r: r["variant"],                       # what_if.rows
    "levers": lambda r: (r["key"], r["title"]),
    "no_help": lambda r: (r["key"], r["title"]),
    "chips": lambda r: (r["chip"], r["lnc"]),
    "live": lambda r: (r["name"], r["category"], r["op"], r["module"], r["source"], r["shape"]),
    "activations": lambda r: r["module"],
    "engines": lambda r: r["engine"],
    "parts": lambda r: r["key"],
    "recommendations": lambda r: r["category"],
    "region_splits": lambda r: (r["reason"], r["op"], r["source"]),
}
#: Truncated lists (the top rows): a row only one side shows must tie with the other side's last row.
RANKED_BY = {"hot_ops": "device_ns", "op_table": "device_ns", "live": "nbytes", "activations": "activation_bytes",
             "places": "time_ns"}


def _summary(steps: int, mode: str, sync: bool, optimizer: bool = True) -> dict:
    return _profile(steps, mode, sync, optimizer).to_summary()


def _profile(steps: int, mode: str, sync: bool, optimizer: bool = True) -> Profile:
    # device memory held before a capture that is no model or optimizer state is the step's `input`: garbage an
    # earlier test left (collected at some point during one of the two profiles) must not differ between them
    gc.collect()
    torch.manual_seed(0)
    model = TransformerBlock(64, 4).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(2, 16, 64, device="neuron")

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        if optimizer:
            opt.step()
            opt.zero_grad()
        if sync:
            loss.item()
            torch.nonzero(x > 0)       # a data-dependent op: a sync row every step
            torch.unique(x.round())    # a CPU fallback every step

    return profile(step, steps=steps, warmup=1, mode=mode, host_events=False)


def _text(s: str) -> str:
    """A line that re-runs the profile keeps the user's own number of steps (`--steps 3`, `steps=3`): not a figure."""
    return re.sub(r"(--steps |\bsteps=)\d+", r"\1N", s)


def _ops_in(row: Any) -> float:
    if isinstance(row, dict):
        for k in ("count", "launches"):
            if isinstance(row.get(k), (int, float)):
                return max(1.0, float(row[k]))
    return 1.0


def _grouped(rows: list[dict], key: Callable[[dict], Any]) -> dict[Any, list[dict]]:
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return {k: sorted(v, key=repr) for k, v in out.items()}


def _share_per_ns(a: dict, b: dict, inherited: float) -> float:
    """What one ns of a row's device time is as a share (its share over its time), for the share's tolerance."""
    per = [r["share"] / r["device_ns"] for r in (a, b) if isinstance(r.get("share"), (int, float))
           and isinstance(r.get("device_ns"), (int, float)) and r["device_ns"] > 0]
    return max(per) if per else inherited


def _compare(a: Any, b: Any, path: str, diffs: list[str], *, ops: float = 1.0, per_ns: float = 0.0) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        row_ops, row_per_ns = max(_ops_in(a), _ops_in(b)), _share_per_ns(a, b, per_ns)
        for k in sorted(set(a) | set(b)):
            if k not in SKIP:
                _compare(a.get(k), b.get(k), f"{path}.{k}", diffs, ops=row_ops, per_ns=row_per_ns)
        return
    if isinstance(a, list) and isinstance(b, list):
        name = path.rsplit(".", 1)[-1]
        keyed = ROW_KEYS.get(name)
        if keyed and all(isinstance(r, dict) for r in a + b):
            ka, kb = _grouped(a, keyed), _grouped(b, keyed)
            rank = RANKED_BY.get(name)
            for only, other in ((set(ka) - set(kb), b), (set(kb) - set(ka), a)):
                for k in only:
                    row = (ka.get(k) or kb.get(k))[0]
                    if not (rank and other and _close(row[rank], other[-1][rank], f".{rank}", _ops_in(row))):
                        diffs.append(f"{path}: {k} in one summary only")
            for k in set(ka) & set(kb):   # rows the key does not tell apart (equal temporaries) in a fixed order
                _compare(ka[k], kb[k], f"{path}[{k}]", diffs, per_ns=per_ns)
            return
        if len(a) != len(b):
            diffs.append(f"{path}: {len(a)} vs {len(b)} entries")
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]", diffs, ops=ops, per_ns=per_ns)
        return
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if not _close(a, b, path, ops, per_ns):
            diffs.append(f"{path}: {a} vs {b}")
        return
    if isinstance(a, str) and isinstance(b, str):
        if _text(a) != _text(b):
            diffs.append(f"{path}: {a[:160]!r} vs {b[:160]!r}")
        return
    if a != b:
        diffs.append(f"{path}: {a!r} vs {b!r}")


def _close(a: float, b: float, path: str, ops: float, per_ns: float = 0.0) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    slack = NS_PER_OP * ops if leaf.endswith("ns") else 0.0
    if leaf == "share":
        slack = NS_PER_OP * ops * per_ns      # the same few ns per op, as a share
    return math.isclose(a, b, rel_tol=REL, abs_tol=slack + 1e-12)


@pytest.fixture(scope="module", params=[("eager", True, True), ("adaptive", True, True), ("adaptive", False, True),
                                        ("adaptive", False, False)],
                ids=["eager-sync", "adaptive-sync", "adaptive", "adaptive-gradients-accumulate"])
def one_and_three(request: pytest.FixtureRequest) -> tuple[dict, dict]:
    """Without an optimizer the step is the model's (NKI kernel rows in the what-if), and its gradients accumulate
    into the existing .grad tensors every step (tiny in-place adds)."""
    mode, sync, optimizer = request.param
    return _summary(STEPS[0], mode, sync, optimizer), _summary(STEPS[1], mode, sync, optimizer)


def test_every_per_step_figure_is_the_same_for_one_and_three_profiled_steps(one_and_three: tuple[dict, dict]) -> None:
    one, three = one_and_three
    assert (one["steps"], three["steps"]) == STEPS
    diffs: list[str] = []
    _compare(one, three, "", diffs, per_ns=1 / one["step_time_ns"])
    assert not diffs, "\n".join(diffs)


def test_each_profiled_steps_breakdown_is_the_one_step_breakdown(one_and_three: tuple[dict, dict]) -> None:
    one, three = one_and_three
    (only,) = one["breakdown"]["steps"]
    assert len(three["breakdown"]["steps"]) == 3
    for s in three["breakdown"]["steps"]:
        diffs: list[str] = []
        _compare({k: v for k, v in only.items() if k != "step"}, {k: v for k, v in s.items() if k != "step"},
                 f"breakdown.steps[{s['step']}]", diffs)
        assert not diffs, "\n".join(diffs)


def test_the_comparison_sees_a_figure_summed_over_the_steps(one_and_three: tuple[dict, dict]) -> None:
    """The check itself: a total over the 3 steps where a per-step figure belongs is reported."""
    one, three = one_and_three
    row = dict(three["op_table"][0])
    row["count"] = row["count"] * 3
    diffs: list[str] = []
    _compare(one, {**three, "op_table": [row, *three["op_table"][1:]]}, "", diffs, per_ns=1 / one["step_time_ns"])
    assert any(".count" in d for d in diffs)


@pytest.mark.parametrize("fit", [1, 2])
def test_a_run_above_the_what_if_op_limit_gets_the_one_step_what_if_and_advice(monkeypatch: pytest.MonkeyPatch,
                                                                               fit: int) -> None:
    """The summary re-models at most `what_if.REMODEL_MAX_OPS` ops. With the limit at `fit` steps' ops, one
    profiled step is re-modeled whole and three are not: the three-step summary re-models its first `fit` steps and
    says so, and everything else in it (what-if rows, their ranking, the advice the breakdown recommends from, the
    hot path's code changes) is the one-step summary's."""
    one, three = _profile(STEPS[0], "adaptive", True), _profile(STEPS[1], "adaptive", True)
    per_step = len(one.trace.ops)
    assert len(three.trace.ops) == STEPS[1] * per_step
    monkeypatch.setattr(what_if, "REMODEL_MAX_OPS", fit * per_step)
    s1, s3 = one.to_summary(), three.to_summary()
    w1, w3 = s1["what_if"], s3["what_if"]
    first = sorted(three.trace.ops["step"].unique())[:fit]
    assert (w1["remodeled_steps"], w1["scope_note"]) == ([], None)
    assert w3["remodeled_steps"] == [int(k) for k in first]
    assert f"first {fit} of the {STEPS[1]} profiled steps" in w3["scope_note"]
    assert f"prof.what_if() re-models all {STEPS[1]}" in w3["scope_note"]
    # the advice is there (its rows and ranks: the comparison below holds them to the one-step ones)
    assert any(r["rank"] == 1 for r in w3["rows"]) and {"mode", "code"} <= {r["kind"] for r in w3["rows"]}
    for w in (w1, w3):
        del w["remodeled_steps"], w["scope_note"]
    diffs: list[str] = []
    _compare(s1, s3, "", diffs, per_ns=1 / s1["step_time_ns"])
    a1, a3 = one.advice(), three.advice()
    assert a1 and a3
    _compare({"advice": a1}, {"advice": a3}, "", diffs, per_ns=1 / s1["step_time_ns"])
    assert not diffs, "\n".join(diffs)


def test_a_step_too_large_to_re_model_inline_is_said_the_same_for_one_and_three_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One step is more ops than the limit: no what-if rows and no advice, at any number of profiled steps, with a
    note naming the step's op count and the limit (never the run's total, which grows with the steps)."""
    one, three = _profile(STEPS[0], "adaptive", True), _profile(STEPS[1], "adaptive", True)
    per_step = len(one.trace.ops)
    monkeypatch.setattr(what_if, "REMODEL_MAX_OPS", per_step - 1)
    b1, b3 = breakdown_summary.what_if_block(one), breakdown_summary.what_if_block(three)
    assert b1 == b3 and b1["rows"] == []
    assert f"is {per_step:,} ops, more than the {per_step - 1:,} the summary re-models" in b1["note"]
    assert "prof.what_if()" in b1["note"]
    assert one.advice() is None and three.advice() is None
