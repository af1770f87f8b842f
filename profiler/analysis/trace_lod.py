"""Level-of-detail boxes for the trace viewer: a run's ops, per lane, merged to what a window can show.

A 1M-op run cannot be sent to a browser op by op. For a time window and a pixel width, each lane's ops
that overlap the window become boxes: an op at least one pixel wide is its own box (with its row, so the
viewer can show its name and details); neighbouring ops narrower than a pixel, with gaps under a pixel
between them and starting within the same `MERGE_PX` pixels, are merged into one box that carries how many ops it holds and their busy time. No op is
dropped: the counts of a lane's boxes add up to the ops overlapping the window, and their busy times to
those ops' time inside the window.

Lanes, all on the run's one (modeled or measured) device clock:
- one per NeuronCore and track: the engines (Tensor, Vector, Scalar, GpSimd, DMA) and collectives
  (ops named ``collective_prefix``, which the model charges to the DMA queues);
- one per host thread holding the launches that thread issued ([device start - launch cost, device start)),
  when the table has the ``thread`` and ``launch_ns`` columns. Ops on no engine (views) are on no lane.

numpy only and no imports from the studio, so the JupyterLab extension's server loads this file without
importing torch; the vocabulary (engine names, the collective prefix) is passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = ["WindowError", "Lane", "TraceLanes", "LaneBoxes", "build_lanes", "lane_boxes", "check_window",
           "in_window", "boxes_json", "MIN_WIDTH_PX", "MAX_WIDTH_PX", "COLLECTIVE_TRACK", "REGION_TRACK",
           "RegionLanes", "build_region_lanes", "with_region_lanes", "region_boxes_json", "region_details",
           "REGION_DETAIL_COLUMNS", "REGION_COLUMNS", "region_lanes_from_columns"]

MIN_WIDTH_PX = 16
MAX_WIDTH_PX = 8192
#: Widest a merged box may start apart from the next one, in pixels.
MERGE_PX = 3
COLLECTIVE_TRACK = "collective"
#: The track of a core's launch-region lane: one box per launched region (adaptive-eager region, op run alone,
#: compiled-graph execution), so the boundaries between regions are drawn above the engines.
REGION_TRACK = "regions"


class WindowError(ValueError):
    """A window or pixel width the viewer cannot draw; the message names the parameter and the valid range."""


@dataclass(frozen=True)
class Lane:
    """One row of the viewer: its ops' [start, end) in start order and their rows in the source table."""

    id: str
    label: str
    kind: str  # "device" or "host"
    core: int | None
    track: str
    starts: np.ndarray
    ends: np.ndarray
    rows: np.ndarray
    max_duration: int

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.ends.nbytes + self.rows.nbytes)


