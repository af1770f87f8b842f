"""Device memory over the step: bytes live by category, the peak and what is live there, activations per
module, and the fragmentation-free lower bound against an allocator's high-water mark.

Input is the trace's `memory` table (profiler/memory_capture.py): storages live when the profiled steps
begin (kind 0), then allocations (1) and frees (-1) in the order the device's allocator counted them.
Replaying it gives exactly the allocator's own figures (`torch.neuron.memory_allocated()` at each point,
`max_memory_allocated()` at the peak), one device at a time.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pandas as pd

from neuron_studio.profiler.memory_capture import CATEGORIES

__all__ = [
    "MemoryBounds", "NoMemoryDataError", "CATEGORIES", "device_rows", "peak_device", "memory_timeline",
    "memory_peak", "activation_memory", "memory_bounds", "binned_timeline", "ALLOCATOR_ROUND_BYTES",
]

ALLOCATOR_ROUND_BYTES = 512
"""Allocation granularity of the modeled allocator: PyTorch's caching allocator rounds every block to 512
bytes (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize). TorchNeuron's allocator policy is not documented,
so the high-water mark built on it is an assumption, labelled modeled."""


class NoMemoryDataError(LookupError):
    """The profile has no per-allocation memory record (names why and what to do)."""


def _require(mem: pd.DataFrame, meta: dict | None = None) -> None:
    if mem is None or not len(mem):
        backend = (meta or {}).get("backend")
        why = ("TorchNeuron exposes no per-allocation hook: only the measured peak is recorded on real "
               "Trainium; run the same step on the emulator (NEURON_STUDIO_BACKEND=emulated) for the timeline"
               if backend == "real" else
               "this trace has no memory table (imported traces and runs captured before memory capture "
               "existed carry none); profile the step again with %%neuron or neuron_studio.profile")
        raise NoMemoryDataError(f"no device-memory record in this profile: {why}")


def peak_device(mem: pd.DataFrame) -> int:
    """The device whose live bytes peak highest (the one that runs out of memory first)."""
    devices = np.unique(mem["device"].to_numpy())
    if len(devices) == 1:
        return int(devices[0])
    best, best_peak = 0, -1
    for dev in sorted(set(mem["device"].tolist())):
        rows = mem[mem["device"] == dev]
        live = np.cumsum(np.where(rows["kind"].to_numpy() >= 0, rows["nbytes"].to_numpy(), -rows["nbytes"].to_numpy()))
        p = int(live.max()) if len(live) else 0
        if p > best_peak:
            best, best_peak = dev, p
    return int(best)


def device_rows(mem: pd.DataFrame, device: int | None = None) -> pd.DataFrame:
    """The rows of one device (default: the device with the highest peak), re-indexed from 0."""
    _require(mem)
    dev = peak_device(mem) if device is None else int(device)
    on_dev = mem["device"].to_numpy() == dev
    rows = (mem if on_dev.all() else mem[on_dev]).reset_index(drop=True)
    if not len(rows):
        raise NoMemoryDataError(f"no allocation on neuron:{dev}; devices with memory: "
                                f"{sorted(set(mem['device'].tolist()))}")
    return rows


def _signed(rows: pd.DataFrame) -> np.ndarray:
    nb = rows["nbytes"].to_numpy(dtype=np.int64)
    return np.where(rows["kind"].to_numpy() >= 0, nb, -nb)


def memory_timeline(mem: pd.DataFrame, *, device: int | None = None,
                    device_time: pd.Series | None = None) -> pd.DataFrame:
    """One row per point of the replay: bytes live in total and per category after that row.

    Columns: time_ns (host, since the capture started), device_time_ns (modeled or measured device time of
    the row's op when `device_time` maps op seq -> ns), step, kind, event (baseline/alloc/free), nbytes,
    category, op, module, source, total_bytes, then one column per category. The categories add up to
    total_bytes on every row.
    """
    rows = device_rows(mem, device)
    signed = _signed(rows)
    cats = rows["category"].to_numpy(dtype=object)
    out = pd.DataFrame({
        "time_ns": rows["time_ns"].to_numpy(np.int64),
        "device_time_ns": (rows["seq"].map(device_time).to_numpy(dtype=np.float64)
                           if device_time is not None else np.full(len(rows), np.nan)),
        "step": rows["step"].to_numpy(np.int32),
        "event": np.select([rows["kind"].to_numpy() == 0, rows["kind"].to_numpy() > 0], ["baseline", "alloc"], "free"),
        "alloc_id": rows["alloc_id"].to_numpy(np.int64),
        "nbytes": rows["nbytes"].to_numpy(np.int64),
        "category": cats,
        "op": rows["op"].to_numpy(dtype=object),
        "module": rows["module"].to_numpy(dtype=object),
        "source": rows["source"].to_numpy(dtype=object),
        "total_bytes": np.cumsum(signed),
    })
    for c in CATEGORIES:
        out[c] = np.cumsum(np.where(cats == c, signed, 0))
    return out


def _peak_index(rows: pd.DataFrame) -> int:
    return int(np.argmax(np.cumsum(_signed(rows))))


def memory_peak(mem: pd.DataFrame, *, device: int | None = None, top: int | None = None) -> pd.DataFrame:
    """Every storage live at the peak (largest first): its bytes, category, name, dtype, shape and the op,
    module and source line that allocated it. `nbytes` sums to the peak (before `top` trims the rows).

    `attrs` holds the peak itself: peak_bytes, device, time_ns, step, op/module/source of the row where
    the peak is reached, and bytes per category.
    """
    rows = device_rows(mem, device)
    i = _peak_index(rows)
    upto = rows.iloc[: i + 1]
    freed = set(upto.loc[upto["kind"] < 0, "alloc_id"].tolist())
    live = upto[(upto["kind"] >= 0) & ~upto["alloc_id"].isin(freed)]
    df = live[["alloc_id", "nbytes", "category", "name", "dtype", "shape", "op", "module", "phase", "source",
               "step", "output_of"]].sort_values("nbytes", ascending=False, kind="stable").reset_index(drop=True)
    total = int(df["nbytes"].sum())
    df.insert(2, "share", df["nbytes"] / total if total else 0.0)
    at = rows.iloc[i]
    category, nbytes = df["category"].to_numpy(dtype=object), df["nbytes"].to_numpy(dtype=np.int64)
    attrs = {
        "peak_bytes": total, "device": int(rows["device"].iloc[0]), "time_ns": int(at["time_ns"]),
        "step": int(at["step"]), "op": at["op"], "module": at["module"], "source": at["source"],
        "phase": at["phase"], "row": i,
        "by_category": {c: int(nbytes[category == c].sum()) for c in CATEGORIES},
    }
    if top is not None:
        df = df.head(top)
    df.attrs.update(attrs)
    return df


def activation_memory(mem: pd.DataFrame, *, device: int | None = None, steps: int | None = None,
                      peak: pd.DataFrame | None = None) -> pd.DataFrame:
    """Activation memory (storages saved for backward) per module, the module's children included.

    Columns: module, depth, activation_bytes (allocated per step), at_peak_bytes (still live at the peak),
    tensors (per step). Largest first. `peak`: `memory_peak(mem, device=device)` when the caller has it.
    """
    rows = device_rows(mem, device)
    nsteps = steps or max(1, int(rows.loc[rows["kind"] > 0, "step"].nunique()) or 1)
    peak = memory_peak(mem, device=device) if peak is None else peak
    at_peak = set(peak.loc[peak["category"] == "activation", "alloc_id"].tolist())
    acts = rows[(rows["kind"] >= 0) & (rows["category"] == "activation")]
    totals: dict[str, list[float]] = {}
    for module, nbytes, aid, kind in zip(acts["module"], acts["nbytes"], acts["alloc_id"], acts["kind"]):
        path = str(module or "")
        if not path:
            continue
        parts = path.split(".")
        for d in range(1, len(parts) + 1):
            t = totals.setdefault(".".join(parts[:d]), [0.0, 0.0, 0.0])
            if kind > 0:
                t[0] += nbytes
                t[2] += 1
            if aid in at_peak:
                t[1] += nbytes
    df = pd.DataFrame([{"module": m, "depth": m.count("."), "activation_bytes": v[0] / nsteps,
                        "at_peak_bytes": int(v[1]), "tensors": v[2] / nsteps} for m, v in totals.items()],
                      columns=["module", "depth", "activation_bytes", "at_peak_bytes", "tensors"])
    return df.sort_values(["at_peak_bytes", "activation_bytes"], ascending=False, kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class MemoryBounds:
    """Fragmentation-free lower bound (the most bytes ever live at once) vs an allocator's high-water mark.

    `allocator_high_water_bytes` replays the allocations through a best-fit allocator on one address space
    with `round_bytes` granularity (modeled: see ALLOCATOR_ROUND_BYTES); `tracker_peak_bytes` is what the
    emulator's allocator counts (no caching, no fragmentation: equal to the lower bound).
    """

    device: int
    lower_bound_bytes: int
    allocator_high_water_bytes: int
    round_bytes: int
    modeled: bool = True

    @property
    def fragmentation_bytes(self) -> int:
        return self.allocator_high_water_bytes - self.lower_bound_bytes

    @property
    def fragmentation_share(self) -> float:
        return self.fragmentation_bytes / self.allocator_high_water_bytes if self.allocator_high_water_bytes else 0.0


def memory_bounds(mem: pd.DataFrame, *, device: int | None = None,
                  round_bytes: int = ALLOCATOR_ROUND_BYTES) -> MemoryBounds:
    rows = device_rows(mem, device)
    lower = int(np.cumsum(_signed(rows)).max())
    return MemoryBounds(device=int(rows["device"].iloc[0]), lower_bound_bytes=lower,
                        allocator_high_water_bytes=_best_fit_high_water(rows, round_bytes), round_bytes=round_bytes)


def _best_fit_high_water(rows: pd.DataFrame, round_bytes: int) -> int:
    """Highest address a best-fit allocator (split blocks, coalesce neighbours) reaches on this sequence."""
    starts: list[int] = []  # free blocks sorted by start
    sizes: list[int] = []
    top = 0  # end of the used address space
    high = 0
    where: dict[int, tuple[int, int]] = {}
    for kind, aid, nbytes in zip(rows["kind"].to_numpy(), rows["alloc_id"].to_numpy(), rows["nbytes"].to_numpy()):
        size = max(round_bytes, -(-int(nbytes) // round_bytes) * round_bytes)
        if kind >= 0:
            best = -1
            for j, s in enumerate(sizes):
                if s >= size and (best < 0 or s < sizes[best]):
                    best = j
            if best >= 0:
                addr = starts[best]
                if sizes[best] == size:
                    del starts[best], sizes[best]
                else:
                    starts[best] += size
                    sizes[best] -= size
            else:
                addr = top
                top += size
                high = max(high, top)
            where[int(aid)] = (addr, size)
        else:
            got = where.pop(int(aid), None)
            if got is None:
                continue
            addr, size = got
            j = bisect.bisect_left(starts, addr)
            starts.insert(j, addr)
            sizes.insert(j, size)
            if j + 1 < len(starts) and starts[j] + sizes[j] == starts[j + 1]:  # merge with the next block
                sizes[j] += sizes[j + 1]
                del starts[j + 1], sizes[j + 1]
            if j > 0 and starts[j - 1] + sizes[j - 1] == starts[j]:  # merge with the previous block
                sizes[j - 1] += sizes[j]
                del starts[j], sizes[j]
                j -= 1
            if starts[j] + sizes[j] == top:  # the last block returns to the untouched space
                top = starts[j]
                del starts[j], sizes[j]
    return high


def binned_timeline(timeline: pd.DataFrame, bins: int = 200) -> pd.DataFrame:
    """At most `bins` points for a chart: in each bin the row where the total is highest (so the
    categories still add up and the peak itself is one of the points)."""
    n = len(timeline)
    if n <= bins:
        return timeline.reset_index(drop=True)
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    total = timeline["total_bytes"].to_numpy()
    picks = [int(a + np.argmax(total[a:b])) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    return timeline.iloc[picks].reset_index(drop=True)
