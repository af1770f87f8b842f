"""Built-in NKI interpreter (numpy): runs `nki.jit` kernels on CPU, enforces tile rules, records instructions.

Speaks NKI as AWS documents it (previous `neuronxcc.nki` and current `nki` releases; `nki_imports` lets kernel
files import either layout unmodified). Never imports torch_neuronx;
imports torch only to convert results when the caller passed torch tensors.
"""
from __future__ import annotations

from . import isa, language, nki, nki_imports
from .errors import NkiError, NkiRuleError, NkiUsageError
from .jit import GridLaunch, JitKernel, collect_traces, default_chip, jit, simulate
from .trace import ENGINES, Instruction, KernelTrace

__all__ = ["nki", "nki_imports", "language", "isa", "jit", "simulate", "JitKernel", "GridLaunch", "KernelTrace",
           "Instruction", "ENGINES", "NkiError", "NkiRuleError", "NkiUsageError", "default_chip", "collect_traces"]
