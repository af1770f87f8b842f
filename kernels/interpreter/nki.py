"""The interpreter's stand-in for the top-level `nki` package: `nki.jit`, `nki.simulate_kernel`, `nki.simulate`,
`nki.baremetal`, `nki.language`, `nki.isa`."""
from __future__ import annotations

from . import isa, language
from .toplevel import baremetal, benchmark, compiler, jit, profile, simulate, simulate_kernel, tensor

__all__ = ["jit", "simulate", "simulate_kernel", "baremetal", "benchmark", "profile", "compiler", "tensor",
           "language", "isa"]
