"""The columnar fast path of the streaming reader (issue 17: a 1M-event trace in seconds) gives exactly the
whole-document reader's tables: on the six real traces recorded by others and the suite's own kineto traces, on a synthetic GPU trace it takes whole, and on
every kind of piece it must decline (each asserted to be declined AND to give the same tables); and its
columns match values read independently from the raw JSON, so a dropped or altered field fails here.
"""
from __future__ import annotations

import copy
import io
import json

import orjson
import pytest

import trace_truth as truth
from neuron_studio.profiler.importers import read_trace, read_trace_bytes
from neuron_studio.profiler.importers.arrow_pieces import parse_piece
from neuron_studio.profiler.importers.chunked_columns import stream_trace
from neuron_studio.profiler.importers.common import BadTrace
from neuron_studio.profiler.importers.json_stream import NotStreamable
from neuron_studio.profiler.importers.read import read_trace_whole
from neuron_studio.profiler.importers import trace_from_chrome
from neuron_studio.profiler.trace import Trace, TraceFormatError
from kineto_fixtures import SYN_NS
from tests.test_stream_reader import SHARED, TRACES, whole

CHUNK = 4000                # small pieces: every synthetic trace spans many of them


def fast_stream(data: bytes, *, chunk: int = CHUNK, fast: bool = True) -> tuple[Trace, dict]:
    report: dict = {}
    t = stream_trace(io.BytesIO(data), "t.json", chunk=chunk, guess_above=0, fast=fast, report=report)
    return t, report


def reference(data: bytes) -> Trace:
    return trace_from_chrome(json.loads(data), name="t.json", raw=data)


# -- real and generated kineto traces -------------------------------------------------------------------

@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("chunk", [1 << 20, 50_000, 3_000])
def test_shared_traces_identical_through_the_fast_path(name: str, chunk: int) -> None:
    report: dict = {}
    with open(truth.path_of(name), "rb") as fh:
        got = stream_trace(fh, name, chunk=chunk, report=report, **({"guess_above": 0} if chunk < 10_000 else {}))
    assert got.equals(whole(name))
    assert report["pieces"] >= report["pieces_fast"] + report["pieces_declined"]
    if name.startswith(("nccl", "ns_resolution", "trace_filter", "synthetic_no_shapes", "synthetic_ns",
                        "synthetic_ddp")) and report["pieces"] >= 8:    # kineto 2.x traces: the fast path reads them
        assert report["pieces_fast"] >= 1 and report["pieces_fast"] >= report["pieces"] // 2, report


@pytest.mark.parametrize("name, chunk, pieces", [(SYN_NS, 1_000, 10), (SHARED[2], 50_000, 100)])
def test_fast_path_reads_the_ns_trace_with_exact_timestamps(name: str, chunk: int, pieces: int) -> None:
    """Epoch µs with ns fractions: the fast path recovers the digits from each piece's text."""
    report: dict = {}
    with open(truth.path_of(name), "rb") as fh:
        got = stream_trace(fh, name, chunk=chunk, report=report, guess_above=0)
    assert report["pieces_fast"] > pieces and got.meta["imported"]["timestamps"] == "exact"
    assert got.equals(whole(name))


# -- a synthetic GPU trace ------------------------------------------------------------------------------

