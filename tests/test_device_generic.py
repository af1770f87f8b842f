"""Device-generic behaviour that passes on CPU must pass on the emulated `neuron` device too.

Storages, output arguments not named `out`, set_, quantized tensors (a clear error), lazy modules and
fractional max pooling; each compared with plain CPU PyTorch.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import neuron_studio
pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator internals")


def _pair(shape: tuple[int, ...] = (3, 5)) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    return x, x.to("neuron")


# -- storages -----------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_storage_data_ptr_is_the_data_address() -> None:
    _, d = _pair()
    assert d.untyped_storage().data_ptr() == d.data_ptr() != 0
    assert d.storage().data_ptr() == d.data_ptr()
    assert d[1:].untyped_storage().data_ptr() == d.data_ptr()  # a view shares its base's storage
    assert d[1:].data_ptr() == d.data_ptr() + 5 * d.element_size()
    st = d.untyped_storage()
    assert st.device == d.device
    assert st.nbytes() == 15 * 4
    assert d.storage().size() == 15
    assert d.storage().tolist() == d.cpu().flatten().tolist()


def test_set_to_own_storage_as_on_cpu() -> None:
    x, d = _pair()
    expected = x.clone().set_(x.untyped_storage(), 5, (2, 5), (5, 1))
    got = d.clone().set_(d.untyped_storage(), 5, (2, 5), (5, 1))
    assert got.device == d.device and got.shape == expected.shape
    assert torch.equal(got.cpu(), expected)
    assert got.data_ptr() == d[1].data_ptr()  # aliases d, as set_ does on CPU
    d[1, 0] = 42.0
    assert got[0, 0].item() == 42.0
    same = d.set_(d.storage(), 0, d.size(), d.stride())
    assert same is d and torch.equal(d.cpu()[0], x[0])


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_storages_allocate_and_clone_on_neuron() -> None:
    x, d = _pair()
    st = torch.UntypedStorage(8, device="neuron")
    assert st.device == torch.device("neuron", 0) and st.nbytes() == 8
    assert torch.UntypedStorage(8, device="neuron:1").device == torch.device("neuron", 1)
    c = d.untyped_storage().clone()
    assert c.device == d.device and c.nbytes() == 60 and c.data_ptr() != d.data_ptr()
    back = torch.empty(0, device="neuron").set_(c, 0, (3, 5), (5, 1))
    assert torch.equal(back.cpu(), x)
    assert d.untyped_storage().cpu().nbytes() == 60
    typed = d.storage().clone()
    assert typed.device == d.device and typed.tolist() == x.flatten().tolist()


def test_deepcopy_copies_the_data() -> None:
    _, d = _pair()
    c = copy.deepcopy(d)
    assert c.device == d.device and torch.equal(c.cpu(), d.cpu())
    assert c.data_ptr() != d.data_ptr()
    p = nn.Parameter(d.clone())
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and torch.equal(q.detach().cpu(), d.cpu())


# -- output arguments not named `out` ---------------------------------------------------------------------
def _call(name: str, x: torch.Tensor, outs: tuple[torch.Tensor, torch.Tensor]):  # noqa: ANN202
    if name == "max":
        return torch.max(x, 1, out=outs)
    if name == "min":
        return torch.min(x, 1, out=outs)
    if name == "sort":
        return torch.sort(x, 1, out=outs)
    if name == "topk":
        return torch.topk(x, 2, 1, out=outs)
    if name == "kthvalue":
        return torch.kthvalue(x, 2, 1, out=outs)
    if name == "mode":
        return torch.mode(x, 1, out=outs)
    if name == "median":
        return torch.median(x, 1, out=outs)
    if name == "cummax":
        return torch.cummax(x, 1, out=outs)
    if name == "aminmax":
        return torch.aminmax(x, dim=1, out=outs)
    raise AssertionError(name)


_NAMED_OUT_OPS = ["max", "min", "sort", "topk", "kthvalue", "mode", "median", "cummax", "aminmax"]


def _outputs(device: str, strided: bool, dtypes: tuple[torch.dtype, torch.dtype]) -> tuple[torch.Tensor, ...]:
    if strided:  # pre-filled, non-contiguous outputs
        return tuple(torch.full((6, 12), 7, dtype=dt, device=device)[:3, ::2] for dt in dtypes)
    return tuple(torch.empty(0, dtype=dt, device=device) for dt in dtypes)


@pytest.mark.parametrize("strided", [False, True], ids=["empty", "strided"])
@pytest.mark.parametrize("name", _NAMED_OUT_OPS)
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_named_output_arguments_are_filled_and_resized(name: str, strided: bool) -> None:
    x, d = _pair()
    dtypes = (torch.float32, torch.float32) if name == "aminmax" else (torch.float32, torch.int64)
    cpu_outs = _outputs("cpu", strided, dtypes)
    dev_outs = _outputs("neuron", strided, dtypes)
    expected = _call(name, x, cpu_outs)
    got = _call(name, d, dev_outs)
    for i, (c, g, r) in enumerate(zip(cpu_outs, dev_outs, got)):
        assert r is g, f"{name}: result {i} is not the caller's output tensor"
        assert g.shape == c.shape and g.stride() == c.stride(), f"{name} output {i}: {g.shape}/{g.stride()}"
        assert torch.equal(g.cpu(), c), f"{name} output {i} differs"
        assert torch.equal(r.cpu(), expected[i])


def test_allocator_counts_a_storage_once_and_frees_it_when_its_last_tensor_dies() -> None:
    dev = "neuron:2"
    before = torch.neuron.memory_stats(dev)
    x = torch.empty(4, 4, device=dev)
    views = [x[1:], x.t(), x.view(16), torch.empty(0, device=dev).set_(x.untyped_storage(), 0, (16,), (1,))]
    after = torch.neuron.memory_stats(dev)
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"] + 64
    assert after["num_allocs"] == before["num_allocs"] + 1
    del x
    assert torch.neuron.memory_allocated(dev) == after["allocated_bytes.all.current"]  # views keep it alive
    views.clear()
    final = torch.neuron.memory_stats(dev)
    assert final["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert final["num_frees"] == before["num_frees"] + 1


# -- quantized tensors: a clear error -------------------------------------------------------------------
_QUANTIZED = {
    "to": lambda: torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.quint8).to("neuron"),
    "quantize_per_tensor": lambda: torch.quantize_per_tensor(torch.randn(3, device="neuron"), 0.1, 0, torch.qint8),
    "empty": lambda: torch.empty(3, dtype=torch.quint8, device="neuron"),
    "_empty_affine_quantized": lambda: torch._empty_affine_quantized(
        [3], scale=0.1, zero_point=0, dtype=torch.qint32, device="neuron"),
}


@pytest.mark.parametrize("name", list(_QUANTIZED))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_quantized_tensors_raise_a_clear_error(name: str) -> None:
    with pytest.raises(RuntimeError, match="neuron: quantized tensors .* not supported .* dequantize"):
        _QUANTIZED[name]()


# -- lazy modules and fractional max pooling ------------------------------------------------------------
_LAZY = {
    "LazyLinear": (lambda: nn.LazyLinear(6), (4, 5)),
    "LazyConv1d": (lambda: nn.LazyConv1d(4, 3), (2, 3, 9)),
    "LazyConv2d": (lambda: nn.LazyConv2d(4, 3), (2, 3, 7, 7)),
    "LazyConv3d": (lambda: nn.LazyConv3d(4, 3), (1, 2, 5, 5, 5)),
    "LazyConvTranspose1d": (lambda: nn.LazyConvTranspose1d(4, 3), (2, 3, 9)),
    "LazyConvTranspose2d": (lambda: nn.LazyConvTranspose2d(4, 3), (2, 3, 7, 7)),
    "LazyConvTranspose3d": (lambda: nn.LazyConvTranspose3d(4, 3), (1, 2, 5, 5, 5)),
    "LazyBatchNorm1d": (lambda: nn.LazyBatchNorm1d(), (4, 5)),
    "LazyInstanceNorm2d": (lambda: nn.LazyInstanceNorm2d(affine=True, track_running_stats=True), (2, 3, 4, 4)),
}


@pytest.mark.parametrize("how", ["moved", "constructed"])
@pytest.mark.parametrize("name", list(_LAZY))
def test_lazy_module_on_neuron_before_first_forward(name: str, how: str) -> None:
    factory, shape = _LAZY[name]
    torch.manual_seed(0)
    cpu = factory()
    torch.manual_seed(0)
    x = torch.randn(*shape)
    torch.manual_seed(1)
    expected = cpu(x)
    torch.manual_seed(0)
    if how == "moved":
        dev = factory().to("neuron")
    else:
        with torch.device("neuron"):
            dev = factory()
    torch.manual_seed(1)
    got = dev(x.to("neuron"))
    assert got.device.type == "neuron"
    assert torch.equal(got.detach().cpu(), expected.detach())
    expected.square().sum().backward()
    got.square().sum().backward()
    for (pname, p), pd in zip(cpu.named_parameters(), dev.parameters()):
        assert not isinstance(pd, nn.UninitializedParameter) and pd.device.type == "neuron", pname
        assert torch.equal(pd.detach().cpu(), p.detach()), pname
        assert torch.equal(pd.grad.cpu(), p.grad), f"grad of {pname}"


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fractional_max_pool_matches_cpu(dims: int, dtype: torch.dtype) -> None:
    pool = nn.FractionalMaxPool2d(2, output_ratio=0.5) if dims == 2 else nn.FractionalMaxPool3d(2, output_ratio=0.5)
    torch.manual_seed(0)
    x = torch.randn(2, 3, *([8] * dims), dtype=dtype, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    torch.manual_seed(1)
    expected = pool(x)
    torch.manual_seed(1)
    got = pool(xd)
    assert torch.equal(got.detach().cpu(), expected.detach())
    expected.sum().backward()
    got.sum().backward()
    assert torch.equal(xd.grad.cpu(), x.grad)


def test_lazy_parameters_stay_lazy_on_neuron_and_move_like_on_any_device() -> None:
    on_device = copy.deepcopy(nn.LazyLinear(3).to("neuron"))
    assert isinstance(on_device.weight, nn.UninitializedParameter) and on_device.weight.device.type == "neuron"
    assert isinstance(on_device.weight, nn.Parameter) and on_device.has_uninitialized_params()
    assert on_device.weight.requires_grad and on_device.bias.is_leaf
    with pytest.raises(ValueError, match="uninitialized parameter"):
        on_device.weight + 1
    on_cpu = on_device.to("cpu")  # as a lazy module moves between CPU and CUDA
    assert isinstance(on_cpu.weight, nn.UninitializedParameter) and on_cpu.weight.device.type == "cpu"
    back = on_cpu.to("neuron")
    out = back(torch.randn(2, 5, device="neuron"))
    assert out.shape == (2, 3) and back.weight.device.type == "neuron"
    assert not isinstance(back.weight, nn.UninitializedParameter)
