"""The run store: concurrency, crash safety, verbatim strings, previous-run linkage."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuron_studio.store import (
    ENV_STORE,
    SCHEMA_VERSION,
    InvalidTableName,
    RunNotFound,
    RunRecord,
    RunStore,
    SchemaVersionError,
    TableNotFound,
    make_cell_key,
)

RUN_KW = dict(mode="eager", chip="trn2", backend="emulated")
HOSTILE = [
    "<script>alert(1)</script>",
    "'; DROP TABLE runs; --",
    'quote " and \\ backslash',
    "nul\x00byte",
    "new\nline\r\ttab",
    "ünïcödé ✓ 🚀 中文",
    "../../etc/passwd",
    "",
    "\u2028\u2029",
]


def _ops_table(n: int, tag: str = "op") -> pa.Table:
    return pa.table(
        {
            "seq": pa.array(range(n), pa.int64()),
            "name": pa.array([f"{tag}{i}" for i in range(n)], pa.string()),
            "start_ns": pa.array([i * 10 for i in range(n)], pa.int64()),
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "store")


# -- basics -----------------------------------------------------------------------------------------


def test_layout_wal_and_schema_version(store: RunStore) -> None:
    assert store.db_path.is_file()
    assert (store.root / "traces").is_dir()
    assert store.schema_version == SCHEMA_VERSION
    conn = sqlite3.connect(store.db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_default_root_is_cwd_and_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_STORE, raising=False)
    assert RunStore().root == tmp_path / ".neuron_studio"
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "elsewhere"))
    assert RunStore().root == tmp_path / "elsewhere"
    assert RunStore(tmp_path / "arg").root == tmp_path / "arg"  # the argument wins


def test_newer_schema_is_refused(store: RunStore) -> None:
    conn = sqlite3.connect(store.db_path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    with pytest.raises(SchemaVersionError, match="schema version"):
        RunStore(store.root)


def test_run_lifecycle(store: RunStore) -> None:
    rid = store.begin_run(cell_source="y = model(x)", options={"steps": 5}, name="train-step",
                          notebook="02.ipynb", **RUN_KW)
    run = store.get_run(rid)
    assert isinstance(run, RunRecord)
    assert (run.status, run.name, run.notebook, run.options) == ("running", "train-step", "02.ipynb", {"steps": 5})
    assert run.ended_at is None and run.summary is None and run.ranks == 1 and run.parent_run is None
    assert run.trace_dir == store.root / "traces" / str(rid)

    store.finish_run(rid, status="ok", summary={"mfu": 0.31, "hot_ops": [{"op": "aten::mm"}]},
                     step_time_ns=1_234_567, mfu=0.31)
    run = store.get_run(rid)
    assert run.status == "ok"
    assert run.summary == {"mfu": 0.31, "hot_ops": [{"op": "aten::mm"}]}
    assert run.step_time_ns == 1_234_567 and run.mfu == pytest.approx(0.31)
    assert run.ended_at is not None and run.wall_s is not None and run.wall_s >= 0
    assert store.get_run("train-step").id == rid
    assert store.get_run(str(rid)).id == rid
    assert run.to_dict()["trace_dir"] == str(run.trace_dir)


def test_finish_run_validates_status(store: RunStore) -> None:
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    with pytest.raises(ValueError, match="status"):
        store.finish_run(rid, status="running", summary=None)
    with pytest.raises(RunNotFound):
        store.finish_run(rid + 100, status="ok", summary=None)


def test_run_not_found_lists_recent_ids(store: RunStore) -> None:
    with pytest.raises(RunNotFound, match="no runs yet"):
        store.get_run(1)
    ids = [store.begin_run(cell_source=str(i), options={}, name=f"r{i}", **RUN_KW) for i in range(3)]
    with pytest.raises(RunNotFound) as info:
        store.get_run("nope")
    assert isinstance(info.value, KeyError)
    msg = str(info.value)
    assert "'nope' not found" in msg
    for i, rid in enumerate(ids):
        assert f"{rid} (r{i})" in msg


def test_list_runs_filters_and_orders(store: RunStore) -> None:
    a = store.begin_run(cell_source="a", options={}, notebook="a.ipynb", **RUN_KW)
    b = store.begin_run(cell_source="b", options={}, notebook="b.ipynb", **RUN_KW)
    c = store.begin_run(cell_source="c", options={}, notebook="a.ipynb", **RUN_KW)
    assert [r.id for r in store.list_runs()] == [c, b, a]
    assert [r.id for r in store.list_runs(notebook="a.ipynb")] == [c, a]
    assert [r.id for r in store.list_runs(limit=1)] == [c]


def test_previous_run_links_same_cell(store: RunStore) -> None:
    first = store.begin_run(cell_source="loss.backward()", options={}, notebook="n.ipynb", **RUN_KW)
    other = store.begin_run(cell_source="print(1)", options={}, notebook="n.ipynb", **RUN_KW)
    second = store.begin_run(cell_source="loss.backward()", options={}, notebook="n.ipynb", **RUN_KW)
    same_src_other_nb = store.begin_run(cell_source="loss.backward()", options={}, notebook="m.ipynb", **RUN_KW)
    by_id_1 = store.begin_run(cell_source="v1", options={}, notebook="n.ipynb",
                              cell_key=make_cell_key("n.ipynb", cell_id="abc"), **RUN_KW)
    by_id_2 = store.begin_run(cell_source="v2 (edited)", options={}, notebook="n.ipynb",
                              cell_key=make_cell_key("n.ipynb", cell_id="abc"), **RUN_KW)

    assert store.previous_run(first) is None
    assert store.previous_run(other) is None
    assert store.previous_run(second).id == first  # type: ignore[union-attr]
    assert store.get_run(second).parent_run == first
    assert store.previous_run(same_src_other_nb) is None
    assert store.previous_run(by_id_2).id == by_id_1  # type: ignore[union-attr]

    third = store.begin_run(cell_source="loss.backward()", options={}, notebook="n.ipynb", **RUN_KW)
    store.delete_run(second)
    assert store.previous_run(third).id == first  # type: ignore[union-attr]
    assert store.get_run(third).parent_run == first


def test_delete_run_removes_traces(store: RunStore) -> None:
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    path = store.save_table(rid, "device_ops", _ops_table(3))
    assert path.is_file()
    store.delete_run(rid)
    assert not path.parent.exists()
    with pytest.raises(RunNotFound):
        store.get_run(rid)
    with pytest.raises(RunNotFound):
        store.delete_run(rid)


# -- tables -----------------------------------------------------------------------------------------


def test_save_and_load_tables(store: RunStore) -> None:
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    table = _ops_table(1000)
    path = store.save_table(rid, "device_ops", table)
    assert path == store.root / "traces" / str(rid) / "device_ops.parquet"
    assert store.load_table(rid, "device_ops").equals(table)

    df = pd.DataFrame({"op": ["aten::mm", "aten::add"], "device_ns": [10, 20]})
    store.save_table(rid, "op_table", df)
    assert store.load_table(rid, "op_table").to_pandas().equals(df)
    assert store.list_tables(rid) == ["device_ops", "op_table"]

    store.save_table(rid, "device_ops", _ops_table(2, tag="new"))  # replace
    assert store.load_table(rid, "device_ops").column("name").to_pylist() == ["new0", "new1"]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "name", ["../evil", "a/b", "..", ".", "", "x.parquet", "a\\b", "/abs", "nul\x00", "sp ace", "ü"]
)
def test_table_names_are_validated(store: RunStore, name: str) -> None:
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    with pytest.raises(InvalidTableName):
        store.save_table(rid, name, _ops_table(1))
    with pytest.raises(InvalidTableName):
        store.load_table(rid, name)
    assert list(store.root.rglob("*.parquet")) == []


def test_table_errors(store: RunStore) -> None:
    with pytest.raises(RunNotFound):
        store.save_table(42, "device_ops", _ops_table(1))
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    with pytest.raises(TableNotFound, match="no table 'device_ops'"):
        store.load_table(rid, "device_ops")


# -- hostile strings --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_verbatim(store: RunStore, text: str) -> None:
    rid = store.begin_run(cell_source=text, options={text: text, "nested": [text]}, name=text or None,
                          notebook=text, cell_key=text or None, mode=text, chip=text, backend=text)
    store.finish_run(rid, status="error", summary={"warnings": [text], text: {"op": text}})
    run = store.get_run(rid)
    assert run.cell_source == text and run.notebook == text and run.mode == text
    assert run.chip == text and run.backend == text
    assert run.options == {text: text, "nested": [text]}
    assert run.summary == {"warnings": [text], text: {"op": text}}
    if text and not text.isdigit():
        assert store.get_run(text).id == rid
    assert [r.id for r in store.list_runs(notebook=text)] == [rid]
    store.save_table(rid, "device_ops", pa.table({"name": [text]}))
    assert store.load_table(rid, "device_ops").column("name").to_pylist() == [text]
    assert store.list_runs()[0].id == rid  # the table survived "DROP TABLE"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200), key=st.text(max_size=50))
def test_any_text_round_trips(store: RunStore, text: str, key: str) -> None:
    rid = store.begin_run(cell_source=text, options={key: text}, name=text, notebook=text, **RUN_KW)
    store.finish_run(rid, status="ok", summary={key: [text]})
    run = store.get_run(rid)
    assert (run.cell_source, run.name, run.notebook) == (text, text, text)
    assert run.options == {key: text} and run.summary == {key: [text]}


# -- concurrency and crashes ------------------------------------------------------------------------


def _write_runs(root: str, tag: str, n: int, barrier) -> list[int]:  # noqa: ANN001 - mp.Barrier
    store = RunStore(root)
    barrier.wait()
    ids = []
    for i in range(n):
        rid = store.begin_run(cell_source=f"{tag} {i % 7}", options={"i": i}, name=f"{tag}-{i}",
                              notebook=f"{tag}.ipynb", **RUN_KW)
        store.finish_run(rid, status="ok", summary={"tag": tag, "i": i}, step_time_ns=i)
        ids.append(rid)
    return ids


def test_two_processes_writing_concurrently_lose_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    RunStore(root)
    n = 200
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            a = pool.apply_async(_write_runs, (root, "A", n, barrier))
            b = pool.apply_async(_write_runs, (root, "B", n, barrier))
            ids_a, ids_b = a.get(timeout=120), b.get(timeout=120)
    store = RunStore(root)
    runs = store.list_runs()
    assert len(runs) == 2 * n
    assert len(set(ids_a) | set(ids_b)) == 2 * n
    for tag in "AB":
        mine = sorted((r for r in runs if r.notebook == f"{tag}.ipynb"), key=lambda r: r.id)
        assert [r.summary["i"] for r in mine] == list(range(n))  # type: ignore[index]
        assert all(r.status == "ok" for r in mine)
        # each run links to the previous run of the same cell, across the interleaving
        for r in mine:
            prev = store.previous_run(r.id)
            same_cell = [m for m in mine if m.cell_source == r.cell_source and m.id < r.id]
            assert (prev.id if prev else None) == (same_cell[-1].id if same_cell else None)


def _crashy_writer(root: str, run_id: int, ready) -> None:  # noqa: ANN001 - mp.Event
    """Repeatedly rewrite a big trace table and insert runs until killed."""
    import pyarrow.parquet as pq_mod

    store = RunStore(root)
    big = _ops_table(300_000, tag="crash")
    real_write = pq_mod.write_table

    def slow_write(table, where, **kw):  # noqa: ANN001, ANN003
        real_write(table, where, **kw)
        ready.set()  # the temp file is fully written but not yet replaced: a good time to die
        time.sleep(0.05)

    pq_mod.write_table = slow_write
    i = 0
    while True:
        store.begin_run(cell_source=f"crash {i}", options={}, **RUN_KW)
        store.save_table(run_id, "device_ops", big)
        i += 1


def test_sigkill_mid_write_leaves_readable_store(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = RunStore(root)
    committed = []
    for i in range(5):
        rid = store.begin_run(cell_source=f"good {i}", options={"i": i}, **RUN_KW)
        store.finish_run(rid, status="ok", summary={"i": i})
        committed.append(rid)
    good = _ops_table(10, tag="good")
    store.save_table(committed[0], "device_ops", good)

    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_crashy_writer, args=(root, committed[0], ready))
    proc.start()
    try:
        assert ready.wait(60), "writer never got going"
        time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
    assert proc.exitcode == -signal.SIGKILL

    store = RunStore(root)
    runs = {r.id: r for r in store.list_runs()}
    for i, rid in enumerate(committed):
        assert runs[rid].status == "ok" and runs[rid].summary == {"i": i}
    table = store.load_table(committed[0], "device_ops")
    names = table.column("name").to_pylist()
    # either the good table or a complete replacement; never a torn file
    assert names == good.column("name").to_pylist() or (len(names) == 300_000 and names[0] == "crash0")
    assert store.list_tables(committed[0]) == ["device_ops"]  # leftover temp files are not tables
    # the store still accepts writes
    rid = store.begin_run(cell_source="after crash", options={}, **RUN_KW)
    store.finish_run(rid, status="ok", summary=None)
    assert store.get_run(rid).status == "ok"


def test_torn_temp_file_never_replaces_good_table(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    store.save_table(rid, "device_ops", _ops_table(5, tag="good"))

    def exploding_write(table, where, **kw):  # noqa: ANN001, ANN003
        where.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", exploding_write)
    with pytest.raises(OSError, match="disk full"):
        store.save_table(rid, "device_ops", _ops_table(5, tag="bad"))
    monkeypatch.undo()
    assert store.load_table(rid, "device_ops").column("name").to_pylist()[0] == "good0"
    assert [p.name for p in (store.root / "traces" / str(rid)).iterdir()] == ["device_ops.parquet"]
