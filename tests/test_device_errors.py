"""Error cases of the `neuron` device: each asserts the message a user sees."""
from __future__ import annotations

import re

import pytest
import torch

import neuron_studio
from neuron_studio.device import BackendError, _select_backend
from neuron_studio.device.coverage import load_coverage
from neuron_studio.device.targets import UnknownChipError, target_for

emulated = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator behaviour")
SAME_DEVICE = re.escape("Expected all tensors to be on the same device, but found at least two devices")


@emulated
@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: b * a,
        lambda a, b: torch.mm(a, b),
        lambda a, b: torch.cat([a, b]),
        lambda a, b: torch.where(a > 0, a, b),
        lambda a, b: a.add_(b),
        lambda a, b: torch.add(a, 1, out=b),
    ],
    ids=["add", "rmul", "mm", "cat", "where", "add_", "out"],
)
def test_mixing_cpu_and_neuron_raises(op) -> None:  # noqa: ANN001
    a = torch.ones(2, 2, device="neuron")
    b = torch.ones(2, 2)
    with pytest.raises(RuntimeError, match=SAME_DEVICE + ".*(neuron:0 and cpu|cpu and neuron:0)"):
        op(a, b)


@emulated
def test_mixing_cpu_and_neuron_names_the_op() -> None:
    with pytest.raises(RuntimeError, match=re.escape("neuron:0 and cpu! (when checking arguments for aten::add.Tensor)")):
        torch.ones(2, device="neuron") + torch.ones(2)


@emulated
def test_mixing_tensor_passed_by_keyword_raises() -> None:
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.searchsorted(a, a, sorter=torch.arange(3))


@emulated
def test_mixing_two_neuron_devices_raises() -> None:
    with pytest.raises(RuntimeError, match=SAME_DEVICE + ".*neuron:0 and neuron:1"):
        torch.ones(2, device="neuron:0") + torch.ones(2, device="neuron:1")


@emulated
def test_host_scalars_and_host_indices_are_allowed_like_cuda() -> None:
    a = torch.arange(4.0, device="neuron")
    assert (a * torch.tensor(2.0)).device.type == "neuron"  # 0-dim host tensors act as scalars
    assert a[torch.tensor([0, 2])].tolist() == [0.0, 2.0]  # index tensors may stay on the host


@emulated
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(2, device="neuron:7"),
        lambda: torch.randn(2, device="neuron:7"),
        lambda: torch.ones(2).to("neuron:7"),
        lambda: torch.ones(2).neuron(7),
        lambda: torch.tensor([1.0], device="neuron:7"),
        lambda: torch.neuron.set_device(7),
        lambda: torch.neuron.memory_allocated(7),
        lambda: torch.neuron.get_device_properties("neuron:7"),
    ],
    ids=["ones", "randn", "to", "neuron()", "tensor", "set_device", "memory_allocated", "properties"],
)
def test_device_ordinal_beyond_device_count_raises(make) -> None:  # noqa: ANN001
    n = torch.neuron.device_count()
    assert n < 8
    with pytest.raises(RuntimeError, match=re.escape(f"neuron: invalid device ordinal 7: this (emulated) chip has {n} "
                                                     f"logical NeuronCores (valid: neuron:0 .. neuron:{n - 1})")):
        make()


@emulated
def test_set_device_rejects_other_device_types() -> None:
    with pytest.raises(ValueError, match="expected a neuron device, got cpu"):
        torch.neuron.set_device("cpu")


@emulated
def test_numpy_on_device_raises_type_error_like_cuda() -> None:
    with pytest.raises(TypeError, match=re.escape("can't convert neuron:0 device type tensor to numpy. Use Tensor.cpu()")):
        torch.ones(2, device="neuron").numpy()


@emulated
def test_sparse_tensors_are_refused() -> None:
    with pytest.raises(RuntimeError, match="neuron: torch.sparse_coo tensors are not supported on the neuron device"):
        torch.ones(2, 2).to_sparse().to("neuron")
    with pytest.raises(RuntimeError, match="torch.sparse_coo tensors are not supported"):
        torch.ones(2, 2, device="neuron").to_sparse()


def test_backend_env_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_STUDIO_BACKEND", "gpu")
    with pytest.raises(BackendError, match="NEURON_STUDIO_BACKEND='gpu' is not one of auto, real, emulated"):
        _select_backend()
    if neuron_studio.device.backend() == "emulated":
        monkeypatch.setenv("NEURON_STUDIO_BACKEND", "real")
        with pytest.raises(BackendError, match="NEURON_STUDIO_BACKEND=real but the real TorchNeuron backend is not usable"):
            _select_backend()
    monkeypatch.setenv("NEURON_STUDIO_BACKEND", "emulated")
    assert _select_backend() == "emulated"


def test_unknown_chip_and_lnc() -> None:
    with pytest.raises(UnknownChipError, match="unknown chip 'trn9'; choose one of trn1, trn2, trn3"):
        target_for("trn9")
    with pytest.raises(UnknownChipError, match=re.escape("LNC=2 is not valid on trn1; valid: (1,)")):
        target_for("trn1", 2)


def test_coverage_file_errors() -> None:
    with pytest.raises(ValueError, match="unsupported op-coverage file version 2; expected 1"):
        load_coverage('{"version": 2}')
    bad = '{"version": 1, "reasons": {"rng": "x"}, "fallback_ops": {"aten::foo": "nope"}, "eager_casts": {}}'
    with pytest.raises(ValueError, match=re.escape("op-coverage: aten::foo names unknown reason 'nope'; known: ['rng']")):
        load_coverage(bad)


def test_subscription_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity must be positive, got 0"):
        neuron_studio.device.subscribe(capacity=0)


def test_a_native_build_from_other_sources_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import types

    from neuron_studio.device.emulator import native

    real_import = importlib.import_module
    stale = types.ModuleType("neuron_studio.device.emulator._C")  # a build from before the columnar drain

    def fake_import(name: str, *a, **k):  # noqa: ANN002, ANN003, ANN202
        return stale if name == "neuron_studio.device.emulator._C" else real_import(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    with pytest.raises(BackendError, match=rf"interface 1, expected {native.INTERFACE}\): rebuild it.*"
                                           r"pip install --no-build-isolation -e \."):
        native.load_native()
    stale.INTERFACE = native.INTERFACE
    assert native.load_native() is stale
