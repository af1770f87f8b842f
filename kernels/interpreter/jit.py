"""`nki.jit` for the interpreter: converts torch/numpy arguments to HBM tensors, runs the kernel body once per
SPMD launch-grid point in a call scope that records a `KernelTrace`, and converts the result back to the caller's
array kind. Entry points as NKI documents them: `kernel(*args)`, `kernel[grid](*args)`,
`nki.simulate_kernel(kernel, *args)`, `nki.baremetal(kernel)(*args)`."""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from . import dtypes as _dt
from . import lang_math as _m
from .errors import NkiRuleError
from .spmd import LaunchGrid, parse_grid
from .state import CallState, call_scope, check_chip, default_chip
from .tensor import NkiTensor, describe, wrap_input
from .trace import KernelTrace

__all__ = ["jit", "simulate", "simulate_kernel", "baremetal", "JitKernel", "GridLaunch", "default_chip",
           "NkiOptionWarning", "collect_traces"]

_TORCH_TO_NKI = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16",
                 "torch.int32": "int32", "torch.int8": "int8", "torch.uint8": "uint8", "torch.bool": "bool",
                 "torch.int16": "int16"}
# `mode=` values that run the kernel (here: on the interpreter); benchmark/profile need a device.
_RUN_MODES = {None, "auto", "simulation", "baremetal", "torchxla", "jax", "numpy", "pytorch", "trace"}


_sink: contextvars.ContextVar["list[KernelTrace] | None"] = contextvars.ContextVar("nki_trace_sink", default=None)


@contextlib.contextmanager
def collect_traces() -> Iterator[list[KernelTrace]]:
    """`with collect_traces() as traces:` collects the trace of every kernel call inside the block, including
    calls made by host code (a tutorial's `nki_tensor_add(a, b)` launching `kernel[grid]`)."""
    traces: list[KernelTrace] = []
    token = _sink.set(traces)
    try:
        yield traces
    finally:
        _sink.reset(token)


class NkiOptionWarning(UserWarning):
    """A `@nki.jit` option that configures the Neuron compiler and has no effect on the interpreter."""


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


def _check_written(x: Any) -> None:
    """An output element the kernel never wrote is an error, not a silent zero (or NaN)."""
    if isinstance(x, NkiTensor):
        if x._written is not None and not x._written.all():
            missing = int((~x._written).sum())
            raise NkiRuleError("uninitialized_output",
                               f"{missing} of {x._written.size} output element(s) were never written by the "
                               "kernel (uninitialised HBM memory)", tensor=describe(x),
                               kernel_line=x._alloc.line)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _check_written(v)


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
    """A kernel function wrapped for the interpreter. Call it like the real `nki.jit` kernel (`kernel(x)`,
    `kernel[grid](x)`); use `.run` to also get the `KernelTrace`. `options` holds the `@nki.jit(...)` keyword
    arguments: `platform_target` selects the modeled chip, `mode="benchmark"/"profile"` is rejected (it needs
    a device), compiler flags are kept here and reported with an `NkiOptionWarning` on the first call."""

    def __init__(self, func: Callable[..., Any], options: dict[str, Any] | None = None) -> None:
        self.func = func
        self.options = dict(options or {})
        self._sig = inspect.signature(func)
        self._warned = False
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)[0]

    def __getitem__(self, grid: Any) -> "GridLaunch":
        """`kernel[g]`, `kernel[g0, g1]`, `kernel[nl.spmd_dim(g, nl.nc(2)), g1]`: an SPMD launch."""
        return GridLaunch(self, parse_grid(grid))

    def _chip(self, chip: str | None) -> str:
        target = self.options.get("platform_target")
        if chip is None and target is not None:
            chip = str(target).lower()
        return check_chip(chip or default_chip())

    def _check_options(self) -> None:
        mode = self.options.get("mode")
        if mode not in _RUN_MODES:
            raise NotImplementedError(f"@nki.jit(mode={mode!r}) needs a Neuron device; the interpreter runs modes "
                                      f"{sorted(m for m in _RUN_MODES if m)} (kernel {self.func.__name__})")
        ignored = sorted(k for k in self.options if k not in ("mode", "platform_target"))
        if ignored and not self._warned:
            self._warned = True
            warnings.warn(f"@nki.jit options {ignored} of kernel {self.func.__name__} configure the Neuron "
                          "compiler and have no effect on the interpreter", NkiOptionWarning, stacklevel=4)

    def run(self, *args: Any, chip: str | None = None, grid: LaunchGrid | None = None,
            **kwargs: Any) -> tuple[Any, KernelTrace]:
        """Execute on the interpreter (every launch-grid point in row-major order); returns (output, trace)."""
        self._check_options()
        chip = self._chip(chip)
        grid = grid or LaunchGrid()
        bound = self._sig.bind(*args, **kwargs)
        as_torch = any(_is_torch(v) for v in bound.arguments.values())
        for name, value in list(bound.arguments.items()):
            bound.arguments[name] = _to_hbm(value, name)
        state = CallState(KernelTrace(kernel=self.func.__name__, chip=chip), grid=grid,
                          elementwise=_m.elementwise, accumulate=_m.accumulate, assign=_m.assign)
        out = None
        with call_scope(state):
            for point in grid.points():
                state.start_program(point)
                out = self.func(*bound.args, **bound.kwargs)
            _check_written(out)
        trace = state.finish()
        sink = _sink.get()
        if sink is not None:
            sink.append(trace)
        return _from_hbm(out, as_torch), trace


class GridLaunch:
    """`kernel[grid]`: call it like the kernel; `.run(...)` also returns the trace."""

    def __init__(self, kernel: JitKernel, grid: LaunchGrid) -> None:
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.kernel.run(*args, grid=self.grid, **kwargs)[0]

    def run(self, *args: Any, chip: str | None = None, **kwargs: Any) -> tuple[Any, KernelTrace]:
        return self.kernel.run(*args, chip=chip, grid=self.grid, **kwargs)

    @property
    def func(self) -> Callable[..., Any]:
        return self.kernel.func


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@nki.jit` / `@nki.jit(platform_target=..., mode=..., ...)`."""
    if func is None:
        return lambda f: JitKernel(f.func if isinstance(f, JitKernel) else f, options)
    return JitKernel(func.func if isinstance(func, JitKernel) else func, options)


def _as_kernel(kernel: Any) -> Any:
    if isinstance(kernel, (JitKernel, GridLaunch)):
        return kernel
    if callable(kernel):
        return JitKernel(kernel)
    raise TypeError(f"expected an NKI kernel function, got {type(kernel).__name__}")


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """`nki.simulate_kernel(kernel, *np_arrays)`: run on the interpreter, numpy in / numpy out."""
    return _as_kernel(kernel)(*args, **kwargs)


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*np_arrays)`, as in the current release."""
    return _as_kernel(kernel).__call__


def baremetal(kernel: Any = None, **options: Any) -> Any:
    """`nki.baremetal(kernel)` / `nki.baremetal(**opts)(kernel)`: run the kernel and return its outputs.

    Without a device the kernel runs on the interpreter (same outputs; the artifacts baremetal would save, such
    as NEFF files, are not produced: those options give an NkiOptionWarning)."""
    if kernel is None:
        return lambda k: baremetal(k, **options)
    base = kernel.func if isinstance(kernel, JitKernel) else kernel
    merged = {**(kernel.options if isinstance(kernel, JitKernel) else {}), **options}
    merged.pop("mode", None)
    return JitKernel(base, merged)
