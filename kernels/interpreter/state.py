"""Per-call interpreter state: the trace being recorded, on-chip memory accounting, source-line lookup."""
from __future__ import annotations

import contextvars
import linecache
import os
import re
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

from .errors import NkiRuleError, NkiUsageError
from .trace import Instruction, KernelTrace

__all__ = ["CallState", "current", "kernel_frame", "kernel_line", "call_scope", "SBUF_BYTES_PER_PARTITION",
           "PSUM_BANK_BYTES", "PSUM_NUM_BANKS", "PMAX"]

PMAX = 128
PSUM_BANK_BYTES = 2048      # 2 KiB per partition per bank = 512 fp32
PSUM_NUM_BANKS = 8
# Usable SBUF bytes per partition (trainium.md §6): trn1 192 KiB, trn2 224 KiB, trn3 256 KiB [derived].
SBUF_BYTES_PER_PARTITION = {"trn1": 192 * 1024, "trn2": 224 * 1024, "trn3": 256 * 1024}

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")
_current: contextvars.ContextVar["CallState | None"] = contextvars.ContextVar("nki_interp_state", default=None)


def kernel_frame(depth: int = 2) -> Any:
    """The innermost frame outside this interpreter package: the kernel (or kernel helper) source line."""
    f = sys._getframe(depth)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _PKG_DIR:
        f = f.f_back
    return f


def kernel_line(frame: Any) -> str:
    if frame is None:
        return ""
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def assigned_name(frame: Any) -> str | None:
    """Variable name on the left of the kernel line (`x = nl.ndarray(...)` -> "x"), if any."""
    if frame is None:
        return None
    m = _ASSIGN.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
    return m.group(1) if m else None


@dataclass
class _Pool:
    """Live on-chip allocations of one buffer kind, bytes per partition; freed when the tile object dies."""

    live: int = 0
    peak: int = 0
    sizes: dict[int, int] = field(default_factory=dict)
    _next: int = 0

    def add(self, nbytes: int) -> int:
        self._next += 1
        self.sizes[self._next] = nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        return self._next

    def free(self, key: int) -> None:
        self.live -= self.sizes.pop(key, 0)


@dataclass
class CallState:
    """State for one kernel call: chip, instruction trace, SBUF/PSUM pools."""

    trace: KernelTrace
    sbuf: _Pool = field(default_factory=_Pool)
    psum: _Pool = field(default_factory=_Pool)

    @property
    def chip(self) -> str:
        return self.trace.chip

    @property
    def sbuf_capacity(self) -> int:
        return SBUF_BYTES_PER_PARTITION[self.chip]

    def allocate(self, owner: object, buffer: str, nbytes: int, tensor: str, frame: Any) -> None:
        """Account an SBUF/PSUM allocation of `nbytes` per partition; release it when `owner` is collected."""
        pool = self.sbuf if buffer == "sbuf" else self.psum
        if buffer == "sbuf" and pool.live + nbytes > self.sbuf_capacity:
            raise NkiRuleError(
                "sbuf_capacity",
                f"allocating {nbytes} B/partition with {pool.live} B/partition live exceeds the "
                f"{self.chip} SBUF capacity of {self.sbuf_capacity} B/partition",
                tensor=tensor, kernel_line=kernel_line(frame))
        if buffer == "psum" and pool.live + nbytes > PSUM_BANK_BYTES * PSUM_NUM_BANKS:
            raise NkiRuleError(
                "psum_capacity",
                f"allocating {nbytes} B/partition with {pool.live} B/partition live exceeds PSUM "
                f"({PSUM_NUM_BANKS} banks x {PSUM_BANK_BYTES} B/partition)",
                tensor=tensor, kernel_line=kernel_line(frame))
        key = pool.add(nbytes)
        weakref.finalize(owner, pool.free, key)

    def record(self, ins: Instruction) -> None:
        self.trace.instructions.append(ins)

    def finish(self) -> KernelTrace:
        self.trace.peak_sbuf_bytes_per_partition = self.sbuf.peak
        self.trace.peak_psum_bytes_per_partition = self.psum.peak
        return self.trace


def current() -> CallState:
    st = _current.get()
    if st is None:
        raise NkiUsageError("nki.language / nki.isa calls must run inside an @nki.jit kernel call")
    return st


class call_scope:
    """Context manager installing a CallState for the duration of one kernel call."""

    def __init__(self, state: CallState) -> None:
        self.state = state
        self._token: contextvars.Token | None = None

    def __enter__(self) -> CallState:
        self._token = _current.set(self.state)
        return self.state

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
