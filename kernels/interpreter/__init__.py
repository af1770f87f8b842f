"""Built-in NKI interpreter (numpy): runs `nki.jit` kernels on CPU, enforces tile rules, records instructions.

Implements the subset of `nki.language` / `nki.isa` the Neuron Studio kernels use. Never imports torch_neuronx;
imports torch only to convert results when the caller passed torch tensors.
"""
from __future__ import annotations

from . import isa, language, nki
from .errors import NkiError, NkiRuleError, NkiUsageError
from .jit import JitKernel, default_chip, jit, simulate
from .trace import ENGINES, Instruction, KernelTrace

__all__ = ["nki", "language", "isa", "jit", "simulate", "JitKernel", "KernelTrace", "Instruction", "ENGINES",
           "NkiError", "NkiRuleError", "NkiUsageError", "default_chip"]
