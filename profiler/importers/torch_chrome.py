"""Plain torch.profiler / Chrome traces (any PyTorch program) -> a `Trace`: every complete event becomes a
`host` row; the outermost framework ops ("ns::op") on each thread become `ops`, sized from their recorded
inputs. String tests run once per distinct name or category, then broadcast through codes.

What the events mean across kineto generations (categories, op names vs wrapper nodes, rank identity, the
clock base) is in `neuron_studio.profiler.kineto`. Times are integer nanoseconds from the first event: when
the file's µs values are beyond float64's exact range (epoch timestamps with ns fractions), they are read
from the decimal text (`profiler.timebase`). Steps are `ProfilerStep#N` windows on the CPU; an op belongs
to the window holding its start on any thread of its process (backward-thread ops included). GPU activity
keeps the args the analyses join on (correlation, External id, stream, device, grid, block, bytes)."""
from __future__ import annotations

import math
import operator
from itertools import repeat
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler import kineto
from neuron_studio.profiler.importers.common import BadTrace, frame_of
from neuron_studio.profiler.importers.torch_events import gpu_arg_columns, port_fallbacks, start_abs_ns
from neuron_studio.profiler.importers.torch_op_sizes import derive_sizes, is_inplace, per_name
from neuron_studio.profiler.trace import Trace

__all__ = ["plain_chrome_trace", "assemble", "EventColumns", "SideEvents", "op_arg_values", "gpu_rows",
           "intern_ids", "finite_numbers", "pair_begin_end", "TS_LIMIT_US", "no_dur_message"]

_INT64_MAX = np.iinfo(np.int64).max
_EMPTY: dict = {}
_GET_PH = operator.methodcaller("get", "ph")
_FIELDS = operator.itemgetter("name", "cat", "ts", "dur", "tid")
TS_LIMIT_US = 9.0e15  # int64 nanoseconds
_NO_DUR = object()


def no_dur_message(event: int | None) -> str:
    """A complete event without `dur`: its op's time is unknown, so the trace is refused rather than read as 0 ns."""
    at = f"event {event}" if event is not None else "a complete event"
    return (f"{at}: complete event (\"ph\": \"X\") has no \"dur\", so its duration is unknown (the Chrome trace "
            "format requires it); write the event with its duration, or as a \"B\"/\"E\" pair")


class _Where:
    """Event numbers (positions in traceEvents) of the complete events, computed only for error messages."""

    def __init__(self, phs: list, extra: list[int]) -> None:
        self.phs, self.extra, self._pos = phs, extra, None

    def __call__(self, j: int) -> int:
        if self._pos is None:
            self._pos = [i for i, p in enumerate(self.phs) if p == "X"] + self.extra
        return self._pos[j]


def _fail_first(values: Any, ok: Any, what: str, where: _Where) -> None:
    for j, v in enumerate(values):
        if not ok(v):
            raise BadTrace(f"event {where(j)}: {what}, got {str(v)[:60]!r}")


def _is_num(v: Any) -> bool:
    return type(v) is int or type(v) is float


def finite_numbers(values: Any, what: str, where: _Where) -> np.ndarray:
    if not set(map(type, values)) <= {int, float}:
        _fail_first(values, _is_num, f"{what} must be a number", where)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except OverflowError:                                  # ints beyond float range
        arr = np.asarray([float(v) if abs(v) < 1e308 else math.inf for v in values])
    if not np.isfinite(arr).all():
        j = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise BadTrace(f"event {where(j)}: {what} is not finite")
    return arr


