"""Register the emulated `neuron` device with PyTorch (PrivateUse1), once per process.

The device itself is C++ (csrc/: allocators, guard, hooks, generator, the kernel that runs CPU kernels on the
same bytes, the op-event recorder), loaded from the extension built with the package. This module is the
only place that changes torch's global state, and it runs only from `neuron_studio.device.register()` (i.e.
`import neuron_studio`), never from `import torch`. What stays Python is what rests on Python data or is
TorchNeuron's policy: the channels_last error (its message from the op-coverage file), the autocast op
lists, CPU kernels for the fused RNN cells, and the host-visible events (printing, tolist).
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch

from neuron_studio.device.coverage import op_coverage
from neuron_studio.device.errors import UnsupportedMemoryFormatError
from neuron_studio.device.emulator import runtime
from neuron_studio.device.emulator.memory import MemoryTracker
from neuron_studio.device.emulator.native import load_native
from neuron_studio.device.emulator.op_events import NativeEventSource

__all__ = ["register_emulator", "unrecorded"]

_LIB: list[torch.library.Library] = []  # keep the registrations alive for the process
_C: Any = None

# Ops the device must not run as CPU does: pinning is a host-memory property, so a neuron tensor answers as
# any non-CPU tensor does (is_pinned() False; pin_memory() raises "only dense CPU tensors can be pinned").
_NOT_AS_ON_CPU = ["aten::is_pinned", "aten::_pin_memory"]

# The recorder's codes for host-visible events (csrc/Module.cpp)
_SYNC_ITEM = 1
_SYNC_PRINT = 5


class unrecorded:
    """Suppress recording for internal ops, which are not ops of the user's program: printing formats a tensor
    with dozens of ops; the profiler's saved-tensor hook detaches what autograd saves. The ops still run and
    their memory is counted as usual."""

    def __enter__(self) -> None:
        self.prev = _C.set_quiet(True)

    def __exit__(self, *exc: object) -> None:
        _C.set_quiet(self.prev)


def raise_memory_format(op: str, memory_format: str) -> None:
    """channels_last on the device is an error in TorchNeuron, not a fallback: say so and what to do instead."""
    message = op_coverage().memory_format_error(memory_format)
    if message is not None:
        raise UnsupportedMemoryFormatError(
            f"neuron: {op} with memory_format=torch.{memory_format}: {message} "
            "(TorchNeuron raises here; it is not a CPU fallback). Drop the memory_format argument or use "
            "torch.contiguous_format on the neuron device; keep channels_last tensors on the CPU"
        )


def _install_host_events() -> None:
    """Printing a neuron tensor and `tolist()` read it on the host: one event each (a sync point), and the
    ops they run internally are not the program's."""
    base_repr = torch.Tensor.__repr__
    base_tolist = torch.Tensor.tolist
    if getattr(base_repr, "_neuron_event", False):
        return

    def __repr__(self, *, tensor_contents=None):  # noqa: ANN001, ANN202
        if self.device.type != "neuron" or self.is_meta:
            return base_repr(self, tensor_contents=tensor_contents)
        with unrecorded():
            text = base_repr(self, tensor_contents=tensor_contents)
        _C.record_marker("aten::_print", self, _SYNC_PRINT, self.numel() * self.element_size())
        return text

    def tolist(self):  # noqa: ANN001, ANN202
        if self.device.type != "neuron":
            return base_tolist(self)
        with unrecorded():
            out = base_tolist(self)
        _C.record_marker("aten::tolist", self, _SYNC_ITEM, self.numel() * self.element_size())
        return out

    __repr__._neuron_event = True  # type: ignore[attr-defined]
    torch.Tensor.__repr__ = __repr__
    torch.Tensor.tolist = tolist


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


def _register_python_kernels() -> None:
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_thnn_fused_lstm_cell", _fused_lstm_cell, "CPU")
    lib.impl("_thnn_fused_lstm_cell_backward_impl", _fused_lstm_cell_backward, "CPU")
    lib.impl("_thnn_fused_gru_cell", _fused_gru_cell, "CPU")
    lib.impl("_thnn_fused_gru_cell_backward", _fused_gru_cell_backward, "CPU")
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


def register_emulator(registry: Any) -> None:
    """Make `neuron` a PyTorch device backed by the emulator. Idempotent only through the registry."""
    global _C
    torch.utils.rename_privateuse1_backend("neuron")
    _C = load_native()
    runtime.bind(registry, _C)
    torch._register_device_module("neuron", runtime)
    from neuron_studio.device.emulator import distributed

    distributed.install()  # the c10d ops exist before the device registers its kernels for them
    _C._register(registry.device_count, registry.target.hbm_bytes_per_logical_core, _NOT_AS_ON_CPU)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    registry.memory = MemoryTracker(_C, registry.device_count)
    _register_python_kernels()
    _C.set_skip_dirs(list(_skip_dirs()))
    _C.set_memory_format_policy(raise_memory_format)
    registry.bus.attach(NativeEventSource(_C, registry.bus))
    _install_host_events()
    from neuron_studio.device.emulator.inductor import register_inductor_backend

    register_inductor_backend()
    from neuron_studio.device.emulator.lazy import keep_moved_lazy_parameters_lazy

    keep_moved_lazy_parameters_lazy()