OPS = [("aten::mm", [[64, 128], [128, 32]], ["float", "float"], 2 * 64 * 128 * 32),
       ("aten::add", [[64, 32], [64, 32], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"], None),
       ("aten::cat", [[], []], ["TensorList", "Scalar"], None),
       ("aten::empty", [], [], None),
       ("aten::relu", [[7]], ["float"], 7)]


def gpu_events(n: int = 300) -> list[dict]:
    events: list[dict] = []
    t = 1_000.0
    for k in range(n):
        if k % 50 == 0:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k // 50}", "pid": 7,
                           "tid": 8, "ts": t - 0.25, "dur": 50 * 12.0, "args": {"External id": 10 ** 6 + k}})
        name, dims, types, flops = OPS[k % len(OPS)]
        args = {"External id": k + 1, "Input Dims": dims, "Input type": types, "Record function id": 0}
        if flops is not None:
            args["flops"] = flops
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 8, "ts": t, "dur": 9.125,
                       "args": args})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8,
                       "ts": t + 2, "dur": 5, "args": {"External id": k + 1, "correlation": 5000 + k, "cbid": 211}})
        events.append({"ph": "s", "id": 5000 + k, "pid": 7, "tid": 8, "ts": t + 2, "cat": "ac2g", "name": "ac2g"})
        kargs = {"External id": k + 1, "device": k % 2, "stream": 7 + k % 3, "correlation": 5000 + k,
                 "grid": [k % 9 + 1, 1, 1], "block": [256, 2, 1], "queued": 0}
        if k % 4 == 0:
            kargs["bytes"] = 4096 + k
        events.append({"ph": "X", "cat": "kernel" if k % 5 else "gpu_memcpy", "name": f"kernel_{k % 6}",
                       "pid": 0, "tid": 7 + k % 3, "ts": t + 6, "dur": 3.5 + k % 4, "args": kargs})
        events.append({"ph": "f", "id": 5000 + k, "pid": 0, "tid": 7, "ts": t + 6, "cat": "ac2g", "name": "ac2g",
                       "bp": "e"})
        t += 12.0
    return events


def gpu_doc(events: list[dict] | None = None, **outside) -> bytes:
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
           "traceEvents": gpu_events() if events is None else events,
           "deviceProperties": [{"id": 0, "name": "GPU 0"}, {"id": 1, "name": "GPU 1"}], **outside}
    return json.dumps(doc).encode()


def test_synthetic_gpu_trace_is_read_whole_by_the_fast_path() -> None:
    data = gpu_doc()
    got, report = fast_stream(data)
    assert report["pieces_declined"] == 0 and report["pieces_fast"] >= report["pieces"] - 1 >= 20, report
    want = reference(data)
    assert got.equals(want)
    dicts, rep2 = fast_stream(data, fast=False)
    assert rep2["pieces_fast"] == 0 and dicts.equals(want)


def test_fast_path_columns_match_the_raw_json() -> None:
    """Every field the fast path reads, checked against the raw events (not against the other reader)."""
    events = gpu_events()
    got, report = fast_stream(gpu_doc(events))
    assert report["pieces_fast"] >= 20
    host = got.host
    xs = [e for e in events if e["ph"] == "X"]
    assert len(host) == len(xs)
    assert host["name"].tolist() == [e["name"] for e in xs]
    assert host["category"].tolist() == [e["cat"] for e in xs]
    assert host["thread"].tolist() == [e["tid"] for e in xs]
    assert host["pid"].tolist() == [e["pid"] for e in xs]
    t0 = min(e["ts"] for e in xs)
    assert host["start_ns"].tolist() == [round((e["ts"] - t0) * 1000) for e in xs]
    assert host["dur_ns"].tolist() == [round(e["dur"] * 1000) for e in xs]
    gpu = [i for i, e in enumerate(xs) if e["cat"] in ("kernel", "gpu_memcpy", "cuda_runtime")]
    for col, key in (("correlation", "correlation"), ("external_id", "External id"), ("stream", "stream"),
                     ("device", "device"), ("bytes", "bytes")):
        assert host[col].iloc[gpu].tolist() == [xs[i]["args"].get(key, -1) for i in gpu], col
    for col in ("grid", "block"):
        want = [",".join(map(str, xs[i]["args"][col])) if col in xs[i]["args"] else None for i in gpu]
        assert host[col].iloc[gpu].tolist() == want, col
    ops = [i for i, e in enumerate(xs) if e["cat"] == "cpu_op"]
    assert host["input_shapes"].iloc[ops].tolist() == [str(xs[i]["args"]["Input Dims"]) for i in ops]
    assert host["flops"].iloc[ops].tolist() == [float(xs[i]["args"].get("flops", 0)) for i in ops]
    mm = got.ops[got.ops["name"] == "aten::mm"].iloc[0]
    assert mm["input_shapes"] == "64x128;128x32" and mm["flops"] == 2 * 64 * 128 * 32
    assert got.meta["imported"]["flows"] == {"ac2g": 300}
    assert got.meta["imported"]["step_windows"][0]["step"] == 0 and got.meta["steps"] == 6


