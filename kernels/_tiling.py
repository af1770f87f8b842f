"""Tiny helpers shared by kernels (plain Python, evaluated at trace time)."""
from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Number of tiles of size b covering a (the last one may be ragged)."""
    return (a + b - 1) // b
