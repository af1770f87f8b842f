"""Columnar op input for the model: one pass turns OpEvents (or an imported table) into numpy arrays.

The model never touches per-event Python objects; a 1M-event imported trace can be modeled from a
DataFrame/dict of arrays without building OpEvents at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from neuron_studio.profiler.model.ops import classify_engine, shape_stats, string_rows

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from neuron_studio.device.events import OpEvent

__all__ = ["OpColumns", "ColumnsError", "events_to_columns", "columns_from_mapping", "as_columns",
           "DERIVED_COLUMNS", "SHAPE_COLUMNS", "ATTN_CAUSAL", "ATTN_DROPOUT", "attention_flags", "parse_ids"]

# Precomputed per-op figures an importer may supply instead of shapes (fast path, no per-row Python).
DERIVED_COLUMNS = ("in_bytes", "out_bytes", "elems", "itemsize", "dtype_class")
SHAPE_COLUMNS = ("input_shapes", "input_dtypes", "output_shapes", "output_dtypes")
_REQUIRED = ("seq", "name", "start_ns", "end_ns", "device_index")


class ColumnsError(ValueError):
    """Input table is missing columns the model needs (names them) or has mismatched lengths."""


@dataclass(frozen=True)
class OpColumns:
    """One row per op, in event order. Names are interned: `names[name_code]` is the op name.

    Optional string columns (`sync`, `transfer`, `fallback`, `source`) are object arrays of str/None, or None
    when no row has a value. `dtype_class`: 0 = BF16/FP16 rate, 1 = FP8 rate, 2 = FP32 rate.
    """

    seq: np.ndarray            # int64
    name_code: np.ndarray      # int32 index into names
    names: np.ndarray          # object array of unique op names
    start_ns: np.ndarray       # int64 host wall clock
    end_ns: np.ndarray         # int64
    core: np.ndarray           # int32 device_index
    flops: np.ndarray          # float64
    in_bytes: np.ndarray       # float64
    out_bytes: np.ndarray      # float64
    elems: np.ndarray          # float64
    itemsize: np.ndarray       # int8
    dtype_class: np.ndarray    # int8
    is_view: np.ndarray        # bool
    graph: np.ndarray          # int64
    deterministic: np.ndarray  # bool
    transfer_bytes: np.ndarray  # float64
    sync: np.ndarray | None = None
    transfer: np.ndarray | None = None
    fallback: np.ndarray | None = None
    source: np.ndarray | None = None
    attention: np.ndarray | None = None  # int8 bit flags from the event tags: ATTN_CAUSAL | ATTN_DROPOUT
    reads: np.ndarray | None = None      # object array: tuple of storage ids each op read (None = unknown)
    writes: np.ndarray | None = None     # ... and wrote; the schedule orders the ops of one launch by them
    step: np.ndarray | None = None       # int64 step of each op (the studio synchronises between steps)

    def __post_init__(self) -> None:
        n = len(self.seq)
        if self.attention is None:
            object.__setattr__(self, "attention", np.zeros(n, dtype=np.int8))
        for f in ("name_code", "start_ns", "end_ns", "core", "flops", "in_bytes", "out_bytes", "elems",
                  "itemsize", "dtype_class", "is_view", "graph", "deterministic", "transfer_bytes",
                  "sync", "transfer", "fallback", "source", "attention", "reads", "writes", "step"):
            a = getattr(self, f)
            if a is not None and len(a) != n:
                raise ColumnsError(f"column {f!r} has {len(a)} rows, expected {n}")

    def __len__(self) -> int:
        return len(self.seq)

    def name_array(self) -> np.ndarray:
        """Op name per row (object array)."""
        return self.names[self.name_code] if len(self.names) else np.empty(0, dtype=object)


ATTN_CAUSAL, ATTN_DROPOUT = 1, 2


def attention_flags(tags: Any) -> int:
    """Bit flags for attention events from their tags ("causal", "dropout"); tags may be a tuple or a string."""
    if not tags:
        return 0
    if isinstance(tags, str):
        tags = tags.split(",")
    return (ATTN_CAUSAL if "causal" in tags else 0) | (ATTN_DROPOUT if "dropout" in tags else 0)


def _optional(values: list[Any]) -> np.ndarray | None:
    if all(v is None for v in values):
        return None
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _optional_ids(values: list[Any]) -> np.ndarray | None:
    """Object array of tuples (assigned one by one: numpy would read a list of tuples as a 2-D array)."""
    if all(v is None for v in values):
        return None
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


def events_to_columns(events: Iterable["OpEvent"], *, deterministic_tag: str = "deterministic") -> OpColumns:
    """Convert OpEvents to OpColumns in one pass (the only per-event Python work in the model)."""
    codes: dict[str, int] = {}
    engines: dict[tuple[str, bool], str] = {}
    memo: dict[tuple[Any, ...], tuple[float, float, float, int, int, float]] = {}
    cols: dict[str, list[Any]] = {k: [] for k in (
        "seq", "name_code", "start_ns", "end_ns", "core", "flops", "in_bytes", "out_bytes", "elems", "itemsize",
        "dtype_class", "is_view", "graph", "deterministic", "transfer_bytes", "sync", "transfer", "fallback",
        "source", "attention", "reads", "writes")}
    a = {k: v.append for k, v in cols.items()}
    for ev in events:
        name = ev.name
        code = codes.get(name)
        if code is None:
            code = codes[name] = len(codes)
        # Training loops repeat the same ops with the same shapes: memoise the shape arithmetic per call.
        skey = (name, ev.is_view, ev.input_shapes, ev.input_dtypes, ev.output_shapes, ev.output_dtypes, ev.flops)
        stats = memo.get(skey)
        if stats is None:
            key = (name, bool(ev.is_view))
            eng = engines.get(key)
            if eng is None:
                eng = engines[key] = classify_engine(name, ev.is_view)
            stats = memo[skey] = shape_stats(name, eng, ev.input_shapes, ev.input_dtypes, ev.output_shapes,
                                             ev.output_dtypes, ev.flops)
        ib, ob, el, isz, dc, fl = stats
        a["seq"](ev.seq); a["name_code"](code); a["start_ns"](ev.start_ns); a["end_ns"](ev.end_ns)
        a["core"](ev.device_index); a["flops"](fl); a["in_bytes"](ib); a["out_bytes"](ob); a["elems"](el)
        a["itemsize"](isz); a["dtype_class"](dc); a["is_view"](ev.is_view); a["graph"](ev.graph)
        a["deterministic"](deterministic_tag in ev.tags); a["transfer_bytes"](ev.transfer_bytes)
        a["sync"](ev.sync); a["transfer"](ev.transfer); a["fallback"](ev.fallback); a["source"](ev.source)
        a["attention"](attention_flags(ev.tags) if ev.tags else 0)
        a["reads"](ev.reads); a["writes"](ev.writes)
    names = np.empty(len(codes), dtype=object)
    names[:] = list(codes)
    return OpColumns(
        seq=np.asarray(cols["seq"], dtype=np.int64),
        name_code=np.asarray(cols["name_code"], dtype=np.int32),
        names=names,
        start_ns=np.asarray(cols["start_ns"], dtype=np.int64),
        end_ns=np.asarray(cols["end_ns"], dtype=np.int64),
        core=np.asarray(cols["core"], dtype=np.int32),
        flops=np.asarray(cols["flops"], dtype=np.float64),
        in_bytes=np.asarray(cols["in_bytes"], dtype=np.float64),
        out_bytes=np.asarray(cols["out_bytes"], dtype=np.float64),
        elems=np.asarray(cols["elems"], dtype=np.float64),
        itemsize=np.asarray(cols["itemsize"], dtype=np.int8),
        dtype_class=np.asarray(cols["dtype_class"], dtype=np.int8),
        is_view=np.asarray(cols["is_view"], dtype=bool),
        graph=np.asarray(cols["graph"], dtype=np.int64),
        deterministic=np.asarray(cols["deterministic"], dtype=bool),
        transfer_bytes=np.asarray(cols["transfer_bytes"], dtype=np.float64),
        sync=_optional(cols["sync"]),
        transfer=_optional(cols["transfer"]),
        fallback=_optional(cols["fallback"]),
        source=_optional(cols["source"]),
        attention=np.asarray(cols["attention"], dtype=np.int8),
        reads=_optional_ids(cols["reads"]),
        writes=_optional_ids(cols["writes"]),
    )


def parse_ids(value: Any) -> tuple[int, ...] | None:
    """Storage ids of one row of a `reads`/`writes` column: "3,7" (the trace's form), a sequence of ints, or
    missing (None/NaN -> None: unknown). Raises ColumnsError on anything else."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, str):
        try:
            return tuple(int(x) for x in value.split(",") if x)
        except ValueError as exc:
            raise ColumnsError(f"storage id list {value!r} is not comma-separated integers") from exc
    try:
        return tuple(int(x) for x in value)
    except (TypeError, ValueError) as exc:
        raise ColumnsError(f"storage id list {value!r} is not a sequence of integers") from exc


def _opt_ids(data: Mapping[str, Any], key: str, n: int) -> np.ndarray | None:
    if key not in data:
        return None
    raw = _col(data, key)
    if len(raw) != n:
        raise ColumnsError(f"column {key!r} has {len(raw)} rows, expected {n}")
    return _optional_ids([parse_ids(v) for v in raw])


def _col(data: Mapping[str, Any], key: str) -> np.ndarray:
    v = data[key]
    return v.to_numpy() if hasattr(v, "to_numpy") else np.asarray(v)


def _opt_obj(data: Mapping[str, Any], key: str, n: int) -> np.ndarray | None:
    if key not in data:
        return None
    arr = np.asarray(_col(data, key), dtype=object)
    if len(arr) != n:
        raise ColumnsError(f"column {key!r} has {len(arr)} rows, expected {n}")
    # pandas stores missing strings as NaN; normalise to None.
    mask = string_rows(arr)
    if not mask.any():
        return None
    out = np.empty(n, dtype=object)
    out[mask] = arr[mask]
    return out


def columns_from_mapping(data: "Mapping[str, Any] | pd.DataFrame", *,
                         deterministic_tag: str = "deterministic") -> OpColumns:
    """Build OpColumns from a DataFrame or dict of arrays named like OpEvent fields.

    Needs seq, name, start_ns, end_ns, device_index, plus either the derived columns (in_bytes, out_bytes,
    elems, itemsize, dtype_class: vectorised, no per-row Python) or the shape columns (input_shapes,
    input_dtypes, output_shapes, output_dtypes: one Python pass per row). Optional: flops, is_view, graph,
    tags or deterministic, transfer_bytes, sync, transfer, fallback, source, reads and writes (storage ids
    per op, "3,7"; without them the ops of one launch are scheduled one after another), and step (no adaptive
    region crosses a step boundary).
    """
    keys = set(data.keys())
    missing = [k for k in _REQUIRED if k not in keys]
    has_derived = all(k in keys for k in DERIVED_COLUMNS)
    has_shapes = all(k in keys for k in SHAPE_COLUMNS)
    if not (has_derived or has_shapes):
        missing += [f"{' + '.join(DERIVED_COLUMNS)} or {' + '.join(SHAPE_COLUMNS)}"]
    if missing:
        raise ColumnsError(f"op table is missing column(s): {missing}")
    seq = np.asarray(_col(data, "seq"), dtype=np.int64)
    n = len(seq)
    name_col = data["name"]
    import pandas as pd  # local: pandas is only needed for interning names

    if isinstance(getattr(name_col, "dtype", None), pd.CategoricalDtype):
        name_code = np.asarray(name_col.cat.codes, dtype=np.int32)
        names = np.asarray(name_col.cat.categories, dtype=object)
    else:
        codes, uniq = pd.factorize(np.asarray(_col(data, "name"), dtype=object))
        name_code = codes.astype(np.int32)
        names = np.asarray(uniq, dtype=object)
    if n and name_code.min() < 0:
        raise ColumnsError("column 'name' has missing values")

    def num(key: str, dtype: Any, default: float | int | bool) -> np.ndarray:
        if key in keys:
            arr = np.asarray(_col(data, key), dtype=dtype)
            if len(arr) != n:
                raise ColumnsError(f"column {key!r} has {len(arr)} rows, expected {n}")
            return arr
        return np.full(n, default, dtype=dtype)

    is_view = num("is_view", bool, False)
    flops = num("flops", np.float64, 0.0)
    if "deterministic" in keys:
        det = num("deterministic", bool, False)
    elif "tags" in keys:
        det = np.fromiter((deterministic_tag in (t or ()) for t in _col(data, "tags")), dtype=bool, count=n)
    else:
        det = np.zeros(n, dtype=bool)
    if "attention" in keys:
        attn = num("attention", np.int8, 0)
    elif "tags" in keys:
        attn = np.fromiter((attention_flags(t) for t in _col(data, "tags")), dtype=np.int8, count=n)
    else:
        attn = np.zeros(n, dtype=np.int8)
    if has_derived:
        in_b = num("in_bytes", np.float64, 0.0)
        out_b = num("out_bytes", np.float64, 0.0)
        elems = num("elems", np.float64, 0.0)
        itemsize = num("itemsize", np.int8, 4)
        dclass = num("dtype_class", np.int8, 0)
    else:
        in_b = np.empty(n); out_b = np.empty(n); elems = np.empty(n)
        itemsize = np.empty(n, dtype=np.int8); dclass = np.empty(n, dtype=np.int8)
        ish, idt, osh, odt = (_col(data, k) for k in SHAPE_COLUMNS)
        eng_cache: dict[tuple[int, bool], str] = {}
        for i in range(n):
            key = (int(name_code[i]), bool(is_view[i]))
            eng = eng_cache.get(key)
            if eng is None:
                eng = eng_cache[key] = classify_engine(names[key[0]], key[1])
            r = shape_stats(names[key[0]], eng, ish[i], idt[i], osh[i], odt[i], int(flops[i]))
            in_b[i], out_b[i], elems[i], itemsize[i], dclass[i], flops[i] = r
    return OpColumns(
        seq=seq, name_code=name_code, names=names,
        start_ns=num("start_ns", np.int64, 0), end_ns=num("end_ns", np.int64, 0),
        core=num("device_index", np.int32, 0), flops=flops, in_bytes=in_b, out_bytes=out_b, elems=elems,
        itemsize=itemsize, dtype_class=dclass, is_view=is_view, graph=num("graph", np.int64, -1),
        deterministic=det, transfer_bytes=num("transfer_bytes", np.float64, 0.0),
        sync=_opt_obj(data, "sync", n), transfer=_opt_obj(data, "transfer", n),
        fallback=_opt_obj(data, "fallback", n), source=_opt_obj(data, "source", n), attention=attn,
        reads=_opt_ids(data, "reads", n), writes=_opt_ids(data, "writes", n),
        step=num("step", np.int64, 0) if "step" in keys else None,
    )


def as_columns(data: Any, *, deterministic_tag: str = "deterministic") -> OpColumns:
    """Accept OpColumns, a DataFrame/dict of columns, or an iterable of OpEvents."""
    if isinstance(data, OpColumns):
        return data
    if isinstance(data, Mapping) or hasattr(data, "columns"):
        return columns_from_mapping(data, deterministic_tag=deterministic_tag)
    return events_to_columns(data, deterministic_tag=deterministic_tag)
