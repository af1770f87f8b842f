"""Op events: what the device tells the profiler about every op it executed.

The device records; subscribers (the profiler's capture) drain. When nobody is subscribed, the device
checks one flag and records nothing, so the emulator pays no recording cost outside a profile. A device that
records natively (the emulator's C++ recorder) is the bus's `EventSource`: it keeps its rows until a
subscription drains and hands them over as an `OpBatch`, columns the profiler reads directly, with the
per-op fields (policies, FLOPs) computed once per distinct op signature. `OpEvent` is one row of a batch, for
code that wants objects (`Subscription.drain()`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

import numpy as np

__all__ = [
    "OpEvent",
    "OpSignature",
    "OpBatch",
    "FLAG_DETERMINISTIC",
    "FLAG_BACKWARD",
    "FLAG_TIMING_SYNC",
    "StorageIds",
    "Subscription",
    "EventBus",
    "EventSource",
    "SYNC_ITEM",
    "SYNC_TO_HOST",
    "SYNC_PRINT",
    "SYNC_DATA_DEPENDENT",
    "SYNC_EXPLICIT",
    "SYNC_HOST_ROUND_TRIP",
    "TRANSFER_H2D",
    "TRANSFER_D2H",
    "TAG_TIMING_SYNC",
]

# Why an op forced the host to wait for the device (and so closed an adaptive-eager fusion group).
SYNC_ITEM = "item"                      # .item(), bool(t), float(t), .tolist()
SYNC_TO_HOST = "to_host"                # .cpu(), .numpy() after .cpu(), copies to CPU
SYNC_PRINT = "print"                    # repr/print of a neuron tensor
SYNC_DATA_DEPENDENT = "data_dependent"  # output shape depends on values (nonzero, unique, masked_select)
SYNC_EXPLICIT = "synchronize"           # torch.neuron.synchronize()
SYNC_HOST_ROUND_TRIP = "host_round_trip"  # a 64-bit cast: copied to the host, cast there, copied back

TAG_TIMING_SYNC = "timing_sync"         # the profiler's own end-of-run synchronize, not the user's

TRANSFER_H2D = "h2d"
TRANSFER_D2H = "d2h"

# OpBatch.flags bits: the row tags "deterministic", "backward", TAG_TIMING_SYNC
FLAG_DETERMINISTIC, FLAG_BACKWARD, FLAG_TIMING_SYNC = 1, 2, 4
_FLAG_TAGS = ((FLAG_DETERMINISTIC, "deterministic"), (FLAG_BACKWARD, "backward"))


@dataclass(frozen=True, slots=True)
class OpEvent:
    """One aten op executed on a `neuron` device (emulated or real).

    Times are host wall-clock nanoseconds (`time.perf_counter_ns`). Shapes and dtypes describe tensor
    arguments in positional order (dtype names as `str(torch.dtype)` without the "torch." prefix).
    """

    seq: int
    name: str                                   # "aten::mm"
    overload: str                               # "default", "Tensor", "out", ...
    start_ns: int
    end_ns: int
    thread: int
    device_index: int
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    flops: int = 0                              # torch.utils.flop_counter rules; 0 when it has none
    is_view: bool = False                       # view/metadata only: no data moves
    is_inplace: bool = False
    sync: str | None = None                     # one of SYNC_*: the host waited on the device here
    transfer: str | None = None                 # TRANSFER_H2D / TRANSFER_D2H for host<->device copies
    transfer_bytes: int = 0
    fallback: str | None = None                 # reason this op runs on CPU under TorchNeuron, else None
    source: str | None = None                   # "file.py:123" of the user code that issued the op
    graph: int = -1                             # compiled-graph launch this op ran in (compile mode), else -1
    tags: tuple[str, ...] = field(default=())   # free-form markers, e.g. ("deterministic",)
    reads: tuple[int, ...] | None = None        # storages the op read (opaque ids; None = not recorded)
    writes: tuple[int, ...] | None = None       # storages it wrote: fresh outputs and mutated arguments
    input_strides: tuple[tuple[int, ...], ...] | None = None  # strides of the input tensors (None = not recorded)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class OpSignature:
    """What the ops of one signature (op, shapes, strides, dtypes, kept arguments, sync/transfer kind) share: the
    OpEvent fields computed once per signature rather than once per op."""

    name: str
    overload: str
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    input_strides: tuple[tuple[int, ...], ...] | None = None
    flops: int = 0
    is_view: bool = False
    is_inplace: bool = False
    sync: str | None = None
    transfer: str | None = None
    fallback: str | None = None
    tags_before: tuple[str, ...] = ()    # policy tags (casts): before the row's own tags
    tags_after: tuple[str, ...] = ()     # tags from the op's arguments (attention, collectives): after them
    records_storages: bool = True        # False: its rows' reads/writes are not recorded (markers)


def _gather_lists(offsets: np.ndarray, flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, flat) of the variable-length lists of `rows` (indices into `offsets`), in that order."""
    lengths = offsets[rows + 1] - offsets[rows]
    new_off = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_off[1:])
    if not new_off[-1]:
        return new_off, np.zeros(0, dtype=np.int64)
    starts = np.repeat(offsets[rows] - new_off[:-1], lengths)
    return new_off, flat[starts + np.arange(new_off[-1], dtype=np.int64)]


