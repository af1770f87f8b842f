"""Module sweep: every torch.nn module in torch's `module_db` runs forward and backward on `neuron` as on CPU.

torch.nn module classes module_db lacks are swept from the EXTRA table below (simple constructor
arguments); the few that cannot run alone (containers, abstract bases, multi-GPU/distributed wrappers) are
listed under "not_swept" with the reason, and a test keeps that list complete.

For each ModuleInfo: up to 2 of its module inputs (constructor + forward arguments) made on CPU in
float32. The module is built twice from the same seed, once on CPU and once with its constructor's
tensors on `neuron` and then moved with `.to("neuron")`; the forward inputs are moved too. Outputs, the
gradients of every parameter and of every input (from the sum of all floating outputs) are compared
with `assert_close` (the emulator runs CPU kernels; RNNs take CUDA's fused-cell path, hence tolerances).
Modules that do not match are strict xfails listed with a reason in device_modules_known_failures.json.

    pytest tests/test_device_modules.py              # the sweep
"""
from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map

import neuron_studio

pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator runs CPU kernels")

KNOWN_FAILURES_FILE = Path(__file__).with_name("device_modules_known_failures.json")
MAX_INPUTS = 2
MIN_MATCH_RATIO = 0.95


def _module_db():  # noqa: ANN202
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_modules import module_db
    return module_db


_MODULES = _module_db()
_DATA = json.loads(KNOWN_FAILURES_FILE.read_text())
_KNOWN = dict(_DATA["modules"])
_NOT_SWEPT = dict(_DATA["not_swept"])


def _to_neuron(x):  # noqa: ANN001, ANN202
    if isinstance(x, torch.Tensor) and x.device.type == "cpu":
        return x.detach().to("neuron").requires_grad_(x.requires_grad)
    return x


def _clone(x):  # noqa: ANN001, ANN202
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def _inputs(info) -> list:  # noqa: ANN001
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                            training=True))[:MAX_INPUTS]


def _run(info, module_input, move):  # noqa: ANN001, ANN202
    """Build the module and run forward + backward; `move` maps CPU tensors to the target device."""
    cargs = tree_map(move, tree_map(_clone, module_input.constructor_input.args))
    ckwargs = tree_map(move, tree_map(_clone, module_input.constructor_input.kwargs))
    fargs = tree_map(move, tree_map(_clone, module_input.forward_input.args))
    fkwargs = tree_map(move, tree_map(_clone, module_input.forward_input.kwargs))
    return _run_module(lambda: info.module_cls(*cargs, **ckwargs), fargs, fkwargs, move is _to_neuron)