def intern_ids(values: Any, what: str, where: _Where, names: dict | None = None) -> tuple[np.ndarray, dict]:
    """pid/tid values → int64 (ints as given, decimal strings such as 2021's "25738" as their number; other
    strings such as "Spans" or "stream 7" numbered above 2**40, in order of first appearance; `names` carries
    that numbering across calls)."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        if values and (max(values) > _INT64_MAX or min(values) < -_INT64_MAX):
            _fail_first(values, lambda v: -_INT64_MAX <= v <= _INT64_MAX, f"{what} out of range", where)
        return np.asarray(values, dtype=np.int64), ({} if names is None else names)
    names = {} if names is None else names
    out = np.empty(len(values), dtype=np.int64)
    for j, v in enumerate(values):
        if type(v) is int and -_INT64_MAX <= v <= _INT64_MAX:
            out[j] = v
        elif type(v) is str and v.isdigit() and len(v) < 19:
            out[j] = int(v)
        elif type(v) is str:
            code = names.get(v)
            if code is None:
                code = names[v] = (1 << 40) + len(names)
            out[j] = code
        else:
            raise BadTrace(f"event {where(j)}: {what} must be an integer or a string, got {str(v)[:40]!r}")
    return out, names


def _containing(start: np.ndarray, end: np.ndarray, thread: np.ndarray, r_start: np.ndarray, r_end: np.ndarray,
                r_thread: np.ndarray, r_value: np.ndarray, default: Any) -> np.ndarray:
    """Per event, the value of the latest-starting region on the same thread that contains it."""
    out = np.full(len(start), default, dtype=r_value.dtype if len(r_value) else object)
    for tid in np.unique(r_thread):
        m = thread == tid
        if not m.any():
            continue
        rm = r_thread == tid
        order = np.argsort(r_start[rm], kind="stable")
        rs, re, rv = r_start[rm][order], r_end[rm][order], r_value[rm][order]
        k = np.searchsorted(rs, start[m], side="right") - 1
        ok = (k >= 0) & (re[np.maximum(k, 0)] >= end[m])
        vals = out[m]
        vals[ok] = rv[k[ok]]
        out[m] = vals
    return out


def _outermost(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Indices of events not nested inside another event of the same thread (events nest properly)."""
    keep = []
    for tid in np.unique(thread):
        idx = np.flatnonzero(thread == tid)
        order = idx[np.lexsort((-end[idx], start[idx]))]
        e = end[order]
        prev_max = np.maximum.accumulate(np.concatenate(([np.iinfo(np.int64).min], e[:-1])))
        keep.append(order[~(prev_max >= e) | (np.arange(len(order)) == 0)])
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)


def _step_number(s: str) -> int:
    tail = s[len("ProfilerStep#"):]
    return int(tail) if tail.isdigit() and len(tail) < 10 else -1


def pair_begin_end(evs: list[dict], pos: list[int]) -> list[dict]:
    """Match "B"/"E" events per (pid, tid) into complete events (unmatched ones are dropped)."""
    stacks: dict[tuple, list] = {}
    out = []
    for ev, p in zip(evs, pos):
        key = (str(ev.get("pid")), str(ev.get("tid")))
        if ev.get("ph") == "B":
            stacks.setdefault(key, []).append((ev, p))
            continue
        st = stacks.get(key)
        if not st:
            continue
        b, bp = st.pop()
        tb, te = b.get("ts"), ev.get("ts")
        if type(tb) not in (int, float) or type(te) not in (int, float):
            raise BadTrace(f"event {bp}: ts must be a number")
        args = dict(b["args"]) if type(b.get("args")) is dict else {}
        if type(ev.get("args")) is dict:
            args.update(ev["args"])
        out.append({"ph": "X", "name": b.get("name", ev.get("name")), "cat": b.get("cat", ""),
                    "pid": b.get("pid"), "tid": b.get("tid", 0), "ts": tb, "dur": te - tb, "args": args,
                    "_pos": bp})
    return out


# -- events as columns ----------------------------------------------------------------------------------------
@dataclass
class EventColumns:
    """The complete events as columns: names, categories, ns times from the first event, interned threads."""

    n: int                    # complete events (X, then matched B/E pairs)
    name: np.ndarray
    cat: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    tids: np.ndarray
    tid_names: dict
    pids: np.ndarray
    keep: np.ndarray          # all but the profiler's own whole-run span
    t0: float                 # first kept timestamp (us)
    origin_ns: int            # the same, exact, in the trace's clock (ns)
    timestamps: str           # "exact" or "float64" (the decimal text could not be matched to the events)
    cat_codes: np.ndarray
    cat_uni: list
    name_codes: np.ndarray
    name_uni: Any
    raw_cats: tuple = ()      # the categories as written (kineto normalises `mtia_ccp_events` to "kernel")

    def cat_is(self, value: str) -> np.ndarray:
        return self.cat_codes == self.cat_uni.index(value) if value in self.cat_uni else np.zeros(self.n, dtype=bool)

    def name_matches(self, pred: Any) -> np.ndarray:
        per = np.fromiter((bool(pred(x)) for x in self.name_uni), dtype=bool, count=len(self.name_uni))
        return per[self.name_codes] if self.n else np.zeros(0, dtype=bool)


