"""NKI kernels with PyTorch references, a built-in NKI interpreter, a cost model and an op -> kernel registry.

Kernels import NKI through `nki_api` (real `nki` on hardware, the interpreter elsewhere). `run(kernel, *args)`
returns the output and the instruction trace; `kernel_time(trace)` models its time per engine and source line.
Your own kernel files (e.g. AWS's nki-samples) load unmodified with `load_kernel(path, name)` and swap into a
model with `use(model, kernel, include=...)`.
"""
from __future__ import annotations

from .cost import KernelTiming, LineTiming, kernel_time, roofline_ns
from .execute import run
from .flash_attention import flash_attention_kernel, reference_flash_attention
from .interpreter import (Instruction, JitKernel, KernelTrace, NkiError, NkiRuleError, NkiUsageError,
                          collect_traces)
from .layernorm import layernorm_kernel, reference_layernorm
from .matmul import matmul_kernel, reference_matmul
from .nki_api import BACKEND
from .registry import KernelMatch, get_registry, lookup, lookup_module
from .rmsnorm import reference_rmsnorm, rmsnorm_kernel
from .rope import reference_rope, rope_kernel
from .softmax import reference_softmax, softmax_kernel
from .swap import SwapError, SwapHandle, use
from .swiglu_mlp import reference_swiglu_mlp, swiglu_mlp_kernel
from .user_kernels import kernel_source, load_kernel

__all__ = [
    "run", "use", "load_kernel", "kernel_source", "collect_traces", "SwapHandle", "SwapError", "lookup", "lookup_module",
    "get_registry", "KernelMatch", "KernelTrace", "Instruction",
    "NkiError", "NkiRuleError", "NkiUsageError", "kernel_time", "KernelTiming", "LineTiming", "roofline_ns",
    "BACKEND", "KERNELS",
    "matmul_kernel", "rmsnorm_kernel", "layernorm_kernel", "softmax_kernel", "swiglu_mlp_kernel", "rope_kernel",
    "flash_attention_kernel",
    "reference_matmul", "reference_rmsnorm", "reference_layernorm", "reference_softmax", "reference_swiglu_mlp",
    "reference_rope", "reference_flash_attention",
]

KERNELS = ("matmul_kernel", "rmsnorm_kernel", "layernorm_kernel", "softmax_kernel", "swiglu_mlp_kernel",
           "rope_kernel", "flash_attention_kernel")
