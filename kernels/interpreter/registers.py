"""`nki.isa` virtual registers (NKI 0.5/0.6): scalar values an engine sequencer holds, loaded from and stored to
memory, that drive `nl.fori_loop` bounds and `nl.while_loop` conditions.

The interpreter runs the kernel body on the host, so a register is a Python integer; loading or storing one
moves a single value between a [1, 1] tile (or HBM element) and the register. Register moves run on engine
sequencers, not on the data paths the kernel model times, so no instruction is recorded for them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import NkiRuleError
from .state import kernel_frame, kernel_line
from .tensor import NkiTensor

__all__ = ["VirtualRegister", "register_alloc", "register_move", "register_load", "register_store"]


class VirtualRegister:
    """One virtual register: an integer value (up to 32 bits)."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = int(value)

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"VirtualRegister({self.value})"


def _scalar(src: NkiTensor) -> int:
    if not isinstance(src, NkiTensor) or src.data.size != 1:
        raise NkiRuleError("register_operand", "a register loads/stores one element (a [1, 1] tensor)",
                           kernel_line=kernel_line(kernel_frame(3)))
    return int(np.asarray(src.read()).reshape(-1)[0])


def register_alloc(x: int | None = None) -> VirtualRegister:
    """A new register, holding `x` (0 when None)."""
    return VirtualRegister(0 if x is None else int(x))


def register_move(dst: VirtualRegister, src: Any) -> None:
    """dst = src (an integer or another register)."""
    dst.value = int(src)


def register_load(dst: VirtualRegister, src: NkiTensor) -> None:
    """dst = the single value of `src` (a [1, 1] SBUF tile or HBM element)."""
    dst.value = _scalar(src)


def register_store(dst: NkiTensor, src: VirtualRegister) -> None:
    """Write the register's value into the single element of `dst`."""
    if not isinstance(dst, NkiTensor) or dst.data.size != 1:
        raise NkiRuleError("register_operand", "a register loads/stores one element (a [1, 1] tensor)",
                           kernel_line=kernel_line(kernel_frame(2)))
    dst.write(np.full(dst.shape, int(src), np.float64), None)
