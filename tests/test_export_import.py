"""Export (Chrome JSON, Parquet) and import (ours, plain torch.profiler): exact round trips, Perfetto shape,
hostile data, and the error for every kind of bad file."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from neuron_studio.profiler import chrome_trace, export
from neuron_studio.profiler.capture import profile
from neuron_studio.profiler.export import DEVICE_PID_BASE, to_chrome_trace, to_parquet
from neuron_studio.profiler.importers import read_trace, read_trace_bytes
from neuron_studio.profiler.profile import Profile
from neuron_studio.profiler.trace import OPS_COLUMNS, Trace, TraceFormatError
from tests.models.blocks import TransformerBlock

HOSTILE = ["</script><script>alert(1)</script>", "nul\x00byte", "x" * 100_000, "ünïcödé ✓ 🚀", "\u2028\u2029",
           'quote " and \\ backslash', "", "new\nline\ttab"]
# Lone surrogates (e.g. from "\udc80" escapes in a JSON file) survive export/import; the model's frames
# (pandas Arrow strings) reject them in op names, so they are tested in columns the model does not read.
SURROGATE = "lone \udc80 surrogate"


@pytest.fixture(scope="module")
def run() -> Profile:
    """A profiled 3-step training loop of a small transformer block on the emulated device."""
    torch.manual_seed(0)
    m = TransformerBlock(64, 4).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(2, 16, 64, device="neuron")

    def step() -> None:
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    return profile(step, steps=3, warmup=1, mode="adaptive")


def hand_trace(n: int = 4, names: list[str] | None = None) -> Trace:
    """A small Trace built by hand (no capture), with every kind of cell the tables may hold."""
    names = names or [f"aten::op{i}" for i in range(n)]
    n = len(names)
    ops = pd.DataFrame({c: pd.Series([0] * n).astype(dt) if dt != "object" else [None] * n
                        for c, dt in OPS_COLUMNS.items()})
    ops["seq"] = np.arange(n)
    ops["name"] = pd.Series(names, dtype=object)     # object: Arrow strings reject lone surrogates
    ops["start_ns"] = np.arange(n) * 100
    ops["end_ns"] = ops["start_ns"] + 50
    ops["input_shapes"] = ["4x4"] * n
    ops["input_dtypes"] = ["float32"] * n
    ops["in_bytes"] = 64.0
    ops["out_bytes"] = 64.0
    ops["elems"] = 16.0
    ops["itemsize"] = 4
    ops["source"] = [names[i] if i % 2 else None for i in range(n)]
    ops["phase"] = "forward"
    ops["module"] = pd.Series(names, dtype=object)
    ops["sync"] = [None] * (n - 1) + ["item"]
    host = pd.DataFrame({"name": pd.Series(names, dtype=object), "category": ["cpu_op"] * n, "thread": [1] * n,
                         "start_ns": np.arange(n) * 100, "dur_ns": [40] * n, "input_shapes": [None] * n,
                         "flops": [0.0] * n, "stack": ["a.py:1\nb.py:2"] * n})
    compiles = pd.DataFrame({"graph_key": ["g0", ("g", 1)], "shapes": [((2, 3), (4,)), {"x": [1, 2]}],
                             "reason": ["first", "</script>"], "compile_ns": [10, 20], "recompile": [False, True]})
    meta = {"format": "neuron-studio-trace", "version": 1, "backend": "emulated", "chip": "trn2", "mode": "eager",
            "steps": 1, "name": "</script>", "figures": {"device_time": "modeled"}, "pid": 4242}
    return Trace(ops=ops, host=host, compiles=compiles, meta=meta)


# -- exact round trips --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fname", ["run.json", "run.json.gz"])
def test_chrome_round_trip_is_exact(run: Profile, tmp_path: Path, fname: str) -> None:
    path = to_chrome_trace(run, tmp_path / fname)
    back = read_trace(path)
    assert back.equals(run.trace)
    assert back.meta == run.trace.meta
    assert [p.name for p in tmp_path.iterdir()] == [fname]          # no temp files left behind


@pytest.mark.parametrize("mode", ["eager", "adaptive", "compile"])
def test_every_mode_round_trips_and_re_imports_as_that_mode(mode: str, tmp_path: Path) -> None:
    """A run of each mode (compile: the compiled step, its graph breaks and the memory its graphs return)
    exports to Chrome JSON and Parquet and reads back exactly; re-modeled, the same figures; stored by
    `neuron-studio import`, the run is listed with its own mode and chip (it was listed as eager)."""
    from neuron_studio.imported_runs import store_imported
    from neuron_studio.session import load_stored_profile
    from neuron_studio.store import RunStore

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(8, 32, device="neuron")

    def step() -> None:
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    p = profile(step, steps=2, warmup=1, mode=mode, chip="trn1")
    assert p.trace.mode == mode and len(p.trace.memory)
    for path in (to_chrome_trace(p, tmp_path / "run.json"), to_parquet(p.trace, tmp_path / "run.nstrace")):
        back = read_trace(path)
        assert back.equals(p.trace) and back.meta == p.trace.meta
        assert back.memory["source"].notna().sum() == p.trace.memory["source"].notna().sum()
        q = Profile.from_trace(back)
        assert q.summary.step_time_ns == p.summary.step_time_ns
        assert q.memory_peak()["nbytes"].sum() == p.memory_peak()["nbytes"].sum()
    store = RunStore(tmp_path / "store")
    run_id, summary = store_imported(store, tmp_path / "run.json")
    rec = store.get_run(run_id)
    assert (rec.mode, rec.chip, summary["mode"]) == (mode, "trn1", mode)
    assert load_stored_profile(store, run_id).summary.step_time_ns == p.summary.step_time_ns


def test_chrome_from_trace_models_it_first(run: Profile, tmp_path: Path) -> None:
    path = to_chrome_trace(run.trace, tmp_path / "t.json")
    assert read_trace(path).equals(run.trace)


def test_profile_export_chrome_trace_like_torch_profiler(run: Profile, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`prof.export_chrome_trace(path)` as on torch.profiler.profile: the file reads back with our importer
    (exactly) and with plain `json`, holds every op, and an interrupted write leaves the old file intact."""
    path = tmp_path / "prof.json"
    assert run.export_chrome_trace(str(path)) == path
    assert read_trace(path).equals(run.trace)
    doc = json.loads(path.read_text())
    op_events = [e for e in doc["traceEvents"] if e.get("args", {}).get("_ns", {}).get("table") == "ops"]
    assert sorted(e["args"]["_ns"]["row"] for e in op_events) == list(range(len(run.trace.ops)))
    assert sorted(e["name"] for e in op_events) == sorted(run.trace.ops["name"])
    assert path.read_bytes() == to_chrome_trace(run, tmp_path / "same.json").read_bytes()
    before = path.read_bytes()

    def broken(profile, *, bins):
        yield {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "host"}}
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(chrome_trace, "chrome_events", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        run.export_chrome_trace(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prof.json", "same.json"]   # no temp file left


def test_parquet_round_trip_is_exact_and_replaces(run: Profile, tmp_path: Path) -> None:
    path = to_parquet(run.trace, tmp_path / "run.nstrace")
    assert sorted(p.name for p in path.iterdir()) == ["compiles.parquet", "host.parquet", "memory.parquet",
                                                      "meta.json", "ops.parquet"]
    assert len(run.trace.memory) and read_trace(path).equals(run.trace)
    to_parquet(hand_trace(), path)                                  # overwrite an earlier export
    assert read_trace(path).equals(hand_trace())
    assert not (path / "memory.parquet").exists()                   # a trace without memory writes none
    assert [p.name for p in tmp_path.iterdir()] == ["run.nstrace"]
    back = read_trace(path)
    assert back.ops["itemsize"].dtype == np.int8 and back.ops["step"].dtype == np.int32


def test_parquet_refuses_to_replace_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a Neuron Studio trace directory"):
        to_parquet(hand_trace(), tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("fmt", ["chrome", "parquet"])
def test_hostile_strings_and_odd_cells_round_trip_verbatim(tmp_path: Path, fmt: str) -> None:
    t = hand_trace(names=HOSTILE)
    t.meta["weird"] = {"tuple": (1, 2), 3: "int key", "nan": float("inf"), "s": SURROGATE}
    t.host["stack"] = pd.Series([SURROGATE] * len(t.host), dtype=object)
    t.compiles["reason"] = pd.Series([SURROGATE, "</script>"], dtype=object)
    path = to_chrome_trace(t, tmp_path / "h.json") if fmt == "chrome" else to_parquet(t, tmp_path / "h.nstrace")
    back = read_trace(path)
    assert back.equals(t)
    assert back.ops["name"].tolist() == HOSTILE
    assert back.compiles["shapes"].tolist() == [((2, 3), (4,)), {"x": [1, 2]}]
    if fmt == "chrome":
        text = path.read_text(encoding="ascii")                   # ASCII only: NUL and surrogates are escaped
        assert "</script>" not in text and "\\u003c/script>" in text


def test_failed_export_keeps_the_previous_file(run: Profile, tmp_path: Path, monkeypatch) -> None:
    path = to_chrome_trace(hand_trace(), tmp_path / "t.json")
    before = path.read_bytes()

    def broken(profile, *, bins):
        yield {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "host"}}
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(chrome_trace, "chrome_events", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        to_chrome_trace(run, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


# -- Perfetto shape -------------------------------------------------------------------------------------

def test_chrome_json_has_processes_threads_counters(run: Profile, tmp_path: Path) -> None:
    path = to_chrome_trace(run, tmp_path / "run.json", bins=50)
    with open(path) as fh:
        doc = json.load(fh)
    assert doc["displayTimeUnit"] == "ns"
    ev = doc["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert (run.trace.meta["pid"], "host") in names
    assert (DEVICE_PID_BASE, "NeuronCore 0 (modeled)") in names
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"
               and e["pid"] == DEVICE_PID_BASE}
    assert {"tensor", "vector", "scalar", "gpsimd", "dma"} <= threads
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == len(run.trace.ops) + len(run.trace.host)
    assert all(isinstance(e["dur"], float) and e["dur"] >= 0 for e in xs)
    dev = [e for e in xs if e["pid"] == DEVICE_PID_BASE]
    assert {e["args"]["modeled"]["engine"] for e in dev} >= {"tensor", "vector"}
    mm = next(e for e in dev if e["name"] == "aten::mm")
    row = run.trace.ops.iloc[mm["args"]["_ns"]["row"]]
    assert mm["args"]["start_ns"] == int(row["start_ns"]) and isinstance(mm["args"]["start_ns"], int)
    assert mm["args"]["input_shapes"] == row["input_shapes"]
    counters = [e for e in ev if e["ph"] == "C"]
    assert len(counters) == 51 and all(e["name"] == "engine utilization" for e in counters)
    assert set(counters[0]["args"]) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    assert max(e["args"]["tensor"] for e in counters) > 0
    assert doc["metadata"]["neuron_studio"]["meta"]["value"] == run.trace.meta


def test_device_tracks_do_not_overlap(run: Profile, tmp_path: Path) -> None:
    """Perfetto drops overlapping complete events on one track: each engine track must be a sequence."""
    doc = json.loads((to_chrome_trace(run, tmp_path / "r.json")).read_text())
    by_track: dict = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] >= DEVICE_PID_BASE:
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))


# -- plain torch.profiler traces --------------------------------------------------------------------------

def test_plain_torch_profiler_trace_imports_and_analyses(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = TransformerBlock(32, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(2, 8, 32)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True) as prof:
        for _ in range(2):
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    t = read_trace(path)
    assert t.meta["backend"] == "imported" and t.meta["figures"]["device_time"] == "modeled"
    assert len(t.host) > len(t.ops) > 0
    assert set(t.host["category"]) >= {"cpu_op"}
    assert set(t.ops["phase"]) == {"forward", "backward"}
    p = Profile.from_trace(t, kernel_lookup=None)
    table = p.op_table()
    assert len(table) > 0 and table["device_ns"].sum() > 0
    tensor = table[table["engine"] == "tensor"]
    assert len(tensor) and tensor["flops"].sum() > 0              # matmuls found, FLOPs derived from shapes
    assert p.hot_path() and len(p.roofline()) > 0
    assert p.engine_utilization(bins=10)["tensor"].max() > 0
    # and the imported trace exports/imports exactly like a captured one
    assert read_trace(to_parquet(t, tmp_path / "p.nstrace")).equals(t)
    assert read_trace(to_chrome_trace(p, tmp_path / "p.json")).equals(t)


def test_plain_trace_keeps_hostile_names_and_maps_types() -> None:
    evs = [{"ph": "X", "cat": "cpu_op", "name": s, "pid": 1, "tid": "main thread", "ts": 10.0 + i, "dur": 0.5,
            "args": {"Input Dims": [[4, 8], [8, 2], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}}
           for i, s in enumerate(["aten::mm", "</script>\x00", "y" * 50_000])]
    evs.append({"ph": "B", "name": "outer", "pid": 1, "tid": 7, "ts": 0})
    evs.append({"ph": "E", "pid": 1, "tid": 7, "ts": 20})
    t = read_trace_bytes(json.dumps({"traceEvents": evs}).encode())
    assert t.host["name"].tolist()[:3] == ["aten::mm", "</script>\x00", "y" * 50_000]
    assert "outer" in t.host["name"].tolist()
    mm = t.ops[t.ops["name"] == "aten::mm"].iloc[0]
    assert (mm["input_shapes"], mm["input_dtypes"], mm["output_shapes"]) == ("4x8;8x2", "bfloat16,bfloat16", "4x2")
    assert mm["flops"] == 2 * 4 * 2 * 8 and mm["in_bytes"] == (32 + 16) * 2 and mm["dtype_class"] == 0
    assert t.meta["imported"]["thread_names"] == {str(1 << 40): "main thread"}


# -- bad files -------------------------------------------------------------------------------------------

def _ours_doc() -> dict:
    return {"displayTimeUnit": "ns", "metadata": {"neuron_studio": export.chrome_metadata(
        Profile.from_trace(hand_trace(), kernel_lookup=None))["neuron_studio"]},
        "traceEvents": list(export.chrome_events(Profile.from_trace(hand_trace(), kernel_lookup=None), bins=4))}


def _mutate(fn) -> bytes:
    doc = _ours_doc()
    fn(doc)
    return json.dumps(doc).encode()


def _ops_events(doc: dict) -> list:
    return [e for e in doc["traceEvents"] if e.get("args", {}).get("_ns", {}).get("table") == "ops"]


BAD = {
    "truncated": (json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}).encode()[:-9],
                  "truncated JSON"),
    "garbage": (b"{not json", "invalid JSON"),
    "empty": (b"  \n", "empty file"),
    "scalar": (b"42", "expected a JSON object"),
    "no events": (b'{"a": 1}', "no 'traceEvents' key"),
    "events not list": (b'{"traceEvents": {"a": 1}}', "'traceEvents' must be an array"),
    "event not object": (b'{"traceEvents": [1]}', "event 0 is not an object"),
    "NaN": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}', "non-finite number NaN"),
    "Infinity": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": -Infinity}]}',
                 "non-finite number -Infinity"),
    "overflow": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1e400, "dur": 1}]}', "event 0: ts is not finite"),
    "negative dur": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": -5}]}',
                     "event 0: negative duration"),
    "absurd ts": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1},'
                  b' {"ph": "X", "name": "b", "ts": 1e300, "dur": 1}]}', "out of range"),
    "ts string": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "soon", "dur": 1}]}',
                  "event 0: ts must be a number"),
    "name int": (b'{"traceEvents": [{"ph": "M"}, {"ph": "X", "name": 5, "ts": 0, "dur": 1}]}',
                 "event 1: name must be a string"),
    "huge tid": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "tid": 99999999999999999999}]}',
                 "tid out of range"),
    "deep nesting": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "bad gzip": (b"\x1f\x8b\x08\x00garbage", "corrupt gzip"),
    "not utf8": (b'{"traceEvents": ["\xff\xfe"]}', "not UTF-8"),
    "ours: version": (_mutate(lambda d: d["metadata"]["neuron_studio"].update(version=99)),
                      "unsupported format version 99"),
    "ours: format": (_mutate(lambda d: d["metadata"]["neuron_studio"].update(format="other")),
                     "unknown Neuron Studio format 'other'"),
    "ours: missing row": (_mutate(lambda d: d["traceEvents"].remove(_ops_events(d)[0])),
                          "table 'ops': 1 of 4 rows missing"),
    "ours: duplicate row": (_mutate(lambda d: d["traceEvents"].append(_ops_events(d)[0])), "duplicate row 0"),
    "ours: lacks column": (_mutate(lambda d: _ops_events(d)[1]["args"].pop("end_ns")), "lacks column 'end_ns'"),
    "ours: wrong type": (_mutate(lambda d: _ops_events(d)[2]["args"].update(start_ns="12")),
                         "column 'start_ns' must hold integers, found '12'"),
    "ours: float for int": (_mutate(lambda d: _ops_events(d)[2]["args"].update(start_ns=1.5)),
                            "column 'start_ns' must hold integers"),
    "ours: ends before start": (_mutate(lambda d: _ops_events(d)[2]["args"].update(end_ns=-1)),
                                "rows that end before they start"),
    "ours: int8 overflow": (_mutate(lambda d: _ops_events(d)[0]["args"].update(itemsize=1000)),
                            "out of range for int8"),
    "ours: unknown tag": (_mutate(lambda d: _ops_events(d)[0]["args"].update(source={"$eval": "x"})),
                          "unknown value tag '$eval'"),
    "ours: meta": (_mutate(lambda d: d["metadata"]["neuron_studio"].update(meta=[1])),
                   "metadata 'meta' must be an object"),
    "ours: row index": (_mutate(lambda d: _ops_events(d)[0]["args"]["_ns"].update(row=10**30)), "out of range"),
}


