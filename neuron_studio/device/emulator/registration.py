"""Register the emulated `neuron` device with PyTorch (PrivateUse1), once per process.

This is the only place that changes torch's global state, and it runs only from
`neuron_studio.device.register()` (i.e. `import neuron_studio`), never from `import torch`.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import torch

from neuron_studio.device.emulator import runtime, tensor
from neuron_studio.device.emulator.device_ordinals import check_index
from neuron_studio.device.emulator.storage import host_storage, resize_device_storage
from neuron_studio.device.emulator.tensor import NeuronTensor

__all__ = ["register_emulator"]

_LIB: list[torch.library.Library] = []  # keep the registrations alive for the process


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):  # noqa: ANN201
        return torch._C._autograd.DeviceType.PrivateUse1


def _index_of(device: Any) -> int:
    if device is None:
        return runtime.current_device()
    d = torch.device(device)
    return check_index(d.index)


# -- PrivateUse1 kernels: the ops C++ calls on a neuron device before any neuron tensor exists --------
def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):  # noqa: ANN001, ANN202
    if memory_format in (torch.channels_last, torch.channels_last_3d):
        tensor.raise_memory_format(None, memory_format)
    elem = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return NeuronTensor(elem, _index_of(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):  # noqa: ANN001, ANN202
    elem = torch.empty_strided(size, stride, dtype=dtype, layout=layout)
    return NeuronTensor(elem, _index_of(device))


def _inner(t: torch.Tensor) -> torch.Tensor:
    if type(t) is NeuronTensor:
        return t._elem
    if t.device.type == "neuron":
        # a plain tensor over a neuron storage (storage-level copies): alias the host memory behind it
        host = host_storage(t.untyped_storage())
        return torch.empty(0, dtype=t.dtype).set_(host, t.storage_offset(), t.shape, t.stride())
    return t


def _copy_from(self, dst, non_blocking=False):  # noqa: ANN001, ANN202
    _inner(dst).copy_(_inner(self))
    return dst


def _copy_from_and_resize(self, dst):  # noqa: ANN001, ANN202
    d = _inner(dst)
    d.resize_(self.shape)
    d.copy_(_inner(self))
    if type(dst) is NeuronTensor:
        tensor._sync_metadata(dst)
    return dst


_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def _is_pinned(self, device=None):  # noqa: ANN001, ANN202
    """Host memory is device memory on the emulator: every host tensor counts as pinned for `neuron`.

    So `pin_memory()` returns the tensor itself and `DataLoader(pin_memory=True)` works; other devices
    keep torch's own answer.
    """
    if device is None:
        acc = torch.accelerator.current_accelerator()
        is_neuron = acc is not None and acc.type == "neuron"
    else:
        is_neuron = torch.device(device).type == "neuron"
    if is_neuron:
        return True
    return torch.ops.aten.is_pinned.default.redispatch(_CPU_KEYS, self, device)


def _factory_fallback(op, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    """Any other op that reaches the PrivateUse1 key holds no neuron tensor: a factory such as
    `triu_indices(..., device="neuron")`. Run it on the host and place the result on the device."""
    return NeuronTensor.__torch_dispatch__(op, (), args, kwargs)


# -- fused RNN cells: ATen's LSTM/GRU take CUDA's fused-cell path on any non-CPU device (is_privateuseone),
# and those ops have no CPU kernel. These are CUDA's kernels written with CPU ops (same workspace layout).
def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):  # noqa: ANN001, ANN202
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):  # noqa: ANN001, ANN202
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    gcx = torch.zeros_like(cy) if grad_cy is None else grad_cy.clone()
    if grad_hy is not None:
        gcx = gcx + grad_hy * o * (1 - tanh_cy * tanh_cy)
        go = grad_hy * tanh_cy * o * (1 - o)
    else:
        go = torch.zeros_like(o)
    gi = gcx * g * i * (1 - i)
    gf = gcx * cx * f * (1 - f)
    gg = gcx * i * (1 - g * g)
    grad_gates = torch.cat([gi, gf, gg, go], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, gcx * f, grad_bias


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):  # noqa: ANN001, ANN202
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _fused_gru_cell_backward(grad_hy, workspace, has_bias):  # noqa: ANN001, ANN202
    r, z, n, hx, hn = workspace.chunk(5, 1)
    gz = grad_hy * (hx - n) * z * (1 - z)
    gn = grad_hy * (1 - z) * (1 - n * n)
    gr = gn * hn * r * (1 - r)
    grad_input = torch.cat([gr, gz, gn], 1)
    grad_hidden = torch.cat([gr, gz, gn * r], 1)
    gbi = grad_input.sum(0) if has_bias else None
    gbh = grad_hidden.sum(0) if has_bias else None
    return grad_input, grad_hidden, grad_hy * z, gbi, gbh


def _register_kernels() -> None:
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(_factory_fallback, "PrivateUse1")
    # quantized factories and copies (quantize_per_tensor(...).to("neuron")) dispatch to this key
    fallback.fallback(tensor.raise_quantized_unsupported, "QuantizedPrivateUse1")
    _LIB.append(fallback)
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    lib.impl("_thnn_fused_lstm_cell", _fused_lstm_cell, "CPU")
    lib.impl("_thnn_fused_lstm_cell_backward_impl", _fused_lstm_cell_backward, "CPU")
    lib.impl("_thnn_fused_gru_cell", _fused_gru_cell, "CPU")
    lib.impl("_thnn_fused_gru_cell_backward", _fused_gru_cell_backward, "CPU")
    lib.impl("is_pinned", _is_pinned, "AutogradCPU")
    from neuron_studio.device.emulator.attention import sdpa_kernel

    # SDPA stays one op on the device (TorchNeuron runs it as its built-in NKI kernel)
    lib.impl("scaled_dot_product_attention", sdpa_kernel, "AutogradPrivateUse1")
    _LIB.append(lib)
    _register_autocast()


# -- autocast: torch has no AutocastPrivateUse1 kernels; mirror CUDA's op lists ---------------------
_LOWER_PRECISION_OPS = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
_FP32_OPS = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d",
)
_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _autocast_kernel(op: torch._ops.OpOverload, to_lower: bool):  # noqa: ANN202
    def kernel(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        dev = torch._C._get_privateuse1_backend_name()
        if to_lower:
            dtype = torch.get_autocast_dtype(dev)

            def cast(x):  # noqa: ANN001, ANN202
                if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64:
                    return x.to(dtype)
                return x
        else:

            def cast(x):  # noqa: ANN001, ANN202
                if isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16):
                    return x.float()
                return x

        args = [cast(a) if not isinstance(a, (list, tuple)) else type(a)(cast(x) for x in a) for a in args]
        kwargs = {k: cast(v) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*args, **kwargs)

    return kernel


def _register_autocast() -> None:
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _LIB.append(fallback)
    lib = torch.library.Library("aten", "IMPL")
    for names, lower in ((_LOWER_PRECISION_OPS, True), (_FP32_OPS, False)):
        for qualified in names:
            base, _, overload = qualified.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            if packet is None:
                continue
            op = getattr(packet, overload or "default", None)
            if op is None:
                continue
            lib.impl(qualified, _autocast_kernel(op, lower), "AutocastPrivateUse1")
    _LIB.append(lib)


def _skip_dirs() -> tuple[str, ...]:
    """Directories whose frames are not user code: torch, contextlib and this package's source trees.

    The profiler and kernel directories are located with `find_spec`, which reads the installer's layout
    (a wheel, or an editable install mapping `neuron_studio.profiler` to `profiler/`) without importing
    them: the device stays below the profiler and kernels, and `import neuron_studio` stays light.
    """
    import contextlib

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(contextlib.__file__)]
    dirs += _package_dirs(__name__.split(".")[0], ("profiler", "kernels"))
    return tuple(os.path.join(d, "") for d in dirs)


def _package_dirs(root: str, subpackages: tuple[str, ...]) -> list[str]:
    """Source directories of `root` and of `root.<sub>` for each installed subpackage (none are imported)."""
    dirs = []
    for name in (root, *(f"{root}.{sub}" for sub in subpackages)):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.abspath(loc) for loc in spec.submodule_search_locations)
    return dirs


def _route_storage_resize() -> None:
    """`storage.resize_` of a neuron tensor's storage (FSDP2's free/re-gather of unsharded parameters) resizes
    the CPU storage behind it and is counted by the allocator; every other storage resizes as before."""
    base = torch._C.StorageBase.resize_
    if getattr(torch.UntypedStorage.__dict__.get("resize_"), "_neuron_route", False):
        return

    def resize_(self, size):  # noqa: ANN001, ANN202
        if getattr(self, "_neuron_host", None) is None:
            return base(self, size)
        return resize_device_storage(self, size, runtime._reg().memory)

    resize_._neuron_route = True  # type: ignore[attr-defined]
    torch.UntypedStorage.resize_ = resize_


def _guard_storage_allocation() -> None:
    """`torch.UntypedStorage(n, device="neuron")` (and `storage.clone()` on neuron) asks torch's C++ allocator
    for the device, which a Python-only backend cannot register: it would crash the process. Raise instead."""
    new = torch.UntypedStorage.__new__

    def __new__(cls, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202, N807
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "neuron":
            raise RuntimeError(
                "neuron: allocating a storage directly on the emulated device (torch.UntypedStorage(..., "
                "device='neuron'), storage.clone()) is not supported; allocate tensors instead (torch.empty(..., "
                "device='neuron')), or copy the storage on the CPU (storage.cpu())"
            )
        return new(cls, *args, **kwargs)

    torch.UntypedStorage.__new__ = __new__


def register_emulator(registry: Any) -> None:
    """Make `neuron` a PyTorch device backed by the emulator. Idempotent only through the registry."""
    runtime.bind(registry)
    torch.utils.rename_privateuse1_backend("neuron")
    tensor.configure(registry.bus, registry.memory, registry.device_count, _skip_dirs())
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    torch._register_device_module("neuron", runtime)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _register_kernels()
    from neuron_studio.device.emulator.attention import register_attention_flops

    register_attention_flops()
    from neuron_studio.device.emulator import dynamo_skip

    dynamo_skip.skip_emulator_frames_in_dynamo([tensor, runtime, sys.modules[__name__]])
    from neuron_studio.device.emulator import distributed

    distributed.install()
    from neuron_studio.device.emulator.lazy import install_lazy_parameters

    install_lazy_parameters()
    _guard_storage_allocation()
    _route_storage_resize()
