"""A Chrome trace's `traceEvents` array read in bounded pieces, without holding the parsed document.

The text is read in chunks (gunzipped on the fly). Each piece handed out is a run of whole events: the text
between two top-level commas of the array, parsed by orjson (the `json` module where orjson declines, as
`json_text.load_json` does). Where to cut is guessed cheaply (the last `},` of the chunk) and the guess is
proved by the parse: a JSON parser is deterministic, so `[` + piece + `]` parses only if the cut is a real
separator of the array (a cut inside a string or a nested value leaves the parse unfinished). When the guess
fails, a vectorised scan finds the real separators (quotes not escaped by an odd run of backslashes delimit
strings; brackets outside strings give the depth). Every piece is validated by the parse, so the events are
exactly those a whole-document parse gives.

Everything outside the array (`distributedInfo`, `deviceProperties`, `baseTimeNanoseconds`, ...) is parsed
at the end as the document with the array replaced by a placeholder. Documents this reader does not handle
(no top-level `traceEvents` array, our own format, a duplicate key, not ASCII-compatible text) raise
`NotStreamable`, and the caller reads them whole.
"""
from __future__ import annotations

import gzip
import json
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from neuron_studio.profiler.importers.common import BadTrace
from neuron_studio.profiler.importers.json_text import reject_constant

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; stay correct without it
    _orjson = None

__all__ = ["NotStreamable", "EventPiece", "StreamedDocument", "stream_events", "CHUNK_BYTES", "GUESS_ABOVE"]

CHUNK_BYTES = 1 << 20              # text read per step: bounds the parsed events held at once (~10x the text);
                                   # small enough that a piece's objects stay in cache while they become columns
_HEAD_LIMIT = 64 << 20             # a document whose traceEvents key is not within this is read whole
GUESS_ABOVE = 1 << 14              # text up to this size is cut by the exact scan, larger text guessed first
_KEY = b'"traceEvents"'
_PLACEHOLDER = "neuron-studio:streamed-trace-events"
_WS = b" \t\r\n"
_QUOTE, _BACKSLASH = 0x22, 0x5C
_DELTA = np.zeros(256, dtype=np.int64)
_DELTA[[ord("{"), ord("[")]] = 1
_DELTA[[ord("}"), ord("]")]] = -1
_STRUCTURAL = np.zeros(256, dtype=bool)
_STRUCTURAL[[ord(c) for c in "{}[],"]] = True


class NotStreamable(Exception):
    """The document is not a plain Chrome trace this reader handles; read it whole."""


@dataclass
class EventPiece:
    """Whole events parsed from one piece of the array, with the text they came from."""

    events: Any               # a list of dicts, or the columns `fast` returned for the piece
    text: bytes               # the piece's JSON text (for exact timestamp digits)
    offset: int               # byte offset of `text` in the (decompressed) JSON text
    columnar: bool = False    # `events` came from `fast`

    def dicts(self) -> list:
        """The events as dicts (a columnar piece is parsed again, by orjson)."""
        if not self.columnar:
            return self.events
        return _parse_piece(self.text, self.offset, "", empty_ok=False)


@dataclass
class StreamedDocument:
    """What is known once the array has been read: the rest of the document, and its size."""

    doc: dict = field(default_factory=dict)
    bare_array: bool = False
    outside_text: bytes = b""  # the document's text outside the array (head and tail)
    size: int = 0


class _Reader:
    def __init__(self, fh: BinaryIO, chunk: int) -> None:
        self.fh, self.chunk, self.pos, self.eof = fh, chunk, 0, False

    def read(self, n: int | None = None) -> bytes:
        if self.eof:
            return b""
        try:
            data = self.fh.read(n or self.chunk)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise BadTrace(f"corrupt gzip data ({e})") from None
        if not data:
            self.eof = True
        self.pos += len(data)
        return data


def _unescaped_quotes(a: np.ndarray) -> np.ndarray:
    """Positions of the quotes that delimit strings (text starting outside a string)."""
    q = np.flatnonzero(a == _QUOTE)
    if not len(q):
        return q
    after_bs = q[(q > 0)]
    after_bs = after_bs[a[after_bs - 1] == _BACKSLASH]
    if not len(after_bs):
        return q
    bs = np.flatnonzero(a == _BACKSLASH)
    starts = bs[np.concatenate(([True], np.diff(bs) != 1))]
    run = after_bs - starts[np.searchsorted(starts, after_bs - 1, side="right") - 1]
    escaped = after_bs[run % 2 == 1]
    return np.setdiff1d(q, escaped, assume_unique=True) if len(escaped) else q


