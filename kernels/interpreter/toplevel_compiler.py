"""`neuronxcc.nki.compiler` / `nki.compiler` as an importable module: the same object as the top-level
`nki.compiler` attribute (directives that only steer the compiler pass kernels through; direct allocation
raises NotImplementedError naming the API)."""
from __future__ import annotations

from typing import Any

from .toplevel import compiler as _compiler

__all__ = ["skip_middle_end_transformations"]

skip_middle_end_transformations = _compiler.skip_middle_end_transformations


def __getattr__(name: str) -> Any:
    return getattr(_compiler, name)
