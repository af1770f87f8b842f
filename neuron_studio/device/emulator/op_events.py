"""The emulator's op events: rows recorded in C++ (csrc/Module.cpp) turned into OpEvents when drained.

C++ records what it knows without Python (name, shapes, strides, dtypes, storages read/written, timing, syncs,
transfers, autograd tags, the user's source line when asked); the fields that rest on Python data are computed
here, once per drained event: TorchNeuron's policies from the op-coverage file (CPU fallbacks, host round trips
of 64-bit casts, eager cast tags), FLOPs by torch's own formulas (from the argument metadata C++ keeps for the
ops that have one), and the extra fields of attention ops and collectives (`RECORD_EXTRA`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch.utils.flop_counter import flop_registry

from neuron_studio.device import events as ev
from neuron_studio.device.coverage import op_coverage
from neuron_studio.device.emulator.attention import ATTENTION_RECORD_EXTRA

__all__ = ["NativeEventSource", "RECORD_EXTRA", "keep_args_ops"]

# op -> fn(func, args, kwargs, out) -> OpEvent fields to set (attention tags; collectives: filled by
# emulator.distributed.install()). args/out hold meta tensors: shapes, strides and dtypes, no data.
RECORD_EXTRA: dict[Any, Callable[..., dict]] = dict(ATTENTION_RECORD_EXTRA)
_MARKERS = frozenset({"aten::_print", "aten::tolist", "neuron::synchronize"})


def keep_args_ops() -> list[str]:
    """Qualified names of the ops whose argument metadata C++ keeps: those with a FLOP formula or a hook."""
    names = {p._qualified_op_name for p in flop_registry if hasattr(p, "_qualified_op_name")}  # not HOPs
    names |= {f"{op._schema.name}.{op._overloadname}" for op in RECORD_EXTRA}
    return sorted(names)


class NativeEventSource:
    """The bus's EventSource over the C++ recorder."""

    def __init__(self, native: Any, bus: ev.EventBus) -> None:
        self._C = native
        self._bus = bus
        self._ops: dict[tuple[str, str], Any] = {}
        self._policies: dict[tuple, tuple] = {}  # (name, dtypes in/out, eager) -> (fallback, round trip, tags)

    def configure(self, active: bool, want_source: bool, capacity: int) -> None:
        self._C.set_recording(active, want_source, capacity)

    def last_seq(self) -> int:
        return self._C.last_seq()

    def set_graph(self, graph: int) -> None:
        self._C.set_current_graph(graph)

    def take(self) -> tuple[list[ev.OpEvent], int]:
        rows, dropped = self._C.take_events()
        out = []
        for row in rows:
            try:
                out.append(self._event(row))
            except Exception:  # noqa: BLE001 - one event that cannot be completed must not lose the rest
                self._bus.record_errors += 1
        return out, dropped

    def _policy(self, name: str, in_dtypes: tuple, out_dtypes: tuple, eager: bool) -> tuple:
        """TorchNeuron's policies for one op and dtypes: (fallback reason, host round trip?, cast tags)."""
        key = (name, in_dtypes, out_dtypes, eager)
        found = self._policies.get(key)
        if found is None:
            coverage = op_coverage()
            fallback = coverage.fallback_reason(name)
            round_trip = False
            if fallback is None and eager:
                fallback = coverage.round_trip_cast(name, in_dtypes, out_dtypes)
                round_trip = fallback is not None
            # a factory (no tensor inputs) makes its dtype on the device: its outputs' dtypes are what is cast
            cast_tags = coverage.cast_tags(in_dtypes if in_dtypes else out_dtypes)
            found = self._policies[key] = (fallback, round_trip, cast_tags)
        return found

    def _op(self, name: str, overload: str) -> Any:
        key = (name, overload)
        op = self._ops.get(key)
        if op is None and key not in self._ops:
            ns, _, base = name.partition("::")
            try:
                op = getattr(getattr(getattr(torch.ops, ns), base), overload)
            except AttributeError:
                op = None
            self._ops[key] = op
        return op

    def _event(self, row: tuple) -> ev.OpEvent:
        (seq, name, overload, t0, t1, thread, device, in_shapes, in_dtypes, out_shapes, out_dtypes, is_view,
         is_inplace, sync, transfer, transfer_bytes, source, graph, tags, reads, writes, in_strides, args,
         outs) = row
        fallback = None
        flops = 0
        extra = None
        if name not in _MARKERS:
            fallback, round_trip, cast_tags = self._policy(name, in_dtypes, out_dtypes,
                                                           transfer is None and graph < 0)
            if round_trip:
                sync = ev.SYNC_HOST_ROUND_TRIP
            tags = cast_tags + tags
            if args is not None:
                func = self._op(name, overload)
                if func is not None:
                    pos, kw = _split(func, args)
                    out = outs[0] if outs is not None and len(outs) == 1 else outs
                    flops = _flops(func, pos, kw, out)
                    hook = RECORD_EXTRA.get(func)
                    if hook is not None:
                        extra = hook(func, pos, kw, out)
        if name == "neuron::synchronize":
            source = None  # a sync is the device's, not a line of the program (the profiler's own sync is too)
        if source is not None and self._bus.source_namer is not None:
            file, _, line = source.rpartition(":")
            source = self._bus.source_namer(file, int(line))
        event = ev.OpEvent(
            seq=seq, name=name, overload=overload, start_ns=t0, end_ns=t1, thread=thread, device_index=device,
            input_shapes=in_shapes, input_dtypes=in_dtypes, output_shapes=out_shapes, output_dtypes=out_dtypes,
            flops=flops, is_view=is_view, is_inplace=is_inplace, sync=sync, transfer=transfer,
            transfer_bytes=transfer_bytes, fallback=fallback, source=source, graph=graph, tags=tags,
            reads=reads if name not in _MARKERS else None, writes=writes if name not in _MARKERS else None,
            input_strides=in_strides,
        )
        if extra:
            extra = dict(extra)
            extra["tags"] = event.tags + tuple(extra.get("tags", ()))
            event = dataclasses.replace(event, **extra)
        return event


def _split(func: Any, args: tuple) -> tuple[list, dict]:
    """Positional and keyword-only arguments, as the op's schema names them."""
    pos: list = []
    kw: dict = {}
    for a, value in zip(func._schema.arguments, args):
        if a.kwarg_only:
            kw[a.name] = value
        else:
            pos.append(value)
    return pos, kw


def _flops(func: Any, args: list, kw: dict, out: Any) -> int:
    """The op's FLOPs by torch's flop formulas; 0 where torch has none for it."""
    fn = flop_registry.get(func._overloadpacket)
    if fn is None:
        return 0
    try:
        return int(fn(*args, **kw, out_val=out))
    except Exception:  # noqa: BLE001 - flop formulas reject some argument forms; a missing count is not an error
        return 0
