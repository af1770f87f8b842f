"""The fast path of the streaming reader: a piece of the traceEvents array parsed by pyarrow's C++ JSON reader
straight into typed columns (no Python dict per event), then added to `ChunkedColumns` exactly as the dict
path (`ChunkedColumns.add`) would add the same events.

Why: building a Python dict per event and reading it back field by field is what bounds the dict path
(~10 µs per event); Arrow's reader fills typed columns in C++.

Trust: the fast path takes a piece only when it can prove the result is the dict path's. Otherwise it
declines, before changing anything, and the piece goes through orjson and `ChunkedColumns.add`:

- `parse_piece` declines text Arrow reads but orjson rejects (NaN/Inf/Infinity literals, invalid UTF-8) and
  every piece Arrow cannot read into the fixed schema below: a field of another type than torch.profiler
  writes (string pids/tids of 2021 traces, float tids, nested TensorList dims, a non-object event, ints
  beyond int64, a duplicated field). It parses `{"e":[[` + piece + `]]}` and requires one outer element, so
  the parse also proves the cut (a cut inside a string or a nested value, or past the array's end, fails).
- `add_arrow_piece` declines pieces with the events whose dicts the dict path keeps (metadata "M", memory
  "i", "B"/"E" pairs), a missing/null field where the dict path tells missing from null (Arrow cannot),
  numbers beyond float64's exact integers, and GPU args the dict path reads value by value (beyond ±2**62,
  the 2021 "external id" spelling).
"""
from __future__ import annotations

import io
import re
from typing import Any

import numpy as np

from neuron_studio.profiler import kineto, timebase
from neuron_studio.profiler.importers.torch_chrome import gpu_rows

try:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
except ImportError:  # pragma: no cover - pyarrow is a dependency; the dict path stays correct without it
    pa = None

__all__ = ["parse_piece", "add_arrow_piece", "GPU_INT_ARGS"]

#: GPU arg columns read from ints (output column -> the key torch.profiler writes); "external id" (2021)
#: is in the schema only so that a piece using it is declined
GPU_INT_ARGS = {"correlation": "correlation", "external_id": "External id", "stream": "stream",
                "device": "device", "bytes": "bytes"}
_BIG = 1 << 62
_EXACT_INT = float(1 << 53)
_DECLINED_PHASES = {"M", "i", "B", "E"}
_INT64_MIN = np.iinfo(np.int64).min
#: where Arrow would read a NaN/Inf literal: in a value position (inside a string it only costs a decline)
_NON_JSON_NUMBER = re.compile(rb"[:,\[][ \t\r\n]*-?(?:NaN|Inf)")


def _schema() -> Any:
    args = pa.struct([("Input Dims", pa.list_(pa.list_(pa.int64()))), ("Input type", pa.list_(pa.string())),
                      ("flops", pa.float64()), ("correlation", pa.int64()), ("External id", pa.int64()),
                      ("external id", pa.int64()), ("stream", pa.int64()), ("device", pa.int64()),
                      ("bytes", pa.int64()), ("grid", pa.list_(pa.int64())), ("block", pa.list_(pa.int64()))])
    event = pa.struct([("ph", pa.string()), ("name", pa.string()), ("cat", pa.string()), ("ts", pa.float64()),
                       ("dur", pa.float64()), ("pid", pa.int64()), ("tid", pa.int64()), ("args", args)])
    return pa.schema([("e", pa.list_(pa.list_(event)))])


_SCHEMA = _schema() if pa is not None else None


