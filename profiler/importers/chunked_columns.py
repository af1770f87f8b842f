"""A plain torch.profiler trace read in pieces (`json_stream`) into the columns `torch_chrome.assemble` takes.

Each piece's events become typed arrays at once (names and categories as codes, times as float64 µs and
exact int64 ns, interned thread ids, per op row its "Input Dims" text, FLOPs and a shared args record, GPU
args at their rows) and the dicts are dropped, so memory is bounded by the columns, not the parsed document.
Every check and conversion is the one `plain_chrome_trace` applies to the whole event list; where the whole
list decides (a string tid anywhere, an int beyond int64 in a GPU arg column, B/E pairs, whether timestamps
need their decimal text), the decision is taken at `finish()` over all pieces. A check that fails raises
`BadTrace`; the caller then reads the document whole, so a bad file gets the same message either way.

Exact timestamps: a piece whose µs values float64 cannot hold exactly (epoch µs with ns fractions, or more
than 3 decimals) has its digits read from that piece's text (`timebase.scan_us_field`), matched per piece.
"""
from __future__ import annotations

import operator
from collections import Counter
from itertools import compress, repeat
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from neuron_studio.profiler import kineto, timebase
from neuron_studio.profiler.importers.arrow_pieces import add_arrow_piece, parse_piece
from neuron_studio.profiler.importers.common import BadTrace
from neuron_studio.profiler.importers.json_stream import (CHUNK_BYTES, GUESS_ABOVE, EventPiece, NotStreamable,
                                                          StreamedDocument, stream_events)
from neuron_studio.profiler.importers.torch_chrome import (TS_LIMIT_US, no_dur_message, EventColumns, SideEvents, assemble,
                                                           finite_numbers, gpu_rows, intern_ids, op_arg_values,
                                                           pair_begin_end)
from neuron_studio.profiler.importers.torch_events import gpu_arg_columns
from neuron_studio.profiler.trace import Trace

__all__ = ["ChunkedColumns", "stream_trace"]

_GRID_COLS = ("grid", "block")
_EMPTY: dict = {}
_BIG = 1 << 62                      # `_int_or` keeps ints strictly inside ±2**62


#: what a failed check raises; the whole-document reader then gives the message
_CHECK_FAILED = (BadTrace, KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError,
                 ArithmeticError, UnicodeError)


def stream_trace(fh: BinaryIO, name: str, *, chunk: int = CHUNK_BYTES, guess_above: int = GUESS_ABOVE,
                 fast: bool = True, report: dict | None = None) -> Trace:
    """A plain Chrome trace (JSON, optionally gzip) read from `fh` in pieces of about `chunk` bytes; with
    `fast`, each piece is first offered to the columnar fast path (`arrow_pieces`), else parsed into dicts;
    `report` receives the number of pieces the fast path took ("pieces_fast") and declined, and all pieces.

    Raises BadTrace for text that is not valid JSON inside traceEvents (with its byte offset), NotStreamable
    when the document is another kind (ours, no traceEvents array) or fails a check (read it whole)."""
    streamed = StreamedDocument()
    cols = ChunkedColumns()
    for piece in stream_events(fh, streamed, chunk=chunk, guess_above=guess_above,
                               fast=parse_piece if fast else None):
        try:
            cols.add(piece)
        except _CHECK_FAILED as e:
            raise NotStreamable(f"check failed ({type(e).__name__})") from None
    if report is not None:
        report.update(pieces=cols.pieces, pieces_fast=cols.pieces_fast, pieces_declined=cols.pieces_declined)
    try:
        return cols.finish(streamed, name)
    except _CHECK_FAILED as e:
        raise NotStreamable(f"check failed ({type(e).__name__})") from None


_NO_DUR = object()
_FIELDS_ARGS = operator.itemgetter("name", "cat", "ts", "dur", "tid", "pid", "args")


def _kind(p: Any) -> Any:
    """A "ph" value that cannot be hashed stands for no phase the reader knows (it only equals itself)."""
    try:
        hash(p)
    except TypeError:
        return None
    return p


def _where(j: int) -> int:
    return j                          # messages come from the whole-document reader on failure


def _no_ts_in(text: bytes) -> bool:
    """True when `text` (the document outside the array) holds no `"ts": <number>` the digit scan would count."""
    return timebase.scan_us_field(text, "ts", np.zeros(0)) is not None