@pytest.mark.parametrize("key", list(BAD))
def test_bad_files_raise_trace_format_error(tmp_path: Path, key: str) -> None:
    data, message = BAD[key]
    path = tmp_path / "bad-file.json"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as ei:
        read_trace(path)
    assert str(ei.value).startswith("bad-file.json: ")
    assert message in str(ei.value)


def test_missing_path_and_parquet_problems(tmp_path: Path) -> None:
    from neuron_studio.profiler.importers.read import read_trace_whole

    d = tmp_path / "run.nstrace"
    (d).mkdir()
    for read in (read_trace, read_trace_whole):   # the streaming reader and the whole-document one alike
        with pytest.raises(TraceFormatError, match="nope.json: cannot be read"):
            read(tmp_path / "nope.json")
        with pytest.raises(TraceFormatError, match="run.nstrace: directory has no meta.json"):
            read(d)
    to_parquet(hand_trace(), d)
    (d / "ops.parquet").write_bytes((d / "ops.parquet").read_bytes()[:100])
    with pytest.raises(TraceFormatError, match="ops.parquet cannot be read"):
        read_trace(d)
    to_parquet(hand_trace(), d)
    (d / "meta.json").write_text('{"format": "neuron-studio-parquet", "version": 1')
    with pytest.raises(TraceFormatError, match="meta.json is not valid JSON"):
        read_trace(d)
    to_parquet(hand_trace(), d)
    (d / "host.parquet").unlink()
    with pytest.raises(TraceFormatError, match="missing host.parquet"):
        read_trace(d)
    pq_file = tmp_path / "x.parquet"
    to_parquet(hand_trace(), tmp_path / "y")
    pq_file.write_bytes((tmp_path / "y" / "ops.parquet").read_bytes())
    with pytest.raises(TraceFormatError, match="a Parquet file"):
        read_trace(pq_file)


def test_gzip_plain_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps([{"ph": "X", "name": "aten::add", "cat": "cpu_op", "ts": 1,
                                                "dur": 2}]).encode()))
    t = read_trace(path)
    assert t.ops["name"].tolist() == ["aten::add"] and t.host["dur_ns"].tolist() == [2000]