def parse_piece(text: bytes) -> Any:
    """The events of `text` (array elements between two separators of traceEvents) as an Arrow StructArray,
    or None when Arrow cannot read them into the schema or the text is not JSON orjson accepts."""
    if pa is None or not text:
        return None
    if (b"NaN" in text or b"Inf" in text) and _NON_JSON_NUMBER.search(text):
        return None                                   # Arrow reads NaN, Inf, Infinity: JSON has none
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return None
    doc = b'{"e":[[' + text + b"]]}"
    try:
        table = pj.read_json(io.BytesIO(doc),
                             read_options=pj.ReadOptions(block_size=len(doc) + 64, use_threads=False),
                             parse_options=pj.ParseOptions(explicit_schema=_SCHEMA, newlines_in_values=True,
                                                           unexpected_field_behavior="ignore"))
    except (pa.ArrowException, ValueError, UnicodeDecodeError, OverflowError):
        return None
    if table.num_rows != 1:
        return None
    outer = table.column("e").combine_chunks()
    if outer.null_count or len(outer.values) != 1 or outer.values.null_count:
        return None                                   # `[[a], [b]]`: the piece closed the array it was cut from
    events = outer.values.values
    if not len(events) or events.null_count:
        return None
    return events


def _np(a: Any, dtype: Any) -> np.ndarray:
    return np.asarray(a.to_numpy(zero_copy_only=False), dtype=dtype)


def _codes(a: Any) -> tuple[np.ndarray, list]:
    """Dictionary codes (in order of first appearance, as `pd.factorize`; -1 for null) and the distinct values."""
    enc = pc.dictionary_encode(a)
    idx = enc.indices
    return _np(pc.fill_null(idx, -1) if idx.null_count else idx, np.int64), enc.dictionary.to_pylist()


def _exact_float(x: np.ndarray) -> bool:
    """Finite and within float64's exact integers (larger values the dict path checks or reads value by value)."""
    return bool(np.isfinite(x).all()) and (not len(x) or float(np.abs(x).max()) < _EXACT_INT)


def add_arrow_piece(cols: Any, events: Any, text: bytes) -> bool:
    """Add a piece parsed by `parse_piece` to `cols` as `cols.add` adds its dicts; False (nothing changed)
    when the piece needs the dict path."""
    n_events = len(events)
    ph = events.field("ph")
    kinds = set(pc.unique(ph).to_pylist())
    if kinds & _DECLINED_PHASES:
        return False
    flows: list = []
    if "s" in kinds:
        s_cat = events.field("cat").filter(pc.fill_null(pc.equal(ph, "s"), False))
        if s_cat.null_count:                          # missing ("") or null ("None"): Arrow cannot tell
            return False
        flows = s_cat.to_pylist()
    is_x_arr = pc.fill_null(pc.equal(ph, "X"), False)
    xs = events if kinds == {"X"} else events.filter(is_x_arr)
    try:
        prep = _prepare(cols, xs, events, is_x_arr, text) if len(xs) else None
    except pa.ArrowException:                         # a conversion Arrow does not offer: the dict path reads it
        return False
    if len(xs) and prep is None:
        return False
    if flows:
        cols.flow_counts.update(flows)
    if prep is not None:
        _commit(cols, prep)
    cols.n_events += n_events
    return True


def _prepare(cols: Any, xs: Any, events: Any, is_x_arr: Any, text: bytes) -> dict | None:
    """Every column of the complete events, checked; None when the dict path must take the piece. Reads
    `cols` but changes nothing."""
    fields = {k: xs.field(k) for k in ("name", "cat", "ts", "dur", "tid", "pid")}
    if any(f.null_count for f in fields.values()):    # missing keys have defaults in the dict path, nulls fail
        return None
    ts, dur = _np(fields["ts"], np.float64), _np(fields["dur"], np.float64)
    if not _exact_float(ts) or not _exact_float(dur) or (dur < 0).any():
        return None
    tids, pids = _np(fields["tid"], np.int64), _np(fields["pid"], np.int64)
    if (tids == _INT64_MIN).any() or (pids == _INT64_MIN).any():
        return None
    exact = _exact_ns(ts, events, is_x_arr, text)
    if exact is False:
        return None
    p = {"ts": ts, "dur": dur, "tids": tids, "pids": pids, "exact": exact}
    # the codes `cols` will give (new values take the next codes, in order of first appearance)
    cat_raw, p["cat_values"] = _codes(fields["cat"])
    cat_uni = list(cols.cat_uni)
    remap = []
    for c in p["cat_values"]:
        code = cols.cat_code.get(c)
        if code is None:
            normal = kineto.normal_category(c)
            if normal not in cat_uni:
                cat_uni.append(normal)
            code = cat_uni.index(normal)
        remap.append(code)
    cat_codes = p["cat_codes"] = np.asarray(remap, dtype=np.int64)[cat_raw]
    name_raw, p["name_values"] = _codes(fields["name"])
    p["name_raw"] = name_raw
    keep = cat_codes != cat_uni.index("Trace") if "Trace" in cat_uni else np.ones(len(xs), dtype=bool)
    args = None
    p["ops"] = p["gpu"] = None
    if "cpu_op" in cat_uni:
        known = cols.name_index
        name_is_op = np.asarray([cols.is_op[known[x]] if x in known else bool(kineto.is_op_name(x))
                                 for x in p["name_values"]], dtype=bool)
        rows = np.flatnonzero(name_is_op[name_raw] & (cat_codes == cat_uni.index("cpu_op")) & keep)
        if len(rows):
            args = _args_of(xs)
            p["ops"] = _op_values(args, rows)
            if p["ops"] is None:
                return None
    wanted = gpu_rows(cat_codes, cat_uni, keep)
    if len(wanted):
        p["gpu"] = _gpu_values(_args_of(xs) if args is None else args, wanted)
        if p["gpu"] is None:
            return None
    return p


