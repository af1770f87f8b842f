"""The streaming Chrome-trace reader (issue 17: bounded memory) gives exactly the tables of the whole-document
reader: on the six real traces recorded by others (shared/traces) and the suite's own kineto-format traces, on hostile strings cut at every chunk boundary, on random event lists;
and a file that ends inside traceEvents is an error naming the file and the byte offset, never a partial import.
"""
from __future__ import annotations

import functools
import gzip
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trace_truth as truth
from kineto_fixtures import SYN_NO_SHAPES, SYNTHETIC
from neuron_studio.profiler.importers import read_trace, read_trace_bytes, trace_from_chrome
from neuron_studio.profiler.importers.chunked_columns import stream_trace
from neuron_studio.profiler.importers.common import BadTrace
from neuron_studio.profiler.importers.json_stream import NotStreamable, StreamedDocument, stream_events
from neuron_studio.profiler.importers.read import read_trace_whole
from neuron_studio.profiler.trace import Trace, TraceFormatError
from tests.test_importers_fuzz import EVENT, PLAIN, dumps

SHARED = ["resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz", "nccl_parser_config_nccl_data.json.gz",
          "ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "trace_filter_sampled_rank-0.json.gz",
          "trace_filter_sampled_rank-1.json.gz", "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
TRACES = [*SYNTHETIC, *SHARED]      # the suite's own traces always run; the shared ones need shared/traces
GUESS, SCAN = 0, 1 << 62            # guess_above: always guess a cut first / always scan for it


@functools.cache
def whole(name: str) -> Trace:
    return read_trace_whole(truth.path_of(name))


def streamed(data: bytes, *, chunk: int, guess_above: int, name: str = "t.json") -> Trace:
    """Streamed only (NotStreamable propagates: the test must not pass through the whole-document fallback)."""
    return stream_trace(io.BytesIO(data), name, chunk=chunk, guess_above=guess_above)


def whole_bytes(data: bytes, name: str = "t.json") -> Trace:
    return trace_from_chrome(json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data), name=name,
                             raw=gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


# -- real and generated kineto traces -----------------------------------------------------------------------

@pytest.mark.parametrize("name", TRACES)
def test_default_reader_streams_the_shared_traces_to_identical_tables(name: str) -> None:
    path = truth.path_of(name)
    with open(path, "rb") as fh:
        direct = stream_trace(fh, name)                  # raises NotStreamable if it could not stream
    assert direct.equals(whole(name))
    assert read_trace(path).equals(whole(name))


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("guess", [GUESS, SCAN])
def test_small_pieces_give_identical_tables(name: str, guess: int) -> None:
    data = (truth.path_of(name)).read_bytes()
    t = streamed(data, chunk=20_000 if name in SHARED else 2_000, guess_above=guess, name=name)
    assert t.equals(whole(name))
    assert t.meta["imported"]["timestamps"] == "exact"


@pytest.mark.parametrize("name", [SYN_NO_SHAPES, SHARED[1]])
def test_pieces_are_bounded_by_the_chunk_size(name: str) -> None:
    """The reader never holds more than about one chunk of events (here 1/50 of the file) at once."""
    data = gzip.decompress(truth.path_of(name).read_bytes())
    chunk = len(data) // 50
    longest = max(len(json.dumps(e)) for e in json.loads(data)["traceEvents"])
    biggest = max(len(p.text) for p in stream_events(io.BytesIO(data), StreamedDocument(), chunk=chunk))
    assert biggest <= chunk + 2 * longest              # a chunk, plus the rest of the event it cut


# -- hostile strings at every boundary --------------------------------------------------------------------

HOSTILE_NAMES = ['a}, {"b": 1', "quote \" inside", "backslash \\", "both \\\" and \\\\\"", "]]]}}}", "[[[{{{",
                 '"ts": 1712195495519695.8', "café ∑ 日本 \U0001F600", "\\\\", "},\n{", "tab\tnew\nline",
                 "\\u005d"]


def hostile_doc() -> bytes:
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "weird \"}, {\" thread"}}]
    t = 1712195495519695.0
    for i, nm in enumerate(HOSTILE_NAMES):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": t + 10 * i,
                       "dur": 5, "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"],
                                          "note": nm, nm: [nm, {nm: nm}]}})
        events.append({"ph": "X", "cat": "user_annotation", "name": nm, "pid": 1, "tid": 2, "ts": t + 10 * i + 1,
                       "dur": 1})
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 2, "ts": t - 1,
                   "dur": 500})
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
           "note": "traceEvents [ ] }, {", "traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "GPU \"}, {\" 0"}], "baseTimeNanoseconds": 1700000000000000000}
    text = json.dumps(doc, ensure_ascii=False, indent=1).encode()
    # the same timestamps with nanosecond fractions (beyond float64's exact range): exact only from the text
    return text.replace(b'95519695.0,', b'95519695.123,').replace(b'95519705.0,', b'95519705.457,')


def test_hostile_strings_at_every_chunk_size() -> None:
    data = hostile_doc()
    want = whole_bytes(data)
    assert want.meta["imported"]["timestamps"] == "exact" and want.meta["rank"] == 1
    assert int(want.ops["start_ns"].iloc[0]) + want.meta["imported"]["origin_ns"] == 1712195495519695123
    # pieces of 1..61 bytes (primes: every event boundary falls at many offsets within a read) and larger
    for chunk in [1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 211, 1009,
                  len(data)]:
        for guess in (GUESS, SCAN):
            got = streamed(data, chunk=chunk, guess_above=guess)
            assert got.equals(want), (chunk, guess)