def _structure(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of `{}[],` outside strings, the characters, and the depth after each (relative to the
    start of `buf`, which must begin outside any string)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    q = _unescaped_quotes(a)
    m = np.flatnonzero(_STRUCTURAL[a])
    if len(q):
        m = m[(np.searchsorted(q, m) & 1) == 0]
    ch = a[m]
    return m, ch, np.cumsum(_DELTA[ch])


def _array_cuts(buf: bytes) -> tuple[int, int]:
    """In text starting inside the array (outside strings): (position of the last top-level comma or -1,
    position of the array's closing `]` or -1). A `}` that closes the array is invalid JSON."""
    m, ch, depth = _structure(buf)
    below = np.flatnonzero(depth < 0)
    end = -1
    if len(below):
        k = int(below[0])
        if ch[k] != ord("]"):
            raise _Invalid(int(m[k]), "unbalanced '}' in traceEvents")
        end = int(m[k])
        m, ch, depth = m[:k], ch[:k], depth[:k]
    seps = m[(ch == ord(",")) & (depth == 0)]
    return (int(seps[-1]) if len(seps) else -1), end


class _Invalid(Exception):
    def __init__(self, pos: int, msg: str) -> None:
        super().__init__(msg)
        self.pos, self.msg = pos, msg


def _parse_array(text: bytes) -> Any:
    """orjson where it accepts the text, else `json` (big integers, lone surrogates), with the old path's
    messages for what neither accepts; a syntax error raises _Invalid at its byte position in `text`."""
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except (_orjson.JSONDecodeError, RecursionError, MemoryError):
            pass
    try:
        return json.loads(text, parse_constant=reject_constant)
    except RecursionError:
        raise BadTrace("JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise _Invalid(e.start, f"not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        prefix = e.doc[:e.pos].encode("utf-8", "surrogatepass") if isinstance(e.doc, str) else b""
        raise _Invalid(len(prefix), f"invalid JSON: {e.msg}") from None


def _skip_ws(buf: bytes, i: int) -> int:
    while i < len(buf) and buf[i] in _WS:
        i += 1
    return i


def _find_events_key(head: bytes) -> int:
    """Position just after the `[` that opens the top-level "traceEvents" array in `head` (the document's
    start), -1 when not (yet) seen; NotStreamable when the key's value is not an array."""
    m = q = depth = None
    start = 0
    while True:
        p = head.find(_KEY, start)
        if p < 0:
            return -1
        start = p + 1
        if m is None:
            a = np.frombuffer(head, dtype=np.uint8)
            q = _unescaped_quotes(a)
            m, ch, depth = _structure(head)
        k = int(np.searchsorted(q, p))
        if k >= len(q) or q[k] != p or k % 2:
            continue                                   # not an opening quote: inside a string
        j = int(np.searchsorted(m, p))
        if j == 0 or depth[j - 1] != 1:
            continue                                   # not a key of the top-level object
        c = _skip_ws(head, p + len(_KEY))
        if c >= len(head):
            return -1
        if head[c:c + 1] != b":":
            continue                                   # a string value, not a key
        v = _skip_ws(head, c + 1)
        if v >= len(head):
            return -1
        if head[v:v + 1] != b"[":
            raise NotStreamable("traceEvents is not an array")
        return v + 1


def stream_events(fh: BinaryIO, result: StreamedDocument, *, chunk: int = CHUNK_BYTES,
                  guess_above: int = GUESS_ABOVE, fast: Callable[[bytes], Any] | None = None,
                  workers: int = 2) -> Iterator[EventPiece]:
    """Pieces of whole events, in document order; fills `result` when the array is done. Text beyond
    `guess_above` bytes is cut at a guessed separator first (proved by the parse), shorter text by the scan.
    `fast`, when given, parses a guessed piece first (columns, or None to let orjson parse it); it must
    prove the cut as orjson does: accept the text only if `[` + text + `]` is a JSON array. It runs on
    `workers` threads ahead of the consumer (it must release the GIL to gain from that), on cuts guessed
    ahead: a cut that then does not hold is undone with every later one.

    Raises BadTrace for text that is not valid JSON inside the array (naming the byte offset; a file that ends
    inside the array is reported as truncated), NotStreamable for documents the caller should read whole."""
    first = fh.read(2)
    fh.seek(0)
    gz = first == b"\x1f\x8b"
    of = " of the decompressed JSON" if gz else ""     # byte offsets in error messages
    rd = _Reader(gzip.GzipFile(fileobj=fh, mode="rb") if gz else fh, chunk)
    buf = rd.read()
    i = _skip_ws(buf, 0)
    while i == len(buf) and not rd.eof:
        buf += rd.read()
        i = _skip_ws(buf, 0)
    if i == len(buf) or buf[i:i + 1] not in (b"{", b"["):
        raise NotStreamable("not a JSON object or array")
    if buf[i:i + 1] == b"[":
        result.bare_array = True
        body = i + 1
    else:
        body = _find_events_key(buf)
        while body < 0 and not rd.eof and len(buf) < _HEAD_LIMIT:
            buf += rd.read(max(chunk, len(buf)))
            body = _find_events_key(buf)
        if body < 0:
            raise NotStreamable("no top-level traceEvents array")
    head = buf[:body - 1]
    if b'"neuron_studio"' in head:
        raise NotStreamable("a Neuron Studio trace")
    base = rd.pos - len(buf) + body           # offset of buf[0] in the JSON text
    buf = buf[body:]
    pieces = 0
    want = chunk
    pool = ThreadPoolExecutor(max_workers=workers) if fast is not None else None
    pending: deque = deque()                  # (future of `fast`, text, base) of cuts not yet proved
    skip_fast = False
    try:
        while True:
            if len(buf) < want and not rd.eof:
                buf += rd.read(want - len(buf))
                continue
            if pool is not None and not skip_fast and len(buf) > guess_above:
                guess = buf.rfind(b"},")      # speculative: later cuts assume this one holds
                if guess > 0:
                    text = buf[:guess + 1]
                    pending.append((pool.submit(fast, text), text, base))
                    base += guess + 2
                    buf = buf[guess + 2:]
                    want = chunk
                    if len(pending) <= workers:
                        continue
            skip_fast = False
            if pending:
                fut, text, pbase = pending.popleft()
                events = fut.result()
                if events is not None:
                    pieces += 1
                    yield EventPiece(events, text, pbase, columnar=True)
                    continue
                if _orjson is not None:       # declined: orjson decides whether the cut holds
                    try:
                        events = _orjson.loads(b"[" + text + b"]")
                    except (_orjson.JSONDecodeError, RecursionError, MemoryError):
                        events = None
                if events:
                    pieces += 1
                    yield EventPiece(events, text, pbase)
                    continue
                for f, _, _ in pending:       # the cut did not hold: undo it and every later one
                    f.cancel()
                buf = b",".join([text] + [t for _, t, _ in pending] + [buf])
                base = pbase
                pending.clear()
                skip_fast = True
                continue
            cut = end = -1
            events = None
            if len(buf) > guess_above:               # guess, let the parse prove it; scan only what is left
                guess = buf.rfind(b"},")
                if guess > 0:
                    try:
                        events = _orjson.loads(b"[" + buf[:guess + 1] + b"]") if _orjson is not None else None
                        cut = guess + 1
                    except (_orjson.JSONDecodeError, RecursionError, MemoryError):
                        events = None
            if events is None:
                try:
                    cut, end = _array_cuts(buf)
                except _Invalid as e:
                    raise BadTrace(f"invalid JSON at byte {base + e.pos}{of}: {e.msg}") from None
                if end >= 0:
                    cut = end
                elif rd.eof:
                    if cut >= 0:                   # whatever is complete must still be valid JSON
                        _parse_piece(buf[:cut], base, of, empty_ok=False)
                    raise BadTrace(f"truncated JSON (the file ends early, at byte {rd.pos}{of}, inside traceEvents)")
                elif cut < 0:
                    want = 2 * max(want, len(buf))    # one event larger than the chunk: read on
                    continue
                events = _parse_piece(buf[:cut], base, of, empty_ok=end >= 0 and pieces == 0)
            elif not events:
                raise BadTrace(f"invalid JSON at byte {base}{of}: empty element in traceEvents")
            pieces += 1
            yield EventPiece(events, buf[:cut], base)
            events = None
            if end >= 0:
                break
            base += cut + 1
            buf = buf[cut + 1:]
            want = chunk
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    tail = buf[end + 1:]
    while not rd.eof:
        tail += rd.read()
    result.size = rd.pos
    result.outside_text = head + tail
    if result.bare_array:
        if tail.strip(_WS):
            raise NotStreamable("data after the event array")
        return
    try:
        doc = _parse_array(head + json.dumps(_PLACEHOLDER).encode() + tail)
    except (_Invalid, BadTrace):
        raise NotStreamable("the document outside traceEvents is not valid JSON") from None
    if type(doc) is not dict or doc.get("traceEvents") != _PLACEHOLDER:
        raise NotStreamable("traceEvents appears twice")
    md = doc.get("metadata")
    if isinstance(md, dict) and "neuron_studio" in md:
        raise NotStreamable("a Neuron Studio trace")
    del doc["traceEvents"]
    result.doc = doc


def _parse_piece(text: bytes, base: int, of: str, *, empty_ok: bool) -> list:
    try:
        events = _parse_array(b"[" + text + b"]")
    except _Invalid as e:
        raise BadTrace(f"{e.msg} at byte {base + max(e.pos - 1, 0)}{of}") from None
    if not events and not empty_ok:
        raise BadTrace(f"invalid JSON at byte {base}{of}: empty element in traceEvents")
    return events
