"""Run store lifecycle: crashed writers' runs become `interrupted`, ids are never reused (with the
schema 1 -> 2 migration), read-only opens never wait on a writer, and one rule locates the store."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neuron_studio import run_writer
from neuron_studio import store as store_mod
from neuron_studio.store import ENV_STORE, SCHEMA_VERSION, RunStore, StoreError, resolve_store_root

RUN_KW = dict(mode="eager", chip="trn2", backend="emulated")
REPO = Path(__file__).resolve().parents[1]


def _child(code: str) -> subprocess.Popen:
    """A separate Python process running `code` (with the repo importable), talking over stdin/stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def _begin_in_child(root: Path) -> tuple[subprocess.Popen, int]:
    """A child process that begins a run and then waits (a kernel mid-cell); returns it and the run id."""
    proc = _child(f"""
        import sys
        from neuron_studio.store import RunStore
        rid = RunStore({str(root)!r}).begin_run(cell_source="train()", options={{}}, mode="eager",
                                                 chip="trn2", backend="emulated")
        print(rid, flush=True)
        sys.stdin.read()
    """)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.strip().isdigit(), f"child failed to begin a run: {line!r}"
    return proc, int(line)


def _raw_status(root: Path, run_id: int) -> str:
    conn = sqlite3.connect(root / "runs.sqlite")
    try:
        return conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    finally:
        conn.close()


def test_crashed_writers_run_becomes_interrupted(tmp_path: Path) -> None:
    root = tmp_path / "store"
    RunStore(root)
    proc, rid = _begin_in_child(root)
    try:
        # the writer is alive: its run is running, for readers and for writable opens alike
        assert RunStore(root).get_run(rid).status == "running"
        assert RunStore(root, read_only=True).get_run(rid).status == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    # a read-only open reports it without writing
    assert RunStore(root, read_only=True).get_run(rid).status == "interrupted"
    assert _raw_status(root, rid) == "running"
    # the next writable open stores it
    assert RunStore(root).get_run(rid).status == "interrupted"
    assert _raw_status(root, rid) == "interrupted"