# -- each reason to decline a piece: declined, and the same tables ----------------------------------------

def _set(path: str, value):
    def edit(ev: dict) -> None:
        keys = path.split("/")
        d = ev
        for k in keys[:-1]:
            d = d.setdefault(k, {})
        d[keys[-1]] = value
    return edit


def _drop(key: str):
    return lambda ev: ev.pop(key)


CPU, RT, FLOW, KERNEL = "cpu_op", "cuda_runtime", "flow start", "kernel"
DECLINE = {   # which event (the first of its category from event 400 on) and its edit
    "string tid": (CPU, _set("tid", "8")),
    "named thread": (CPU, _set("tid", "stream 7")),
    "float tid": (CPU, _set("tid", 8.0)),
    "bool pid": (CPU, _set("pid", True)),
    "pid beyond int64": (CPU, _set("pid", 2 ** 63)),
    "TensorList dims": (CPU, _set("args/Input Dims", [[[2, 3], [4]], []])),
    "dims with null": (CPU, _set("args/Input Dims", [[2, None], []])),
    "null inner dims": (CPU, _set("args/Input Dims", [None, []])),
    "float dims": (CPU, _set("args/Input Dims", [[2.5], []])),
    "string dims": (CPU, _set("args/Input Dims", "[[2], []]")),
    "types with null": (CPU, _set("args/Input type", ["TensorList", None])),
    "types not a list": (CPU, _set("args/Input type", "float")),
    "number in types": (CPU, _set("args/Input type", ["float", 3])),
    "flops beyond 2**53": (CPU, _set("args/flops", 2 ** 60 + 1)),
    "string flops": (CPU, _set("args/flops", "12")),
    "args not an object": (CPU, _set("args", [1, 2])),
    "missing cat": (CPU, _drop("cat")),
    "missing dur": (CPU, _drop("dur")),
    "null name": (CPU, _set("name", None)),
    "number name": (CPU, _set("name", 12)),
    "2021 external id": (KERNEL, lambda ev: ev["args"].update({"external id": ev["args"].pop("External id")})),
    "string correlation": (RT, _set("args/correlation", "5002")),
    "nested grid": (KERNEL, _set("args/grid", [[1], [1]])),
    "duplicate": (CPU, None),
    "metadata event": (CPU, lambda ev: ev.update(ph="M", name="thread_name", args={"name": "worker"})),
    "memory event": (CPU, lambda ev: ev.update(ph="i", name="[memory]", s="t",
                                               args={"Device Type": 0, "Device Id": -1, "Bytes": 64,
                                                     "Total Allocated": 64, "Total Reserved": 128, "Addr": 1})),
    "begin/end pair": (CPU, None),
    "flow start without cat": (FLOW, _drop("cat")),
    "ph not a string": (RT, _set("ph", 1)),
    "event not an object": (CPU, None),
    "ts as a string": (RT, _set("ts", "1")),
}


HANDLED = {   # edits the fast path reads itself (to the dict path's values)
    "grid with null": (KERNEL, _set("args/grid", [1, None, 1])),
    "empty grid": (KERNEL, _set("args/grid", [])),
    "null grid": (KERNEL, _set("args/grid", None)),
    "kernel without args": (KERNEL, _drop("args")),
    "op without args": (CPU, _drop("args")),
    "op with empty dims": (CPU, _set("args/Input Dims", [])),
    "op without dims": (CPU, lambda ev: ev["args"].pop("Input Dims")),
    "null flops": (CPU, _set("args/flops", None)),
    "negative flops": (CPU, _set("args/flops", -5)),
    "null correlation": (RT, _set("args/correlation", None)),
    "int ts": (RT, _set("ts", 5000)),
    "unknown phase": (RT, _set("ph", "C")),
    "unknown field types": (RT, _set("args/cbid", [{"x": "y"}])),
    "external id -1": (KERNEL, _set("args/External id", -1)),
}


