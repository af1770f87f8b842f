"""Every figure in a summary table is per profiled step (issue 14 item 4): profiling the same step 1 or 3 times
gives the same hot-path savings, op counts and fallback figures, and the headers say "/step"."""
from __future__ import annotations

import pytest
import torch

from neuron_studio.profiler.capture import profile
from neuron_studio.ui.html import render_html
from tests.models.blocks import TransformerBlock


def _summary(steps: int) -> dict:
    torch.manual_seed(0)
    m = TransformerBlock(32, 2).to("neuron")
    x = torch.randn(2, 8, 32, device="neuron")

    def step() -> None:
        m(x).sum().backward()
        torch.nonzero(x > 0)          # a data-dependent op: a fallback/sync row in every step
    return profile(step, steps=steps, warmup=1, mode="eager").to_summary(run_id=steps)   # steady state


@pytest.fixture(scope="module")
def one_and_three() -> tuple[dict, dict]:
    return _summary(1), _summary(3)


def test_hot_path_saving_is_per_step(one_and_three: tuple[dict, dict]) -> None:
    one, three = one_and_three
    saves1 = [(h["op"], h["kernel"]["saving_ns"]) for h in one["hot_ops"] if h["kernel"] and h["kernel"]["saving_ns"]]
    saves3 = [(h["op"], h["kernel"]["saving_ns"]) for h in three["hot_ops"] if h["kernel"] and h["kernel"]["saving_ns"]]
    assert saves1 and len(saves1) == len(saves3)
    for (op1, s1), (op3, s3) in zip(saves1, saves3):
        assert op1 == op3 and s3 == pytest.approx(s1, rel=0.02)          # not 3x: the same step
    for h in three["hot_ops"]:
        k = h["kernel"]
        if k and k["saving_ns"] is not None:
            assert k["saving_ns"] <= h["device_ns"] * (1 + 1e-6) or k["scope"] != "op"
    assert max(s for _, s in saves3) < three["step_time_ns"]


def test_counts_and_fallback_times_are_per_step(one_and_three: tuple[dict, dict]) -> None:
    one, three = one_and_three
    c1 = {r["op"]: r["count"] for r in one["op_table"]}
    c3 = {r["op"]: r["count"] for r in three["op_table"]}
    assert c1 and all(c3[op] == pytest.approx(c1[op]) for op in c1 if op in c3)
    key = lambda h: (h["op"], h["module"], h["source"])  # noqa: E731
    h1 = {key(h): h["count"] for h in one["hot_ops"]}
    both = [h for h in three["hot_ops"] if key(h) in h1]
    assert both and all(h["count"] == pytest.approx(h1[key(h)]) for h in both)   # every call counts, also one the
    # model gives 0 ns in some steps
    f1 = {f["op"]: f for f in one["fallbacks"]}
    for f in three["fallbacks"]:
        if f["op"] in f1:
            assert f["count"] == pytest.approx(f1[f["op"]]["count"])
            assert f["time_ns"] == pytest.approx(f1[f["op"]]["time_ns"], rel=0.02)


def test_every_table_header_states_per_step(one_and_three: tuple[dict, dict]) -> None:
    out = render_html(one_and_three[1])
    for header in ("<th>count/step</th><th>device/step (modeled)</th><th>host/step (measured)</th><th>FLOPs/step</th>",
                   "<th>device/step (modeled)</th><th>share</th><th>bound</th><th>change / NKI kernel</th>"):
        assert header in out
    assert "saves ~" in out
