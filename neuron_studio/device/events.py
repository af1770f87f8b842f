"""OpEvents: what the device tells the profiler about every op it executed.

The device publishes; subscribers (the profiler's capture) drain. When nobody is subscribed, the device
checks one flag and records nothing, so the emulator pays no recording cost outside a profile. A device that
records natively (the emulator's C++ recorder) is the bus's `EventSource`: it keeps its rows until a
subscription drains, and the bus turns them into OpEvents then.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

__all__ = [
    "OpEvent",
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

    def take(self) -> tuple[list[OpEvent], int]:
        """The events recorded since the last call, oldest first, and how many were dropped meanwhile."""

    def last_seq(self) -> int:
        """Sequence number of the last op recorded."""

    def set_graph(self, graph: int) -> None:
        """The compiled-graph launch the ops run in from now on (-1: none)."""


class Subscription:
    """A bounded FIFO of OpEvents for one consumer. When full, the oldest events are dropped and counted."""

    def __init__(self, bus: "EventBus", capacity: int, with_source: bool) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._bus = bus
        self._events: collections.deque[OpEvent] = collections.deque(maxlen=capacity)
        self.capacity = capacity
        self.with_source = with_source
        self.dropped = 0
        self.closed = False

    def _push(self, event: OpEvent) -> None:
        if len(self._events) == self.capacity:
            self.dropped += 1
        self._events.append(event)

    def drain(self) -> list[OpEvent]:
        """Return and forget the events received so far, oldest first."""
        self._bus.pull()
        out = list(self._events)
        self._events.clear()
        return out

    def __len__(self) -> int:
        self._bus.pull()
        return len(self._events)

    def __iter__(self) -> Iterator[OpEvent]:
        self._bus.pull()
        return iter(list(self._events))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._bus._remove(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventBus:
    """Fan-out of OpEvents to subscriptions. `active` is the one flag the device checks per op."""

    def __init__(self, source: EventSource | None = None) -> None:
        self._lock = threading.RLock()
        self._subs: tuple[Subscription, ...] = ()
        self._source = source
        self.active = False
        self.want_source = False
        self._graph = -1
        self._seq = 0
        self._graph_launches = 0
        self.record_errors = 0  # ops whose event could not be built (counted, never raised)
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
            events, dropped = self._source.take()
            for sub in self._subs:
                sub.dropped += dropped
                for e in events:
                    sub._push(e)

    def publish(self, event: OpEvent) -> None:
        for sub in self._subs:
            sub._push(event)
