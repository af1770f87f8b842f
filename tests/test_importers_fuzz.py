"""Fuzz the importers: whatever the bytes, `read_trace*` returns a Trace or raises TraceFormatError, nothing else.

Inputs: random JSON structures, random Chrome-like event lists (absurd numbers, wrong types, hostile strings),
valid files (ours and plain) mutated byte-wise or structurally, truncated prefixes, and damaged Parquet
directories. A trace that imports must also model (`Profile.from_trace`) without error.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from neuron_studio.profiler.export import chrome_events, chrome_metadata, to_parquet
from neuron_studio.profiler.importers import read_trace, read_trace_bytes
from neuron_studio.profiler.profile import Profile
from neuron_studio.profiler.trace import Trace, TraceFormatError
from tests.test_export_import import hand_trace

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def outcome(data: bytes) -> Trace | None:
    """The contract: a Trace (that the model accepts) or TraceFormatError."""
    try:
        t = read_trace_bytes(data, name="fuzz.json")
    except TraceFormatError as e:
        assert str(e).startswith("fuzz.json: ")
        return None
    assert isinstance(t, Trace)
    Profile.from_trace(t, kernel_lookup=None).op_table()
    return t


def _ours_bytes() -> bytes:
    prof = Profile.from_trace(hand_trace(), kernel_lookup=None)
    doc = {"displayTimeUnit": "ns", "metadata": chrome_metadata(prof),
           "traceEvents": list(chrome_events(prof, bins=3))}
    return json.dumps(doc).encode()


OURS = _ours_bytes()
PLAIN = json.dumps({"schemaVersion": 1, "traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 1.0, "dur": 10.0,
     "args": {"Input Dims": [[4, 8], [16, 8], [16]], "Input type": ["float", "float", "float"]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 2.0, "dur": 5.0,
     "args": {"Input Dims": [[16], [4, 8], [8, 16], [], []], "Input type": ["float", "float", "float", "Scalar",
                                                                            "Scalar"], "flops": 1024}},
    {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1, "tid": 2,
     "ts": 20.0, "dur": 30.0},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 21.0, "dur": 5.5,
     "args": {"Input Dims": [[4, 16], [16, 8]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
    {"ph": "B", "name": "region", "pid": 1, "tid": 3, "ts": 5.0},
    {"ph": "E", "pid": 1, "tid": 3, "ts": 9.0},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 3.0, "dur": 2.0,
     "args": {"stream": 7, "correlation": 5}},
    {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 2.5, "cat": "ac2g", "name": "ac2g"},
]}).encode()


def test_seeds_import() -> None:
    assert outcome(OURS).equals(hand_trace())
    t = outcome(PLAIN)
    assert t is not None and t.ops["name"].tolist() == ["aten::linear", "aten::mm"]
    # the backward-thread op runs inside ProfilerStep#3's window (issue 17: steps are not per thread)
    assert t.ops["phase"].tolist() == ["forward", "backward"] and t.ops["step"].tolist() == [3, 3]


# -- random JSON -------------------------------------------------------------------------------------------

HOSTILE_TEXT = st.sampled_from(["</script>", "\x00", "\udc80", "x" * 5000, "ProfilerStep#1", "cpu_op", "aten::mm",
                                "$tuple", "$dict", "_ns", "autograd::engine::evaluate_function: X", "B", "X"])
TEXT = st.one_of(st.text(max_size=12), HOSTILE_TEXT)
NUMBER = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0, -1, 1e300, -1e300, 2**63, 2**64, 5e-324, 9.2e15]))
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(SCALAR, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                   st.dictionaries(TEXT, kids, max_size=5)), max_leaves=30)


def dumps(x: object) -> bytes:
    return json.dumps(x, allow_nan=True).encode("utf-8", "surrogatepass")


@FUZZ
@given(JSON)
def test_random_json(x: object) -> None:
    outcome(dumps(x))


DIMS = st.one_of(st.lists(st.lists(st.integers(-3, 2**40), max_size=4), max_size=4), JSON)
TYPES = st.one_of(st.lists(st.sampled_from(["float", "c10::BFloat16", "Scalar", "", "long int", "TensorList",
                                            "weird"]), max_size=4), JSON)
EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "B", "E", "M", "C", "i", "s", "f"])},
    optional={"name": st.one_of(st.sampled_from(["aten::mm", "aten::add", "aten::view", "ProfilerStep#2",
                                                 "autograd::engine::evaluate_function: A"]), TEXT, NUMBER),
              "cat": st.one_of(st.sampled_from(["cpu_op", "user_annotation", "kernel", "Trace", "python_function"]),
                               TEXT, st.none()),
              "ts": st.one_of(st.floats(0, 1e6), NUMBER, TEXT), "dur": st.one_of(st.floats(0, 1e4), NUMBER),
              "pid": st.one_of(st.integers(0, 3), TEXT, NUMBER), "tid": st.one_of(st.integers(0, 3), TEXT, NUMBER),
              "args": st.one_of(st.fixed_dictionaries({}, optional={"Input Dims": DIMS, "Input type": TYPES,
                                                                    "flops": NUMBER}), JSON)})


@FUZZ
@given(st.lists(EVENT, max_size=25), st.booleans())
def test_random_chrome_events(events: list, bare: bool) -> None:
    outcome(dumps(events if bare else {"traceEvents": events}))


# -- mutated valid files ----------------------------------------------------------------------------------

@FUZZ
@given(st.sampled_from([OURS, PLAIN]), st.data())
def test_truncated_prefix(seed: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(seed) - 1))
    assert outcome(seed[:cut]) is None or cut > len(seed) - 3


@FUZZ
@given(st.sampled_from([OURS, PLAIN]), st.lists(st.tuples(st.integers(0, 10**9), st.binary(min_size=0, max_size=3)),
                                                min_size=1, max_size=4))
def test_byte_mutations(seed: bytes, edits: list) -> None:
    b = bytearray(seed)
    for pos, rep in edits:
        p = pos % len(b)
        b[p:p + len(rep) or p + 1] = rep
    outcome(bytes(b))


def _paths(x: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(x, dict):
        for k, v in x.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out += _paths(v, prefix + (i,))
    return out


OURS_DOC, PLAIN_DOC = json.loads(OURS), json.loads(PLAIN)
OURS_PATHS, PLAIN_PATHS = _paths(OURS_DOC), _paths(PLAIN_DOC)


@FUZZ
@given(st.sampled_from(["ours", "plain"]), st.data(), st.sampled_from(["replace", "delete"]))
def test_structural_mutations(which: str, data: st.DataObject, how: str) -> None:
    doc = copy.deepcopy(OURS_DOC if which == "ours" else PLAIN_DOC)
    paths = OURS_PATHS if which == "ours" else PLAIN_PATHS
    path = data.draw(st.sampled_from(paths[1:]))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if how == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    outcome(dumps(doc))


# -- damaged Parquet directories -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def pq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return to_parquet(hand_trace(), tmp_path_factory.mktemp("pq") / "t.nstrace")


@FUZZ
@given(st.sampled_from(["meta.json", "ops.parquet", "host.parquet", "compiles.parquet"]), st.data())
def test_damaged_parquet_dir(pq_dir: Path, tmp_path_factory: pytest.TempPathFactory, fname: str,
                             data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("dmg") / "t.nstrace"
    shutil.copytree(pq_dir, d)
    raw = (d / fname).read_bytes()
    if fname == "meta.json" and data.draw(st.booleans()):
        doc = json.loads(raw)
        path = data.draw(st.sampled_from(_paths(doc)[1:]))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = data.draw(JSON)
        (d / fname).write_bytes(dumps(doc))
    else:
        cut = data.draw(st.integers(0, len(raw)))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        b = bytearray(raw[:cut])
        if b and data.draw(st.booleans()):
            b[pos % len(b)] ^= 0xFF
        assume(bytes(b) != raw)
        (d / fname).write_bytes(bytes(b))
    try:
        t = read_trace(d)
    except TraceFormatError as e:
        assert str(e).startswith("t.nstrace: ")
        return
    Profile.from_trace(t, kernel_lookup=None)
