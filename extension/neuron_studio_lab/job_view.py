"""The trace viewer's job view: every rank of a many-rank run on the job's aligned clock.

Served from the run's job tables (`neuron_studio.job_tables`): per rank one lane (collapsed) drawn from its
activity bins, so 64 ranks cost 64 × a few thousand bins, never their events; a rank asked for in `expand`
gets its measured host timeline instead (one lane per host thread plus its collectives, from its stored
`ops_r<k>` table, level of detail as in `trace_view`, shifted onto the aligned clock). Collective instances in
the window come with every rank's arrival and the last rank (the viewer links them across lanes); the
straggler's lane is marked. Like `trace_view`, no tornado here.

Box ids: a one-op box of an expanded rank carries `position * SEQ_STRIDE + seq`, so `trace/op` finds the
rank's row (`job_op`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import core
from .run_cache import RunOpsCache

__all__ = ["is_job_run", "job_window", "job_op", "job_search", "SEQ_STRIDE", "MAX_LINKS", "MAX_EXPANDED"]

SEQ_STRIDE = 1 << 32
#: Collective instances the answer links at most (more in the window: zoom in to see them).
MAX_LINKS = 300
#: Ranks expanded at once at most (each costs its host ops in the server's cache).
MAX_EXPANDED = 8
JOB_KIND = "job_tables"
RANK_KIND = "job_rank_lanes"
_HOST_OPS_COLUMNS = ("seq", "name", "start_ns", "end_ns", "thread")


@dataclass(frozen=True)
class JobTables:
    ranks: Any            # pandas frame of job_ranks
    activity: dict[int, tuple[np.ndarray, np.ndarray]]   # rank -> (aligned bin starts, compute busy ns)
    collectives: Any      # pandas frame, aligned clock
    origin: int
    end: int
    nbytes: int


def is_job_run(store: Any, run_id: int) -> bool:
    return store.table_path(run_id, "job_ranks").is_file()


def _load_tables(store: Any, run_id: int) -> JobTables:
    ranks = store.load_table(run_id, "job_ranks").to_pandas().sort_values("rank").reset_index(drop=True)
    act = store.load_table(run_id, "job_activity").to_pandas()
    coll = store.load_table(run_id, "job_collectives").to_pandas()
    off = dict(zip(ranks["rank"].tolist(), ranks["offset_ns"].tolist()))
    activity = {}
    for r, g in act.groupby("rank", sort=True):
        activity[int(r)] = (g["start_ns"].to_numpy(dtype=np.int64) + int(off.get(int(r), 0)),
                            g["compute_ns"].to_numpy(dtype=np.int64))
    starts = (ranks["first_ns"] + ranks["offset_ns"]).astype(np.int64)
    ends = (ranks["last_ns"] + ranks["offset_ns"]).astype(np.int64)
    nbytes = int(sum(a.nbytes + b.nbytes for a, b in activity.values()) + coll.memory_usage(deep=True).sum())
    return JobTables(ranks, activity, coll, int(starts.min()), int(ends.max()), nbytes)


@dataclass(frozen=True)
class RankLanes:
    """One expanded rank's lanes (its own clock) and what answers need."""

    lanes: list[Any]
    seq: np.ndarray
    names: np.ndarray
    nbytes: int


def _rank_lanes(store: Any, run_id: int, rank: int, position: int, world: int) -> RankLanes:
    lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
    kineto = core.studio_module("neuron_studio.profiler.kineto")
    name = f"ops_r{position}" if world > 1 else "ops"
    path = store.table_path(run_id, name)
    if not path.is_file():
        raise core.NotFound(f"run {run_id} has no table {name!r}: rank {rank}'s timeline is not stored")
    import pyarrow.parquet as pq

    present = set(pq.read_schema(path).names)
    t = pq.read_table(path, columns=[c for c in _HOST_OPS_COLUMNS if c in present]).to_pandas()
    starts, ends = t["start_ns"].to_numpy(dtype=np.int64), t["end_ns"].to_numpy(dtype=np.int64)
    names = t["name"].astype(str).to_numpy(dtype=object)
    uniq, inv = np.unique(names, return_inverse=True)
    coll = np.array([kineto.is_collective_name(n) for n in uniq.tolist()], dtype=bool)[inv]
    threads = t["thread"].to_numpy(dtype=np.int64) if "thread" in t.columns else np.zeros(len(t), np.int64)
    rows = np.arange(len(t), dtype=np.int64)
    lanes = []
    for i, th in enumerate(dict.fromkeys(threads[~coll].tolist())):
        m = (threads == th) & ~coll
        lanes.append(_lane(lod, f"r{rank}/thread{i}", f"rank {rank} · host thread {i + 1}", starts[m], ends[m],
                           rows[m], "host"))
    if coll.any():
        lanes.append(_lane(lod, f"r{rank}/collectives", f"rank {rank} · collectives", starts[coll], ends[coll],
                           rows[coll], "collective"))
    seq = t["seq"].to_numpy(dtype=np.int64) + position * SEQ_STRIDE
    return RankLanes(lanes, seq, names, int(starts.nbytes * 3 + seq.nbytes + names.nbytes))


