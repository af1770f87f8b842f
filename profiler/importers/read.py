"""Entry points: read a trace file, directory or in-memory document, whatever its format, into a `Trace`.

Every failure becomes one `TraceFormatError` naming the file and what was wrong."""
from __future__ import annotations

import contextlib
import gc
import io
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from neuron_studio.profiler.importers.chunked_columns import stream_trace
from neuron_studio.profiler.importers.common import BadTrace
from neuron_studio.profiler.importers.json_stream import NotStreamable
from neuron_studio.profiler.importers.json_text import json_text, load_json
from neuron_studio.profiler.importers.studio_formats import read_parquet_dir, studio_chrome_trace
from neuron_studio.profiler.importers.torch_chrome import plain_chrome_trace
from neuron_studio.profiler.importers.torch_events import needs_raw_text
from neuron_studio.profiler.trace import Trace, TraceFormatError

__all__ = ["read_trace", "read_trace_bytes", "read_trace_whole", "trace_from_chrome"]


def read_trace(path: str | os.PathLike, *, columnar: bool = True, report: dict | None = None) -> Trace:
    """Read a trace file or directory (format detected from the content). A plain torch.profiler trace is
    read in bounded pieces (`chunked_columns`), each through the columnar fast path where it provably gives
    the same events (`columnar=False`: never); anything else, or a file failing a check, is read whole.
    `report`, when given, receives which reader took the file ("parquet", "stream" or "whole") and, for a
    streamed file, how many pieces took the fast path and how many it declined."""
    report = {} if report is None else report
    if Path(path).is_dir():
        report["reader"] = "parquet"
    return _read_path(path, lambda p, name: _streamed(lambda: open(p, "rb"), p.read_bytes, name, columnar, report))


def read_trace_bytes(data: bytes, *, name: str = "<memory>") -> Trace:
    """Read a Chrome trace JSON document (optionally gzip-compressed) held in memory."""
    with _gc_paused():
        if isinstance(data, (bytes, bytearray, memoryview)):
            return _streamed(lambda: io.BytesIO(data), lambda: data, name)
        doc, raw = _guard(name, lambda: _parse(data))
        return trace_from_chrome(doc, name=name, raw=raw)


def read_trace_whole(path: str | os.PathLike) -> Trace:
    """`read_trace` holding the whole parsed document (the reader before streaming; kept as the reference
    the streaming reader is tested and benchmarked against)."""
    return _read_path(path, _whole_file)


def _read_path(path: str | os.PathLike, read_file: Callable[[Path, str], Trace]) -> Trace:
    """A trace directory (Parquet tables), or a file read by `read_file(path, name)`; a file or directory that
    cannot be read is a TraceFormatError naming it."""
    p = Path(path)
    name = p.name or str(p)
    try:
        if p.is_dir():
            return _guard(name, lambda: read_parquet_dir(p))
        with _gc_paused():
            return read_file(p, name)
    except OSError as e:
        raise TraceFormatError(f"{name}: cannot be read ({e.strerror or e})") from None


def _whole_file(p: Path, name: str) -> Trace:
    doc, raw = _guard(name, lambda: _parse(p.read_bytes()))
    return trace_from_chrome(doc, name=name, raw=raw)


def _streamed(opener: Any, whole: Any, name: str, columnar: bool = True, report: dict | None = None) -> Trace:
    """Stream the document; read it whole when it is not a plain Chrome trace or fails a check."""
    report = {} if report is None else report

    def stream() -> Trace | None:
        try:
            with opener() as fh:
                return stream_trace(fh, name, fast=columnar, report=report)
        except NotStreamable:
            return None

    trace = _guard(name, stream)
    if trace is not None:
        report["reader"] = "stream"
        return trace
    report["reader"] = "whole"
    # the file's bytes live only while they are parsed, unless its timestamps need their decimal text
    doc, raw = _guard(name, lambda: _parse(whole()))
    return trace_from_chrome(doc, name=name, raw=raw)


def _parse(data: bytes) -> tuple[Any, bytes | None]:
    """The parsed document, and its text when exact timestamps need it (else None, so it can be freed)."""
    text = json_text(data)
    del data
    doc = load_json(text)
    return doc, (text if needs_raw_text(doc) else None)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing allocates millions of small dicts/lists that hold no cycles; the cyclic GC would rescan
    every live object (torch's included) many times over while they pile up."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _guard(name: str, fn: Any) -> Trace:
    try:
        with _gc_paused():
            return fn()
    except BadTrace as e:
        raise TraceFormatError(f"{name}: {e}") from None
    except TraceFormatError as e:
        raise TraceFormatError(f"{name}: {e}") from None
    except RecursionError:
        raise TraceFormatError(f"{name}: nested too deeply") from None
    except MemoryError:
        raise TraceFormatError(f"{name}: too large to load in memory") from None
    except OSError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, ArithmeticError,
            UnicodeError) as e:
        # a safety net: every expected problem is named above; this keeps the contract for the rest
        raise TraceFormatError(f"{name}: unreadable trace ({type(e).__name__}: {str(e)[:200]})") from None



def trace_from_chrome(doc: Any, *, name: str = "<memory>", raw: bytes | None = None) -> Trace:
    """A parsed Chrome trace document → Trace (ours exactly; any other → imported host events + ops).
    `raw`, the document's JSON text, lets epoch timestamps with ns fractions be read exactly."""
    if isinstance(doc, list):
        return _guard(name, lambda: plain_chrome_trace(doc, {}, name, raw))
    if not isinstance(doc, dict):
        raise TraceFormatError(f"{name}: expected a JSON object with 'traceEvents' or an event array, "
                               f"got {type(doc).__name__}")
    md = doc.get("metadata")
    ns = md.get("neuron_studio") if isinstance(md, dict) else None
    if ns is not None:
        return _guard(name, lambda: studio_chrome_trace(doc, ns))
    if "traceEvents" not in doc:
        raise TraceFormatError(f"{name}: not a Chrome trace (no 'traceEvents' key)")
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise TraceFormatError(f"{name}: 'traceEvents' must be an array, got {type(events).__name__}")
    return _guard(name, lambda: plain_chrome_trace(events, doc, name, raw))

