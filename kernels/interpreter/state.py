"""Per-call interpreter state: the trace being recorded, the SPMD program being run, on-chip memory liveness,
shared HBM tensors, the Scalar Engine reduction registers, the random generator, source-line lookup.

Tile limits and on-chip sizes come from the hardware accessor (`neuron_studio.hardware`) for the chip of the
call: `CallState.spec`, or `active_spec()` for code that runs outside a call (e.g. `nl.tile_size` at import).
"""
from __future__ import annotations

import contextvars
import itertools
import linecache
import os
import re
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from neuron_studio.hardware import ChipSpec, chip_spec, trainium_chips

from .errors import NkiRuleError, NkiUsageError
from .memory import AllocRecord, MemoryTimeline
from .spmd import LaunchGrid
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


_BUFFER_NAMES = {"sbuf": "sbuf", "psum": "psum", "hbm": "shared_hbm", "shared_hbm": "shared_hbm",
                 "private_hbm": "private_hbm"}


@dataclass
class CallState:
    """State for one kernel call (all instances of its launch grid).

    `tick` counts instructions and allocations: it is the clock of the liveness intervals. `elementwise`,
    `accumulate` and `assign` are the language-level operations behind `a + b`, `t += x` and `t[i] = x`
    (installed by `jit`, which knows the language module; tensors only know this state).
    """

    trace: KernelTrace
    grid: LaunchGrid = field(default_factory=LaunchGrid)
    elementwise: Callable[..., Any] | None = None
    accumulate: Callable[..., Any] | None = None
    assign: Callable[..., Any] | None = None
    seed: int = 0
    spec: ChipSpec = field(init=False)
    tick: int = 0
    program: tuple[int, ...] = ()
    memory: MemoryTimeline = field(init=False)
    reduce_regs: np.ndarray | None = None
    _shared: list[Any] = field(default_factory=list)
    _hbm_ordinal: int = 0
    _rng: np.random.Generator | None = None
    _buffer_ids: "weakref.WeakKeyDictionary[object, int]" = field(default_factory=weakref.WeakKeyDictionary)
    _buffer_counter: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.spec = chip_spec(check_chip(self.trace.chip))
        cap = {"sbuf": int(self.spec.sbuf_bytes_per_partition or 0),
               "psum": int(self.spec.psum_bank_bytes_per_partition or 0) * int(self.spec.psum_banks or 0)}
        self.memory = MemoryTimeline(cap, self.chip)

    @property
    def chip(self) -> str:
        return self.trace.chip

    @property
    def sbuf_capacity(self) -> int:
        return int(self.spec.sbuf_bytes_per_partition or 0)

    @property
    def rng(self) -> np.random.Generator:
        """The call's random generator (dropout, nl.rand): seeded, so a kernel call is reproducible."""
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return self._rng

    # -- SPMD ----------------------------------------------------------------------------------------------
    def start_program(self, point: tuple[int, ...]) -> None:
        """Begin the kernel instance at launch-grid coordinates `point`."""
        self.program = point
        self._hbm_ordinal = 0

    def program_id(self, axis: int) -> int:
        axis = int(axis)
        if axis < 0 or (self.grid.dims and axis >= len(self.grid.dims)):
            raise NkiUsageError(f"nl.program_id({axis}): the launch grid has {len(self.grid.dims)} dimension(s)")
        return self.program[axis] if axis < len(self.program) else 0

    def num_programs(self, axes: Any = None) -> int:
        dims = self.grid.dims or (1,)
        if axes is None:
            return self.grid.size
        if isinstance(axes, (tuple, list)):
            n = 1
            for a in axes:
                n *= dims[int(a)] if int(a) < len(dims) else 1
            return n
        return dims[int(axes)] if int(axes) < len(dims) else 1

    # -- HBM -----------------------------------------------------------------------------------------------
    def buffer_name(self, buffer: Any, var: str | None, frame: Any) -> str:
        name = getattr(buffer, "value", buffer)
        if isinstance(name, str) and name in _BUFFER_NAMES:
            return _BUFFER_NAMES[name]
        raise NotImplementedError(f"buffer={buffer!r} for {var or 'a tensor'} is not supported by the Neuron Studio "
                                  f"interpreter (at {kernel_line(frame)}); use nl.sbuf, nl.psum or nl.shared_hbm")

    def shared_hbm(self, var: str | None, shape: tuple[int, ...], dtype: str, buffer: str) -> Any:
        """The shared HBM tensor an earlier SPMD instance allocated at this point of the kernel (the same
        allocation, by order and kernel line, with the same shape and dtype), if any."""
        if buffer != "shared_hbm":
            return None
        i = self._hbm_ordinal
        self._hbm_ordinal += 1
        if i < len(self._shared):
            t = self._shared[i]
            if t.shape == shape and t.dtype == dtype and t._alloc.line == kernel_line(kernel_frame(3)):
                return t
            raise NkiUsageError(f"SPMD instance {self.program} allocates shared HBM tensor #{i} "
                                f"({var or 'unnamed'}, {list(shape)} {dtype}) differently from the first instance "
                                f"({t.name or 'unnamed'}, {list(t.shape)} {t.dtype} at {t._alloc.line}): every "
                                "instance must allocate the same shared tensors in the same order")
        return None

    def register_hbm(self, tensor: Any, buffer: str) -> None:
        if buffer == "shared_hbm" and self._hbm_ordinal > len(self._shared):
            self._shared.append(tensor)

    # -- on-chip memory ------------------------------------------------------------------------------------
    def allocate(self, owner: Any, buffer: str, nbytes: int, block_shape: tuple[int, ...], tensor: str,
                 frame: Any) -> None:
        """Account an SBUF/PSUM allocation of `nbytes` per partition (over all its blocks)."""
        self.tick += 1
        nblocks = int(np.prod(block_shape, dtype=np.int64)) if block_shape else 1
        rec = AllocRecord(buffer, nbytes // max(nblocks, 1), nblocks, tensor, kernel_line(frame), self.tick)
        self.memory.add(rec)
        owner.record = rec
        rec.owner_ref = weakref.ref(owner, lambda _ref, rec=rec: rec.die(self.tick))  # cheaper than finalize

    def record(self, ins: Instruction) -> None:
        self.tick += 1
        self.trace.instructions.append(ins)

    def scalar_registers(self, partitions: int) -> np.ndarray:
        """The Scalar Engine's per-partition reduction registers (`nisa.activation(reduce_cmd=...)`)."""
        if self.reduce_regs is None or self.reduce_regs.shape[0] < partitions:
            self.reduce_regs = np.zeros(max(partitions, int(self.spec.partition_max or 0)), np.float32)
        return self.reduce_regs
    def buffer_id(self, alloc: object) -> int:
        """A number for one allocation, unique within this call (object ids are reused after a tile dies)."""
        bid = self._buffer_ids.get(alloc)
        if bid is None:
            bid = self._buffer_ids[alloc] = next(self._buffer_counter)
        return bid

    def finish(self) -> KernelTrace:
        peaks = self.memory.peaks(self.tick + 1)
        # every spilled byte/partition is saved to HBM and reloaded, on every partition
        self.trace.spill_bytes = 2 * self.memory.spilled * int(self.spec.partition_max or 0)
        self.trace.peak_sbuf_bytes_per_partition = peaks.get("sbuf", 0)
        self.trace.peak_psum_bytes_per_partition = peaks.get("psum", 0)
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
