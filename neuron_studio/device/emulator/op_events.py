"""The emulator's op events: columns recorded in C++ (csrc/Module.cpp) completed into an OpBatch when drained.

C++ records what it knows without Python (name, shapes, strides, dtypes, storages read/written, timing, syncs,
transfers, autograd flags, the user's source line when asked) and hands the rows over as columns plus a table of
distinct op signatures. The fields that rest on Python data are computed here once per signature, not per op:
TorchNeuron's policies from the op-coverage file (CPU fallbacks, host round trips of 64-bit casts, eager cast
tags), FLOPs by torch's own formulas (from the argument metadata C++ keeps for the ops that have one), and the
extra fields of attention ops and collectives (`RECORD_EXTRA`); source lines once per distinct line.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from neuron_studio.device import events as ev
from neuron_studio.device.coverage import op_coverage
from neuron_studio.device.emulator.attention import ATTENTION_RECORD_EXTRA

__all__ = ["NativeEventSource", "RECORD_EXTRA", "keep_args_ops"]

# op -> fn(func, args, kwargs, out) -> the fields its events get: "tags" (appended) and "transfer_bytes"
# (attention tags; collectives: filled by emulator.distributed.install()). args/out hold meta tensors: shapes,
# strides and dtypes, no data.
RECORD_EXTRA: dict[Any, Callable[..., dict]] = dict(ATTENTION_RECORD_EXTRA)
_EXTRA_FIELDS = frozenset({"tags", "transfer_bytes"})


def keep_args_ops() -> list[str]:
    """Qualified names of the ops whose argument metadata C++ keeps: those with a FLOP formula or a hook."""
    from torch.utils.flop_counter import flop_registry

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
        self._armed = False

    def configure(self, active: bool, want_source: bool, capacity: int) -> None:
        if active and not self._armed:
            self._arm()
        self._C.set_recording(active, want_source, capacity)

    def _arm(self) -> None:
        """Tell C++ which ops' arguments to keep (those with a FLOP formula or a record hook), when recording first
        starts: torch.utils.flop_counter imports triton wherever triton is installed (torch's CUDA wheels),
        ~130 ms that `import neuron_studio` does not pay."""
        from neuron_studio.device.emulator.attention import register_attention_flops

        register_attention_flops()
        self._C.set_keep_args_ops(keep_args_ops())
        self._armed = True

    def last_seq(self) -> int:
        return self._C.last_seq()

    def set_graph(self, graph: int) -> None:
        self._C.set_current_graph(graph)

    def take(self) -> tuple[ev.OpBatch, int]:
        cols = self._C.take_columns()
        n = cols["n"]
        if not n:
            return ev.OpBatch.empty(), cols["dropped"]

        def col(key: str, dtype: Any) -> np.ndarray:
            return np.frombuffer(cols[key], dtype=dtype)

        signature = col("sig", np.int32)
        sigs: list[ev.OpSignature | None] = []
        sig_bytes: list[int | None] = []
        for row in cols["signatures"]:
            try:
                sig, nbytes = self._signature(row)
            except Exception:  # noqa: BLE001 - one op that cannot be completed must not lose the rest
                sig, nbytes = None, None
            sigs.append(sig)
            sig_bytes.append(nbytes)
        transfer_bytes = col("transfer_bytes", np.int64)
        if any(b is not None for b in sig_bytes):  # the op's own message size (collectives)
            own = np.array([-1 if b is None else b for b in sig_bytes], dtype=np.int64)[signature]
            transfer_bytes = np.where(own >= 0, own, transfer_bytes)
        namer = self._bus.source_namer
        names = np.empty(len(cols["sources"]) + 1, dtype=object)  # the last entry (index -1): no source
        names[:-1] = [f"{file}:{line}" if namer is None else namer(file, line) for file, line in cols["sources"]]
        batch = ev.OpBatch(
            seq=col("seq", np.int64), start_ns=col("t0", np.int64), end_ns=col("t1", np.int64),
            thread=col("thread", np.int64), device_index=col("device", np.int32), graph=col("graph", np.int64),
            transfer_bytes=transfer_bytes, signature=signature,
            signatures=tuple(s if s is not None else _FAILED for s in sigs),
            source=names[col("source", np.int32)], flags=col("flags", np.uint8),
            autograd_seq=col("autograd_seq", np.int64), fwd_seq=col("fwd_seq", np.int64),
            reads_offsets=col("reads_offsets", np.int64), reads=col("reads", np.int64),
            writes_offsets=col("writes_offsets", np.int64), writes=col("writes", np.int64),
        )
        failed = [i for i, s in enumerate(sigs) if s is None]
        if failed:
            lost = np.isin(signature, failed)
            self._bus.record_errors += int(lost.sum())
            batch = batch.take(np.flatnonzero(~lost))
        return batch, cols["dropped"]

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

    def _signature(self, row: tuple) -> tuple[ev.OpSignature, int | None]:
        """One signature's OpEvent fields, and the message size its ops move (collectives; None: the row's)."""
        (name, overload, in_shapes, in_dtypes, out_shapes, out_dtypes, in_strides, is_view, is_inplace, sync,
         transfer, in_graph, is_marker, args, outs) = row
        fallback = None
        flops = 0
        cast_tags: tuple[str, ...] = ()
        extra: dict = {}
        if not is_marker:
            fallback, round_trip, cast_tags = self._policy(name, in_dtypes, out_dtypes,
                                                           transfer is None and not in_graph)
            if round_trip:
                sync = ev.SYNC_HOST_ROUND_TRIP
            if args is not None:
                func = self._op(name, overload)
                if func is not None:
                    pos, kw = _split(func, args)
                    out = outs[0] if outs is not None and len(outs) == 1 else outs
                    flops = _flops(func, pos, kw, out)
                    hook = RECORD_EXTRA.get(func)
                    if hook is not None:
                        extra = dict(hook(func, pos, kw, out))
                        unknown = set(extra) - _EXTRA_FIELDS
                        if unknown:
                            raise ValueError(f"record hook of {name} set unknown fields {sorted(unknown)}")
        sig = ev.OpSignature(
            name=name, overload=overload, input_shapes=in_shapes, input_dtypes=in_dtypes, output_shapes=out_shapes,
            output_dtypes=out_dtypes, input_strides=in_strides, flops=flops, is_view=is_view, is_inplace=is_inplace,
            sync=sync, transfer=transfer, fallback=fallback, tags_before=cast_tags,
            tags_after=tuple(extra.get("tags", ())), records_storages=not is_marker)
        nbytes = extra.get("transfer_bytes")
        return sig, None if nbytes is None else int(nbytes)


# the signature of ops whose fields could not be computed (their rows are dropped and counted)
_FAILED = ev.OpSignature(name="", overload="", input_shapes=(), input_dtypes=(), output_shapes=(), output_dtypes=())


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
    from torch.utils.flop_counter import flop_registry

    fn = flop_registry.get(func._overloadpacket)
    if fn is None:
        return 0
    try:
        return int(fn(*args, **kw, out_val=out))
    except Exception:  # noqa: BLE001 - flop formulas reject some argument forms; a missing count is not an error
        return 0