def _index(events: list[dict], which: str) -> int:
    if which == FLOW:
        return next(i for i in range(400, len(events)) if events[i]["ph"] == "s")
    return next(i for i in range(400, len(events)) if events[i].get("cat") == which)


def _decline_doc(case: str) -> bytes:
    events = copy.deepcopy(gpu_events())
    which, edit = DECLINE[case] if case in DECLINE else HANDLED[case]
    i = _index(events, which)
    if case == "duplicate":                         # a key written twice: the last counts
        text = gpu_doc(events)
        first = json.dumps(events[i]).encode()
        assert text.count(first) == 1
        return text.replace(first, first[:-1] + b', "name": "aten::twice"}')
    if case == "begin/end pair":
        b = {"ph": "B", "cat": "cpu_op", "name": "aten::paired", "pid": 7, "tid": 8, "ts": events[i]["ts"]}
        events[i:i] = [b, {"ph": "E", "pid": 7, "tid": 8, "ts": events[i]["ts"] + 1}]
    elif case == "event not an object":
        events[i] = 17
    else:
        edit(events[i])
    return gpu_doc(events)


@pytest.mark.parametrize("case", sorted(DECLINE))
def test_each_reason_to_decline_takes_the_dict_path_with_the_same_tables(case: str) -> None:
    data = _decline_doc(case)
    try:
        want: Trace | Exception = reference(data)
    except TraceFormatError as e:
        want = e
    try:
        got, report = fast_stream(data)
    except NotStreamable:                             # a failed check: read whole, the reference's own code
        got, report = None, None
    if report is not None:
        assert report["pieces_declined"] + (report["pieces"] - report["pieces_fast"]) >= 1, report
        assert report["pieces_fast"] >= 10, report      # the other pieces still take the fast path
    if isinstance(want, Trace):
        assert got is None or got.equals(want)
    else:
        assert got is None


@pytest.mark.parametrize("case", sorted(HANDLED))
def test_edits_the_fast_path_reads_give_the_same_tables(case: str) -> None:
    data = _decline_doc(case)
    got, report = fast_stream(data)
    assert report["pieces_declined"] == 0 and report["pieces_fast"] >= report["pieces"] - 1, report
    assert got.equals(reference(data))


@pytest.mark.parametrize("case", sorted(DECLINE))
def test_each_reason_to_decline_is_refused_by_the_piece_parser_or_converter(case: str) -> None:
    """The piece holding the edited event is never taken by the fast path: parsing it alone is refused, or
    its conversion declines."""
    from neuron_studio.profiler.importers.arrow_pieces import add_arrow_piece
    from neuron_studio.profiler.importers.chunked_columns import ChunkedColumns

    data = _decline_doc(case)
    body = data[data.index(b"[", data.index(b'"traceEvents"')) + 1:]
    events = json.loads(data)["traceEvents"]
    k = _index(copy.deepcopy(gpu_events()), DECLINE[case][0]) + 1
    texts = [json.dumps(e).encode() for e in events[k - 3:k + 4]]
    # the edited event's text as written in the document, between its neighbours
    start = body.index(texts[0])
    end = body.index(texts[-1], start) + len(texts[-1])
    text = body[start:end]
    if case == "duplicate":
        assert b"aten::twice" in text
    arr = parse_piece(text)
    if arr is not None:
        cols = ChunkedColumns()
        assert add_arrow_piece(cols, arr, text) is False and cols.n == 0 and cols.n_events == 0


