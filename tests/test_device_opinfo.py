"""OpInfo sweep: every op in torch's `op_db` gives the same result on the emulated `neuron` device as on CPU.

For each op: up to 3 sample inputs made on CPU (float32, or the op's first supported dtype when it has no
float32), moved to `neuron` with a tree map, run on both devices with the same RNG seed, and compared with
`torch.testing.assert_close(..., equal_nan=True)`. Every tensor the neuron run returns must be on `neuron`.
Ops that do not match are listed in `opinfo_known_failures.json` with a reason; they are strict xfails, so
the file cannot go stale (an op that starts matching fails the sweep until it is removed from the list).

    pytest tests/test_device_opinfo.py -n 2          # the sweep (marked slow)
    python tests/test_device_opinfo.py               # print the ops that fail now, with the first error
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

import neuron_studio  # noqa: F401  (registers the `neuron` device)

pytestmark = pytest.mark.slow

KNOWN_FAILURES_FILE = Path(__file__).with_name("opinfo_known_failures.json")
MAX_SAMPLES = 3
MIN_MATCH_RATIO = 0.99
SEED = 1234
# The emulator runs the very CPU kernels, so results are expected to be bit-identical; EXACT=0 relaxes to
# assert_close's default float32 tolerances.
EXACT = os.environ.get("EXACT", "1") != "0"
RTOL, ATOL = (0.0, 0.0) if EXACT else (None, None)
# Ops compared with assert_close's default float32 tolerances instead of bit-exactly, and why.
TOLERANCE = {
    name: "ATen's composite asks for singular/eigen vectors when the input is a tensor subclass "
    "(_may_require_fw_or_bw_grad -> isTensorSubclassLike), so LAPACK runs its vector-computing path, "
    "whose values differ from the values-only path in the last bits"
    for name in ("linalg.svdvals", "linalg.eigvalsh", "linalg.cond", "norm.nuc")
}
# Tensor arguments that must stay on the host, as on CUDA (tensor_split reads its split points there).
KEEP_ARGS_ON_HOST = frozenset({"tensor_split"})
# Ops returning uninitialised memory: compare shape, dtype and strides only.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})


def _op_db():  # noqa: ANN202
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402


def op_id(op) -> str:  # noqa: ANN001
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _known_failures() -> dict[str, str]:
    data = json.loads(KNOWN_FAILURES_FILE.read_text())
    return dict(data["ops"])


def _dtype_for(op) -> torch.dtype | None:  # noqa: ANN001
    dtypes = op.supported_dtypes("cpu")
    if torch.float32 in dtypes:
        return torch.float32
    if not dtypes:
        return None
    return sorted(dtypes, key=str)[0]


def _to_neuron(x):  # noqa: ANN001, ANN202
    if isinstance(x, torch.Tensor) and x.device.type == "cpu":
        return x.detach().to("neuron").requires_grad_(x.requires_grad)
    return x


def _clone(x):  # noqa: ANN001, ANN202
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def _sample_to_neuron(sample, keep_args: bool = False):  # noqa: ANN001, ANN202
    """Tensors to `neuron`; a `device=` keyword (factory ops such as zeros, arange, randn) names `neuron` too."""
    moved = _map_sample(_to_neuron, sample)
    if keep_args:
        moved.args = sample.args
    if "device" in moved.kwargs:
        moved.kwargs = {**moved.kwargs, "device": "neuron"}
    moved.args = tuple("neuron" if _is_cpu_device(a) else a for a in moved.args)  # Tensor.to("cpu", ...)
    return moved


def _is_cpu_device(a) -> bool:  # noqa: ANN001
    return (isinstance(a, str) and a == "cpu") or (isinstance(a, torch.device) and a.type == "cpu")


def _map_sample(fn, sample):  # noqa: ANN001, ANN202
    """SampleInput is not a pytree node: map its input, args and kwargs (which are) explicitly."""
    return SampleInput(
        tree_map(fn, sample.input), args=tree_map(fn, sample.args), kwargs=tree_map(fn, sample.kwargs)
    )


def _run(op, sample):  # noqa: ANN001, ANN202
    torch.manual_seed(SEED)
    return op(sample.input, *sample.args, **sample.kwargs)


def _misplaced(result) -> list[str]:  # noqa: ANN001
    leaves, _ = tree_flatten(result)
    return [str(t.device) for t in leaves if isinstance(t, torch.Tensor) and t.device.type != "neuron"]


def check_op(op) -> int:  # noqa: ANN001
    """Run the op's samples on CPU and on neuron and compare. Returns the number of samples compared."""
    dtype = _dtype_for(op)
    if dtype is None:
        pytest.skip("no dtype supported on CPU")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), MAX_SAMPLES))
    compared = 0
    for i, sample in enumerate(samples):
        on_neuron = _sample_to_neuron(sample, keep_args=op_id(op) in KEEP_ARGS_ON_HOST)  # before the CPU run: in-place ops mutate their inputs
        on_cpu = _map_sample(_clone, sample)
        try:
            expected = _run(op, on_cpu)
        except Exception as e:  # noqa: BLE001 - the neuron run must then fail the same way
            with pytest.raises(type(e)):
                _run(op, on_neuron)
            compared += 1
            continue
        actual = _run(op, on_neuron)
        wrong = _misplaced(actual) if _has_neuron_tensor(on_neuron) or "device" in on_neuron.kwargs else []
        assert not wrong, f"sample {i}: outputs left the neuron device: {wrong}"
        actual_cpu = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual)
        if op_id(op) in UNINITIALIZED:
            actual_cpu, expected = tree_map(_metadata, actual), tree_map(_metadata, expected)
        exact = op_id(op) not in TOLERANCE
        torch.testing.assert_close(
            actual_cpu, expected, equal_nan=True, check_device=False,
            rtol=RTOL if exact else None, atol=ATOL if exact else None,
            msg=lambda m, i=i: f"sample {i}: {m}",
        )
        compared += 1
    return compared