def _run_module(make, fargs, fkwargs, on_neuron: bool):  # noqa: ANN001, ANN202
    torch.manual_seed(0)
    module = make()
    if on_neuron:
        module = module.to("neuron")
    module.train(True)
    torch.manual_seed(1)
    out = module(*fargs, **fkwargs)
    leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = {}
    if leaves:
        sum(t.float().sum() for t in leaves).backward()
        grads = {f"param {n}": p.grad for n, p in module.named_parameters() if p.grad is not None}
        inputs = [t for t in tree_flatten((fargs, fkwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        grads.update({f"input {i}": t.grad for i, t in enumerate(inputs) if t.grad is not None})
    return out, grads, dict(module.named_buffers())


def _compare(actual, expected, what: str) -> None:  # noqa: ANN001
    devices = {str(t.device) for t in tree_flatten(actual)[0] if isinstance(t, torch.Tensor)}
    assert devices <= {"neuron:0"}, f"{what}: results left the neuron device: {devices}"
    assert set(actual[1]) == set(expected[1]), f"{what}: gradients for {sorted(actual[1])} vs {sorted(expected[1])}"
    actual_cpu = tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, actual)
    expected = tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, expected)
    torch.testing.assert_close(actual_cpu, expected, equal_nan=True, msg=lambda m: f"{what}: {m}")


def check_module(info) -> int:  # noqa: ANN001
    compared = 0
    for i, module_input in enumerate(_inputs(info)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                expected = _run(info, module_input, lambda x: x)
            except Exception as e:  # noqa: BLE001 - then neuron must fail the same way
                with pytest.raises(type(e)):
                    _run(info, module_input, _to_neuron)
                compared += 1
                continue
            actual = _run(info, module_input, _to_neuron)
        _compare(actual, expected, f"input {i} ({module_input.desc or 'default'})")
        compared += 1
    return compared


def _params():  # noqa: ANN202
    for info in _MODULES:
        marks = (pytest.mark.xfail(strict=True, reason=_KNOWN[info.name]),) if info.name in _KNOWN else ()
        yield pytest.param(info, id=info.name, marks=marks)


@pytest.mark.parametrize("info", _params())
def test_module_matches_cpu(info) -> None:  # noqa: ANN001
    assert check_module(info) > 0, "no module input compared"


def _rg(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def _unpool_inputs(dims: int):  # noqa: ANN202
    x = torch.randn(1, 2, *([8] * dims))
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[dims - 1]
    out, idx = pool(x, 2, return_indices=True)
    return (out.requires_grad_(), idx)


# torch.nn modules that module_db has no entry for: a constructor with simple arguments and forward inputs.
EXTRA = {
    "AdaptiveLogSoftmaxWithLoss": (lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8]),
                                   lambda: (_rg(5, 8), torch.randint(0, 10, (5,)))),
    "AlphaDropout": (lambda: nn.AlphaDropout(0.3), lambda: (_rg(4, 6),)),
    "ChannelShuffle": (lambda: nn.ChannelShuffle(2), lambda: (_rg(1, 4, 3, 3),)),
    "CosineSimilarity": (lambda: nn.CosineSimilarity(), lambda: (_rg(3, 5), _rg(3, 5))),
    "CrossMapLRN2d": (lambda: nn.CrossMapLRN2d(3), lambda: (_rg(2, 4, 5, 5),)),
    "Dropout": (lambda: nn.Dropout(0.3), lambda: (_rg(4, 6),)),
    "Dropout1d": (lambda: nn.Dropout1d(0.3), lambda: (_rg(2, 3, 4),)),
    "Dropout2d": (lambda: nn.Dropout2d(0.3), lambda: (_rg(2, 3, 4, 4),)),
    "Dropout3d": (lambda: nn.Dropout3d(0.3), lambda: (_rg(2, 3, 2, 4, 4),)),
    "FeatureAlphaDropout": (lambda: nn.FeatureAlphaDropout(0.3), lambda: (_rg(2, 3, 4, 4),)),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), lambda: (torch.randint(0, 10, (3, 4)),)),
    "Flatten": (lambda: nn.Flatten(), lambda: (_rg(2, 3, 4),)),
    "Fold": (lambda: nn.Fold(output_size=(4, 5), kernel_size=2), lambda: (_rg(1, 12, 12),)),
    "Hardsigmoid": (lambda: nn.Hardsigmoid(), lambda: (_rg(4, 6) * 4,)),
    "Identity": (lambda: nn.Identity(), lambda: (_rg(4, 6),)),
    "LazyBatchNorm1d": (lambda: nn.LazyBatchNorm1d(), lambda: (_rg(4, 5),)),
    "LazyBatchNorm2d": (lambda: nn.LazyBatchNorm2d(), lambda: (_rg(2, 3, 4, 4),)),
    "LazyBatchNorm3d": (lambda: nn.LazyBatchNorm3d(), lambda: (_rg(2, 3, 2, 4, 4),)),
    "LazyInstanceNorm1d": (lambda: nn.LazyInstanceNorm1d(affine=True, track_running_stats=True),
                           lambda: (_rg(2, 3, 6),)),
    "LazyInstanceNorm2d": (lambda: nn.LazyInstanceNorm2d(affine=True, track_running_stats=True),
                           lambda: (_rg(2, 3, 4, 4),)),
    "LazyInstanceNorm3d": (lambda: nn.LazyInstanceNorm3d(affine=True, track_running_stats=True),
                           lambda: (_rg(2, 3, 2, 4, 4),)),
    "LazyLinear": (lambda: nn.LazyLinear(6), lambda: (_rg(4, 5),)),
    "MaxUnpool1d": (lambda: nn.MaxUnpool1d(2), lambda: _unpool_inputs(1)),
    "MaxUnpool2d": (lambda: nn.MaxUnpool2d(2), lambda: _unpool_inputs(2)),
    "MaxUnpool3d": (lambda: nn.MaxUnpool3d(2), lambda: _unpool_inputs(3)),
    "NLLLoss2d": (lambda: nn.NLLLoss2d(), lambda: (_rg(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4)))),
    "PairwiseDistance": (lambda: nn.PairwiseDistance(), lambda: (_rg(3, 5), _rg(3, 5))),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), lambda: (_rg(1, 8, 3, 3),)),
    "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), lambda: (_rg(1, 2, 4, 4),)),
    "RReLU": (lambda: nn.RReLU(), lambda: (_rg(4, 6),)),
    "TransformerDecoder": (
        lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2),
        lambda: (_rg(2, 5, 8), _rg(2, 3, 8))),
    "TripletMarginLoss": (lambda: nn.TripletMarginLoss(), lambda: (_rg(3, 5), _rg(3, 5), _rg(3, 5))),
    "TripletMarginWithDistanceLoss": (lambda: nn.TripletMarginWithDistanceLoss(),
                                      lambda: (_rg(3, 5), _rg(3, 5), _rg(3, 5))),
    "Unflatten": (lambda: nn.Unflatten(1, (2, 3)), lambda: (_rg(4, 6),)),
    "Unfold": (lambda: nn.Unfold(kernel_size=2), lambda: (_rg(1, 2, 4, 4),)),
    "Upsample": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), lambda: (_rg(1, 2, 3, 3),)),
    "UpsamplingBilinear2d": (lambda: nn.UpsamplingBilinear2d(scale_factor=2), lambda: (_rg(1, 2, 3, 3),)),
    "UpsamplingNearest2d": (lambda: nn.UpsamplingNearest2d(scale_factor=2), lambda: (_rg(1, 2, 3, 3),)),
}


