"""One classification of every op, computed once per profile and read by every view.

Each op is exactly one of `KINDS`; the breakdown, the op table, the hot path, `cpu_fallbacks()`, the timeline's
lanes and the model's launch rules all read the same `kind` column, so no two views can disagree about an op
(e.g. one calling dropout a CPU fallback while `cpu_fallbacks()` lists nothing).

Rules, first match wins (facts come from the trace's op columns; the sources of each fact are in
neuron_studio/device/coverage.json and trainium.md §1.7):

1. ``collective``: a torch.distributed op (``c10d::`` prefix): runs on the device's collective engines.
2. ``host_fallback``: TorchNeuron runs it on the CPU (`fallback` names the reason, and it is one
   `torch_neuronx.get_fallback_ops()` reports).
3. ``host_round_trip``: runs on the device but needs the host on the way, unreported by `get_fallback_ops()`:
   casts to/from 64-bit types (copied to the host, cast, copied back, with a sync), ops TorchNeuron copies to
   the CPU and back explicitly (`argsort.stable`), and device ops whose random mask the host draws
   (`native_dropout`, SDPA with dropout).
4. ``sync``: the host waited for the device (`.item()`, `.cpu()`, printing, data-dependent shapes,
   `synchronize()`).
5. ``transfer``: a host↔device copy that does not wait (host→device).
6. ``view``: moves no data and launches nothing (views, metadata, allocation).
7. ``device``: a kernel on a NeuronCore engine.

Pure: arrays in, arrays out (the model's schedule and the analyses both use it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from neuron_studio.device.events import SYNC_HOST_ROUND_TRIP
from neuron_studio.profiler.model.ops import base_name, string_rows
from neuron_studio.profiler.vocabulary import COLLECTIVE_PREFIX

__all__ = ["KINDS", "OpKind", "KIND_INFO", "classify_ops", "kind_names", "HOST_ROUND_TRIP_REASONS",
           "HOST_MASK_OPS", "SYNC_HOST_ROUND_TRIP", "COLLECTIVE_PREFIX", "K_DEVICE", "K_HOST_FALLBACK",
           "K_HOST_ROUND_TRIP", "K_SYNC", "K_TRANSFER", "K_COLLECTIVE", "K_VIEW", "HOST_KINDS"]

KINDS: tuple[str, ...] = ("device", "host_fallback", "host_round_trip", "sync", "transfer", "collective", "view")
K_DEVICE, K_HOST_FALLBACK, K_HOST_ROUND_TRIP, K_SYNC, K_TRANSFER, K_COLLECTIVE, K_VIEW = range(len(KINDS))
#: Kinds whose time is (partly) host work: what `cpu_fallbacks()` lists and the breakdown's host-work part holds.
HOST_KINDS: tuple[str, ...] = ("host_fallback", "host_round_trip")

#: Fallback reasons (coverage.json "reasons") that are round trips TorchNeuron does not report as fallbacks.
HOST_ROUND_TRIP_REASONS: frozenset[str] = frozenset({"host_round_trip", "host_round_trip_cast"})
#: Device ops whose random mask the host draws and copies to the device (trainium.md §1.7.1: nn.Dropout).
HOST_MASK_OPS: frozenset[str] = frozenset({"native_dropout"})
#: Attention-event flag (profiler.model.columns.ATTN_DROPOUT): SDPA with dropout draws its mask on the host.
_ATTN_DROPOUT = 2


@dataclass(frozen=True)
class OpKind:
    """What a kind means to a reader: its label, where the op runs, and one sentence on what it costs."""

    key: str
    label: str
    runs_on: str          # "device" | "host" | "device+host" | "none"
    launches: bool        # does an op of this kind launch a NEFF on the device
    description: str


KIND_INFO: dict[str, OpKind] = {
    "device": OpKind("device", "device op", "device", True,
                     "a kernel on a NeuronCore engine (one NEFF launch on its own, or part of a fused region/graph)"),
    "host_fallback": OpKind("host_fallback", "CPU fallback", "host", False,
                            "TorchNeuron runs it on the CPU: inputs copied to the host, the op run there, outputs "
                            "copied back (reported by torch_neuronx.get_fallback_ops())"),
    "host_round_trip": OpKind("host_round_trip", "host round trip", "device+host", False,
                              "runs on the device but needs the host: a 64-bit cast or an op copied to the CPU and "
                              "back, or a random mask drawn on the host and copied over (not reported by "
                              "get_fallback_ops())"),
    "sync": OpKind("sync", "sync", "host", False,
                   "the host waits for the device (.item(), .cpu(), print, data-dependent shapes, synchronize): "
                   "ends every fused region"),
    "transfer": OpKind("transfer", "host↔device transfer", "device", False,
                       "a copy between host and device memory over the host link"),
    "collective": OpKind("collective", "collective", "device", True,
                         "a torch.distributed collective over NeuronLink/EFA: runs alone, never fused"),
    "view": OpKind("view", "view", "none", False, "a view or metadata op: moves no data, launches nothing"),
}


def _obj(a: Any, n: int) -> np.ndarray:
    if a is None:
        return np.full(n, None, dtype=object)
    return np.asarray(a, dtype=object)


def _present(a: np.ndarray) -> np.ndarray:
    """Non-missing strings of an object column (None and NaN count as missing)."""
    out = string_rows(a)
    rows = np.flatnonzero(out)
    out[rows] = np.asarray(a[rows] != "", dtype=bool)
    return out


def _one_of(a: np.ndarray, present: np.ndarray, values: Any) -> np.ndarray:
    """Which elements are one of `values` (compared only where `present` says they are strings)."""
    out = np.zeros(len(a), dtype=bool)
    rows = np.flatnonzero(present)
    out[rows] = np.isin(a[rows].astype(str), list(values))
    return out


def classify_ops(names: Sequence[str] | np.ndarray, *, no_engine: Sequence[bool] | np.ndarray,
                 fallback: Any = None, sync: Any = None, transfer: Any = None,
                 attention: Any = None) -> np.ndarray:
    """Kind code (index into KINDS, int8) per op.

    `names`: op names; `no_engine`: True where the op occupies no engine (views and metadata ops, by the model's
    engine table or the trace's `is_view`); `fallback`, `sync`, `transfer`: the trace's string columns (None/NaN =
    absent); `attention`: the ATTN_* flags (SDPA with dropout draws its mask on the host)."""
    names = np.asarray(names, dtype=object)
    n = len(names)
    fb_s, sy_s, tr_s = _obj(fallback, n), _obj(sync, n), _obj(transfer, n)
    fb, sy, tr = _present(fb_s), _present(sy_s), _present(tr_s)
    uniq, inv = np.unique(names.astype(str), return_inverse=True) if n else (np.zeros(0, dtype=str),
                                                                            np.zeros(0, dtype=np.int64))
    coll = np.fromiter((u.startswith(COLLECTIVE_PREFIX) for u in uniq), dtype=bool, count=len(uniq))[inv]
    mask_op = np.fromiter((base_name(u) in HOST_MASK_OPS for u in uniq), dtype=bool, count=len(uniq))[inv]
    if attention is not None:
        mask_op |= (np.asarray(attention, dtype=np.int64) & _ATTN_DROPOUT) != 0
    round_trip_reason = _one_of(fb_s, fb, HOST_ROUND_TRIP_REASONS)
    round_trip = round_trip_reason | _one_of(sy_s, sy, {SYNC_HOST_ROUND_TRIP}) | (mask_op & ~fb)
    view = np.asarray(no_engine, dtype=bool)
    kind = np.select(
        [coll, fb & ~round_trip, round_trip, sy, tr, view],
        [K_COLLECTIVE, K_HOST_FALLBACK, K_HOST_ROUND_TRIP, K_SYNC, K_TRANSFER, K_VIEW],
        default=K_DEVICE,
    )
    return kind.astype(np.int8)


def kind_names(codes: np.ndarray) -> np.ndarray:
    """Kind names (object array) of kind codes."""
    return np.asarray(KINDS, dtype=object)[np.asarray(codes, dtype=np.int64)] if len(codes) else \
        np.empty(0, dtype=object)
