"""The PyTorch side of the real-hardware join: every aten op the cell dispatches, with what TorchNeuron keys its
framework mapping on, plus the module and source line the studio attaches.

TorchNeuron stamps each device operation, when it is enqueued, with `at::sequence_number::peek()` and
`at::RecordFunction::currentThreadId()` (`torch_neuronx/csrc/c10/neuron/NeuronStream.cpp`, pre-release source
`parmoham-aws/test-repo-parmoham` @98154b86); with PyTorch and runtime profiling both on it dumps them per runtime
sequence id into `framework_mapping_<ts>.json` (`ProfilerMappingCollector.h`, `profiling.py`). `FrameworkLog`
records the same two keys below autograd (a `TorchDispatchMode`, so the autograd node of a forward op already
exists, as it does when TorchNeuron enqueues), in dispatch order, with:

- `module`: the innermost `nn.Module` running (global forward hooks, as the emulated capture does);
- `source`: `file:line` of the innermost frame outside torch, TorchNeuron and the studio;
- for ops run by the autograd engine (backward), the module and line of the forward op that created the node
  (`torch._C._current_autograd_node()._sequence_nr()`), so backward device time lands on the user's line;
- `t0_ns`/`t1_ns`: `time.monotonic_ns()` around the op, the clock TorchNeuron's metric samples are stamped with
  (`std::chrono::steady_clock`, `csrc/core/metrics/NeuronMetrics.cpp`), so a NEFF compile is attributed to the
  op (and line) during which it ran.

Compile mode: an active `TorchDispatchMode` stops torch.compile from compiling (Dynamo runs the frame eagerly), so
with `compile_mode=True` the log records no aten ops; it records each Dynamo compile instead (Dynamo's
`callback_handler` start/end callbacks: the compile id, the user's line that called the compiled function, the
module running, the time window), which is where TorchNeuron compiles the graph's NEFF. Device executions of
compiled graphs then keep the runtime's names (the join needs the per-op records).

Thread ids: RecordFunction's ids are not visible from Python; threads are numbered here in order of first op, and
the join matches TorchNeuron's ids to them by the sequence numbers they share (`executions.thread_map`). `device_executes` says which ops launch device work:
views and metadata ops never do. Both rules are the studio's reading of the source, unverified on hardware.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neuron_studio.profiler.module_tracker import ModuleTracker

__all__ = ["FrameworkLog", "OpRecord", "device_executes", "NO_DEVICE_WORK"]

#: aten ops that launch no device work (allocation, metadata, aliasing); views are detected from the schema.
NO_DEVICE_WORK = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::detach", "aten::alias", "aten::lift_fresh",
    "aten::_local_scalar_dense", "aten::set_", "aten::resize_", "aten::is_same_size", "aten::size", "aten::stride",
    "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::_has_compatible_shallow_copy_type",
})


def op_name(func: Any) -> str:
    """`aten::mm` for the OpOverload `aten.mm.default` (the name op tracking and profilers use)."""
    return str(func._schema.name)


def device_executes(func: Any) -> bool:
    """Does this op launch device work (a NEFF execution) when its tensors are on the device? Not views, metadata
    ops, or the profiler's own `profiler::` ops (record_function markers)."""
    name = op_name(func)
    return not bool(getattr(func, "is_view", False)) and name not in NO_DEVICE_WORK and \
        not name.startswith("profiler::")


def _skip_dirs() -> tuple[str, ...]:
    """Frames that are not the user's code: torch, contextlib (and the stdlib beside it), the studio, TorchNeuron
    (as the emulator's `registration._skip_dirs` does for emulated ops)."""
    import contextlib
    import importlib.util

    spec = importlib.util.find_spec("neuron_studio")       # located, not imported (no import cycle)
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(contextlib.__file__),
            os.path.dirname(os.path.abspath(__file__))]
    if spec is not None and spec.origin:
        dirs.append(os.path.dirname(os.path.abspath(spec.origin)))
    nx = sys.modules.get("torch_neuronx")
    if nx is not None and getattr(nx, "__file__", None):
        dirs.append(os.path.dirname(nx.__file__))
    return tuple(d + os.sep for d in dirs)


@dataclass
class OpRecord:
    """One dispatched aten op (all lists are columns, one entry per op, in dispatch order)."""

    name: list[str] = field(default_factory=list)
    thread: list[int] = field(default_factory=list)      # 1, 2, ... in order of first op on that thread
    seq: list[int] = field(default_factory=list)         # at::sequence_number::peek() at dispatch
    fwd_seq: list[int] = field(default_factory=list)     # backward ops: the forward node's number, else -1
    module: list[str] = field(default_factory=list)
    source: list[str | None] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)       # forward | backward | optimizer
    shapes: list[str] = field(default_factory=list)
    device: list[bool] = field(default_factory=list)     # launches device work (device_executes)
    t0_ns: list[int] = field(default_factory=list)
    t1_ns: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)        # profiled step 0.., warm-up -warmup..-1, outside: None

    def __len__(self) -> int:
        return len(self.name)


class _Mode(TorchDispatchMode):
    def __init__(self, log: "FrameworkLog") -> None:
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        i = self.log._begin(func, args, kwargs or {})
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.log.ops.t1_ns[i] = time.monotonic_ns()