def check_extra(name: str) -> None:
    make, make_inputs = EXTRA[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _run_module(make, tree_map(_clone, inputs), {}, on_neuron=False)
        actual = _run_module(make, tree_map(_to_neuron, tree_map(_clone, inputs)), {}, on_neuron=True)
    _compare(actual, expected, name)


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_module_outside_module_db_matches_cpu(name: str) -> None:
    if f"nn.{name}" in _KNOWN:
        pytest.xfail(_KNOWN[f"nn.{name}"])
    check_extra(name)


def test_every_nn_module_class_is_swept_or_says_why_not() -> None:
    classes = {n for n, c in vars(nn).items() if inspect.isclass(c) and issubclass(c, nn.Module)}
    swept = {info.name.removeprefix("nn.") for info in _MODULES} | set(EXTRA)
    missing = sorted(classes - swept - set(_NOT_SWEPT))
    assert not missing, f"torch.nn modules neither swept nor listed under not_swept in {KNOWN_FAILURES_FILE.name}: {missing}"
    stale = sorted(set(_NOT_SWEPT) & swept)
    assert not stale, f"swept now, remove from not_swept: {stale}"
    assert all(reason.strip() for reason in _NOT_SWEPT.values())


def test_known_failures_name_real_modules_and_meet_the_ratio() -> None:
    names = {info.name for info in _MODULES} | {f"nn.{n}" for n in EXTRA}
    unknown = sorted(set(_KNOWN) - names)
    assert not unknown, f"{KNOWN_FAILURES_FILE.name} lists modules that are not in module_db: {unknown}"
    assert all(reason.strip() for reason in _KNOWN.values()), "every known failure needs a reason"
    ratio = 1 - len(_KNOWN) / len(names)
    assert ratio >= MIN_MATCH_RATIO, f"only {ratio:.2%} of {len(names)} modules match CPU; need {MIN_MATCH_RATIO:.0%}"


if __name__ == "__main__":  # a quick report: which modules fail now
    import time

    t0 = time.perf_counter()
    failing = {}
    runs = [(info.name, lambda info=info: check_module(info)) for info in _MODULES]
    runs += [(f"nn.{n}", lambda n=n: check_extra(n)) for n in sorted(EXTRA)]
    for name, run in runs:
        try:
            run()
        except BaseException as e:  # noqa: BLE001
            text = str(e).strip()
            failing[name] = f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"
    print(f"{len(runs)} modules, {len(failing)} failing, {time.perf_counter() - t0:.1f}s")
    print(json.dumps(failing, indent=1))
