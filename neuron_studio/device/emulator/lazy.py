"""Uninitialized (lazy) parameters and buffers on the emulated `neuron` device.

`nn.LazyLinear` and friends hold `UninitializedParameter`s: plain-tensor subclasses that torch moves between
devices with `param.data = ...`. A neuron tensor is a wrapper subclass (`NeuronTensor`), so torch's own
path turns a lazy parameter built on or moved to `neuron` into an ordinary 0-element parameter and the
first forward fails ("weight should have at least three dimensions"). Here a lazy parameter on `neuron`
is a NeuronTensor that is also uninitialized; moving a lazy parameter to or from `neuron` keeps it lazy,
and `materialize()` turns it into an ordinary neuron parameter in place. Moving one from `neuron` back to
another device before the first forward raises a clear error (torch would silently initialise it).
"""
from __future__ import annotations

from typing import Any

import torch
from torch.nn.parameter import Parameter, UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

from neuron_studio.device.emulator.tensor import NeuronTensor

__all__ = ["install_lazy_parameters"]


class _NeuronUninitialized:
    """A lazy tensor on `neuron`: a 0-element NeuronTensor that is also torch's UninitializedParameter/Buffer
    (lazy modules check `isinstance(weight, UninitializedParameter)`), so it allows only what those allow."""

    _becomes_parameter = False

    def materialize(self, shape: Any, device: Any = None, dtype: torch.dtype | None = None) -> None:
        data = torch.empty(shape, device=device if device is not None else self.device,
                           dtype=dtype if dtype is not None else self.dtype)
        new = Parameter(data, self.requires_grad) if self._becomes_parameter else data
        if self._becomes_parameter and type(new) is not NeuronTensor:
            raise RuntimeError(f"neuron: a lazy parameter can materialize on neuron only, not on {data.device}")
        # swap in place: the module (and any optimizer) holds this very object
        torch.utils.swap_tensors(self, new)

    def __reduce_ex__(self, proto: int) -> Any:
        return (_rebuild, (self._becomes_parameter, self.requires_grad, str(self.device), self.dtype))

    def __deepcopy__(self, memo: dict) -> "_NeuronUninitialized":
        if id(self) not in memo:
            memo[id(self)] = _uninitialized(self._becomes_parameter, self.requires_grad, self.device, self.dtype)
        return memo[id(self)]


class NeuronUninitializedParameter(_NeuronUninitialized, UninitializedParameter, NeuronTensor):
    cls_to_become = Parameter
    _becomes_parameter = True


class NeuronUninitializedBuffer(_NeuronUninitialized, UninitializedBuffer, NeuronTensor):
    cls_to_become = torch.Tensor


def _uninitialized(parameter: bool, requires_grad: bool, device: Any, dtype: Any) -> _NeuronUninitialized:
    data = torch.empty(0, device=device, dtype=dtype)
    cls = NeuronUninitializedParameter if parameter else NeuronUninitializedBuffer
    # NeuronTensor's constructor, not the Uninitialized* ones (which make plain-tensor subclasses)
    out = NeuronTensor.__new__(cls, data._elem.requires_grad_(requires_grad), data._nidx)
    if not parameter:
        out.persistent = True
        out._is_buffer = True
    return out


def _rebuild(parameter: bool, requires_grad: bool, device: str, dtype: torch.dtype) -> Any:
    return _uninitialized(parameter, requires_grad, device, dtype)


# Conversions an uninitialized tensor allows (torch's UninitializedTensorMixin._allowed_methods).
_CONVERSIONS = frozenset({
    torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.half, torch.Tensor.float,
    torch.Tensor.double, torch.Tensor.char, torch.Tensor.short, torch.Tensor.int, torch.Tensor.long,
})
# What torch's Parameter(...) and Module._apply do to the result of a conversion.
_PASS_THROUGH = frozenset({torch.Tensor.detach, torch.Tensor.requires_grad_})


def install_lazy_parameters() -> None:
    """Make torch's UninitializedParameter/Buffer keep their laziness on `neuron` (called at registration)."""
    torch_function = UninitializedTensorMixin.__dict__["__torch_function__"].__func__
    new_parameter = UninitializedParameter.__new__
    new_buffer = UninitializedBuffer.__new__

    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202, N807
        src = args[0] if args else None
        if isinstance(src, _NeuronUninitialized) and func in _PASS_THROUGH:
            if func is torch.Tensor.requires_grad_:
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **(kwargs or {}))
            out = NeuronTensor.__new__(type(src), src._elem.detach(), src._nidx)
            out.__dict__.update({k: v for k, v in src.__dict__.items() if k not in ("_elem", "_nidx")})
            return out
        if func in _CONVERSIONS and isinstance(src, UninitializedTensorMixin):
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **(kwargs or {}))  # a 0-element conversion: where and what it lands as
            if isinstance(out, torch.Tensor) and (out.device.type == "neuron" or isinstance(src, _NeuronUninitialized)):
                if out.device.type != "neuron":
                    # torch.nn.Module._apply would make it an initialised 0-element parameter: say so instead
                    raise RuntimeError(
                        f"neuron: a lazy module's uninitialized parameters on neuron cannot move to {out.device} "
                        "before its first forward; run one forward (a dummy batch) first, or build it on that device"
                    )
                parameter = isinstance(src, UninitializedParameter)
                return _uninitialized(parameter, src.requires_grad, out.device, out.dtype)
        return torch_function(cls, func, types, args, kwargs)

    def parameter_new(cls, requires_grad=True, device=None, dtype=None):  # noqa: ANN001, ANN202
        if _on_neuron(device):
            return _uninitialized(True, requires_grad, device, dtype)
        return new_parameter(cls, requires_grad, device, dtype)

    def buffer_new(cls, requires_grad=False, device=None, dtype=None, persistent=True):  # noqa: ANN001, ANN202
        if _on_neuron(device):
            return _uninitialized(False, requires_grad, device, dtype)
        return new_buffer(cls, requires_grad, device, dtype, persistent)

    UninitializedTensorMixin.__torch_function__ = classmethod(__torch_function__)
    UninitializedParameter.__new__ = parameter_new
    UninitializedBuffer.__new__ = buffer_new


def _on_neuron(device: Any) -> bool:
    if device is None:
        device = torch.get_default_device()
    return torch.device(device).type == "neuron"