def _complete_events(events: list) -> tuple[list[dict], _Where, list]:
    """Complete events ("X"), plus B/E pairs matched per thread; and every event's phase."""
    if not set(map(type, events)) <= {dict}:
        raise BadTrace(f"event {next(i for i, ev in enumerate(events) if type(ev) is not dict)} is not an object")
    phs = list(map(_GET_PH, events))
    xs = [ev for ev, p in zip(events, phs) if p == "X"]
    extra: list[int] = []
    if "B" in set(phs):
        be_pos = [i for i, p in enumerate(phs) if p in ("B", "E")]
        be = pair_begin_end([events[i] for i in be_pos], be_pos)
        xs += be
        extra = [e.pop("_pos") for e in be]
    return xs, _Where(phs, extra), phs


def _event_columns(xs: list[dict], where: _Where, events: list, phs: list, raw: bytes | None) -> EventColumns:
    """Check each field's type and range (naming the first bad event) and lay the events out as columns."""
    n = len(xs)
    try:  # fast path: every event has all five keys (torch.profiler's do)
        names, cats, ts_l, dur_l, tid_l = zip(*map(_FIELDS, xs)) if n else ((),) * 5
    except KeyError:
        names = tuple(e.get("name") for e in xs)
        cats = tuple(e.get("cat", "") for e in xs)
        ts_l = tuple(e.get("ts") for e in xs)
        dur_l = tuple(e.get("dur", _NO_DUR) for e in xs)
        tid_l = tuple(e.get("tid", 0) for e in xs)
        if _NO_DUR in dur_l:
            raise BadTrace(no_dur_message(where(dur_l.index(_NO_DUR))))
    pid_l = tuple(e.get("pid", 0) for e in xs)
    if not set(map(type, names)) <= {str}:
        _fail_first(names, lambda v: type(v) is str, "name must be a string", where)
    if not set(map(type, cats)) <= {str}:
        _fail_first(cats, lambda v: type(v) is str, "cat must be a string", where)
    ts = finite_numbers(ts_l, "ts", where)
    dur = finite_numbers(dur_l, "dur", where)
    if n and (dur < 0).any():
        j = int(np.flatnonzero(dur < 0)[0])
        raise BadTrace(f"event {where(j)}: negative duration {dur[j]}")
    # one spelling per category across trace generations (2021 "Operator"/"Kernel" → "cpu_op"/"kernel")
    raw_codes, raw_uni = pd.factorize(np.asarray(cats, dtype=object))
    normal = [kineto.normal_category(c) for c in raw_uni]
    cat_uni = list(dict.fromkeys(normal))
    remap = np.asarray([cat_uni.index(c) for c in normal], dtype=np.int64)
    cat_codes = remap[raw_codes] if n else raw_codes
    cat_arr = np.asarray(cat_uni, dtype=object)[cat_codes] if n else np.zeros(0, dtype=object)
    keep = ~(cat_codes == cat_uni.index("Trace") if "Trace" in cat_uni else np.zeros(n, dtype=bool))
    t0 = float(ts[keep].min()) if keep.any() else 0.0
    if n and (np.abs(ts - t0).max() > TS_LIMIT_US or dur.max() > TS_LIMIT_US):
        raise BadTrace("timestamps or durations out of range (more than 100 days apart)")
    if n and np.abs(ts).max() > TS_LIMIT_US:             # int64 ns could not hold them
        raise BadTrace("timestamps out of range (beyond ±9e15 µs)")
    abs_ns, timestamps = start_abs_ns(ts, events, phs, raw, n_paired=len(where.extra))
    origin = int(abs_ns[keep].min()) if keep.any() else 0
    tids, tid_names = intern_ids(tid_l, "tid", where)
    pids, _ = intern_ids(pid_l, "pid", where)
    name_arr = np.asarray(names, dtype=object)
    name_codes, name_uni = pd.factorize(name_arr)
    return EventColumns(n=n, name=name_arr, cat=cat_arr, start_ns=abs_ns - origin,
                   dur_ns=np.rint(dur * 1000.0).astype(np.int64), tids=tids, tid_names=tid_names, pids=pids,
                   keep=keep, t0=t0, origin_ns=origin, timestamps=timestamps,
                   cat_codes=cat_codes, cat_uni=cat_uni, name_codes=name_codes, name_uni=name_uni,
                   raw_cats=tuple(str(c) for c in raw_uni))


