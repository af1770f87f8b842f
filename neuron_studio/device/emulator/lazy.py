"""Lazy modules moved to `neuron` stay lazy.

`Module._apply` moves a parameter in place (`param.data = moved`) only between devices whose tensors are
shallow-copy compatible, which in torch 2.13 a CPU tensor and a PrivateUse1 tensor are not; otherwise it wraps
the moved tensor in a new `Parameter`. An uninitialized parameter (`nn.LazyLinear(...).to("neuron")`) converts
to a plain 0-element tensor, so it would become an ordinary 0-element parameter whose first forward fails. Here
a conversion of an uninitialized parameter or buffer to or from `neuron` gives an uninitialized one on the
target device, and wrapping an uninitialized parameter in `Parameter` keeps it.
"""
from __future__ import annotations

import torch
from torch.nn.parameter import Parameter, UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

__all__ = ["keep_moved_lazy_parameters_lazy"]

# Conversions an uninitialized tensor allows (torch's UninitializedTensorMixin._allowed_methods).
_CONVERSIONS = frozenset({
    torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.half, torch.Tensor.float,
    torch.Tensor.double, torch.Tensor.char, torch.Tensor.short, torch.Tensor.int, torch.Tensor.long,
})


def keep_moved_lazy_parameters_lazy() -> None:
    new = Parameter.__new__
    if getattr(new, "_neuron_lazy", False):
        return
    torch_function = UninitializedTensorMixin.__dict__["__torch_function__"].__func__

    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202, N807
        out = torch_function(cls, func, types, args, kwargs)
        src = args[0] if args else None
        if (func in _CONVERSIONS and isinstance(src, UninitializedTensorMixin) and isinstance(out, torch.Tensor)
                and not isinstance(out, UninitializedTensorMixin) and "neuron" in (out.device.type, src.device.type)):
            if isinstance(src, UninitializedParameter):
                return UninitializedParameter(src.requires_grad, device=out.device, dtype=out.dtype)
            return UninitializedBuffer(src.requires_grad, device=out.device, dtype=out.dtype)
        return out

    def __new__(cls, data=None, requires_grad=True):  # noqa: ANN001, ANN202, N807
        if cls is Parameter and isinstance(data, UninitializedParameter):
            if data.requires_grad == requires_grad:
                return data
            return UninitializedParameter(requires_grad, device=data.device, dtype=data.dtype)
        return new(cls, data, requires_grad)

    __new__._neuron_lazy = True  # type: ignore[attr-defined]
    UninitializedTensorMixin.__torch_function__ = classmethod(__torch_function__)
    Parameter.__new__ = __new__  # type: ignore[method-assign]