def test_own_running_run_is_not_interrupted(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    assert RunStore(store.root).get_run(rid).status == "running"
    store.finish_run(rid, status="ok", summary=None)
    assert store.get_run(rid).status == "ok"


def _set_writer(root: Path, run_id: int, **cols: object) -> None:
    conn = sqlite3.connect(root / "runs.sqlite")
    try:
        for col, value in cols.items():
            conn.execute(f"UPDATE runs SET {col} = ? WHERE id = ?", (value, run_id))
        conn.commit()
    finally:
        conn.close()


def test_reused_pid_rebooted_host_and_remote_writer(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    reused, rebooted, remote, unknown = (store.begin_run(cell_source=str(i), options={}, **RUN_KW)
                                         for i in range(4))
    # a live pid (our parent) but another process start time: the pid was reused after the writer died
    _set_writer(store.root, reused, writer_pid=os.getppid(), writer_start="1")
    _set_writer(store.root, rebooted, writer_boot="an-earlier-boot")
    _set_writer(store.root, remote, writer_pid=1, writer_host="another-host.invalid")
    _set_writer(store.root, unknown, writer_pid=None, writer_host=None)  # e.g. written before schema 2
    fresh = RunStore(store.root)
    status = {r.id: r.status for r in fresh.list_runs()}
    if run_writer.process_start(os.getppid()):  # /proc available: reuse is detectable
        assert status[reused] == "interrupted"
    if run_writer.boot_id():
        assert status[rebooted] == "interrupted"
    assert status[remote] == "running"  # cannot be judged from here
    assert status[unknown] == "running"


def test_ids_are_never_reused(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    ids = [store.begin_run(cell_source=str(i), options={}, **RUN_KW) for i in range(3)]
    store.delete_run(ids[-1])
    new = store.begin_run(cell_source="next", options={}, **RUN_KW)
    assert new == ids[-1] + 1
    assert RunStore(store.root).begin_run(cell_source="again", options={}, **RUN_KW) == new + 1


_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, name TEXT, cell_key TEXT NOT NULL, cell_source TEXT NOT NULL, notebook TEXT,
    options TEXT NOT NULL, mode TEXT NOT NULL, chip TEXT NOT NULL, backend TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error', 'interrupted', 'running')),
    started_at REAL NOT NULL, ended_at REAL, wall_s REAL, step_time_ns INTEGER, mfu REAL, summary TEXT,
    trace_dir TEXT NOT NULL, ranks INTEGER NOT NULL DEFAULT 1, parent_run INTEGER
);
CREATE INDEX runs_cell_key ON runs (cell_key, id);
CREATE INDEX runs_notebook ON runs (notebook, id);
CREATE INDEX runs_name ON runs (name, id);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def _v1_store(root: Path) -> None:
    (root / "traces" / "7").mkdir(parents=True)  # a deleted run's leftover traces: 7 must not be reused
    conn = sqlite3.connect(root / "runs.sqlite")
    conn.executescript(_V1_SCHEMA)
    for i, status in ((1, "ok"), (2, "error"), (3, "running")):
        conn.execute(
            "INSERT INTO runs (id, name, cell_key, cell_source, options, mode, chip, backend, status, "
            "started_at, trace_dir, summary) VALUES (?, ?, 'k', 'src', '{}', 'eager', 'trn2', 'emulated', ?, "
            "?, ?, ?)", (i, f"run{i}", status, 1000.0 + i, f"traces/{i}", '{"i": %d}' % i))
    conn.commit()
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()


def test_schema_1_store_is_migrated(tmp_path: Path) -> None:
    root = tmp_path / "old"
    _v1_store(root)
    # a read-only open reads a schema 1 store as it is
    ro = RunStore(root, read_only=True)
    assert [r.id for r in ro.list_runs()] == [3, 2, 1]
    assert ro.get_run(3).status == "running"  # writer unknown: not judged
    store = RunStore(root)
    assert store.schema_version == SCHEMA_VERSION == 2
    runs = store.list_runs()
    assert [(r.id, r.name, r.status, r.summary) for r in runs] == [
        (3, "run3", "running", {"i": 3}), (2, "run2", "error", {"i": 2}), (1, "run1", "ok", {"i": 1})]
    assert store.previous_run(3).id == 2  # type: ignore[union-attr]
    conn = sqlite3.connect(root / "runs.sqlite")
    try:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        conn.close()
    assert "AUTOINCREMENT" in sql
    assert {"runs_cell_key", "runs_notebook", "runs_name"} <= indexes
    assert store.begin_run(cell_source="new", options={}, **RUN_KW) == 8
    RunStore(root)  # opening again does not migrate again
    assert len(RunStore(root).list_runs()) == 4


def test_read_only_store_refuses_writes_and_missing_store(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    ro = RunStore(store.root, read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        ro.finish_run(rid, status="ok", summary=None)
    with pytest.raises(StoreError, match="no Neuron Studio run store"):
        RunStore(tmp_path / "absent", read_only=True)
    assert not (tmp_path / "absent").exists()


def test_readers_never_wait_on_a_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    store = RunStore(root)
    rid = store.begin_run(cell_source="x", options={}, **RUN_KW)
    store.finish_run(rid, status="ok", summary={"a": 1})
    # another process holds the write lock mid-transaction, as a kernel saving a run does
    writer = _child(f"""
        import sqlite3, sys
        conn = sqlite3.connect({str(root / "runs.sqlite")!r}, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE runs SET name = 'uncommitted'")
        print("locked", flush=True)
        sys.stdin.read()
        conn.execute("ROLLBACK")
    """)
    try:
        assert writer.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
        monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_MS", 1500)  # a waiting reader would fail, not hang
        began = time.monotonic()
        ro = RunStore(root, read_only=True)
        run = ro.get_run(rid)
        runs = ro.list_runs()
        waited = time.monotonic() - began
        assert (run.status, run.summary, run.name) == ("ok", {"a": 1}, None)  # the committed state
        assert [r.id for r in runs] == [rid]
        assert waited < 1.5, f"the reader waited {waited:.2f} s for the writer"
    finally:
        writer.stdin.close()  # type: ignore[union-attr]
        writer.wait(10)


def test_resolve_store_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_STORE, raising=False)
    assert resolve_store_root() == tmp_path / ".neuron_studio"
    assert resolve_store_root(tmp_path / "nb") == tmp_path / "nb" / ".neuron_studio"
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "shared"))
    assert resolve_store_root(tmp_path / "nb") == tmp_path / "shared"
    monkeypatch.setenv(ENV_STORE, "runs")  # relative: to the notebook's directory (the kernel's cwd)
    assert resolve_store_root(tmp_path / "nb") == tmp_path / "nb" / "runs"
    assert RunStore().root == tmp_path / "runs"