def _exact_ns(ts: np.ndarray, events: Any, is_x_arr: Any, text: bytes) -> Any:
    """As `ChunkedColumns._add_exact`: None when float64 holds the piece's start times exactly, else their
    ns from the text, or "failed" when the text does not match (the trace then keeps float64)."""
    if np.abs(ts).max() < timebase.EXACT_US_LIMIT and (np.rint(ts * 1000.0) / 1000.0 == ts).all():
        return None
    all_ts_arr = events.field("ts")
    has_ts = _np(all_ts_arr.is_valid(), bool)
    all_ts = _np(all_ts_arr.drop_null(), np.float64)
    if not np.isfinite(all_ts).all():
        return False
    exact = timebase.scan_us_field(text, "ts", all_ts)
    if exact is None:
        return "failed"
    is_x = _np(is_x_arr, bool)
    return exact[(np.cumsum(has_ts) - 1)[is_x]]


def _args_of(xs: Any) -> dict:
    """The args fields, each with the event's validity (an event without args has none of them)."""
    return {f.name: a for f, a in zip(xs.type.field("args").type, xs.field("args").flatten())}


def _wrap(x: Any) -> Any:
    return pc.binary_join_element_wise(pa.scalar("["), x, pa.scalar("]"), "")


def _dims_text(dims: Any) -> Any:
    """"Input Dims" (list<list<int64>>) as `str()` writes the Python list ("[[512, 1024], []]", null when
    not recorded); None when an inner list is null or holds a null (written "None": left to the dict path)."""
    inner = dims.flatten()
    if inner.null_count or pc.list_flatten(inner).null_count:
        return None
    inner_txt = _wrap(pc.binary_join(pc.cast(inner, pa.list_(pa.string())), ", "))
    outer = pa.ListArray.from_arrays(dims.offsets, inner_txt, mask=dims.is_null())
    return _wrap(pc.binary_join(outer, ", "))


def _types_key(types: Any) -> Any:
    """"Input type" (list<string>) as one string per row that tells different lists apart (their length,
    then the items joined by \x1f); None when an item is null or holds \x1f (left to the dict path)."""
    items = pc.list_flatten(types)
    if items.null_count or pc.any(pc.match_substring(items, "\x1f")).as_py():
        return None
    length = pc.cast(pc.list_value_length(types), pa.string())
    return pc.binary_join_element_wise(length, pc.binary_join(types, "\x1f"), "\x1f")


