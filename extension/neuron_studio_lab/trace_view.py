"""The trace viewer's server side: level-of-detail boxes for a window, one op's details, search by name.

The viewer asks for a time window and its width in pixels and gets, per lane (host threads, NeuronCore
engine tracks, collectives), the boxes that window can show (`profiler.analysis.trace_lod`): a 1M-op
run costs a few hundred KB per request instead of the whole table. A run's lanes are built once and kept
in the server's `RunOpsCache` next to the timeline's prepared ops. Like `core`, no tornado here: plain
values in, JSON-ready data or a typed `core.ApiError` out.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import core
from .run_cache import RunOpsCache

__all__ = ["trace_window", "trace_op", "trace_search", "check_search", "window_of", "PreparedTrace", "MAX_SEARCH_RESULTS"]

#: Columns the viewer reads; those after `engine`..`end_ns` are optional (older runs lack the host ones).
TRACE_COLUMNS = ("seq", "name", "core", "engine", "start_ns", "end_ns", "thread", "step", "launch_ns")
DETAIL_COLUMNS = ("seq", "name", "core", "engine", "start_ns", "end_ns", "flops", "bytes_read", "bytes_written",
                  "bound", "module", "source", "thread", "step", "launch_ns", "input_shapes", "output_shapes")
MAX_SEARCH_RESULTS = 200
#: The width a request that names none is drawn at (a panel's usual width).
DEFAULT_WIDTH_PX = 1000
CACHE_KIND = "trace_lanes"


def _dictionary(column: Any) -> Any:
    """A string column as one dictionary array (Parquet usually stores it so; else encode it here)."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(arr.type):
        return arr.unify_dictionaries() if hasattr(arr, "unify_dictionaries") else arr
    return arr.dictionary_encode()


#: The run's launched regions (adaptive-eager regions, ops run alone, compiled-graph executions), written by
#: the studio for adaptive and compile runs: drawn as each core's "Launch regions" lane.
REGIONS_TABLE = "regions"


class PreparedTrace:
    """A run's lanes plus the columns answers need (names, seq), sized for the cache's byte budget."""

    def __init__(self, table: Any, path: Any, regions: Any = None) -> None:
        lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
        vocabulary = core.studio_module("neuron_studio.profiler.vocabulary")
        self.path = path
        self.seq = table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        names = _dictionary(table.column("name"))
        self.name_codes = names.indices.fill_null(0).to_numpy(zero_copy_only=False)
        self.name_values = np.array([str(v) for v in names.dictionary.to_pylist()] or [""], dtype=object)
        engines = _dictionary(table.column("engine"))

        def col(name: str) -> np.ndarray | None:
            return table.column(name).to_numpy(zero_copy_only=False) if name in table.column_names else None

        self.lanes = lod.build_lanes(
            name_codes=self.name_codes, name_values=self.name_values.tolist(),
            engine_codes=engines.indices.fill_null(-1).to_numpy(zero_copy_only=False),
            engine_values=[str(v) for v in engines.dictionary.to_pylist()], cores=col("core"),
            starts=col("start_ns"), ends=col("end_ns"), device_engines=vocabulary.DEVICE_ENGINES,
            no_engine=vocabulary.NO_ENGINE, collective_prefix=vocabulary.COLLECTIVE_PREFIX,
            threads=col("thread"), launch_ns=col("launch_ns"), steps=col("step"),
            engine_labels=vocabulary.ENGINE_LABELS)
        # per row: its device lane and its host (launch) lane, -1 for none; and its position in its device lane
        self.lane_of_row = np.full(self.seq.size, -1, dtype=np.int64)
        self.host_lane_of_row = np.full(self.seq.size, -1, dtype=np.int64)
        self.start_of_row = col("start_ns").astype(np.int64, copy=False)
        self.end_of_row = col("end_ns").astype(np.int64, copy=False)
        for i, lane in enumerate(self.lanes.lanes):
            (self.lane_of_row if lane.kind == "device" else self.host_lane_of_row)[lane.rows] = i
        # launched regions (None without a regions table): their lanes go before each core's engine lanes
        self.region_cols: dict[str, np.ndarray] = {}
        self.regions = None
        if regions is not None and regions.num_rows:
            self.region_cols = {c: regions.column(c).to_numpy(zero_copy_only=False) for c in regions.column_names}
            self.regions = lod.region_lanes_from_columns(self.region_cols)
        self.all_lanes = lod.with_region_lanes(self.lanes.lanes, self.regions)
        self.nbytes = int(self.lanes.nbytes + self.seq.nbytes * 6 + self.name_codes.nbytes
                          + (self.regions.nbytes * 4 if self.regions is not None else 0))

    def names_of(self, rows: np.ndarray) -> np.ndarray:
        return self.name_values[self.name_codes[rows]]


