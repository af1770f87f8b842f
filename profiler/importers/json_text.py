"""Bytes -> a parsed JSON document: gzip detection, a fast parser where it agrees with `json`, and messages
that say what is wrong (empty, truncated, not UTF-8, non-finite numbers)."""
from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from neuron_studio.profiler.importers.common import BadTrace

__all__ = ["load_json", "reject_constant"]


def reject_constant(s: str) -> Any:
    raise BadTrace(f"non-finite number {s} in JSON")


_FAILED = object()
try:  # orjson: strict RFC 8259 like json.loads, several times faster on big traces
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; stay correct without it
    _orjson = None
try:  # pandas' bundled ujson parses about twice as fast as the json module; optional, private API
    from pandas._libs._ujson import ujson_loads as _ujson_loads
except ImportError:  # pragma: no cover - depends on the pandas build
    _ujson_loads = None


def _fast_loads(data: bytes) -> Any:
    """Parse with the fast parser when it is certain to agree with `json.loads`; else return _FAILED.

    It reads NaN as null and Infinity as a number, so documents containing those words take the exact
    path (which rejects them with a message); any error it raises is re-diagnosed by the exact path too.
    """
    if len(data) < 1 << 16:
        return _FAILED
    if _orjson is not None:  # rejects NaN/Infinity, >64-bit ints and lone surrogates: those take the exact path
        try:
            return _orjson.loads(data)
        except (_orjson.JSONDecodeError, RecursionError, MemoryError):
            return _FAILED
    if _ujson_loads is None or b"NaN" in data or b"Infinity" in data:
        return _FAILED
    try:
        return _ujson_loads(data, precise_float=True)
    except (ValueError, OverflowError, RecursionError, MemoryError):
        return _FAILED


def json_text(data: bytes) -> bytes:
    """The JSON text of a file's bytes (gunzipped when compressed), or BadTrace naming what it is instead."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadTrace(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise BadTrace(f"corrupt gzip data ({e})") from None
    if len(data) < 4096 and not data.strip():
        raise BadTrace("empty file")
    if data[:4] == b"PAR1":
        raise BadTrace("a Parquet file; read the trace directory that contains it instead")
    return data


def load_json(data: bytes) -> Any:
    data = json_text(data)
    fast = _fast_loads(data)
    if fast is not _FAILED:
        return fast
    try:
        return json.loads(data, parse_constant=reject_constant)
    except BadTrace:
        raise
    except RecursionError:
        raise BadTrace("JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise BadTrace(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        tail = data[-256:]
        end = len(data) - (len(tail) - len(tail.rstrip()))      # e.pos counts characters: exact for ASCII
        truncated = e.pos >= end - 1 or e.msg.startswith("Unterminated string")
        what = "truncated JSON (the file ends early)" if truncated else "invalid JSON"
        raise BadTrace(f"{what}: {e.msg} (line {e.lineno}, column {e.colno})") from None

