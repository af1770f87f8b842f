"""Per-call interpreter state: the trace being recorded, on-chip memory accounting, source-line lookup.

Tile limits and on-chip sizes come from the hardware accessor (`neuron_studio.hardware`) for the chip of the
call: `CallState.spec`, or `active_spec()` for code that runs outside a call (e.g. `nl.tile_size` at import).
"""
from __future__ import annotations

import contextvars
import linecache
import os
import re
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

from neuron_studio.hardware import ChipSpec, chip_spec, trainium_chips

from .errors import NkiRuleError, NkiUsageError
from .trace import Instruction, KernelTrace

__all__ = ["CallState", "current", "kernel_frame", "kernel_line", "call_scope", "active_spec", "default_chip",
           "check_chip"]

DEFAULT_CHIP = "trn2"

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")
_current: contextvars.ContextVar["CallState | None"] = contextvars.ContextVar("nki_interp_state", default=None)


def default_chip() -> str:
    """Chip modeled when none is given: NEURON_PLATFORM_TARGET_OVERRIDE (as the real nki honours), else trn2."""
    chip = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", DEFAULT_CHIP)
    return chip if chip in trainium_chips() else DEFAULT_CHIP


def check_chip(chip: str) -> str:
    """`chip` if the interpreter can model it (a Trainium chip of the spec file), else ValueError naming them."""
    if chip not in trainium_chips():
        raise ValueError(f"unknown chip {chip!r}; expected one of {sorted(trainium_chips())}")
    return chip


def active_spec() -> ChipSpec:
    """Spec of the chip of the running kernel call, or of `default_chip()` outside a call."""
    st = _current.get()
    return st.spec if st is not None else chip_spec(default_chip())


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
    spec: ChipSpec = field(init=False)

    def __post_init__(self) -> None:
        self.spec = chip_spec(check_chip(self.trace.chip))

    @property
    def chip(self) -> str:
        return self.trace.chip

    @property
    def sbuf_capacity(self) -> int:
        return int(self.spec.sbuf_bytes_per_partition or 0)

    def allocate(self, owner: object, buffer: str, nbytes: int, tensor: str, frame: Any) -> None:
        """Account an SBUF/PSUM allocation of `nbytes` per partition; release it when `owner` is collected."""
        pool = self.sbuf if buffer == "sbuf" else self.psum
        if buffer == "sbuf" and pool.live + nbytes > self.sbuf_capacity:
            raise NkiRuleError(
                "sbuf_capacity",
                f"allocating {nbytes} B/partition with {pool.live} B/partition live exceeds the "
                f"{self.chip} SBUF capacity of {self.sbuf_capacity} B/partition",
                tensor=tensor, kernel_line=kernel_line(frame))
        bank_bytes, banks = int(self.spec.psum_bank_bytes_per_partition or 0), int(self.spec.psum_banks or 0)
        if buffer == "psum" and pool.live + nbytes > bank_bytes * banks:
            raise NkiRuleError(
                "psum_capacity",
                f"allocating {nbytes} B/partition with {pool.live} B/partition live exceeds PSUM "
                f"({banks} banks x {bank_bytes} B/partition)",
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