class ChunkedColumns:
    """Columns of the complete events, built piece by piece."""

    def __init__(self) -> None:
        self.n = 0                                  # complete events so far
        self.n_events = 0
        self.name_index: dict[str, int] = {}
        self.is_op: list[bool] = []
        self.cat_code: dict[str, int] = {}          # category as written -> code of its normal spelling
        self.cat_uni: list[str] = []
        self.tid_names: dict = {}
        self.pid_names: dict = {}
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("name", "cat", "ts", "dur", "tid", "pid")}
        self.exact: list[np.ndarray | None] = []    # per piece: ns from the text, or None (float64 is exact)
        self.scan_failed = False
        self.op_rows: list[np.ndarray] = []
        self.op_shapes: list = []
        self.op_flops: list = []
        self.op_args: list = []
        self._args_memo: dict[tuple, dict] = {}
        self.gpu_idx: list[np.ndarray] = []
        self.gpu_vals: dict[str, list] = {}
        self.gpu_per_value: set = set()
        self.m_events: list = []
        self.memory = kineto.MemoryTally()
        self.flow_counts: Counter = Counter()
        self.be_events: list = []
        self.be_pos: list[int] = []
        self.has_b = False
        self.fast_null_cols: set = set()            # GPU int columns where a fast piece had absent values
        self.pieces = self.pieces_fast = self.pieces_declined = 0   # all / taken by / declined by the fast path

    # -- per piece ----------------------------------------------------------------------------------------
    def add(self, piece: EventPiece) -> None:
        self.pieces += 1
        if piece.columnar:
            if add_arrow_piece(self, piece.events, piece.text):
                self.pieces_fast += 1
                return
            self.pieces_declined += 1
        events = piece.dicts()
        try:
            phs = list(map(dict.get, events, repeat("ph")))
        except TypeError:
            raise BadTrace("an event is not an object") from None
        try:
            kinds = set(phs)
        except TypeError:                              # a list or object as "ph": compare values one by one
            phs = list(map(_kind, phs))
            kinds = set(phs)
        if kinds <= {"X"}:
            xs = events
        else:
            ph = np.fromiter(phs, dtype=object, count=len(phs))
            xs = list(compress(events, ph == "X"))
            if "M" in kinds:
                self.m_events += compress(events, ph == "M")
            if "i" in kinds:
                self.memory.add(list(compress(events, ph == "i")))
            if "s" in kinds:
                self.flow_counts.update(map(str, map(dict.get, compress(events, ph == "s"), repeat("cat"), repeat(""))))
            if "B" in kinds or "E" in kinds:
                self.has_b = self.has_b or "B" in kinds
                be = np.flatnonzero((ph == "B") | (ph == "E"))
                self.be_events += [events[i] for i in be]
                self.be_pos += (be + self.n_events).tolist()
        ts = self._add_complete(xs)
        if len(ts):
            self._add_exact(ts, events, phs, piece.text)
        self.n_events += len(events)

    def _add_exact(self, ts: np.ndarray, events: list, phs: list, text: bytes) -> None:
        """This piece's start times from its text, unless float64 holds them exactly: below
        `EXACT_US_LIMIT` with at most 3 decimals. (Above it a float that looks whole may have lost a fraction
        the text has; whether the text is used is decided over the whole trace, in `_events`.)"""
        if np.abs(ts).max() < timebase.EXACT_US_LIMIT and (np.rint(ts * 1000.0) / 1000.0 == ts).all():
            self.exact.append(None)
            return
        has_ts = np.fromiter((type(ev.get("ts")) in (int, float) for ev in events), dtype=bool, count=len(events))
        all_ts = np.fromiter((ev["ts"] for ev, h in zip(events, has_ts) if h), dtype=np.float64,
                             count=int(has_ts.sum()))
        exact = timebase.scan_us_field(text, "ts", all_ts)
        if exact is None:
            self.scan_failed = True
            self.exact.append(None)
            return
        is_x = np.fromiter((p == "X" for p in phs), dtype=bool, count=len(phs))
        self.exact.append(exact[(np.cumsum(has_ts) - 1)[is_x]])

    def _add_complete(self, xs: list) -> np.ndarray:
        n = len(xs)
        if not n:
            return np.zeros(0)
        try:  # fast path: every event has all seven keys (torch.profiler's X events do)
            names, cats, ts_l, dur_l, tid_l, pid_l, args_l = zip(*map(_FIELDS_ARGS, xs))
        except KeyError:
            names, cats, ts_l, dur_l, tid_l, pid_l, args_l = zip(*[
                (e.get("name"), e.get("cat", ""), e.get("ts"), e.get("dur", _NO_DUR), e.get("tid", 0), e.get("pid", 0),
                 e.get("args")) for e in xs])
            if _NO_DUR in dur_l:
                raise BadTrace(no_dur_message(None))
        if not set(map(type, names)) <= {str} or not set(map(type, cats)) <= {str}:
            raise BadTrace("a name or category is not a string")
        ts = finite_numbers(ts_l, "ts", _where)
        dur = finite_numbers(dur_l, "dur", _where)
        if (dur < 0).any():
            raise BadTrace("negative duration")
        raw_codes, raw_uni = pd.factorize(np.asarray(cats, dtype=object))
        remap = np.asarray([self._cat(c) for c in raw_uni], dtype=np.int64)
        cat_codes = remap[raw_codes]
        nm_codes, nm_uni = pd.factorize(np.asarray(names, dtype=object))
        nm_remap = np.asarray([self._name(x) for x in nm_uni], dtype=np.int64)
        name_codes = nm_remap[nm_codes]
        tids, _ = intern_ids(tid_l, "tid", _where, self.tid_names)
        pids, _ = intern_ids(pid_l, "pid", _where, self.pid_names)
        keep = cat_codes != self.cat_uni.index("Trace") if "Trace" in self.cat_uni else np.ones(n, dtype=bool)

        if "cpu_op" in self.cat_uni:
            is_op = np.asarray(self.is_op, dtype=bool)[name_codes] & (cat_codes == self.cat_uni.index("cpu_op")) & keep
            rows = np.flatnonzero(is_op)
            if len(rows):
                args = list(map(args_l.__getitem__, rows.tolist()))
                if not set(map(type, args)) <= {dict}:
                    args = [a if type(a) is dict else _EMPTY for a in args]
                shapes, flops = op_arg_values(args)
                self.op_rows.append(rows + self.n)
                self.op_shapes += shapes
                self.op_flops += flops
                self.op_args += self._size_args(shapes, args)
        wanted = gpu_rows(cat_codes, self.cat_uni, keep)
        if len(wanted):
            cols = gpu_arg_columns(list(map(args_l.__getitem__, wanted.tolist())), np.arange(len(wanted)), len(wanted),
                                   self.gpu_per_value)
            self.gpu_idx.append(wanted + self.n)
            for k, v in cols.items():
                self.gpu_vals.setdefault(k, []).append(v)
        for k, v in (("name", name_codes), ("cat", cat_codes), ("ts", ts), ("dur", dur), ("tid", tids),
                     ("pid", pids)):
            self.cols[k].append(v)
        self.n += n
        return ts

    def _cat(self, c: str) -> int:
        code = self.cat_code.get(c)
        if code is None:
            normal = kineto.normal_category(c)
            if normal not in self.cat_uni:
                self.cat_uni.append(normal)
            code = self.cat_code[c] = self.cat_uni.index(normal)
        return code

    def _name(self, x: str) -> int:
        code = self.name_index.get(x)
        if code is None:
            code = self.name_index[x] = len(self.is_op)
            self.is_op.append(bool(kineto.is_op_name(x)))
        return code

    def _size_args(self, shapes: list, args: list) -> list[dict]:
        """Per op row, the two args its sizes come from, as one record shared by every op recorded with the
        same ones (sizes depend on "Input Dims" only through its text: any non-list value gives no tensor
        inputs)."""
        types = list(map(dict.get, args, repeat("Input type")))
        try:
            keys = list(zip(shapes, [tuple(t) if type(t) is list else t for t in types]))
            first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))   # key -> its first row
        except TypeError:                              # unhashable items in "Input type": key on its text
            keys = list(zip(shapes, map(repr, types)))
            first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))
        memo = self._args_memo
        for k, j in first.items():
            if k not in memo:
                memo[k] = {"Input Dims": args[j].get("Input Dims") if k[0] is not None else None,
                           "Input type": types[j]}
        return list(map(memo.__getitem__, keys))

    # -- the whole trace ----------------------------------------------------------------------------------
    def finish(self, streamed: StreamedDocument, name: str) -> Trace:
        n_paired = 0
        if self.has_b:
            pairs = pair_begin_end(self.be_events, self.be_pos)
            for e in pairs:
                e.pop("_pos")
            n_paired = len(pairs)
            if n_paired:
                self._add_complete(pairs)
                self.exact.append(None)
        self.be_events = []
        ev = self._events(n_paired, streamed.outside_text)
        op_rows = np.concatenate(self.op_rows) if self.op_rows else np.zeros(0, dtype=np.int64)
        extra = self._gpu_columns(ev.n)
        side = SideEvents(self.n_events, self.m_events, self.memory.summary(),
                          kineto.flow_summary_of_counts(self.flow_counts))
        return assemble(ev, op_rows, self.op_shapes, self.op_flops, self.op_args, extra, side, streamed.doc, name)

    def _col(self, k: str, dtype: Any) -> np.ndarray:
        parts = self.cols[k]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    def _events(self, n_paired: int, outside_text: bytes) -> EventColumns:
        n = self.n
        ts, dur = self._col("ts", np.float64), self._col("dur", np.float64)
        cat_codes = self._col("cat", np.int64)
        cat_arr = np.asarray(self.cat_uni, dtype=object)[cat_codes] if n else np.zeros(0, dtype=object)
        keep = ~(cat_codes == self.cat_uni.index("Trace") if "Trace" in self.cat_uni else np.zeros(n, dtype=bool))
        t0 = float(ts[keep].min()) if keep.any() else 0.0
        if n and (np.abs(ts - t0).max() > TS_LIMIT_US or dur.max() > TS_LIMIT_US):
            raise BadTrace("timestamps or durations out of range (more than 100 days apart)")
        if n and np.abs(ts).max() > TS_LIMIT_US:             # int64 ns could not hold them
            raise BadTrace("timestamps out of range (beyond ±9e15 µs)")
        abs_ns, stamps = timebase.us_to_ns(ts), "exact"
        if timebase.needs_text(ts):
            if n_paired or self.scan_failed or not _no_ts_in(outside_text):
                stamps = "float64"
            else:
                parts, k = [], 0
                for chunk_ts, ex in zip(self.cols["ts"], self.exact):
                    parts.append(abs_ns[k:k + len(chunk_ts)] if ex is None else ex)
                    k += len(chunk_ts)
                abs_ns = np.concatenate(parts)
        origin = int(abs_ns[keep].min()) if keep.any() else 0
        name_codes = self._col("name", np.int64)
        name_uni = np.asarray(list(self.name_index), dtype=object)
        return EventColumns(n=n, name=name_uni[name_codes] if n else np.zeros(0, dtype=object), cat=cat_arr,
                       start_ns=abs_ns - origin, dur_ns=np.rint(dur * 1000.0).astype(np.int64),
                       tids=self._col("tid", np.int64), tid_names=self.tid_names, pids=self._col("pid", np.int64),
                       keep=keep, t0=t0, origin_ns=origin, timestamps=stamps, cat_codes=cat_codes,
                       cat_uni=self.cat_uni, name_codes=name_codes, name_uni=name_uni,
                       raw_cats=tuple(str(c) for c in self.cat_code))

    def _gpu_columns(self, n: int) -> dict[str, np.ndarray]:
        out = gpu_arg_columns([], np.zeros(0, dtype=np.int64), n)
        if not self.gpu_idx:
            return out
        idx = np.concatenate(self.gpu_idx)
        for k, parts in self.gpu_vals.items():
            vals = np.concatenate(parts)
            if k in self.fast_null_cols and k not in self.gpu_per_value and ((vals >= _BIG) | (vals <= -_BIG)).any():
                # a fast piece's absent value may have been an explicit null, which makes the dict path read
                # this column value by value (values beyond ±2**62 become -1): undecidable from the columns
                raise BadTrace(f"{k}: values beyond ±2**62 with absent values")
            if k in self.gpu_per_value and k not in _GRID_COLS:   # the whole column is read value by value
                vals = np.where((vals >= _BIG) | (vals <= -_BIG), -1, vals)
            out[k][idx] = vals
        return out
