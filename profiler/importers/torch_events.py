"""Per-event columns of a torch.profiler trace beyond name/category/time: exact start times, the GPU args
the analyses join on, and what a port to Trainium would do with each op."""
from __future__ import annotations

import operator
from itertools import compress, repeat
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler import timebase
from neuron_studio.profiler.importers.common import BadTrace

__all__ = ["start_abs_ns", "needs_raw_text", "gpu_arg_columns", "port_fallbacks", "LOWERED_NAMESPACES"]

#: Operator namespaces TorchNeuron lowers (per op, the coverage data names the exceptions); any other
#: namespace (fbgemm::, torchvision::, a project's own custom ops) has no Neuron lowering.
LOWERED_NAMESPACES = ("aten", "prims", "c10d", "_c10d_functional", "c10d_functional")
_NO_ARGS: dict = {}
_INT_ARGS = {"correlation": ("correlation",), "external_id": ("External id", "external id"),
             "stream": ("stream",), "device": ("device",), "bytes": ("bytes",)}


def needs_raw_text(doc: Any) -> bool:
    """Whether a parsed plain Chrome trace has fractional µs timestamps beyond float64's exact range (so
    `start_abs_ns` will need the document's text)."""
    events = doc if isinstance(doc, list) else doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or (isinstance(doc, dict) and isinstance(doc.get("metadata"), dict)
                                        and "neuron_studio" in doc["metadata"]):
        return False
    get_ts = operator.methodcaller("get", "ts")
    try:
        floats = [t for t in map(get_ts, events) if type(t) is float]
    except (AttributeError, TypeError):             # a non-object event: the reader names it
        return False
    return timebase.needs_text(np.asarray(floats, dtype=np.float64))


def start_abs_ns(ts_us: np.ndarray, events: list, phs: list, raw: bytes | None, *,
                 n_paired: int) -> tuple[np.ndarray, str]:
    """Start of each complete event in integer ns of the trace's own clock, and "exact" or "float64".

    `ts_us` are the parsed values of the X events (in document order) followed by `n_paired` B/E pairs.
    Values within float64's exact range convert directly; otherwise the file's decimal text is read
    (`timebase.scan_us_field`), which needs the raw bytes and no B/E pairs.
    """
    if not timebase.needs_text(ts_us):
        return timebase.us_to_ns(ts_us), "exact"
    if raw is None or n_paired:
        return timebase.us_to_ns(ts_us), "float64"
    has_ts = np.fromiter((type(ev.get("ts")) in (int, float) for ev in events), dtype=bool, count=len(events))
    all_ts = np.fromiter((ev["ts"] for ev, h in zip(events, has_ts) if h), dtype=np.float64, count=int(has_ts.sum()))
    exact = timebase.scan_us_field(raw, "ts", all_ts)
    if exact is None:
        return timebase.us_to_ns(ts_us), "float64"
    is_x = np.fromiter((p == "X" for p in phs), dtype=bool, count=len(phs))
    slot = np.cumsum(has_ts) - 1
    return exact[slot[is_x]], "exact"


def _int_or(v: Any) -> int:
    if type(v) is int and -(1 << 62) < v < (1 << 62):
        return v
    if type(v) is str and v.lstrip("-").isdigit() and len(v) < 19:
        return int(v)
    return -1


def _dims(v: Any) -> str | None:
    if type(v) is list and all(type(x) is int for x in v):
        return ",".join(map(str, v))
    return None


def _ints(vals: list) -> tuple[np.ndarray, bool]:
    """int64 values, and whether every value was an int64 (kept as is; else each goes through `_int_or`,
    which also maps ints beyond ±2**62 to -1)."""
    if set(map(type, vals)) <= {int}:                     # the usual case: one C-level conversion
        try:
            return np.asarray(vals, dtype=np.int64), True
        except OverflowError:
            pass
    return np.asarray([_int_or(v) for v in vals], dtype=np.int64), False


def gpu_arg_columns(args: list, rows: np.ndarray, n: int, per_value: set | None = None) -> dict[str, np.ndarray]:
    """Columns over `n` events, filled at `rows` from their args: correlation, external_id, stream, device
    and bytes (int64, -1 when absent), grid and block ("x,y,z" text, None when absent). `per_value`, when
    given, collects the int columns whose values were not all int64 (read one by one)."""
    out: dict[str, np.ndarray] = {k: np.full(n, -1, dtype=np.int64) for k in _INT_ARGS}
    out["grid"] = np.full(n, None, dtype=object)
    out["block"] = np.full(n, None, dtype=object)
    if not len(rows):
        return out
    if not set(map(type, args)) <= {dict}:
        args = [a if type(a) is dict else _NO_ARGS for a in args]
    # one pass over the args (each dict read once: the dicts are scattered in memory, a pass per key is slower)
    per_key = dict(zip(("correlation", "External id", "stream", "device", "bytes", "grid", "block"), zip(*[
        (a.get("correlation", -1), a.get("External id", -1), a.get("stream", -1), a.get("device", -1),
         a.get("bytes", -1), a.get("grid"), a.get("block")) for a in args])))
    for col, keys in _INT_ARGS.items():
        first = per_key[keys[0]]
        if len(keys) > 1 and -1 in first:                  # 2021 traces spell it "external id"
            first = [a.get(keys[1], -1) if v == -1 else v for v, a in zip(first, args)]
        out[col][rows], all_int = _ints(first)
        if not all_int and per_value is not None:
            per_value.add(col)
    memo: dict[tuple, str | None] = {}
    for col in ("grid", "block"):
        vals = per_key[col]
        is_list = np.fromiter(map(isinstance, vals, repeat(list)), dtype=bool, count=len(vals))
        if not is_list.any():
            continue
        lists = list(compress(vals, is_list))
        try:                                               # one text per distinct value
            tups = list(map(tuple, lists))
            for t in dict.fromkeys(tups):
                if t not in memo:
                    memo[t] = _dims(list(t))
        except TypeError:                                  # unhashable items: as unreadable as before
            raise BadTrace(f"{col} holds nested values") from None
        text = np.full(len(vals), None, dtype=object)
        text[is_list] = list(map(memo.__getitem__, tups))
        out[col][rows] = text
    return out


def port_fallbacks(names: np.ndarray) -> np.ndarray:
    """Per op: the reason it would leave the NeuronCores under TorchNeuron (the op-coverage data's key, or
    "no_lowering" for an operator namespace TorchNeuron does not lower), else None."""
    from neuron_studio.device.coverage import op_coverage

    cov = op_coverage()
    out = np.full(len(names), None, dtype=object)
    if not len(names):
        return out
    inv, uniq = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    per = []
    for u in map(str, uniq):
        reason = cov.fallback_ops.get(u)
        if reason is None and u.split("::", 1)[0] not in LOWERED_NAMESPACES:
            reason = "no_lowering"
        per.append(reason)
    return np.asarray(per, dtype=object)[inv]