@dataclass(frozen=True)
class OpBatch:
    """Op events as columns: numpy arrays with one entry per op, in record order, and the signature table the
    rows point into (`signature[i]` indexes `signatures`). The profiler builds its tables from these directly.

    `source` holds each op's user line ("file:line" or the session's cell name; None when not recorded);
    `autograd_seq` the sequence number of the backward node a forward op made (-1: none); `fwd_seq` the forward
    op a backward op differentiates (-1: none); `flags` FLAG_* bits. Storages read/written are flat int64 lists
    with `len + 1` offsets; the rows of a signature that does not record storages have None.
    """

    seq: np.ndarray             # int64
    start_ns: np.ndarray        # int64 host wall clock (time.perf_counter_ns)
    end_ns: np.ndarray          # int64
    thread: np.ndarray          # int64
    device_index: np.ndarray    # int32
    graph: np.ndarray           # int64
    transfer_bytes: np.ndarray  # int64
    signature: np.ndarray       # int32 index into signatures
    signatures: tuple[OpSignature, ...]
    source: np.ndarray          # object: str | None
    flags: np.ndarray           # uint8
    autograd_seq: np.ndarray    # int64
    fwd_seq: np.ndarray         # int64
    reads_offsets: np.ndarray   # int64, len + 1
    reads: np.ndarray           # int64
    writes_offsets: np.ndarray  # int64, len + 1
    writes: np.ndarray          # int64

    def __len__(self) -> int:
        return len(self.seq)

    @classmethod
    def empty(cls) -> "OpBatch":
        i64 = np.zeros(0, dtype=np.int64)
        return cls(seq=i64, start_ns=i64, end_ns=i64, thread=i64, device_index=np.zeros(0, dtype=np.int32),
                   graph=i64, transfer_bytes=i64, signature=np.zeros(0, dtype=np.int32), signatures=(),
                   source=np.empty(0, dtype=object), flags=np.zeros(0, dtype=np.uint8), autograd_seq=i64,
                   fwd_seq=i64, reads_offsets=np.zeros(1, dtype=np.int64), reads=i64,
                   writes_offsets=np.zeros(1, dtype=np.int64), writes=i64)

    _ROW_FIELDS = ("seq", "start_ns", "end_ns", "thread", "device_index", "graph", "transfer_bytes", "signature",
                   "source", "flags", "autograd_seq", "fwd_seq")

    def take(self, rows: np.ndarray) -> "OpBatch":
        """The batch of the given rows (indices, in that order), sharing this batch's signature table."""
        rows = np.asarray(rows, dtype=np.int64)
        fields = {f: getattr(self, f)[rows] for f in self._ROW_FIELDS}
        fields["reads_offsets"], fields["reads"] = _gather_lists(self.reads_offsets, self.reads, rows)
        fields["writes_offsets"], fields["writes"] = _gather_lists(self.writes_offsets, self.writes, rows)
        return OpBatch(signatures=self.signatures, **fields)

    @staticmethod
    def concat(batches: "Iterable[OpBatch]") -> "OpBatch":
        """One batch of the rows of `batches`, in order (their signature tables are appended)."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return OpBatch.empty()
        if len(batches) == 1:
            return batches[0]
        fields = {f: np.concatenate([getattr(b, f) for b in batches]) for f in OpBatch._ROW_FIELDS}
        base = np.cumsum([0] + [len(b.signatures) for b in batches[:-1]])
        fields["signature"] = np.concatenate([b.signature + np.int32(k) for b, k in zip(batches, base)])
        for name in ("reads", "writes"):
            offs = [getattr(b, f"{name}_offsets") for b in batches]
            shift = np.cumsum([0] + [o[-1] for o in offs[:-1]])
            fields[f"{name}_offsets"] = np.concatenate([offs[0][:1]] + [o[1:] + s for o, s in zip(offs, shift)])
            fields[name] = np.concatenate([getattr(b, name) for b in batches])
        return OpBatch(signatures=tuple(s for b in batches for s in b.signatures), **fields)

    def tags(self) -> list[tuple[str, ...]]:
        """Each row's tags, as OpEvent.tags: the signature's policy tags, "deterministic", "backward",
        "fwd_seq=N" / "seq=N" (autograd), "timing_sync", then the tags from the op's arguments."""
        sigs = self.signatures
        out = []
        for s, fl, aseq, fseq in zip(self.signature.tolist(), self.flags.tolist(), self.autograd_seq.tolist(),
                                     self.fwd_seq.tolist()):
            sig = sigs[s]
            if not fl and aseq < 0 and fseq < 0:
                out.append(sig.tags_before + sig.tags_after)
                continue
            own = [t for bit, t in _FLAG_TAGS if fl & bit]
            if fseq >= 0:
                own.append(f"fwd_seq={fseq}")
            if aseq >= 0:
                own.append(f"seq={aseq}")
            if fl & FLAG_TIMING_SYNC:
                own.append(TAG_TIMING_SYNC)
            out.append(sig.tags_before + tuple(own) + sig.tags_after)
        return out

    def storage_lists(self) -> tuple[list[tuple[int, ...] | None], list[tuple[int, ...] | None]]:
        """(reads, writes) of each row as tuples of storage ids (None where not recorded)."""
        keep = [s.records_storages for s in self.signatures]

        def lists(offsets: np.ndarray, flat: np.ndarray) -> list:
            flat_l, off = flat.tolist(), offsets.tolist()
            return [tuple(flat_l[off[i]:off[i + 1]]) if keep[s] else None
                    for i, s in enumerate(self.signature.tolist())]

        return lists(self.reads_offsets, self.reads), lists(self.writes_offsets, self.writes)

    def events(self) -> list[OpEvent]:
        """The rows as OpEvent objects (for code that wants one object per op; the profiler reads columns)."""
        sigs = self.signatures
        reads, writes = self.storage_lists()
        out = []
        for i, (seq, t0, t1, th, dev, g, tb, s, src, tags) in enumerate(zip(
                self.seq.tolist(), self.start_ns.tolist(), self.end_ns.tolist(), self.thread.tolist(),
                self.device_index.tolist(), self.graph.tolist(), self.transfer_bytes.tolist(),
                self.signature.tolist(), self.source.tolist(), self.tags())):
            sig = sigs[s]
            out.append(OpEvent(
                seq=seq, name=sig.name, overload=sig.overload, start_ns=t0, end_ns=t1, thread=th, device_index=dev,
                input_shapes=sig.input_shapes, input_dtypes=sig.input_dtypes, output_shapes=sig.output_shapes,
                output_dtypes=sig.output_dtypes, flops=sig.flops, is_view=sig.is_view, is_inplace=sig.is_inplace,
                sync=sig.sync, transfer=sig.transfer, transfer_bytes=tb, fallback=sig.fallback, source=src, graph=g,
                tags=tags, reads=reads[i], writes=writes[i], input_strides=sig.input_strides))
        return out


