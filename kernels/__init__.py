"""NKI kernels with PyTorch references, a built-in NKI interpreter, a cost model and an op -> kernel registry.

Kernels import NKI through `nki_api` (real `nki` on hardware, the interpreter elsewhere). `run(kernel, *args)`
returns the output and the instruction trace; `kernel_time(trace)` models its time per engine and source line.
"""
from __future__ import annotations

from typing import Any

import torch

from .cost import KernelTiming, LineTiming, kernel_time, roofline_ns
from .flash_attention import flash_attention_kernel, reference_flash_attention
from .interpreter import Instruction, JitKernel, KernelTrace, NkiError, NkiRuleError, NkiUsageError
from .layernorm import layernorm_kernel, reference_layernorm
from .matmul import matmul_kernel, reference_matmul
from .nki_api import BACKEND
from .registry import KernelMatch, get_registry, lookup, lookup_module
from .rmsnorm import reference_rmsnorm, rmsnorm_kernel
from .rope import reference_rope, rope_kernel
from .softmax import reference_softmax, softmax_kernel
from .swap import SwapError, SwapHandle, use
from .swiglu_mlp import reference_swiglu_mlp, swiglu_mlp_kernel

__all__ = [
    "run", "use", "SwapHandle", "SwapError", "lookup", "lookup_module", "get_registry", "KernelMatch", "KernelTrace", "Instruction",
    "NkiError", "NkiRuleError", "NkiUsageError", "kernel_time", "KernelTiming", "LineTiming", "roofline_ns",
    "BACKEND", "KERNELS",
    "matmul_kernel", "rmsnorm_kernel", "layernorm_kernel", "softmax_kernel", "swiglu_mlp_kernel", "rope_kernel",
    "flash_attention_kernel",
    "reference_matmul", "reference_rmsnorm", "reference_layernorm", "reference_softmax", "reference_swiglu_mlp",
    "reference_rope", "reference_flash_attention",
]

KERNELS = ("matmul_kernel", "rmsnorm_kernel", "layernorm_kernel", "softmax_kernel", "swiglu_mlp_kernel",
           "rope_kernel", "flash_attention_kernel")


def run(kernel: Any, *args: Any, chip: str = "trn2", **kwargs: Any) -> tuple[Any, KernelTrace | None]:
    """Run `kernel` and return (output, trace). Output is the caller's kind (torch in -> torch out).

    On the interpreter the trace holds every instruction; with the real `nki` package (hardware) the kernel
    runs on the device and the trace is None (use the profiler there).
    """
    if isinstance(kernel, JitKernel):
        # the interpreter works on host arrays: neuron (or other device) tensors go through the host and
        # the output comes back to the first argument's device
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        host = [a.detach().cpu() if isinstance(a, torch.Tensor) and a.device.type != "cpu" else a for a in args]
        out, trace = kernel.run(*host, chip=chip, **kwargs)
        if device is not None and device.type != "cpu" and isinstance(out, torch.Tensor):
            out = out.to(device)
        return out, trace
    return kernel(*args, **kwargs), None
