"""The interpreter's stand-in for the top-level `nki` package: `nki.jit`, `nki.simulate`, `nki.language`,
`nki.isa`."""
from __future__ import annotations

from . import isa, language
from .jit import jit, simulate

__all__ = ["jit", "simulate", "language", "isa"]