def _metadata(x):  # noqa: ANN001, ANN202
    if isinstance(x, torch.Tensor):
        return torch.tensor([*x.shape, -1, *x.stride(), -1, x.element_size(), int(x.is_floating_point())])
    return x


def _has_neuron_tensor(sample) -> bool:  # noqa: ANN001
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return any(isinstance(t, torch.Tensor) and t.device.type == "neuron" for t in leaves)


_OPS = _op_db()
_KNOWN = _known_failures()


def _params():  # noqa: ANN202
    for op in _OPS:
        name = op_id(op)
        marks = ()
        if name in _KNOWN:
            marks = (pytest.mark.xfail(strict=True, reason=_KNOWN[name]),)
        yield pytest.param(op, id=name, marks=marks)


@pytest.mark.parametrize("op", _params())
def test_op_matches_cpu(op) -> None:  # noqa: ANN001
    check_op(op)


def test_known_failures_name_real_ops_and_meet_the_ratio() -> None:
    names = {op_id(op) for op in _OPS}
    unknown = sorted(set(_KNOWN) - names)
    assert not unknown, f"opinfo_known_failures.json lists ops that are not in op_db: {unknown}"
    assert all(reason.strip() for reason in _KNOWN.values()), "every known failure needs a reason"
    ratio = 1 - len(_KNOWN) / len(names)
    assert ratio >= MIN_MATCH_RATIO, f"only {ratio:.2%} of {len(names)} OpInfo ops match CPU; need {MIN_MATCH_RATIO:.0%}"


if __name__ == "__main__":  # a quick report: which ops fail now, and where the time goes
    import time
    import traceback

    only = os.environ.get("OPS")
    failing = {}
    times = []
    t_all = time.perf_counter()
    for op in _OPS:
        name = op_id(op)
        if only and name not in only.split(","):
            continue
        t0 = time.perf_counter()
        try:
            check_op(op)
        except BaseException as e:  # noqa: BLE001
            if type(e).__name__ == "Skipped":
                continue
            failing[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            if os.environ.get("TB"):
                traceback.print_exc()
        times.append((time.perf_counter() - t0, name))
    total = len(_OPS)
    print(f"{total} ops, {len(failing)} failing, ratio {1 - len(failing) / total:.4f}, {time.perf_counter() - t_all:.1f}s")
    for name, why in failing.items():
        flag = "known" if name in _KNOWN else "NEW"
        print(f"  [{flag}] {name}: {why}")
    for name in sorted(set(_KNOWN) - set(failing)):
        print(f"  [now passes] {name}")
    print("slowest:", [(round(t, 2), n) for t, n in sorted(times, reverse=True)[:10]])
