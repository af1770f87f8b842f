"""What a Neuron Studio kernel would take for a call of a given size, by the kernel model (`kernel_time`).

The hot path's "saves ~X" for a kernel is the matched ops' modeled time minus what the kernel would take. Running
the interpreter at every matched call's own shapes is too slow for a profile summary (its loops run literally), so
the kernel model is run at two reference calls of the kernel per dtype (a small one and one 2x larger in every
dimension) and read as `fixed_ns + slope x roofline`, the roofline on the one physical NeuronCore a kernel runs on
(`kernels.roofline_ns`, at the call's dtype):
- `fixed_ns` is what does not grow with the work: DMA latencies and descriptor generation on the critical path,
  the fill and drain of the engine pipeline;
- `slope` is how far above its roofline the kernel's work runs (engines that do not overlap, tile shapes).
The kernel's preamble/completion (`ModelConfig.kernel_launch_overhead_ns`) is left out: it is the launch of one
NEFF execution, which the caller charges as one launch, like every op it replaces. A factor taken at one reference
call would scale those fixed costs with the size of the call (a 128-token reference, 12 µs of preamble on a 2.5 µs
roofline, made a 512-token MLP look 11x its roofline).
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .cost import kernel_time, roofline_ns

__all__ = ["KernelScaling", "kernel_scaling", "kernel_call_ns", "REFERENCE_CALLS"]

_REF_DTYPES = {2: torch.bfloat16, 4: torch.float32}   # itemsize -> the dtype a reference call runs in


def _r(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(*shape, generator=g) * 0.1).to(dtype)


def _nbytes(dtype: torch.dtype, elems: float) -> float:
    return float(elems) * torch.empty((), dtype=dtype).element_size()


# Each builder: (scale, dtype) -> (target "module:function", args, flops, bytes). scale 1 and 2.
def _matmul(s: int, dt: torch.dtype) -> tuple:
    m = k = n = 256 * s
    return "matmul:matmul_kernel", (_r(m, k, dtype=dt), _r(k, n, dtype=dt)), 2.0 * m * k * n, \
        _nbytes(dt, m * k + k * n + m * n)


def _norm(name: str, with_beta: bool) -> Callable[[int, torch.dtype], tuple]:
    def call(s: int, dt: torch.dtype) -> tuple:
        rows, d = 256 * s, 512 * s
        args = (_r(rows, d, dtype=dt), _r(d, dtype=dt) + 1.0) + ((_r(d, dtype=dt),) if with_beta else ())
        return name, args, 0.0, _nbytes(dt, 2 * rows * d + len(args[1:]) * d)
    return call


def _softmax(s: int, dt: torch.dtype) -> tuple:
    rows, d = 256 * s, 512 * s
    return "softmax:softmax_kernel", (_r(rows, d, dtype=dt),), 0.0, _nbytes(dt, 2 * rows * d)


def _attention(s: int, dt: torch.dtype) -> tuple:
    n, d = 256 * s, 64 * s
    flops = 2 * 2 * n * n * d / 2  # causal: half of QK^T and AV
    return "flash_attention:flash_attention_kernel", (_r(1, n, d, dtype=dt), _r(1, n, d, dtype=dt),
                                                      _r(1, n, d, dtype=dt)), flops, _nbytes(dt, 4 * n * d)


def _swiglu(s: int, dt: torch.dtype) -> tuple:
    t, d, h = 128 * s, 256 * s, 512 * s
    return "swiglu_mlp:swiglu_mlp_kernel", (_r(t, d, dtype=dt), _r(d, h, dtype=dt), _r(d, h, dtype=dt),
                                            _r(h, d, dtype=dt)), 2.0 * 3 * t * d * h, _nbytes(dt, 2 * t * d + 3 * d * h)


REFERENCE_CALLS: dict[str, Callable[[int, torch.dtype], tuple]] = {
    "matmul_kernel": _matmul,
    "layernorm_kernel": _norm("layernorm:layernorm_kernel", True),
    "rmsnorm_kernel": _norm("rmsnorm:rmsnorm_kernel", False),
    "softmax_kernel": _softmax,
    "flash_attention_kernel": _attention,
    "swiglu_mlp_kernel": _swiglu,
}


@dataclass(frozen=True)
class KernelScaling:
    """A kernel's modeled time (without its launch) for a call whose one-core roofline is r: fixed_ns + slope*r,
    never below r."""

    kernel: str
    chip: str
    dtype: str
    fixed_ns: float
    slope: float

    def call_ns(self, roof_ns: float) -> float:
        return max(roof_ns, self.fixed_ns + self.slope * roof_ns)


def _ref_dtype(itemsize: int) -> torch.dtype:
    return _REF_DTYPES.get(int(itemsize), torch.bfloat16)  # FP8 and others: the 16-bit path (conservative)


@functools.cache
def kernel_scaling(kernel: str, chip: str, itemsize: int = 2) -> KernelScaling | None:
    """The kernel model at the kernel's two reference calls in the dtype of `itemsize`, read as fixed + slope
    (module docstring); None for a kernel without reference calls."""
    build = REFERENCE_CALLS.get(kernel)
    if build is None:
        return None
    dt = _ref_dtype(itemsize)
    dname = str(dt).removeprefix("torch.")
    points = []
    for scale in (1, 2):
        target, args, flops, nbytes = build(scale, dt)
        mod_name, fn_name = target.split(":")
        fn: Any = getattr(importlib.import_module(f"{__package__}.{mod_name}"), fn_name)
        _, trace = fn.run(*args, chip=chip)
        timing = kernel_time(trace, chip, ranges=False)
        points.append((roofline_ns(flops, nbytes, chip, dname), timing.total_ns - timing.launch_overhead_ns))
    (r1, t1), (r2, t2) = points
    slope = max(1.0, (t2 - t1) / (r2 - r1)) if r2 > r1 else max(1.0, t2 / max(r2, 1e-9))
    fixed = max(0.0, t2 - slope * r2)
    return KernelScaling(kernel, chip, dname, fixed, slope)


def kernel_call_ns(kernel: str, chip: str, flops: float, nbytes: float, itemsize: int = 2) -> float | None:
    """Modeled time of one call of `kernel` doing `flops` and moving `nbytes` in a dtype of `itemsize` bytes,
    launch excluded; None for a kernel the kernel model has no reference calls for."""
    sc = kernel_scaling(kernel, chip, int(itemsize))
    if sc is None:
        return None
    return sc.call_ns(roofline_ns(flops, nbytes, chip, sc.dtype))