def _op_values(args: dict, rows: np.ndarray) -> dict | None:
    """As `op_arg_values` and `ChunkedColumns._size_args`: per op row its "Input Dims" as text (None when not
    recorded), its FLOPs (0 when absent or absurd), and its (dims, types) group; per group the dims, types
    and text (each computed once per distinct pair, from its first row)."""
    take = pa.array(rows)
    fl = _np(pc.fill_null(args["flops"].take(take), 0.0), np.float64)
    if not _exact_float(fl):                          # ints beyond 2**53: the dict path rounds them itself
        return None
    dims = args["Input Dims"].take(take)
    types = args["Input type"].take(take)
    text, tkey = _dims_text(dims), _types_key(types)
    if text is None or tkey is None:
        return None
    key = pc.binary_join_element_wise(pc.fill_null(text, "~"), pc.fill_null(tkey, "~"), "\x1e")
    codes, _ = _codes(key)
    _, first = np.unique(codes, return_index=True)    # codes run 0..k-1 in order of first appearance
    first_l = first.tolist()
    g_dims = dims.take(pa.array(first)).to_pylist()
    g_types = types.take(pa.array(first)).to_pylist()
    g_text = text.take(pa.array(first)).to_pylist()
    return {"rows": rows, "codes": codes, "first": first_l, "dims": g_dims, "types": g_types, "text": g_text,
            "flops": np.where((fl >= 0) & (fl < 1e24), fl, 0.0).tolist()}


def _gpu_values(args: dict, wanted: np.ndarray) -> dict | None:
    """As `gpu_arg_columns` over the GPU rows; also the int columns with absent values (the dict path reads
    an explicit null value by value: `ChunkedColumns` checks at the end that this cannot matter)."""
    take = pa.array(wanted)
    if args["external id"].take(take).null_count != len(wanted):
        return None                                   # 2021 spelling: the dict path picks per value
    out: dict = {}
    nulls = set()
    for col, key in GPU_INT_ARGS.items():
        a = args[key].take(take)
        out[col] = _np(pc.fill_null(a, -1), np.int64)
        if a.null_count or (col == "external_id" and (out[col] == -1).any()):
            nulls.add(col)
    for col in ("grid", "block"):                     # "x,y,z"; None when absent or an item is null
        joined = pc.binary_join(pc.cast(args[col].take(take), pa.list_(pa.string())), ",")
        codes, uni = _codes(joined)
        text = np.full(len(wanted), None, dtype=object)
        valid = codes >= 0
        if valid.any():
            text[valid] = np.asarray(uni + [None], dtype=object)[codes[valid]]
        out[col] = text
    return {"rows": wanted, "cols": out, "nulls": nulls}


def _commit(cols: Any, p: dict) -> None:
    for c in p["cat_values"]:
        cols._cat(c)                                  # gives the codes `_prepare` foresaw
    name_codes = np.asarray([cols._name(x) for x in p["name_values"]], dtype=np.int64)[p["name_raw"]]
    ops = p["ops"]
    if ops is not None:                               # as `ChunkedColumns._size_args`, once per group
        memo = cols._args_memo
        records, texts = [], []
        for d, t, x in zip(ops["dims"], ops["types"], ops["text"]):
            k = (x, None if t is None else tuple(t))
            if k not in memo:
                memo[k] = {"Input Dims": d if x is not None else None, "Input type": t}
            records.append(memo[k])
            texts.append(x)
        codes = ops["codes"]
        cols.op_rows.append(ops["rows"] + cols.n)
        cols.op_shapes += np.asarray(texts, dtype=object)[codes].tolist()
        cols.op_flops += ops["flops"]
        rec = np.empty(len(records), dtype=object)
        rec[:] = records
        cols.op_args += rec[codes].tolist()
    gpu = p["gpu"]
    if gpu is not None:
        cols.gpu_idx.append(gpu["rows"] + cols.n)
        for k, v in gpu["cols"].items():
            cols.gpu_vals.setdefault(k, []).append(v)
        cols.fast_null_cols |= gpu["nulls"]
    for k, v in (("name", name_codes), ("cat", p["cat_codes"]), ("ts", p["ts"]), ("dur", p["dur"]),
                 ("tid", p["tids"]), ("pid", p["pids"])):
        cols.cols[k].append(v)
    exact = p["exact"]
    if isinstance(exact, str):
        cols.scan_failed = True
        exact = None
    cols.exact.append(exact)
    cols.n += len(p["ts"])
