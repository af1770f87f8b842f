"""The measured host time per step is a step's time, whatever the number of profiled steps: a step runs from one
step mark to the next (ProfilerStep#N in an imported trace), so the part of a step outside its ops (here a
sleep, as data loading would be) counts, and ops after the last step mark are no step.

Each step sleeps `SLEEP_S`, so it is sleep-dominated; the test times each call of the step function itself and
asserts the measured step holds that whole call and little more (`SLACK`: the step mark and the sync between
calls, a wide bound that an extra or a missing step, ~2x or ~0.1x, cannot hide in). No other timed assertion.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from neuron_studio.profiler.capture import Capture, profile
from neuron_studio.profiler.importers import read_trace
from neuron_studio.profiler.profile import Profile
from neuron_studio.profiler.profile_summary import _trace_warnings

SLEEP_S = 0.05
#: The measured step may exceed the step function's own time by this share (the step mark and sync between calls).
SLACK = 0.2
STEPS = (1, 3, 5)


def _step_fn(sleep_first: bool) -> tuple[Callable[[], None], list[int]]:
    """A small training step on the emulated device that also sleeps; appends each call's duration (ns)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16, device="neuron")
    took: list[int] = []

    def step() -> None:
        t0 = time.perf_counter_ns()
        if sleep_first:
            time.sleep(SLEEP_S)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        if not sleep_first:
            time.sleep(SLEEP_S)
        took.append(time.perf_counter_ns() - t0)

    return step, took


def _ratio(prof: Profile, took: list[int], warmup: int) -> float:
    """Measured host time per step over the mean time of the profiled calls of the step function."""
    calls = took[warmup:]
    assert len(calls) == prof.steps
    ratio = prof.host_time_ns / float(np.mean(calls))
    # the step holds the whole call (sleep included), and not a second step
    assert 1.0 <= ratio <= 1.0 + SLACK, (prof.steps, prof.host_time_ns, calls)
    return ratio


@pytest.mark.parametrize("warmup", [0, 1])
@pytest.mark.parametrize("sleep_first", [False, True])
def test_profile_fn_step_time_is_the_step_at_1_3_and_5_steps(warmup: int, sleep_first: bool) -> None:
    ratios = []
    for k in STEPS:
        fn, took = _step_fn(sleep_first)
        prof = profile(fn, steps=k, warmup=warmup)
        assert prof.host_time_ns >= SLEEP_S * 1e9
        assert prof.to_summary()["host_time_ns"] == pytest.approx(prof.host_time_ns)
        ratios.append(_ratio(prof, took, warmup))
    assert max(ratios) / min(ratios) <= 1.0 + SLACK


@pytest.mark.parametrize("warmup", [0, 1])
def test_capture_steps_and_ops_after_the_last_step_mark(warmup: int) -> None:
    ratios, modeled = [], []
    for k in STEPS:
        fn, took = _step_fn(sleep_first=False)
        with Capture(warmup=warmup) as cap:
            for _ in range(warmup + k):
                fn()
                cap.step()
            # the script's tail (evaluating, saving): no step
            time.sleep(SLEEP_S)
            (torch.ones(4, device="neuron") * 2).sum().item()
        prof = cap.profile
        assert sorted(set(prof.trace.ops["step"].tolist())) == list(range(warmup, warmup + k))
        assert [w["step"] for w in prof.trace.meta["step_windows"]] == list(range(warmup, warmup + k))
        assert prof.trace.meta["ops_after_last_step"] > 0
        assert any("after the last step mark" in w for w in _trace_warnings(prof.trace.meta))
        ratios.append(_ratio(prof, took, warmup))
        modeled.append(prof.step_time_ns)
    assert max(ratios) / min(ratios) <= 1.0 + SLACK
    # the tail's ops are not modeled into the step either: the modeled step is one step's, at any count
    assert max(modeled) / min(modeled) <= 1.0 + 1e-3


def test_a_failed_capture_keeps_its_partial_step() -> None:
    fn, _ = _step_fn(sleep_first=False)
    with pytest.raises(RuntimeError), Capture() as cap:
        fn()
        cap.step()
        torch.ones(4, device="neuron").sum()
        raise RuntimeError("boom")
    assert cap.trace.meta["status"] == "error" and "ops_after_last_step" not in cap.trace.meta
    assert 1 in set(cap.trace.ops["step"].tolist())


@pytest.mark.parametrize("k", [1, 3])
def test_imported_profiler_step_windows_are_the_steps(tmp_path: Path, k: int) -> None:
    model = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=k, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                schedule=sched, on_trace_ready=lambda p: None) as p:
        for _ in range(k + 1):
            model(x).sum().backward()
            time.sleep(SLEEP_S)
            p.step()
    path = tmp_path / "trace.json"
    p.export_chrome_trace(str(path))
    prof = Profile.from_trace(read_trace(path))
    wins = prof.trace.meta["imported"]["step_windows"]
    assert len(wins) == k == prof.steps
    # the host step is the ProfilerStep window, sleep included, not the span of the recorded ops
    assert prof.host_time_ns == pytest.approx(np.mean([w["end_ns"] - w["start_ns"] for w in wins]))
    assert prof.host_time_ns >= SLEEP_S * 1e9
