"""How far above the op roofline each Neuron Studio kernel runs, by the kernel model (`kernel_time`).

The hot path's "saves ~X" for a kernel is the matched ops' modeled time minus what the kernel would take; the
kernel's time is its roofline at the matched ops' FLOPs and bytes times this factor, measured once per kernel
and chip by running the kernel on the interpreter at a reference call and timing it with `kernel_time`
(a kernel that reaches 40% of its roofline saves less than a perfect one would).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from .cost import kernel_time, roofline_ns

__all__ = ["roofline_factor", "REFERENCE_CALLS"]


def _r(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(*shape, generator=g).to(dtype)


def _matmul() -> tuple[str, tuple, float, float, str]:
    m = k = n = 512  # 1024^3 gives 6.1x instead of 7.2x on trn2 but takes seconds on the interpreter
    return "matmul:matmul_kernel", (_r(m, k), _r(k, n)), 2 * m * k * n, 2 * (m * k + k * n + m * n), "bfloat16"


def _norm(name: str, with_beta: bool) -> Callable[[], tuple]:
    def call() -> tuple:
        rows, d = 512, 1024
        args = (_r(rows, d, dtype=torch.float32), _r(d, dtype=torch.float32))
        if with_beta:
            args += (_r(d, dtype=torch.float32),)
        return name, args, 0.0, 4 * (2 * rows * d + len(args[1:]) * d), "float32"
    return call


def _softmax() -> tuple:
    rows, d = 512, 1024
    return "softmax:softmax_kernel", (_r(rows, d, dtype=torch.float32),), 0.0, 4 * 2 * rows * d, "float32"


def _attention() -> tuple:
    s, d = 512, 64
    flops = 2 * 2 * s * s * d / 2  # causal: half of QK^T and AV
    return "flash_attention:flash_attention_kernel", (_r(1, s, d), _r(1, s, d), _r(1, s, d)), flops, \
        2 * 4 * s * d, "bfloat16"


def _swiglu() -> tuple:
    t, d, h = 128, 256, 512
    return "swiglu_mlp:swiglu_mlp_kernel", (_r(t, d), _r(d, h), _r(d, h), _r(h, d)), 2 * 3 * t * d * h, \
        2 * (2 * t * d + 3 * d * h), "bfloat16"


REFERENCE_CALLS: dict[str, Callable[[], tuple]] = {
    "matmul_kernel": _matmul,
    "layernorm_kernel": _norm("layernorm:layernorm_kernel", True),
    "rmsnorm_kernel": _norm("rmsnorm:rmsnorm_kernel", False),
    "softmax_kernel": _softmax,
    "flash_attention_kernel": _attention,
    "swiglu_mlp_kernel": _swiglu,
}


@functools.cache
def roofline_factor(kernel: str, chip: str) -> float | None:
    """Modeled kernel time / op roofline (>= 1) at the kernel's reference call; None for a kernel without one."""
    build = REFERENCE_CALLS.get(kernel)
    if build is None:
        return None
    import importlib

    target, args, flops, nbytes, dtype = build()
    mod_name, fn_name = target.split(":")
    fn: Any = getattr(importlib.import_module(f"{__package__}.{mod_name}"), fn_name)
    _, trace = fn.run(*args, chip=chip)
    roof = roofline_ns(flops, nbytes, chip, dtype)
    return max(1.0, kernel_time(trace, chip).total_ns / roof) if roof > 0 else None
