"""The interpreter's top-level `nki` / `neuronxcc.nki` module: `jit`, `simulate_kernel`, `simulate`,
`baremetal`, the `tensor` type, and the device-only entry points (`benchmark`, `profile`, `trace`,
`compiler`), which raise NotImplementedError naming themselves when used."""
from __future__ import annotations

from typing import Any, Callable

from .jit import baremetal, jit, simulate, simulate_kernel
from .toplevel_typing import tensor
from .unsupported import Unsupported, unsupported

__all__ = ["jit", "simulate_kernel", "simulate", "baremetal", "benchmark", "profile", "trace", "tensor", "compiler"]
# The current standalone `nki` package's top level has only these (the rest were removed after neuronxcc.nki).
CURRENT = ("jit", "simulate", "tensor", "compiler")

benchmark = unsupported("nki", "benchmark", decorator=True)
profile = unsupported("nki", "profile", decorator=True)
trace = unsupported("nki", "trace", decorator=True)


class _Compiler(Unsupported):
    """`nki.compiler`: allocation and scheduling directives for the Neuron compiler. Direct allocation
    (`nki.compiler.sbuf.mod_alloc`, `.psum.alloc`, ...) raises when called; `skip_middle_end_transformations`
    only changes how the compiler optimises, not what the kernel computes, so it passes the kernel through."""

    def __init__(self) -> None:
        super().__init__("nki.compiler", "compiler directives and direct allocation need the Neuron compiler")

    @staticmethod
    def skip_middle_end_transformations(func: Callable[..., Any]) -> Callable[..., Any]:
        return func


compiler = _Compiler()