# -- host rows and op rows --------------------------------------------------------------------------------------
def gpu_rows(cat_codes: np.ndarray, cat_uni: list, keep: np.ndarray) -> np.ndarray:
    """Rows of GPU activity and runtime calls: the events whose args the analyses join on."""
    return np.flatnonzero(keep & np.isin(cat_codes, [cat_uni.index(c) for c in
                                                     kineto.GPU_CATEGORIES + kineto.RUNTIME_CATEGORIES
                                                     if c in cat_uni]))


def op_arg_values(args: list[dict]) -> tuple[list, list]:
    """Per op row's args: "Input Dims" as text (None when not recorded) and its FLOPs (0 when absent/absurd)."""
    dims = list(map(dict.get, args, repeat("Input Dims")))
    fl_raw = list(map(dict.get, args, repeat("flops"), repeat(0)))
    return ([str(d) if type(d) is list else None for d in dims],
            [float(v) if type(v) in (int, float) and 0 <= v < 1e24 else 0.0 for v in fl_raw])


def _host_frame(ev: EventColumns, in_shapes: np.ndarray, flops_host: np.ndarray, extra: dict) -> pd.DataFrame:
    keep = ev.keep
    return frame_of({
        "name": ev.name[keep], "category": ev.cat[keep], "thread": ev.tids[keep],
        "start_ns": ev.start_ns[keep], "dur_ns": ev.dur_ns[keep], "input_shapes": in_shapes[keep],
        "flops": flops_host[keep], "stack": np.full(int(keep.sum()), None, dtype=object),
        "pid": ev.pids[keep], **{k: v[keep] for k, v in extra.items()},
    })