class StorageIds:
    """Stable ids for storages, one per storage lifetime: a storage's address can be reused once it is freed, so
    an op's fresh output gets a new id even at an address seen before (no false dependency on the old one)."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}
        self._last = 0

    def of(self, address: int) -> int:
        """The id of the live storage at `address` (a new one for a storage first seen here)."""
        i = self._ids.get(address)
        return i if i is not None else self.fresh(address)

    def fresh(self, address: int) -> int:
        """A new id for a storage an op just created at `address`."""
        self._last += 1
        self._ids[address] = self._last
        return self._last


class EventSource(Protocol):
    """A device that records op events itself (in native code) and hands them over when asked."""

    def configure(self, active: bool, want_source: bool, capacity: int) -> None:
        """Record (or stop and forget what was recorded) with source lines or not, keeping the newest `capacity`."""

    def take(self) -> tuple[OpBatch, int]:
        """The events recorded since the last call, oldest first, and how many were dropped meanwhile."""

    def last_seq(self) -> int:
        """Sequence number of the last op recorded."""

    def set_graph(self, graph: int) -> None:
        """The compiled-graph launch the ops run in from now on (-1: none)."""


class Subscription:
    """A bounded FIFO of op events for one consumer. When full, the oldest events are dropped and counted."""

    def __init__(self, bus: "EventBus", capacity: int, with_source: bool) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._bus = bus
        self._batches: list[OpBatch] = []
        self._n = 0
        self.capacity = capacity
        self.with_source = with_source
        self.dropped = 0
        self.closed = False

    def _push(self, batch: OpBatch) -> None:
        if not len(batch):
            return
        self._batches.append(batch)
        self._n += len(batch)
        if self._n > self.capacity:
            over = self._n - self.capacity
            self.dropped += over
            rest = OpBatch.concat(self._batches)
            self._batches = [rest.take(np.arange(over, len(rest)))]
            self._n = self.capacity

    def _held(self) -> OpBatch:
        self._bus.pull()
        batch = OpBatch.concat(self._batches)
        self._batches = [batch] if len(batch) else []
        return batch

    def drain_columns(self) -> OpBatch:
        """Return and forget the events received so far, oldest first, as columns (what the profiler reads)."""
        batch = self._held()
        self._batches = []
        self._n = 0
        return batch

    def drain(self) -> list[OpEvent]:
        """Return and forget the events received so far, oldest first, as OpEvent objects."""
        return self.drain_columns().events()

    def __len__(self) -> int:
        self._bus.pull()
        return self._n

    def __iter__(self) -> Iterator[OpEvent]:
        return iter(self._held().events())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._bus._remove(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventBus:
    """Fan-out of op events to subscriptions. `active` is the one flag the device checks per op."""

    def __init__(self, source: EventSource | None = None) -> None:
        self._lock = threading.RLock()
        self._subs: tuple[Subscription, ...] = ()
        self._source = source
        self.active = False
        self.want_source = False
        self._graph = -1
        self._seq = 0
        self._graph_launches = 0
        self.record_errors = 0  # ops whose event could not be completed (counted, never raised)
        self.storages = StorageIds()  # ids of the storages ops read and write (OpEvent.reads/writes)
        # names a user-code location (file, line) as the session knows it (the notebook's cells): the one place
        # sources are named, so every view reads the same `cell-<In>:<line>`; None: `file:line`
        self.source_namer: Callable[[str, int], str] | None = None

    def set_source_namer(self, namer: Callable[[str, int], str] | None) -> None:
        """Name op sources from now on with `namer(file, line)` (the notebook session registers its cells)."""
        self.source_namer = namer

    def attach(self, source: EventSource) -> None:
        """Let `source` record this bus's events (the emulator's native recorder)."""
        self._source = source
        self._refresh()

    @property
    def current_graph(self) -> int:
        """The compiled-graph launch running now (-1: none); set by the compile backend around a launch."""
        return self._graph

    @current_graph.setter
    def current_graph(self, graph: int) -> None:
        self._graph = graph
        if self._source is not None:
            self._source.set_graph(graph)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def next_graph_launch(self) -> int:
        """A new id for one execution of a compiled graph (its ops share it in `OpEvent.graph`)."""
        self._graph_launches += 1
        return self._graph_launches

    @property
    def last_seq(self) -> int:
        """Sequence number of the last op recorded; capture uses it to bracket regions."""
        return self._source.last_seq() if self._source is not None else self._seq

    def subscribe(self, capacity: int = 1_000_000, with_source: bool = False) -> Subscription:
        sub = Subscription(self, capacity, with_source)
        with self._lock:
            self.pull()  # what was recorded so far belongs to the subscriptions already there
            self._subs = self._subs + (sub,)
            self._refresh()
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            self.pull()
            self._subs = tuple(s for s in self._subs if s is not sub)
            self._refresh()

    def _refresh(self) -> None:
        self.active = bool(self._subs)
        self.want_source = any(s.with_source for s in self._subs)
        if self._source is not None:
            capacity = max((s.capacity for s in self._subs), default=1)
            self._source.configure(self.active, self.want_source, capacity)

    def pull(self) -> None:
        """Hand what the native recorder holds to the subscriptions (a no-op without a source)."""
        if self._source is None or not self._subs:
            return
        with self._lock:
            batch, dropped = self._source.take()
            for sub in self._subs:
                sub.dropped += dropped
                sub._push(batch)