@dataclass(frozen=True)
class TraceLanes:
    """All lanes of a run, the run's extent and its step starts (step number -> first start)."""

    lanes: list[Lane]
    first_start: int
    last_end: int
    steps: list[tuple[int, int]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(lane.nbytes for lane in self.lanes)


@dataclass(frozen=True)
class LaneBoxes:
    """One lane's boxes for one window: per box its start/end, ops merged, busy ns in the window, and the
    source row of a single-op box (-1 for a merged box)."""

    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray
    busy: np.ndarray
    rows: np.ndarray


def _lane(lane_id: str, label: str, kind: str, core: int | None, track: str, starts: np.ndarray,
          ends: np.ndarray, rows: np.ndarray) -> Lane:
    if starts.size > 1 and not bool((starts[1:] >= starts[:-1]).all()):  # traces are mostly in start order
        order = np.argsort(starts, kind="stable")
        starts, ends, rows = starts[order], ends[order], rows[order]
    return Lane(lane_id, label, kind, core, track, starts, ends, rows,
                int((ends - starts).max()) if starts.size else 0)


def build_lanes(*, name_codes: np.ndarray, name_values: Sequence[str], engine_codes: np.ndarray,
                engine_values: Sequence[str], cores: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                device_engines: Sequence[str], no_engine: str, collective_prefix: str,
                threads: np.ndarray | None = None, launch_ns: np.ndarray | None = None,
                steps: np.ndarray | None = None, engine_labels: dict[str, str] | None = None) -> TraceLanes:
    """The lanes of a run from its device-op columns, names and engines dictionary-encoded (codes index the
    values; a negative engine code is no engine), so a 1M-op run costs a few vectorized passes."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    n = starts.size
    rows = np.arange(n, dtype=np.int64)
    labels = engine_labels or {}
    engine_values = [str(v) for v in engine_values]
    coll_name = np.array([str(v).startswith(collective_prefix) if collective_prefix else False
                          for v in name_values] or [False], dtype=bool)
    is_coll = coll_name[np.asarray(name_codes, dtype=np.int64)] if n else np.zeros(0, dtype=bool)
    known = set(device_engines)
    codes = np.asarray(engine_codes, dtype=np.int64)
    present = {engine_values[c] for c in np.unique(codes).tolist() if c >= 0}
    others = sorted(present - known - {no_engine})
    track_names = [*device_engines, COLLECTIVE_TRACK, *others]
    # engine code -> track index (-1: no track)
    code_track = np.full(len(engine_values) + 1, -1, dtype=np.int64)
    for c, v in enumerate(engine_values):
        if v in track_names:
            code_track[c] = track_names.index(v)
    track_of = code_track[codes]  # code -1 reads the last slot: -1
    track_of[is_coll & (track_of >= 0)] = track_names.index(COLLECTIVE_TRACK)
    core_arr = np.asarray(cores, dtype=np.int64)
    lanes: list[Lane] = []
    if threads is not None and launch_ns is not None:
        launch = np.asarray(launch_ns, dtype=np.int64)
        thr = np.asarray(threads, dtype=np.int64)
        launched = launch > 0
        for i, t in enumerate(dict.fromkeys(thr[launched].tolist())):
            m = launched & (thr == t)
            lanes.append(_lane(f"host/{i}", f"Host thread {i + 1} · launches", "host", None, "host",
                               starts[m] - launch[m], starts[m], rows[m]))
    # one stable sort by (core, track) splits every device lane at once
    on_track = np.flatnonzero(track_of >= 0)
    key = core_arr[on_track] * (len(track_names) + 1) + track_of[on_track]
    by_key = np.argsort(key, kind="stable")
    order, keys_sorted = on_track[by_key], key[by_key]
    bounds = np.flatnonzero(np.diff(keys_sorted)) + 1
    for chunk in np.split(order, bounds) if order.size else []:
        c, t = int(core_arr[chunk[0]]), track_names[int(track_of[chunk[0]])]
        label = f"NC{c} {labels.get(t, t.capitalize() if t != COLLECTIVE_TRACK else 'Collectives')}"
        lanes.append(_lane(f"core{c}/{t}", label, "device", c, t, starts[chunk], ends[chunk], chunk))
    step_starts: list[tuple[int, int]] = []
    if steps is not None and n:
        st = np.asarray(steps, dtype=np.int64)
        uniq, inverse = np.unique(st, return_inverse=True)
        first = np.full(uniq.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, inverse, starts)
        step_starts = [(int(s), int(f)) for s, f in zip(uniq.tolist(), first.tolist())]
    all_s = [lane.starts for lane in lanes if lane.starts.size]
    all_e = [lane.ends for lane in lanes if lane.ends.size]
    first = int(min(a.min() for a in all_s)) if all_s else (int(starts.min()) if n else 0)
    last = int(max(a.max() for a in all_e)) if all_e else (int(ends.max()) if n else 0)
    return TraceLanes(lanes=lanes, first_start=first, last_end=last, steps=step_starts)


def check_window(lo: int, hi: int, width_px: int) -> float:
    """The ns per pixel of a window; WindowError naming what is wrong."""
    if not MIN_WIDTH_PX <= width_px <= MAX_WIDTH_PX:
        raise WindowError(f"width_px must be between {MIN_WIDTH_PX} and {MAX_WIDTH_PX} (the viewer's width in "
                          f"pixels); got {width_px}")
    if hi <= lo:
        raise WindowError(f"end_ns must be greater than start_ns (got start_ns={lo}, end_ns={hi})")
    return (hi - lo) / width_px


def in_window(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Which [start, end) overlap [lo, hi); a zero-length op counts when lo <= start < hi."""
    return (starts < hi) & ((ends > lo) | (starts >= lo))


def lane_boxes(lane: Lane, lo: int, hi: int, px_ns: float) -> LaneBoxes:
    """The lane's ops overlapping [lo, hi), merged where narrower than `px_ns` (see the module doc)."""
    first = int(np.searchsorted(lane.starts, lo - lane.max_duration, side="left"))
    last = int(np.searchsorted(lane.starts, hi, side="left"))
    s, e, r = lane.starts[first:last], lane.ends[first:last], lane.rows[first:last]
    keep = in_window(s, e, lo, hi)
    s, e, r = s[keep], e[keep], r[keep]
    if not s.size:
        empty = np.zeros(0, dtype=np.int64)
        return LaneBoxes(empty, empty, empty, empty, empty)
    big = (e - s) >= px_ns
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    # a merged box ends at a gap wider than a pixel, a one-op box, or every MERGE_PX pixels of the window,
    # so a dense stretch shows its density box by box instead of one box for the whole stretch
    bucket = ((s - lo) // (px_ns * MERGE_PX)).astype(np.int64)
    new[1:] = big[1:] | big[:-1] | ((s[1:] - run_end[:-1]) > px_ns) | (bucket[1:] != bucket[:-1])
    heads = np.flatnonzero(new)
    counts = np.diff(np.append(heads, s.size))
    clipped = np.maximum(np.minimum(e, hi) - np.maximum(s, lo), 0)
    busy = np.add.reduceat(clipped, heads)
    box_end = np.maximum.reduceat(e, heads)
    rows = np.where(counts == 1, r[heads], -1)
    return LaneBoxes(s[heads], box_end, counts.astype(np.int64), busy.astype(np.int64), rows.astype(np.int64))


def boxes_json(boxes: LaneBoxes, origin: int, row_seq: np.ndarray, row_name: Any, intern: dict[str, int]
               ) -> dict[str, list[int]]:
    """Columnar JSON of a lane's boxes: times relative to `origin`; single-op boxes carry seq and name id."""
    single = boxes.rows >= 0
    seq = np.full(boxes.rows.size, -1, dtype=np.int64)
    name = np.full(boxes.rows.size, -1, dtype=np.int64)
    if single.any():
        idx = boxes.rows[single]
        seq[single] = row_seq[idx]
        name[single] = [intern.setdefault(str(x), len(intern)) for x in row_name(idx)]
    return {"start": (boxes.starts - origin).tolist(), "end": (boxes.ends - origin).tolist(),
            "count": boxes.counts.tolist(), "busy": boxes.busy.tolist(), "seq": seq.tolist(),
            "name": name.tolist()}


@dataclass(frozen=True)
class RegionLanes:
    """A run's launch-region lanes (one per core; rows index the regions table) and, per lane, the sorted end
    times of the regions the user's code ended (an in-place op, a host read...), to count them in merged boxes."""

    lanes: list[Lane]
    split_ends: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(lane.nbytes for lane in self.lanes) + sum(a.nbytes for a in self.split_ends.values())


def build_region_lanes(*, cores: np.ndarray, starts: np.ndarray, ends: np.ndarray, split: np.ndarray
                       ) -> RegionLanes:
    """One lane per core from the regions table's columns (`split`: the user's code ended the region)."""
    cores = np.asarray(cores, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    split = np.asarray(split, dtype=bool)
    rows = np.arange(starts.size, dtype=np.int64)
    lanes, split_ends = [], {}
    for c in np.unique(cores).tolist():
        m = cores == c
        lane = _lane(f"core{c}/{REGION_TRACK}", f"NC{c} Launch regions", "regions", int(c), REGION_TRACK,
                     starts[m], ends[m], rows[m])
        lanes.append(lane)
        split_ends[lane.id] = np.sort(ends[m & split])
    return RegionLanes(lanes, split_ends)


def with_region_lanes(lanes: Sequence[Lane], regions: RegionLanes | None) -> list[Lane]:
    """`lanes` with each core's region lane placed just before that core's first device lane."""
    if regions is None or not regions.lanes:
        return list(lanes)
    by_core = {lane.core: lane for lane in regions.lanes}
    out: list[Lane] = []
    for lane in lanes:
        if lane.kind == "device" and lane.core in by_core:
            out.append(by_core.pop(lane.core))
        out.append(lane)
    return out + list(by_core.values())


def region_boxes_json(lane: Lane, boxes: LaneBoxes, origin: int, split_ends: np.ndarray) -> dict[str, list[int]]:
    """Columnar JSON of a region lane's boxes: like `boxes_json` (no op: seq and name -1), plus per box the
    region row of a one-region box (else -1) and how many regions in it the user's code ended (`split`)."""
    split = (np.searchsorted(split_ends, boxes.ends, side="right")
             - np.searchsorted(split_ends, boxes.starts, side="right"))
    none = np.full(boxes.rows.size, -1, dtype=np.int64)
    return {"start": (boxes.starts - origin).tolist(), "end": (boxes.ends - origin).tolist(),
            "count": boxes.counts.tolist(), "busy": boxes.busy.tolist(), "seq": none.tolist(),
            "name": none.tolist(), "region": boxes.rows.tolist(), "split": split.astype(np.int64).tolist()}


#: What the viewer shows about one launched region (columns of the regions table).
REGION_DETAIL_COLUMNS = ("step", "n_ops", "launches", "first_op", "last_op", "ended_by", "fix")
#: The stored regions table's columns (`fix` is "" where the user's code did not end the region).
REGION_COLUMNS = ("core", "start_ns", "end_ns", *REGION_DETAIL_COLUMNS)


def region_lanes_from_columns(cols: dict[str, np.ndarray]) -> RegionLanes:
    """Region lanes from the regions table's columns (`REGION_COLUMNS`)."""
    return build_region_lanes(cores=cols["core"], starts=cols["start_ns"], ends=cols["end_ns"],
                              split=np.asarray(cols["fix"], dtype=object) != "")


def region_details(columns: dict[str, Any], rows: Any) -> dict[str, dict[str, Any]]:
    """The regions at `rows` (one-region boxes of a window), by row, from the regions table's columns."""
    out: dict[str, dict[str, Any]] = {}
    for r in (int(x) for x in np.asarray(rows).tolist() if x >= 0):
        d = {}
        for c in REGION_DETAIL_COLUMNS:
            v = columns[c][r] if c in columns else None
            d[c] = v.item() if isinstance(v, np.generic) else v
        out[str(r)] = d
    return out