def _step_windows(ev: EventColumns) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the CPU "ProfilerStep#N" events (a `gpu_user_annotation` copy is not a step) and their N."""
    on_cpu = np.zeros(ev.n, dtype=bool)
    for c in kineto.STEP_CATEGORIES:
        on_cpu |= ev.cat_is(c)
    ann = np.flatnonzero(on_cpu & ev.keep & ev.name_matches(lambda x: x.startswith("ProfilerStep#")))
    step_no = np.asarray([_step_number(ev.name[i]) for i in ann], dtype=np.int64)
    ok = step_no >= 0
    return ann[ok], step_no[ok]


def _step_of(start: np.ndarray, pid: np.ndarray, w_start: np.ndarray, w_end: np.ndarray, w_pid: np.ndarray,
             w_step: np.ndarray) -> np.ndarray:
    """Per op, the step whose window (on any thread of the op's process) holds its start; 0 outside all."""
    out = np.zeros(len(start), dtype=np.int64)
    for p in np.unique(w_pid):
        m = np.flatnonzero(pid == p)
        wm = np.flatnonzero(w_pid == p)
        order = wm[np.argsort(w_start[wm], kind="stable")]
        k = np.searchsorted(w_start[order], start[m], side="right") - 1
        ok = (k >= 0) & (start[m] < w_end[order[np.maximum(k, 0)]])
        out[m[ok]] = w_step[order[k[ok]]]
    return out


def _thread_code(tid: Any, names: dict) -> int | None:
    """An `M` event's tid as `intern_ids` numbered the complete events' tids (None: no such thread)."""
    if type(tid) is int:
        return tid
    if type(tid) is str:
        return int(tid) if tid.isdigit() and len(tid) < 19 else names.get(tid)
    return None


def _autograd_threads(ev: EventColumns, leaf_rows: np.ndarray, ann: np.ndarray, m_events: list) -> np.ndarray:
    """Threads that run only the backward pass: the ones PyTorch names `pt_autograd_N`, and (older kineto, which
    names threads only by number and records no `evaluate_function` ranges) a thread other than the one
    stepping the loop (the `ProfilerStep#N` thread, else the process's main thread) that runs `*_backward`
    ops: the autograd engine's device thread."""
    named = {_thread_code(m.get("tid"), ev.tid_names) for m in m_events
             if m.get("name") == "thread_name" and type(m.get("args")) is dict
             and kineto.is_autograd_thread_name(m["args"].get("name"))}
    th = ev.tids[leaf_rows]
    main = set(ev.tids[ann].tolist()) if len(ann) else set(ev.pids[leaf_rows][ev.pids[leaf_rows] == th].tolist())
    bw = per_name(ev.name[leaf_rows], kineto.is_backward_op)
    inferred = set(th[bw].tolist()) - main if main else set()
    return np.asarray(sorted((named - {None}) | inferred), dtype=np.int64)


def _region_values(ev: EventColumns, is_cpu_op: np.ndarray, leaf_rows: np.ndarray,
                   ann: np.ndarray, step_no: np.ndarray, m_events: list = ()) -> tuple[np.ndarray, np.ndarray, int]:
    """Per op: phase and step (its ProfilerStep window); and the number of steps seen. Backward: an op inside
    an autograd engine function, a `*_backward` op, or any op on the autograd engine's thread."""
    s, e, th = ev.start_ns[leaf_rows], ev.start_ns[leaf_rows] + ev.dur_ns[leaf_rows], ev.tids[leaf_rows]
    bwr = np.flatnonzero(is_cpu_op & ev.name_matches(lambda x: x.startswith("autograd::engine::evaluate_function")))
    phase = _containing(s, e, th, ev.start_ns[bwr], ev.start_ns[bwr] + ev.dur_ns[bwr], ev.tids[bwr],
                        np.full(len(bwr), "backward", dtype=object), "forward")
    backward = per_name(ev.name[leaf_rows], kineto.is_backward_op) | np.isin(th, _autograd_threads(ev, leaf_rows, ann,
                                                                                                    list(m_events)))
    phase = np.where(backward, "backward", phase).astype(object)
    steps = _step_of(s, ev.pids[leaf_rows], ev.start_ns[ann], ev.start_ns[ann] + ev.dur_ns[ann], ev.pids[ann],
                     step_no) if len(ann) else np.zeros(len(leaf_rows), dtype=np.int64)
    steps = np.clip(steps, 0, np.iinfo(np.int32).max)
    n_steps = int(np.unique(step_no).size) if len(ann) else 1
    return phase, steps, n_steps


def _sizes(names: list, in_shapes: list, flops: list, row_args: list[dict]) -> list[tuple]:
    """`derive_sizes` per op row, computed once per distinct (name, inputs, flops)."""
    memo: dict[tuple, tuple] = {}
    by_record: dict[tuple, tuple] = {}       # the streamed readers share one args record per distinct inputs
    derived = []
    for nm, sh, fl, a in zip(names, in_shapes, flops, row_args):
        fast_key = (nm, sh, id(a), fl)
        r = by_record.get(fast_key)
        if r is not None:
            derived.append(r)
            continue
        types = a.get("Input type")
        try:
            key = (nm, sh, tuple(types) if type(types) is list else types, fl)
            r = memo.get(key)
        except TypeError:                                      # unhashable junk in "Input type"
            key = (nm, sh, str(types), fl)
            r = memo.get(key)
        if r is None:
            r = memo[key] = derive_sizes(nm, a.get("Input Dims"), types, fl)
        by_record[fast_key] = r
        derived.append(r)
    return derived


def _ops_frame(ev: EventColumns, rows: np.ndarray, derived: list[tuple], phase: np.ndarray,
               steps: np.ndarray) -> pd.DataFrame:
    m = len(rows)
    cols = list(zip(*derived)) if derived else [()] * 10
    return frame_of({
        "seq": np.arange(m, dtype=np.int64),
        "name": ev.name[rows],
        "overload": np.full(m, "", dtype=object),
        "start_ns": ev.start_ns[rows],
        "end_ns": ev.start_ns[rows] + ev.dur_ns[rows],
        "thread": ev.tids[rows],
        "device_index": np.zeros(m, dtype=np.int32),
        "input_shapes": np.asarray(cols[0], dtype=object),
        "input_dtypes": np.asarray(cols[1], dtype=object),
        "output_shapes": np.asarray(cols[2], dtype=object),
        "output_dtypes": np.asarray(cols[3], dtype=object),
        "flops": np.asarray(cols[9], dtype=np.float64),
        "in_bytes": np.asarray(cols[4], dtype=np.float64),
        "out_bytes": np.asarray(cols[5], dtype=np.float64),
        "elems": np.asarray(cols[6], dtype=np.float64),
        "itemsize": np.asarray(cols[7], dtype=np.int8),
        "dtype_class": np.asarray(cols[8], dtype=np.int8),
        "is_view": np.zeros(m, dtype=bool),
        "is_inplace": per_name(ev.name[rows], is_inplace),
        "sync": np.full(m, None, dtype=object),
        "transfer": np.full(m, None, dtype=object),
        "transfer_bytes": np.zeros(m),
        "fallback": port_fallbacks(ev.name[rows]),
        "source": np.full(m, None, dtype=object),
        "graph": np.full(m, -1, dtype=np.int64),
        "deterministic": np.zeros(m, dtype=bool),
        "phase": phase,
        "module": np.full(m, "", dtype=object),
        "step": steps.astype(np.int32),
    })


@dataclass
class SideEvents:
    """What the meta needs from the events that are not complete events."""

    n_events: int             # every event in traceEvents
    m_events: list            # "M" events (process/thread names)
    memory: list              # kineto.memory_summary of the "i" events
    flows: dict               # kineto.flow_summary of the "s" events

    @classmethod
    def of(cls, events: list, phs: list) -> "SideEvents":
        by_phase: dict[str, list] = {"M": [], "i": [], "s": []}
        for i in [i for i, p in enumerate(phs) if p == "M" or p == "i" or p == "s"]:
            by_phase[phs[i]].append(events[i])
        return cls(len(events), by_phase["M"], kineto.memory_summary(by_phase["i"]),
                   kineto.flow_summary(by_phase["s"]))


def _imported_meta(ev: EventColumns, doc: dict, name: str, side: SideEvents, n_ops: int, n_steps: int,
                   windows: list[dict]) -> dict:
    n_events = side.n_events
    keep = ev.keep
    span = int((ev.start_ns[keep] + ev.dur_ns[keep]).max()) if keep.any() else 0
    source_meta = {k: v for k, v in doc.items() if k != "traceEvents"
                   and (type(v) in (str, int, bool) or (type(v) is float and math.isfinite(v)))}
    meta = {
        "format": "neuron-studio-trace", "version": 1, "backend": "imported", "chip": "trn2", "mode": "eager",
        "name": name, "status": "ok", "steps": max(1, n_steps), "warmup": 0, "wall_ns": span,
        "dropped_events": 0,
        "figures": {"device_time": "modeled", "engine_utilization": "modeled", "host_time": "measured",
                    "cost": "modeled"},
        "imported": {"kind": "chrome-trace", "file": name, "events": n_events, "complete_events": ev.n,
                     "ops": n_ops, "start_us": ev.t0, "origin_ns": ev.origin_ns, "timestamps": ev.timestamps,
                     "output_shapes": "inferred", "trace_meta": source_meta, "step_windows": windows},
    }
    imp = meta["imported"]
    if ev.tid_names:
        imp["thread_names"] = {str(v): k for k, v in ev.tid_names.items()}
    ident = kineto.trace_identity(doc)
    if ident.rank is not None:
        meta["rank"], meta["world_size"] = ident.rank, ident.world_size
        meta["rank_source"] = "distributedInfo"
        imp["distributed_backend"] = ident.backend
    # the wall clock of the first event, so ranks line up: kineto's base + ts, or epoch-µs timestamps as such
    if ident.base_time_ns is not None:
        meta["start_wall_ns"] = ident.base_time_ns + ev.origin_ns
    elif ev.t0 >= kineto.EPOCH_US_MIN:
        meta["start_wall_ns"] = ev.origin_ns
    names = kineto.metadata_names(side.m_events)
    imp["process_names"], imp["thread_labels"], imp["process_labels"] = (
        names["processes"], names["threads"], names["labels"])
    imp["devices"] = ident.devices
    imp["record_shapes"] = ident.record_shapes
    imp["memory"] = side.memory
    imp["flows"] = side.flows
    counts = np.bincount(ev.cat_codes, minlength=len(ev.cat_uni)) if ev.n else []
    imp["categories"] = {str(c): int(k) for c, k in zip(ev.cat_uni, counts)}
    imp["notes"] = list(ident.notes)
    has_device = any(c in imp["categories"] for c in kineto.GPU_CATEGORIES)
    imp["device_kind"] = kineto.device_kind(ev.raw_cats, has_device)
    return meta


def plain_chrome_trace(events: list, doc: dict, name: str, raw: bytes | None = None) -> Trace:
    """A plain Chrome trace's events (and its top-level document, for metadata; `raw`, the document's text,
    for exact timestamps) → an imported `Trace`. Holds every parsed event: `importers.stream_trace` reads
    files in bounded pieces into the same columns."""
    xs, where, phs = _complete_events(events)
    ev = _event_columns(xs, where, events, phs, raw)
    op_rows = op_rows_of(ev)
    args = [xs[i].get("args") for i in op_rows]
    args = [a if type(a) is dict else _EMPTY for a in args]
    shapes, flops = op_arg_values(args)
    wanted = gpu_rows(ev.cat_codes, ev.cat_uni, ev.keep)
    extra = gpu_arg_columns([xs[i].get("args") for i in wanted], wanted, ev.n)
    return assemble(ev, op_rows, shapes, flops, args, extra, SideEvents.of(events, phs), doc, name)


def op_rows_of(ev: EventColumns) -> np.ndarray:
    """Rows of the ops: library operators (aten::mm, c10d::allreduce_) recorded as cpu_op; wrapper nodes
    (torch::autograd::AccumulateGrad, torch::distributed::reducer::mul_out) are not, so the ops inside them are."""
    return np.flatnonzero(ev.cat_is("cpu_op") & ev.keep & ev.name_matches(kineto.is_op_name))


def assemble(ev: EventColumns, op_rows: np.ndarray, shapes: list, flops: list, size_args: list, extra: dict,
             side: SideEvents, doc: dict, name: str) -> Trace:
    """The complete events as columns (plus, per op row, its "Input Dims" text, FLOPs and the args its sizes
    come from; the GPU arg columns; the other events' summaries) → the imported `Trace`."""
    n = ev.n
    is_cpu_op = ev.cat_is("cpu_op") & ev.keep
    in_shapes = np.full(n, None, dtype=object)
    in_shapes[op_rows] = shapes
    flops_host = np.zeros(n)
    flops_host[op_rows] = flops
    host = _host_frame(ev, in_shapes, flops_host, extra)

    # ops: the outermost framework ops ("ns::op", e.g. aten::linear, aten::mm) on each thread: what a device
    # backend receives. Their children (aten::t inside aten::linear) are the op's own implementation.
    s, e, th = ev.start_ns[op_rows], ev.start_ns[op_rows] + ev.dur_ns[op_rows], ev.tids[op_rows]
    top = _outermost(s, e, th)
    leaf = top[np.lexsort((top, s[top]))]                      # by start time, then file order
    rows = op_rows[leaf]
    ann, step_no = _step_windows(ev)
    phase, steps, n_steps = _region_values(ev, is_cpu_op, rows, ann, step_no, side.m_events)
    derived = _sizes(ev.name[rows].tolist(), in_shapes[rows].tolist(), flops_host[rows].tolist(),
                     [size_args[j] for j in leaf.tolist()])
    ops = _ops_frame(ev, rows, derived, phase, steps)
    # an op recorded without "Input Dims" has unknown inputs: None, not an empty shape list
    ops["input_shapes"] = ops["input_shapes"].where(pd.Series(in_shapes[rows]).notna().to_numpy(), None)
    windows = sorted(({"step": int(k), "start_ns": int(ev.start_ns[i]), "end_ns": int(ev.start_ns[i] + ev.dur_ns[i])}
                      for i, k in zip(ann.tolist(), step_no.tolist())), key=lambda w: (w["start_ns"], w["step"]))
    meta = _imported_meta(ev, doc, name, side, len(rows), n_steps, windows)
    return Trace(ops=ops, host=host, meta=meta)