def _prepared(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int,
              cache: RunOpsCache | None) -> tuple[Any, PreparedTrace]:
    import pyarrow.parquet as pq

    store, record = core._get_record(root_dir, notebook_path, run_id)
    path = store.table_path(record.id, core.DEVICE_OPS_TABLE)
    if not path.is_file():
        raise core.NotFound(f"run {record.id} has no table {core.DEVICE_OPS_TABLE!r}: no device trace to view")

    def load() -> PreparedTrace:
        present = set(pq.read_schema(path).names)
        missing = [c for c in TRACE_COLUMNS[:6] if c not in present]
        if missing:
            raise core.ApiError(f"run {record.id}'s {core.DEVICE_OPS_TABLE} table lacks columns: {', '.join(missing)}")
        table = pq.read_table(path, columns=[c for c in TRACE_COLUMNS if c in present],
                              read_dictionary=["name", "engine"]).combine_chunks()
        rpath = store.table_path(record.id, REGIONS_TABLE)
        regions = None
        if rpath.is_file():
            lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
            have = set(pq.read_schema(rpath).names)
            missing = [c for c in lod.REGION_COLUMNS if c not in have]
            if missing:
                raise core.ApiError(f"run {record.id}'s {REGIONS_TABLE} table lacks columns: {', '.join(missing)}")
            regions = pq.read_table(rpath, columns=list(lod.REGION_COLUMNS)).combine_chunks()
        return PreparedTrace(table, path, regions)

    try:
        return record, (load() if cache is None else cache.get(path, load, kind=CACHE_KIND))
    except FileNotFoundError:
        raise core.NotFound(f"run {record.id} has no table {core.DEVICE_OPS_TABLE!r}") from None


def window_of(first_ns: int, last_ns: int, start_ns: int | None, end_ns: int | None,
              width_px: int | None) -> tuple[int, int, int, float]:
    """A request's window (default: [first_ns, last_ns], the whole run), width and ns per pixel; BadRequest
    naming what is wrong with it."""
    lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
    width_px = DEFAULT_WIDTH_PX if width_px is None else int(width_px)
    lo = first_ns if start_ns is None else int(start_ns)
    hi = last_ns if end_ns is None else int(end_ns)
    if start_ns is None and end_ns is None and hi <= lo:
        hi = lo + 1  # a run whose ops all take no time: a 1 ns window still lists them
    try:
        return lo, hi, width_px, lod.check_window(lo, hi, width_px)
    except lod.WindowError as exc:
        raise core.BadRequest(str(exc)) from None