def test_metadata_outside_trace_events_is_read() -> None:
    t = read_trace_bytes(hostile_doc(), name="t.json")
    assert (t.meta["rank"], t.meta["world_size"]) == (1, 2)
    assert t.meta["start_wall_ns"] == 1700000000000000000 + t.meta["imported"]["origin_ns"]
    assert t.meta["imported"]["devices"] == [{"id": 0, "name": 'GPU "}, {" 0'}]
    assert t.meta["imported"]["trace_meta"]["note"] == "traceEvents [ ] }, {"


def test_gzip_is_streamed() -> None:
    data = gzip.compress(hostile_doc())
    assert streamed(data, chunk=100, guess_above=GUESS).equals(whole_bytes(data))


def test_bare_event_array_and_empty_array() -> None:
    events = json.loads(PLAIN)["traceEvents"]
    bare = json.dumps(events).encode()
    assert streamed(bare, chunk=7, guess_above=SCAN).equals(trace_from_chrome(events, name="t.json"))
    empty = b'{"traceEvents": [ ], "x": [{"a": 1}, {"b": 2}]}'
    assert streamed(empty, chunk=5, guess_above=GUESS).equals(trace_from_chrome(json.loads(empty), name="t.json"))


def test_documents_the_streaming_reader_leaves_to_the_whole_reader() -> None:
    """A duplicate traceEvents key (the last one counts), our own format, no traceEvents: read whole, same
    answer as before."""
    dup = b'{"traceEvents": [{"ph": "X", "name": "aten::a", "cat": "cpu_op", "ts": 1, "dur": 1}], ' \
          b'"traceEvents": [{"ph": "X", "name": "aten::b", "cat": "cpu_op", "ts": 1, "dur": 1}]}'
    with pytest.raises(NotStreamable):
        streamed(dup, chunk=8, guess_above=SCAN)
    assert read_trace_bytes(dup).ops["name"].tolist() == ["aten::b"]
    with pytest.raises(NotStreamable):
        streamed(b'{"a": [1, 2]}', chunk=8, guess_above=SCAN)


# -- damaged files --------------------------------------------------------------------------------------

def test_truncated_inside_trace_events_names_file_and_byte(tmp_path: Path) -> None:
    data = json.dumps(json.loads(PLAIN), indent=1).encode()
    start, end = data.index(b"[") + 1, data.rindex(b"]")
    path = tmp_path / "cut.json"
    for cut in range(start, end):
        path.write_bytes(data[:cut])
        with pytest.raises(TraceFormatError) as ei:
            read_trace(path)
        msg = str(ei.value)
        assert msg.startswith("cut.json: truncated JSON (the file ends early") and f"at byte {cut}" in msg, msg


def test_truncated_gzip_is_an_error(tmp_path: Path) -> None:
    data = gzip.compress(hostile_doc())
    path = tmp_path / "cut.json.gz"
    for cut in (len(data) // 3, len(data) - 9):
        path.write_bytes(data[:cut])
        with pytest.raises(TraceFormatError, match=r"^cut.json.gz: (truncated JSON|corrupt gzip)"):
            read_trace(path)


def test_invalid_json_mid_stream_names_the_byte(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": i, "dur": 1}
              for i in range(2000)]
    data = json.dumps({"traceEvents": events}).encode()
    bad = data.index(b'"ts": 1500,')                   # a missing comma between two keys of event 1500
    data = data[:bad - 2] + data[bad - 1:]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    for chunk in (1000, 1 << 20):
        with pytest.raises(BadTrace, match="invalid JSON") as ei:
            stream_trace(io.BytesIO(data), "bad.json", chunk=chunk)
        assert f"at byte {bad - 1}" in str(ei.value), str(ei.value)
    with pytest.raises(TraceFormatError) as ei:
        read_trace(path)
    assert str(ei.value).startswith("bad.json: invalid JSON") and f"at byte {bad - 1}" in str(ei.value)


# -- random event lists ---------------------------------------------------------------------------------

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EVENT, max_size=25), st.booleans(), st.integers(1, 400), st.sampled_from([GUESS, SCAN]))
def test_random_event_lists_match_the_whole_reader(events: list, bare: bool, chunk: int, guess: int) -> None:
    data = dumps(events if bare else {"traceEvents": events})
    try:
        want = trace_from_chrome(json.loads(data, parse_constant=_no_constants), name="r.json", raw=data)
    except (TraceFormatError, ValueError) as e:
        want = e
    try:
        got = streamed(data, chunk=chunk, guess_above=guess, name="r.json")
    except NotStreamable:
        return                                          # read whole: the same code as `want`
    except Exception as e:                              # noqa: BLE001 - compared below
        got = e
    if isinstance(want, Trace):
        assert isinstance(got, Trace) and got.equals(want)
    else:
        assert not isinstance(got, Trace)


def _no_constants(s: str) -> None:
    raise ValueError(s)


def test_timestamps_beyond_int64_nanoseconds_are_an_error() -> None:
    """Both readers: equal absurd timestamps (1e300 µs) are 0 µs apart but no int64 ns holds them (the readers
    used to return garbage start times, with a numpy cast warning)."""
    data = b'{"traceEvents": [{"ph": "X", "name": "aten::a", "cat": "cpu_op", "ts": 1e300, "dur": 1}]}'
    with pytest.raises(TraceFormatError, match=r"^t.json: timestamps out of range"):
        read_trace_bytes(data, name="t.json")
    with pytest.raises(TraceFormatError, match="timestamps out of range"):
        trace_from_chrome(json.loads(data), name="t.json")
