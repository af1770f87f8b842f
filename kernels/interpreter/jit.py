"""`nki.jit` for the interpreter: converts torch/numpy arguments to HBM tensors, runs the kernel body in a call
scope that records a `KernelTrace`, and converts the result back to the caller's array kind."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import numpy as np

from . import dtypes as _dt
from .state import CallState, call_scope, check_chip, default_chip
from .tensor import NkiTensor, wrap_input
from .trace import KernelTrace

__all__ = ["jit", "simulate", "JitKernel", "default_chip"]

_TORCH_TO_NKI = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16",
                 "torch.int32": "int32", "torch.int8": "int8", "torch.uint8": "uint8", "torch.bool": "bool",
                 "torch.int16": "int16"}


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _to_hbm(x: Any, name: str) -> Any:
    if isinstance(x, NkiTensor):
        return x
    if _is_torch(x):
        dtype = _TORCH_TO_NKI.get(str(x.dtype))
        if dtype is None:
            raise TypeError(f"argument {name!r}: unsupported torch dtype {x.dtype}")
        t = x.detach().cpu()
        arr = (t.float() if dtype == "bfloat16" else t).contiguous().numpy()
        return wrap_input(arr, dtype, name)
    if isinstance(x, np.ndarray):
        dtype = _dt.normalize_dtype(x.dtype)
        return wrap_input(np.ascontiguousarray(x, dtype=_dt.storage_dtype(dtype)), dtype, name)
    return x


def _from_hbm(x: Any, as_torch: bool) -> Any:
    if isinstance(x, NkiTensor):
        arr = np.array(x.data, copy=True)
        if not as_torch:
            return arr
        import torch  # only when the caller passed torch tensors

        out = torch.from_numpy(arr)
        return out.to(getattr(torch, x.dtype if x.dtype != "bool" else "bool")) if x.dtype != "float32" else out
    if isinstance(x, tuple):
        return tuple(_from_hbm(v, as_torch) for v in x)
    if isinstance(x, list):
        return [_from_hbm(v, as_torch) for v in x]
    return x


class JitKernel:
    """A kernel function wrapped for the interpreter. Call it like the real `nki.jit` kernel; use `.run` to
    also get the `KernelTrace`."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self._sig = inspect.signature(func)
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)[0]

    def __getitem__(self, lnc: Any) -> "JitKernel":
        """`kernel[lnc](...)`: the interpreter models one NeuronCore, so the grid is ignored."""
        return self

    def run(self, *args: Any, chip: str | None = None, **kwargs: Any) -> tuple[Any, KernelTrace]:
        """Execute on the interpreter; returns (output, trace)."""
        chip = check_chip(chip or default_chip())
        bound = self._sig.bind(*args, **kwargs)
        as_torch = any(_is_torch(v) for v in bound.arguments.values())
        for name, value in list(bound.arguments.items()):
            bound.arguments[name] = _to_hbm(value, name)
        state = CallState(KernelTrace(kernel=self.func.__name__, chip=chip))
        with call_scope(state):
            out = self.func(*bound.args, **bound.kwargs)
        return _from_hbm(out, as_torch), state.finish()


def jit(func: Callable[..., Any] | None = None, **_options: Any) -> Any:
    """`@nki.jit` / `@nki.jit(...)`: options (platform, mode, ...) are accepted and ignored."""
    if func is None:
        return lambda f: JitKernel(f)
    return JitKernel(func)


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*np_arrays)`, as in the real package."""
    k = kernel if isinstance(kernel, JitKernel) else JitKernel(kernel)
    return k.__call__