def test_exact_timestamps_beyond_float64_take_the_fast_path() -> None:
    events = gpu_events()
    base = 1712195495519695
    for k, e in enumerate(events):
        e["ts"] = base + k                            # whole µs, then ns fractions written in the text
    text = gpu_doc(events)
    for k in range(0, len(events), 7):
        text = text.replace(f'"ts": {base + k},'.encode(), f'"ts": {base + k}.{k % 1000:03d},'.encode(), 1)
    got, report = fast_stream(text)
    assert report["pieces_fast"] >= 20 and got.meta["imported"]["timestamps"] == "exact"
    want = reference(text)
    assert got.equals(want) and want.meta["imported"]["timestamps"] == "exact"
    origin = got.meta["imported"]["origin_ns"]
    starts = got.host["start_ns"].to_numpy() + origin
    assert starts[0] == base * 1000 and (starts % 1000 != 0).sum() > 50   # the fractions survived


def test_cut_inside_a_string_or_past_the_array_is_not_taken() -> None:
    """`},` inside a name and after the array (deviceProperties): the fast path's parse proves each cut."""
    events = gpu_events()
    for e in events[::9]:
        e["name"] = 'odd}, {"ph": "X"}, name'
    data = gpu_doc(events, tail=[{"a": 1}, {"b": 2}] * 50)
    want = reference(data)
    for chunk in (300, 1000, 4000, 1 << 20):
        got, report = fast_stream(data, chunk=chunk)
        assert got.equals(want), chunk
    for text in (b'{"ph": "X", "name": "a}', b'{"ph": "X", "name": "a\\"}', b'{"ph": "X", "cat": "c"}], "k": [{"a": 1}',
                 b'{"ph": "X"}], "k": 1, "l": [{"a": 1}', b'{"ph": "X"}], [{"a": 1}', b'{"a": {"b": 1}'):
        assert parse_piece(text) is None, text


def test_json_orjson_rejects_is_not_taken() -> None:
    """Arrow reads NaN/Infinity and does not check UTF-8 in fields it skips; orjson (the whole reader) does:
    the fast path refuses such text and both readers reject the file."""
    for bad in (b'"queued": NaN', b'"queued": -Infinity', b'"queued": Inf', b'"queued": -Inf', b'"note": "caf\xe9"'):
        assert parse_piece(b'{"ph": "X", "name": "k", ' + bad + b"}") is None, bad
        doc = gpu_doc().replace(b'"queued": 0', bad, 1)
        with pytest.raises(BadTrace):                 # streamed in small pieces: the fast path sees it
            fast_stream(doc)
        with pytest.raises(TraceFormatError):
            read_trace_bytes(doc, name="t.json")
        with pytest.raises((TraceFormatError, ValueError)):
            orjson.loads(doc)
    for ok in (b'{"ph": "X", "name": "NaN"}', b'{"ph": "X", "name": "Info", "cat": "Inf"}'):
        assert parse_piece(ok) is not None, ok                          # strings that merely say so are read
    assert parse_piece(b'{"ph": "X", "name": "caf\xc3\xa9"}') is not None    # valid UTF-8 is read


def test_absent_gpu_values_with_huge_values_elsewhere_read_whole(tmp_path) -> None:
    """A fast piece's absent correlation may have been an explicit null (the dict path then reads the column
    value by value: values beyond ±2**62 become -1): with such values elsewhere the file is read whole."""
    events = gpu_events()
    events[-2]["args"]["correlation"] = 2 ** 62 + 5           # a kernel near the end
    events[_index(events, RT)]["args"]["correlation"] = None   # explicit null in an early piece
    data = gpu_doc(events)
    with pytest.raises(NotStreamable):
        fast_stream(data)
    path = tmp_path / "t.json"
    path.write_bytes(data)
    report: dict = {}
    got = read_trace(path, report=report)
    assert got.equals(reference(data))
    assert got.host["correlation"].max() < 2 ** 62           # the explicit null made the column read value by value


def test_read_trace_reports_the_path(tmp_path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(gpu_doc(gpu_events(3000)))
    report: dict = {}
    got = read_trace(path, report=report)
    assert report["reader"] == "stream" and report["pieces_fast"] >= 1
    report2: dict = {}
    assert read_trace(path, columnar=False, report=report2).equals(got) and report2["pieces_fast"] == 0
    assert read_trace_whole(path).equals(got)
    assert set(got.host["grid"].dropna()) == {f"{k},1,1" for k in range(1, 10)}