def _shapes(args: Any, kwargs: Any) -> str:
    out = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append("x".join(str(int(d)) for d in a.shape) or "scalar")
    return ",".join(out)


class FrameworkLog:
    """`with FrameworkLog() as log: run()` -> `log.ops` (an `OpRecord`); `log.step = k` marks the iteration:
    profiled steps 0.., warm-up iterations negative (-warmup .. -1)."""

    def __init__(self, *, compile_mode: bool = False) -> None:
        self.compile_mode = compile_mode
        self.ops = OpRecord()
        self.step: int | None = None
        self._threads: dict[int, int] = {}
        self._main = threading.get_ident()
        self._skip = _skip_dirs()
        self._mode: _Mode | None = None
        self._tracker: Any = None
        self._lock = threading.Lock()
        self._first_by_seq: dict[int, int] = {}

    # -- recording ------------------------------------------------------------------------------------
    def _source(self) -> str | None:
        f = sys._getframe(3)
        while f is not None:
            fn = f.f_code.co_filename
            if not fn.startswith(self._skip) and "<frozen" not in fn:
                return f"{fn}:{f.f_lineno}"
            f = f.f_back
        return None

    def _begin(self, func: Any, args: Any, kwargs: Any) -> int:
        ident = threading.get_ident()
        seq = int(torch._C._autograd._get_sequence_nr())
        node = torch._C._current_autograd_node()           # set while the autograd engine runs a node
        fwd = int(node._sequence_nr()) if node is not None else -1
        with self._lock:
            th = self._threads.setdefault(ident, len(self._threads) + 1)
            o = self.ops
            i = len(o.name)
            if fwd >= 0:                                       # run by the autograd engine: the forward's context
                j = self._first_by_seq.get(fwd + 1, -1)
                if j >= 0:
                    module, source = o.module[j], o.source[j]
                else:   # a node with no forward op here (AccumulateGrad): the line that ran backward, if any
                    module, source = "", self._source() if ident == self._main else None
                phase = "backward"
            else:
                stack = self._tracker.stack if self._tracker is not None and ident == self._main else []
                module = stack[-1] if stack else ""
                source = self._source() if ident == self._main else None
                phase = "optimizer" if module.startswith("optimizer.") else "forward"
                self._first_by_seq.setdefault(seq, i)          # the first op after the counter moved made node seq-1
            o.name.append(op_name(func))
            o.thread.append(th)
            o.seq.append(seq)
            o.fwd_seq.append(fwd)
            o.module.append(module)
            o.source.append(source)
            o.phase.append(phase)
            o.shapes.append(_shapes(args, kwargs))
            o.device.append(device_executes(func))
            o.t0_ns.append(time.monotonic_ns())
            o.t1_ns.append(0)
            o.step.append(self.step)
        return i

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> "FrameworkLog":
        class _NoBus:            # the tracker stamps device sequence numbers; the op log keys on autograd's
            last_seq = 0
            current_graph = -1   # no device graph launches are numbered here

        self._tracker = ModuleTracker(_NoBus())
        self._tracker.start()
        if self.compile_mode:
            from torch._dynamo.callback import callback_handler

            callback_handler.register_start_callback(self._compile_start)
            callback_handler.register_end_callback(self._compile_end)
        else:
            self._mode = _Mode(self)
            self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        if self.compile_mode:
            from torch._dynamo.callback import callback_handler

            callback_handler.remove_start_callback(self._compile_start)
            callback_handler.remove_end_callback(self._compile_end)
        if self._tracker is not None:
            self._tracker.stop()

    # -- compile mode: one record per Dynamo compile ---------------------------------------------------
    def _compile_start(self, args: Any) -> None:
        with self._lock:
            o = self.ops
            stack = self._tracker.stack if self._tracker is not None else []
            cid = str(getattr(args, "compile_id", "?"))       # "<frame>/<recompile>"
            o.name.append(f"torch.compile frame {cid.strip('[]').split('/')[0]}")
            o.thread.append(self._threads.setdefault(threading.get_ident(), len(self._threads) + 1))
            o.seq.append(int(torch._C._autograd._get_sequence_nr()))
            o.fwd_seq.append(-1)
            o.module.append(stack[-1] if stack else "")
            o.source.append(self._source())
            o.phase.append("compile")
            o.shapes.append(f"compile id {cid}")
            o.device.append(False)
            o.t0_ns.append(time.monotonic_ns())
            o.t1_ns.append(0)
            o.step.append(self.step)

    def _compile_end(self, args: Any) -> None:
        with self._lock:
            o = self.ops
            for i in range(len(o) - 1, -1, -1):
                if o.phase[i] == "compile" and o.t1_ns[i] == 0:
                    o.t1_ns[i] = time.monotonic_ns()
                    break

    # -- queries --------------------------------------------------------------------------------------
    def at_time(self, mono_ns: int) -> int:
        """Index of the op running at `mono_ns` (innermost, i.e. latest started), else the last one started
        before it; -1 when none."""
        t0 = np.asarray(self.ops.t0_ns, dtype=np.int64)
        if not len(t0):
            return -1
        return int(np.searchsorted(t0, int(mono_ns), side="right")) - 1