def _lane(lod: Any, lane_id: str, label: str, s: np.ndarray, e: np.ndarray, rows: np.ndarray, track: str) -> Any:
    order = np.argsort(s, kind="stable")
    s, e, rows = s[order], e[order], rows[order]
    return lod.Lane(lane_id, label, "rank-detail", None, track, s, e, rows, int((e - s).max()) if s.size else 0)


def _summary_boxes(starts: np.ndarray, busy: np.ndarray, bin_ns: int, lo: int, hi: int, px_ns: float,
                   origin: int) -> dict[str, list[int]]:
    """A collapsed rank's boxes: its busy activity bins in [lo, hi), merged per `MERGE_PX` pixels."""
    lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
    keep = (starts < hi) & (starts + bin_ns > lo) & (busy > 0)
    s, b = starts[keep], busy[keep]
    if not s.size:
        return {"start": [], "end": [], "count": [], "busy": [], "seq": [], "name": []}
    bucket = ((s - lo) // max(px_ns * lod.MERGE_PX, 1)).astype(np.int64)
    heads = np.flatnonzero(np.r_[True, (bucket[1:] != bucket[:-1]) | (s[1:] - s[:-1] > bin_ns)])
    box_s = s[heads]
    box_e = np.maximum.reduceat(s + bin_ns, heads)
    box_b = np.add.reduceat(b, heads)
    n = heads.size
    return {"start": (box_s - origin).tolist(), "end": (box_e - origin).tolist(), "count": [0] * n,
            "busy": box_b.tolist(), "seq": [-1] * n, "name": [-1] * n}


def _links(coll: Any, lo: int, hi: int, origin: int, lane_of_rank: dict[int, str]) -> tuple[list[dict], int]:
    if not len(coll):
        return [], 0
    g = coll.groupby("key", sort=False)
    first, last_exit = g["arrival_ns"].min(), g["exit_ns"].max()
    inside = first[(first < hi) & (last_exit >= lo)].index
    if len(inside) > MAX_LINKS:
        return [], int(len(inside))
    out = []
    sub = coll[coll["key"].isin(inside)].sort_values(["key", "rank"])
    for key, rows in sub.groupby("key", sort=False):
        last = rows.loc[rows["is_last"], "rank"]
        out.append({"key": str(key), "op": str(rows["op"].iloc[0]), "index": int(rows["index"].iloc[0]),
                    "lanes": [lane_of_rank[int(r)] for r in rows["rank"]],
                    "arrival": (rows["arrival_ns"] - origin).astype(np.int64).tolist(),
                    "exit": int(rows["exit_ns"].max() - origin),
                    "last_lane": lane_of_rank[int(last.iloc[0])] if len(last) else None,
                    "max_wait_ns": int(rows["wait_ns"].max())})
    out.sort(key=lambda x: min(x["arrival"]))
    return out, int(len(inside))


def _parse_expand(expand: str | None, ranks: Sequence[int]) -> list[int]:
    if not expand:
        return []
    try:
        want = sorted({int(x) for x in expand.split(",") if x.strip()})
    except ValueError:
        raise core.BadRequest(f"expand must be comma-separated rank numbers, got {expand[:60]!r}") from None
    unknown = [r for r in want if r not in set(ranks)]
    if unknown:
        raise core.BadRequest(f"expand names rank(s) {unknown[:8]} the job does not have")
    if len(want) > MAX_EXPANDED:
        raise core.BadRequest(f"at most {MAX_EXPANDED} ranks can be expanded at once (got {len(want)})")
    return want


def job_window(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int, *, start_ns: int | None,
               end_ns: int | None, width_px: int | None, expand: str | None = None,
               cache: RunOpsCache | None = None) -> dict[str, Any]:
    """The job's lanes for [start_ns, end_ns) at `width_px` (a `trace_window`-shaped answer plus `links`,
    `job`); `expand`: comma-separated ranks shown as their host timelines."""
    from .trace_view import window_of

    lod = core.studio_module("neuron_studio.profiler.analysis.trace_lod")
    store, record = core._get_record(root_dir, notebook_path, run_id)
    jt = _job_tables(store, record.id, cache)
    ranks = jt.ranks["rank"].astype(int).tolist()
    expanded = _parse_expand(expand, ranks)
    lo, hi, width_px, px_ns = window_of(jt.origin, jt.end, start_ns, end_ns, width_px)
    origin = jt.origin
    intern: dict[str, int] = {}
    lanes: list[dict] = []
    lane_of_rank: dict[int, str] = {}
    world = len(ranks)
    for row in jt.ranks.itertuples(index=False):
        r, off = int(row.rank), int(row.offset_ns)
        straggler = bool(row.straggler)
        label = f"rank {r}" + (" · straggler" if straggler else "")
        if r in expanded:
            rl = _rank_lanes_cached(store, record.id, r, int(row.position), world, cache)
            for lane in rl.lanes:
                boxes = lod.lane_boxes(lane, lo - off, hi - off, px_ns)
                body = lod.boxes_json(boxes, origin - off, rl.seq, lambda idx, n=rl.names: n[idx], intern)
                lanes.append({"id": lane.id, "label": lane.label, "kind": "rank-detail", "core": None,
                              "track": lane.track, "total": int(lane.starts.size), "rank": r,
                              "straggler": straggler, **body})
                if lane.track == "collective":
                    lane_of_rank[r] = lane.id
            lane_of_rank.setdefault(r, rl.lanes[0].id if rl.lanes else f"rank{r}")
            continue
        starts, busy = jt.activity.get(r, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        lanes.append({"id": f"rank{r}", "label": label, "kind": "rank", "core": None, "track": "rank",
                      "total": int(busy.size), "rank": r, "straggler": straggler, "bin_ns": int(row.bin_ns),
                      **_summary_boxes(starts, busy, int(row.bin_ns), lo, hi, px_ns, origin)})
        lane_of_rank[r] = f"rank{r}"
    links, in_window = _links(jt.collectives, lo, hi, origin, lane_of_rank)
    straggler_rank = jt.ranks.loc[jt.ranks["straggler"], "rank"]
    return {
        "run_id": record.id, "origin_ns": origin, "start_ns": lo, "end_ns": hi, "width_px": int(width_px),
        "px_ns": px_ns, "run_start_ns": jt.origin, "run_end_ns": jt.end, "total_ops": 0, "names": list(intern),
        "steps": [], "lanes": lanes, "links": links, "links_in_window": in_window,
        "clock": "measured host time of each rank, on the job's aligned clock",
        "job": {"ranks": ranks, "expanded": expanded,
                "straggler": int(straggler_rank.iloc[0]) if len(straggler_rank) else None,
                "max_expanded": MAX_EXPANDED},
    }


def job_op(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int, seq: int | None,
           cache: RunOpsCache | None = None, expand: str | None = None) -> dict[str, Any]:
    """One op of a rank by its job box id (`position * SEQ_STRIDE + seq`), with the lane the view draws it on
    (its rank's lane, or its own host/collectives lane when the rank is in `expand`)."""
    import pyarrow.parquet as pq

    if seq is None:
        raise core.BadRequest("missing 'seq' (the op's id in the job view)")

    store, record = core._get_record(root_dir, notebook_path, run_id)
    position, own = divmod(int(seq), SEQ_STRIDE)
    jt = _job_tables(store, record.id, cache)
    hit = jt.ranks[jt.ranks["position"] == position]
    if not len(hit):
        raise core.NotFound(f"run {record.id} has no rank stored at position {position}")
    rank, off = int(hit["rank"].iloc[0]), int(hit["offset_ns"].iloc[0])
    world = len(jt.ranks)
    path = store.table_path(record.id, f"ops_r{position}" if world > 1 else "ops")
    t = pq.read_table(path, filters=[("seq", "==", own)]).to_pylist()
    if not t:
        raise core.NotFound(f"rank {rank} has no op with seq {own}")
    row = core._finite({k: v for k, v in t[0].items() if k in ("seq", "name", "start_ns", "end_ns", "thread",
                                                               "step", "input_shapes", "module", "source")})
    row["start_ns"] = int(row["start_ns"]) + off
    row["end_ns"] = int(row["end_ns"]) + off
    row["rank"] = rank
    lane = f"rank{rank}"
    if rank in _parse_expand(expand, jt.ranks["rank"].astype(int).tolist()):
        at = np.flatnonzero(_rank_lanes_cached(store, record.id, rank, position, world, cache).seq == int(seq))
        lane = _expanded_lanes(store, record.id, rank, position, world, at[:1], cache)[0] if at.size else lane
    return {"run_id": record.id, "origin_ns": jt.origin, "op": row, "lane": lane, "host_lane": None}


def job_search(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int, query: str,
               limit: int | None = None, expand: str | None = None,
               cache: RunOpsCache | None = None) -> dict[str, Any]:
    """Ops of every rank whose name contains `query` (case-insensitive; collectives included), earliest on the
    job's aligned clock first. Each result names the lane the view draws it on: its rank's lane, or, for a
    rank in `expand`, the host or collectives lane it sits in; `seq` is its job box id (`job_op` reads it).

    Ranks are read one at a time (the name column first, the times only of a rank that matches), so a search
    holds one rank's names plus the results, never the job's events."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from .trace_view import check_search

    needle, limit = check_search(query, limit)
    store, record = core._get_record(root_dir, notebook_path, run_id)
    jt = _job_tables(store, record.id, cache)
    expanded = _parse_expand(expand, jt.ranks["rank"].astype(int).tolist())
    world = len(jt.ranks)
    total, found, unsearched = 0, [], []
    for row in jt.ranks.itertuples(index=False):
        r, pos, off = int(row.rank), int(row.position), int(row.offset_ns)
        path = store.table_path(record.id, f"ops_r{pos}" if world > 1 else "ops")
        if not path.is_file():
            unsearched.append(r)
            continue
        names = pq.read_table(path, columns=["name"], read_dictionary=["name"]).column("name").combine_chunks()
        names = names.unify_dictionaries() if hasattr(names, "unify_dictionaries") else names
        values = names.dictionary
        hit_codes = np.flatnonzero(pc.match_substring(values, needle, ignore_case=True).fill_null(False)
                                   .to_numpy(zero_copy_only=False))
        if not hit_codes.size:
            continue
        rows = np.flatnonzero(np.isin(names.indices.fill_null(-1).to_numpy(zero_copy_only=False), hit_codes))
        total += int(rows.size)
        times = pq.read_table(path, columns=["seq", "start_ns", "end_ns"]).take(rows)
        starts = times.column("start_ns").to_numpy().astype(np.int64) + off
        first = np.argsort(starts, kind="stable")[:limit]            # this rank's earliest `limit`
        lane_of = _expanded_lanes(store, record.id, r, pos, world, rows[first], cache) if r in expanded else None
        ends = times.column("end_ns").to_numpy().astype(np.int64) + off
        seqs = times.column("seq").to_numpy().astype(np.int64)
        row_names = names.take(rows[first]).to_pylist()
        for k, i in enumerate(first.tolist()):
            found.append((int(starts[i]), r, {"seq": int(pos * SEQ_STRIDE + seqs[i]), "name": str(row_names[k]),
                                              "lane": lane_of[k] if lane_of is not None else f"rank{r}",
                                              "rank": r, "start": int(starts[i] - jt.origin),
                                              "end": int(ends[i] - jt.origin)}))
    found.sort(key=lambda x: (x[0], x[1]))
    return {"run_id": record.id, "query": query, "total": total, "origin_ns": jt.origin,
            "results": [x[2] for x in found[:limit]], "unsearched_ranks": unsearched}


def _expanded_lanes(store: Any, run_id: int, rank: int, position: int, world: int, rows: np.ndarray,
                    cache: RunOpsCache | None) -> list[str]:
    """The expanded rank's lane id each of its table rows is drawn on."""
    rl = _rank_lanes_cached(store, run_id, rank, position, world, cache)
    out = np.full(rows.size, f"rank{rank}", dtype=object)
    for lane in rl.lanes:
        out[np.isin(rows, lane.rows)] = lane.id
    return out.tolist()


def _rank_lanes_cached(store: Any, run_id: int, rank: int, position: int, world: int,
                       cache: RunOpsCache | None) -> RankLanes:
    path = store.table_path(run_id, f"ops_r{position}" if world > 1 else "ops")
    return _cached(cache, path, RANK_KIND, lambda: _rank_lanes(store, run_id, rank, position, world))


def _cached(cache: RunOpsCache | None, path: Path, kind: str, load: Any) -> Any:
    try:
        return load() if cache is None else cache.get(path, load, kind=kind)
    except FileNotFoundError:
        raise core.NotFound(f"{path.name}: not stored") from None


def _job_tables(store: Any, run_id: int, cache: RunOpsCache | None) -> JobTables:
    if not is_job_run(store, run_id):
        raise core.NotFound(f"run {run_id} is not a many-rank job (no job timeline stored; `neuron-studio import "
                            "DIR` and multi-rank `neuron-studio run` jobs store one)")
    return _cached(cache, store.table_path(run_id, "job_ranks"), JOB_KIND, lambda: _load_tables(store, run_id))
