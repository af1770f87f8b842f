"""OpInfo sweep under torch.compile: every op swept in eager, compiled with backend="neuron" on `neuron`,
gives CPU eager's result.

For each op in torch's `op_db` (as tests/test_device_opinfo.py): the first sample input, compiled with
`torch.compile(backend="neuron", dynamic=False)` after a Dynamo reset and run on `neuron`, compared with
plain CPU eager by `assert_close` (compiled graphs decompose ops, so float32 tolerances, not bit equality).
One sample per op keeps the sweep to a few minutes. Ops Dynamo does not capture at all (it runs them
eagerly after a graph break) are listed under "not_captured" with the reason; ops whose compiled result
differs under "ops". Both lists are strict: an entry that stops applying fails the sweep.

    pytest tests/test_compile_opinfo.py -n 2         # the sweep (marked slow)
    python -m tests.test_compile_opinfo              # print what fails or is not captured now (SHARD=i/n)
"""
from __future__ import annotations

import itertools
import json
import os
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import neuron_studio
from tests.test_device_opinfo import (
    _KNOWN as EAGER_KNOWN,
    _OPS,
    KEEP_ARGS_ON_HOST,
    SEED,
    UNINITIALIZED,
    _clone,
    _dtype_for,
    _map_sample,
    _metadata,
    _sample_to_neuron,
    op_id,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator runs CPU kernels"),
]

DATA_FILE = Path(__file__).with_name("compile_opinfo_known_failures.json")
MIN_MATCH_RATIO = 0.97


def _data() -> dict:
    return json.loads(DATA_FILE.read_text())


class NotCaptured(Exception):
    """Dynamo compiled no graph for the op: the compiled path was not exercised."""


def _first_sample(op):  # noqa: ANN001, ANN202
    dtype = _dtype_for(op)
    if dtype is None:
        return None
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(iter(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), 1)), None)


def check_compiled_op(op) -> None:  # noqa: ANN001
    """Compile the op's first sample on neuron and compare with CPU eager; NotCaptured if no graph."""
    from torch._dynamo.utils import counters

    sample = _first_sample(op)
    if sample is None:
        pytest.skip("no sample or no dtype supported on CPU")
    on_neuron = _sample_to_neuron(sample, keep_args=op_id(op) in KEEP_ARGS_ON_HOST)
    on_cpu = _map_sample(_clone, sample)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda inp, *a, **k: op(inp, *a, **k), backend="neuron", dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(SEED)
        try:
            expected = op(on_cpu.input, *on_cpu.args, **on_cpu.kwargs)
        except Exception:  # noqa: BLE001 - the compiled neuron run must then fail too
            torch.manual_seed(SEED)
            with pytest.raises(Exception):  # noqa: B017 - Dynamo wraps the op's error in its own types
                compiled(on_neuron.input, *on_neuron.args, **on_neuron.kwargs)
            return
        torch.manual_seed(SEED)
        actual = compiled(on_neuron.input, *on_neuron.args, **on_neuron.kwargs)
    captured = counters["stats"]["unique_graphs"] > 0
    breaks = dict(counters["graph_break"])
    leaves, _ = tree_flatten(actual)
    wrong = [str(t.device) for t in leaves if isinstance(t, torch.Tensor) and t.device.type != "neuron"]
    assert not wrong, f"compiled outputs left the neuron device: {wrong}"
    actual_cpu = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual)
    if op_id(op) in UNINITIALIZED:
        actual_cpu, expected = tree_map(_metadata, actual_cpu), tree_map(_metadata, expected)
    torch.testing.assert_close(actual_cpu, expected, equal_nan=True, check_device=False)
    if not captured:  # the result is right, but it came from eager execution after a graph break
        raise NotCaptured(f"Dynamo compiled no graph; graph breaks: {breaks}")


_DATA = _data()
_FAILS = dict(_DATA["ops"])
_NOT_CAPTURED = dict(_DATA["not_captured"])


def _params():  # noqa: ANN202
    for op in _OPS:
        name = op_id(op)
        if name in EAGER_KNOWN:  # fails in eager already (sparse layouts): listed with its reason there
            continue
        marks = ()
        if name in _FAILS:
            marks = (pytest.mark.xfail(strict=True, reason=_FAILS[name]),)
        yield pytest.param(op, id=name, marks=marks)


@pytest.mark.parametrize("op", _params())
def test_compiled_op_matches_cpu_eager(op) -> None:  # noqa: ANN001
    name = op_id(op)
    try:
        check_compiled_op(op)
    except NotCaptured as e:
        if name in _NOT_CAPTURED:
            return
        raise AssertionError(f"{name}: {e}; list it under not_captured in {DATA_FILE.name} with the reason") from e
    assert name not in _NOT_CAPTURED, f"{name} is captured now: remove it from not_captured in {DATA_FILE.name}"


def test_known_failures_name_real_ops_and_meet_the_ratio() -> None:
    names = {op_id(op) for op in _OPS} - set(EAGER_KNOWN)
    for section in ("ops", "not_captured"):
        entries = _DATA[section]
        unknown = sorted(set(entries) - names)
        assert not unknown, f"{DATA_FILE.name} [{section}] lists ops that are not swept: {unknown}"
        assert all(reason.strip() for reason in entries.values()), f"every entry in [{section}] needs a reason"
    ratio = 1 - len(_FAILS) / len(names)
    assert ratio >= MIN_MATCH_RATIO, f"only {ratio:.2%} of {len(names)} ops match CPU compiled; need {MIN_MATCH_RATIO:.0%}"


if __name__ == "__main__":  # a quick report: which ops fail or are not captured now
    import time

    only = os.environ.get("OPS")
    shard, shards = (int(v) for v in os.environ.get("SHARD", "0/1").split("/"))  # SHARD=i/n: every n-th op
    failing, uncaptured = {}, {}
    t_all = time.perf_counter()
    swept = 0
    for k, op in enumerate(_OPS):
        name = op_id(op)
        if name in EAGER_KNOWN or (only and name not in only.split(",")) or k % shards != shard:
            continue
        swept += 1
        try:
            check_compiled_op(op)
        except NotCaptured as e:
            uncaptured[name] = str(e)[:300]
        except BaseException as e:  # noqa: BLE001
            if type(e).__name__ == "Skipped":
                continue
            text = str(e).strip()
            failing[name] = f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"
    print(f"{swept} ops, {len(failing)} failing, {len(uncaptured)} not captured, "
          f"ratio {1 - len(failing) / max(swept, 1):.4f}, {time.perf_counter() - t_all:.1f}s")
    print(json.dumps({"ops": failing, "not_captured": uncaptured}, indent=1))