def trace_window(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int, *, start_ns: int | None,
                 end_ns: int | None, width_px: int | None, cache: RunOpsCache | None = None) -> dict[str, Any]:
    """Every lane's boxes for [start_ns, end_ns) (default: the whole run) drawn `width_px` pixels wide.

    Times in the answer are ns relative to `origin_ns` (the run's first op start), which stays the same for
    every window of a run; `start_ns`/`end_ns` are absolute like the request's.
    """
    lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
    record, prep = _prepared(root_dir, notebook_path, run_id, cache)
    lanes = prep.lanes
    lo, hi, width_px, px_ns = window_of(lanes.first_start, lanes.last_end, start_ns, end_ns, width_px)
    origin = lanes.first_start
    intern: dict[str, int] = {}
    out_lanes = []
    regions: dict[str, dict[str, Any]] = {}
    for lane in prep.all_lanes:
        boxes = lod.lane_boxes(lane, lo, hi, px_ns)
        head = {"id": lane.id, "label": lane.label, "kind": lane.kind, "core": lane.core, "track": lane.track,
                "total": int(lane.starts.size)}
        if lane.kind == "regions":
            out_lanes.append({**head, **lod.region_boxes_json(lane, boxes, origin, prep.regions.split_ends[lane.id])})
            regions.update(lod.region_details(prep.region_cols, boxes.rows))
            continue
        out_lanes.append({**head, **lod.boxes_json(boxes, origin, prep.seq, prep.names_of, intern)})
    return {
        "run_id": record.id, "origin_ns": origin, "start_ns": lo, "end_ns": hi, "width_px": int(width_px),
        "px_ns": px_ns, "run_start_ns": lanes.first_start, "run_end_ns": lanes.last_end,
        "total_ops": int(prep.seq.size), "names": list(intern),
        "steps": [{"step": s, "start": t - origin} for s, t in lanes.steps],
        "lanes": out_lanes, "regions": regions,
    }


def trace_op(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int, seq: int | None,
             cache: RunOpsCache | None = None) -> dict[str, Any]:
    """One op's stored row (shapes, module, source, engine, times) and the lanes it is drawn on."""
    if seq is None:
        raise core.BadRequest("missing 'seq' (the op's sequence number)")
    record, prep = _prepared(root_dir, notebook_path, run_id, cache)
    hits = np.flatnonzero(prep.seq == int(seq))
    if not hits.size:
        raise core.NotFound(f"run {record.id} has no op with seq {seq}")
    row = int(hits[0])
    op = core._finite(_read_row(prep.path, row))
    lane, host = int(prep.lane_of_row[row]), int(prep.host_lane_of_row[row])
    return {"run_id": record.id, "origin_ns": prep.lanes.first_start, "op": op,
            "lane": prep.lanes.lanes[lane].id if lane >= 0 else None,
            "host_lane": prep.lanes.lanes[host].id if host >= 0 else None}


def _read_row(path: Any, row: int) -> dict[str, Any]:
    """Row `row` of a Parquet file, reading only the row group that holds it."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    present = set(pf.schema_arrow.names)
    columns = [c for c in DETAIL_COLUMNS if c in present]
    for group in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(group).num_rows
        if row < n:
            return pf.read_row_group(group, columns=columns).slice(row, 1).to_pylist()[0]
        row -= n
    raise core.NotFound("op row not found in the table (the file changed while reading)")


def check_search(query: str, limit: int | None) -> tuple[str, int]:
    """A search request's text (stripped, lower case) and result limit, or BadRequest naming what is wrong."""
    if not query or not query.strip():
        raise core.BadRequest("missing 'q' (text to find in op names)")
    limit = MAX_SEARCH_RESULTS if limit is None else limit
    if not 1 <= limit <= MAX_SEARCH_RESULTS:
        raise core.BadRequest(f"limit must be between 1 and {MAX_SEARCH_RESULTS}")
    return query.strip().lower(), limit


def trace_search(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int, query: str,
                 limit: int | None = None, cache: RunOpsCache | None = None) -> dict[str, Any]:
    """Ops on a device lane whose name contains `query` (case-insensitive), earliest first."""
    needle, limit = check_search(query, limit)
    record, prep = _prepared(root_dir, notebook_path, run_id, cache)
    matching_codes = np.flatnonzero([needle in str(v).lower() for v in prep.name_values])
    rows = np.flatnonzero(np.isin(prep.name_codes, matching_codes) & (prep.lane_of_row >= 0))
    origin = prep.lanes.first_start
    hits = rows[np.argsort(prep.start_of_row[rows], kind="stable")]
    chosen = hits[:limit]
    return {
        "run_id": record.id, "query": query, "total": int(hits.size), "origin_ns": origin,
        "results": [{"seq": int(prep.seq[r]), "name": str(prep.names_of(np.array([r]))[0]),
                     "lane": prep.lanes.lanes[int(prep.lane_of_row[r])].id,
                     "start": int(prep.start_of_row[r] - origin), "end": int(prep.end_of_row[r] - origin)}
                    for r in chosen],
    }
