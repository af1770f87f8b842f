"""The run store: one SQLite database plus trace files, in a directory next to the notebook.

Layout of a store rooted at ``<root>`` (default ``./.neuron_studio``, or ``$NEURON_STUDIO_STORE``)::

    <root>/runs.sqlite            runs + meta tables (WAL mode, busy timeout, schema version in `meta`)
    <root>/traces/<run_id>/*.parquet   trace tables, one file per table, each written atomically

Concurrency: several processes (kernels, the Jupyter server, the CLI) may open the same store. Every write
is one short ``BEGIN IMMEDIATE`` transaction, so writers queue on SQLite's lock (bounded by the busy
timeout) instead of failing on a read->write upgrade. Trace files are written to a temporary file in the
same directory, fsynced and ``os.replace``d into place: a reader sees the old file or the new one, never
half of one, even if the writer is killed.

Readers never wait on writers: ``RunStore(root, read_only=True)`` (the Jupyter server, reports) opens
SQLite read-only, takes no lock and never migrates or repairs; WAL lets it read the last committed state
while a kernel is writing.

Crashed writers: every run records the writing process (pid, its start time, host name and boot id).
A run still ``running`` whose writer is provably gone (same host and boot, pid dead or reused, or the
host rebooted) is reported ``interrupted``, and stored so when another process next opens the store for
writing. A writer on another host cannot be judged, so its runs stay ``running`` (see `run_writer`).

Run ids are never reused (``AUTOINCREMENT``): deleting the newest run does not hand its id, and so its
name in notebooks and reports, to the next run. Stores of schema 1 are migrated on first writable open.

Strings are stored verbatim (bound parameters only; JSON for `options`/`summary`). Table names are
validated against ``[A-Za-z0-9_-]+`` so no name can leave the run's trace directory.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping
from urllib.parse import quote

from neuron_studio.run_writer import writer_gone, writer_identity

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas
    import pyarrow

__all__ = [
    "DEFAULT_DIRNAME",
    "ENV_STORE",
    "SCHEMA_VERSION",
    "RUN_STATUSES",
    "RunRecord",
    "RunStore",
    "StoreError",
    "RunNotFound",
    "TableNotFound",
    "InvalidTableName",
    "SchemaVersionError",
    "make_cell_key",
    "resolve_store_root",
]

DEFAULT_DIRNAME = ".neuron_studio"
ENV_STORE = "NEURON_STUDIO_STORE"
DB_FILENAME = "runs.sqlite"
TRACES_DIRNAME = "traces"
SCHEMA_VERSION = 2
#: How long a writer waits for another process's transaction before giving up (SQLite busy timeout).
BUSY_TIMEOUT_MS = 30_000
RUN_STATUSES = ("ok", "error", "interrupted", "running")
_FINAL_STATUSES = frozenset({"ok", "error", "interrupted"})
_TABLE_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: How many recent run ids a RunNotFound message lists.
_RECENT_IN_ERRORS = 10

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT,
    cell_key     TEXT NOT NULL,
    cell_source  TEXT NOT NULL,
    notebook     TEXT,
    options      TEXT NOT NULL,
    mode         TEXT NOT NULL,
    chip         TEXT NOT NULL,
    backend      TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('ok', 'error', 'interrupted', 'running')),
    started_at   REAL NOT NULL,
    ended_at     REAL,
    wall_s       REAL,
    step_time_ns INTEGER,
    mfu          REAL,
    summary      TEXT,
    trace_dir    TEXT NOT NULL,
    ranks        INTEGER NOT NULL DEFAULT 1,
    parent_run   INTEGER,
    writer_pid   INTEGER,
    writer_start TEXT,
    writer_host  TEXT,
    writer_boot  TEXT
);
CREATE INDEX IF NOT EXISTS runs_cell_key ON runs (cell_key, id);
CREATE INDEX IF NOT EXISTS runs_notebook ON runs (notebook, id);
CREATE INDEX IF NOT EXISTS runs_name ON runs (name, id);
"""

_COLUMNS = (
    "id, name, cell_key, cell_source, notebook, options, mode, chip, backend, status, started_at, "
    "ended_at, wall_s, step_time_ns, mfu, summary, trace_dir, ranks, parent_run"
)
_WRITER_COLUMNS = ("writer_pid", "writer_start", "writer_host", "writer_boot")
#: Schema 1 -> 2: the same rows in an AUTOINCREMENT table with the writer columns (NULL: writer unknown).
_V1_COLUMNS = _COLUMNS


class StoreError(Exception):
    """Base class of the run store's errors."""


class RunNotFound(StoreError, KeyError):
    """No run with that id or name. The message lists the store's most recent run ids."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "run not found"


class TableNotFound(StoreError, KeyError):
    """The run exists but has no trace table of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "table not found"


class InvalidTableName(StoreError, ValueError):
    """A table name outside ``[A-Za-z0-9_-]+`` (it would not stay inside the run's trace directory)."""


class SchemaVersionError(StoreError):
    """The database was written by a newer Neuron Studio whose schema this version does not know."""


def make_cell_key(notebook: str | None, *, cell_id: str | None = None, cell_source: str = "") -> str:
    """A stable key for "the same cell": the notebook path plus the cell id, or the cell source if no id."""
    ident = f"id:{cell_id}" if cell_id else f"src:{cell_source}"
    digest = hashlib.sha256(f"{notebook or ''}\x00{ident}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class RunRecord:
    """One row of the `runs` table, decoded (`options`/`summary` parsed, `trace_dir` absolute)."""

    id: int
    name: str | None
    cell_key: str
    cell_source: str
    notebook: str | None
    options: dict[str, Any]
    mode: str
    chip: str
    backend: str
    status: str
    started_at: float
    ended_at: float | None
    wall_s: float | None
    step_time_ns: int | None
    mfu: float | None
    summary: dict[str, Any] | None
    trace_dir: Path
    ranks: int
    parent_run: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the trace dir as a string)."""
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["trace_dir"] = str(self.trace_dir)
        return out


def resolve_store_root(directory: str | os.PathLike[str] | None = None) -> Path:
    """Where the run store of a notebook in `directory` (default: the working directory) lives.

    ``$NEURON_STUDIO_STORE`` when set (a relative value is taken relative to `directory`, which is where
    the notebook's kernel runs), else ``<directory>/.neuron_studio``. The one rule shared by the studio
    (kernels, CLI) and the JupyterLab extension's server, so the panel shows the runs the kernel wrote.
    """
    base = Path(directory).expanduser() if directory is not None else Path.cwd()
    env = os.environ.get(ENV_STORE)
    root = Path(env).expanduser() if env else Path(DEFAULT_DIRNAME)
    return (base / root).absolute() if not root.is_absolute() else root


def _validate_table_name(name: str) -> str:
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
        raise InvalidTableName(f"invalid table name {name!r}: use only letters, digits, '_' and '-'")
    return name


def _fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class RunStore:
    """A directory holding runs (SQLite) and their traces (Parquet files).

    `root` defaults to `resolve_store_root()` (``$NEURON_STUDIO_STORE`` or ``./.neuron_studio``).
    Instances are cheap: each operation opens its own short-lived connection, so a store can be used
    from several threads and survives ``fork``. `read_only=True` opens an existing store without taking
    any lock or changing anything (writes then raise `StoreError`).
    """

    def __init__(
        self, root: str | os.PathLike[str] | None = None, *, create: bool = True, read_only: bool = False
    ) -> None:
        if root is None:
            root = resolve_store_root()
        self.root = Path(root).expanduser().absolute()
        self.db_path = self.root / DB_FILENAME
        self.read_only = read_only
        if (read_only or not create) and not self.db_path.exists():
            raise StoreError(f"no Neuron Studio run store at {self.root}")
        if read_only:
            self._columns = self._check_readable()
            return
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / TRACES_DIRNAME).mkdir(exist_ok=True)
        self._init_schema()
        self._columns = f"{_COLUMNS}, {', '.join(_WRITER_COLUMNS)}"
        self._mark_interrupted()

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    # -- connections -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            uri = f"file:{quote(str(self.db_path))}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            return conn
        conn = sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable against process crashes
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: takes the write lock up front, so no read->write upgrade can fail."""
        if self.read_only:
            raise StoreError(f"the run store at {self.root} was opened read-only")
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _init_schema(self) -> None:
        conn = self._connect()
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # pragma: no cover - e.g. a filesystem without shared memory
                raise StoreError(f"could not switch {self.db_path} to WAL mode (got {mode!r})")
        finally:
            conn.close()
        with self._write() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise SchemaVersionError(self._newer_schema_message(row[0]))
            if row is not None and int(row[0]) == 1:
                self._migrate_v1(conn)
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                conn.execute(stmt)
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )

    def _newer_schema_message(self, version: object) -> str:
        return (f"{self.db_path} has schema version {version}; this Neuron Studio reads up to "
                f"{SCHEMA_VERSION}. Upgrade neuron-studio or use another store directory.")

    def _migrate_v1(self, conn: sqlite3.Connection) -> None:
        """Schema 1 -> 2 inside the caller's write transaction: rows copied into an AUTOINCREMENT table
        whose id sequence starts above every id in use or left behind in ``traces/``."""
        conn.execute("ALTER TABLE runs RENAME TO runs_v1")
        for index in ("runs_cell_key", "runs_notebook", "runs_name"):
            conn.execute(f"DROP INDEX IF EXISTS {index}")
        for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
            conn.execute(stmt)
        conn.execute(f"INSERT INTO runs ({_V1_COLUMNS}) SELECT {_V1_COLUMNS} FROM runs_v1")
        conn.execute("DROP TABLE runs_v1")
        traces = self.root / TRACES_DIRNAME
        used = [int(p.name) for p in traces.iterdir() if p.name.isdigit()] if traces.is_dir() else []
        top = max([int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0]), *used])
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'runs'")
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('runs', ?)", (top,))

    def _check_readable(self) -> str:
        """Read-only open: the schema version must be known; returns the columns to select."""
        with self._read() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise SchemaVersionError(self._newer_schema_message(row[0]))
            present = {r[1] for r in conn.execute("PRAGMA table_info(runs)").fetchall()}
        writer = ", ".join(c if c in present else f"NULL AS {c}" for c in _WRITER_COLUMNS)
        return f"{_COLUMNS}, {writer}"

    def _mark_interrupted(self) -> None:
        """Persist ``interrupted`` for runs whose writer has provably stopped (see the module docstring)."""
        with self._read() as conn:
            running = conn.execute(
                f"SELECT id, {', '.join(_WRITER_COLUMNS)} FROM runs WHERE status = 'running'"
            ).fetchall()
        gone = [r[0] for r in running if writer_gone(*r[1:])]
        if gone:
            with self._write() as conn:
                conn.executemany(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ? AND status = 'running'",
                    [(i,) for i in gone],
                )

    @property
    def schema_version(self) -> int:
        with self._read() as conn:
            return int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    # -- runs ------------------------------------------------------------------------------------

    def begin_run(
        self,
        *,
        cell_source: str,
        options: Mapping[str, Any],
        name: str | None = None,
        cell_key: str | None = None,
        notebook: str | None = None,
        mode: str,
        chip: str,
        backend: str,
        ranks: int = 1,
    ) -> int:
        """Record a new run with status ``running``; returns its id. Links it to the cell's previous run."""
        if cell_key is None:
            cell_key = make_cell_key(notebook, cell_source=cell_source)
        options_json = json.dumps(dict(options), sort_keys=True, default=str)
        with self._write() as conn:
            prev = conn.execute(
                "SELECT MAX(id) FROM runs WHERE cell_key = ?", (cell_key,)
            ).fetchone()[0]
            cur = conn.execute(
                "INSERT INTO runs (name, cell_key, cell_source, notebook, options, mode, chip, backend, "
                "status, started_at, trace_dir, ranks, parent_run, writer_pid, writer_start, writer_host, "
                "writer_boot) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, '', ?, ?, ?, ?, ?, ?)",
                (name, cell_key, cell_source, notebook, options_json, mode, chip, backend, time.time(),
                 int(ranks), prev, *writer_identity()),
            )
            run_id = int(cur.lastrowid)
            conn.execute(
                "UPDATE runs SET trace_dir = ? WHERE id = ?", (f"{TRACES_DIRNAME}/{run_id}", run_id)
            )
        return run_id

    def finish_run(
        self,
        run_id: int,
        *,
        status: str,
        summary: Mapping[str, Any] | None,
        step_time_ns: int | None = None,
        mfu: float | None = None,
        wall_s: float | None = None,
    ) -> None:
        """Close a run: final status (ok|error|interrupted), summary JSON and headline numbers."""
        if status not in _FINAL_STATUSES:
            raise ValueError(f"status must be one of {sorted(_FINAL_STATUSES)}, got {status!r}")
        summary_json = None if summary is None else json.dumps(dict(summary), default=str)
        ended = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT started_at FROM runs WHERE id = ?", (int(run_id),)).fetchone()
            if row is None:
                raise RunNotFound(self._not_found_message(conn, run_id))
            if wall_s is None:
                wall_s = max(0.0, ended - float(row[0]))
            conn.execute(
                "UPDATE runs SET status = ?, summary = ?, step_time_ns = ?, mfu = ?, wall_s = ?, "
                "ended_at = ? WHERE id = ?",
                (status, summary_json, None if step_time_ns is None else int(step_time_ns),
                 None if mfu is None else float(mfu), float(wall_s), ended, int(run_id)),
            )

    def get_run(self, run_id_or_name: int | str) -> RunRecord:
        """A run by id (int, or a string of digits) or by name (the most recent run with that name)."""
        with self._read() as conn:
            row = None
            key = run_id_or_name
            if isinstance(key, bool):
                raise TypeError("run id must be an int or a name")
            if isinstance(key, int) or (isinstance(key, str) and key.isdigit() and key.isascii()):
                row = conn.execute(f"SELECT {self._columns} FROM runs WHERE id = ?", (int(key),)).fetchone()
            if row is None and isinstance(key, str):
                row = conn.execute(
                    f"SELECT {self._columns} FROM runs WHERE name = ? ORDER BY id DESC LIMIT 1", (key,)
                ).fetchone()
            if row is None:
                raise RunNotFound(self._not_found_message(conn, key))
            return self._record(row)

    def list_runs(self, notebook: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Runs, most recent first; only those of `notebook` when given."""
        sql = f"SELECT {self._columns} FROM runs"
        params: list[Any] = []
        if notebook is not None:
            sql += " WHERE notebook = ?"
            params.append(notebook)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, int(limit)))
        with self._read() as conn:
            return [self._record(r) for r in conn.execute(sql, params).fetchall()]

    def previous_run(self, run_id: int) -> RunRecord | None:
        """The latest earlier run of the same cell (same `cell_key`), or None."""
        run = self.get_run(int(run_id))
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {self._columns} FROM runs WHERE cell_key = ? AND id < ? ORDER BY id DESC LIMIT 1",
                (run.cell_key, run.id),
            ).fetchone()
        return None if row is None else self._record(row)

    def delete_run(self, run_id: int) -> None:
        """Remove a run and its trace files. Runs that pointed to it as parent now point to its parent."""
        with self._write() as conn:
            row = conn.execute("SELECT parent_run FROM runs WHERE id = ?", (int(run_id),)).fetchone()
            if row is None:
                raise RunNotFound(self._not_found_message(conn, run_id))
            conn.execute("UPDATE runs SET parent_run = ? WHERE parent_run = ?", (row[0], int(run_id)))
            conn.execute("DELETE FROM runs WHERE id = ?", (int(run_id),))
        shutil.rmtree(self._trace_dir(int(run_id)), ignore_errors=True)

    # -- trace tables ----------------------------------------------------------------------------

    def save_table(
        self, run_id: int, name: str, table: "pyarrow.Table | pandas.DataFrame"
    ) -> Path:
        """Write a trace table as ``traces/<run_id>/<name>.parquet`` atomically; returns its path."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        _validate_table_name(name)
        self._require_run(run_id)
        if not isinstance(table, pa.Table):
            table = pa.Table.from_pandas(table, preserve_index=False)
        directory = self._trace_dir(int(run_id))
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"{name}.parquet"
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".parquet.tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                pq.write_table(table, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp_name, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(directory)
        return final

    def load_table(self, run_id: int, name: str) -> "pyarrow.Table":
        """Read a trace table written by `save_table`."""
        import pyarrow.parquet as pq

        _validate_table_name(name)
        self._require_run(run_id)
        path = self._trace_dir(int(run_id)) / f"{name}.parquet"
        if not path.is_file():
            raise TableNotFound(
                f"run {run_id} has no table {name!r}; tables: {', '.join(self.list_tables(run_id)) or '(none)'}"
            )
        return pq.read_table(path)

    def list_tables(self, run_id: int) -> list[str]:
        """Names of the run's trace tables (temporary files of unfinished writes excluded)."""
        directory = self._trace_dir(int(run_id))
        if not directory.is_dir():
            return []
        return sorted(p.stem for p in directory.glob("*.parquet") if not p.name.startswith("."))

    def table_path(self, run_id: int, name: str) -> Path:
        """Where `save_table` puts (or put) that table."""
        return self._trace_dir(int(run_id)) / f"{_validate_table_name(name)}.parquet"

    # -- helpers ---------------------------------------------------------------------------------

    def _trace_dir(self, run_id: int) -> Path:
        return self.root / TRACES_DIRNAME / str(int(run_id))

    def _require_run(self, run_id: int) -> None:
        with self._read() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (int(run_id),)).fetchone() is None:
                raise RunNotFound(self._not_found_message(conn, run_id))

    def _not_found_message(self, conn: sqlite3.Connection, key: object) -> str:
        recent = conn.execute(
            "SELECT id, name FROM runs ORDER BY id DESC LIMIT ?", (_RECENT_IN_ERRORS,)
        ).fetchall()
        if not recent:
            return f"run {key!r} not found: the store at {self.root} has no runs yet"
        listed = ", ".join(f"{i} ({n})" if n else str(i) for i, n in recent)
        return f"run {key!r} not found in {self.root}; recent runs: {listed}"

    def _record(self, row: tuple[Any, ...]) -> RunRecord:
        (id_, name, cell_key, cell_source, notebook, options, mode, chip, backend, status, started_at,
         ended_at, wall_s, step_time_ns, mfu, summary, trace_dir, ranks, parent_run, *writer) = row
        if status == "running" and writer_gone(*writer):
            status = "interrupted"  # what a writable open would store; read-only opens only report it
        return RunRecord(
            id=int(id_),
            name=name,
            cell_key=cell_key,
            cell_source=cell_source,
            notebook=notebook,
            options=json.loads(options) if options else {},
            mode=mode,
            chip=chip,
            backend=backend,
            status=status,
            started_at=float(started_at),
            ended_at=None if ended_at is None else float(ended_at),
            wall_s=None if wall_s is None else float(wall_s),
            step_time_ns=None if step_time_ns is None else int(step_time_ns),
            mfu=None if mfu is None else float(mfu),
            summary=None if summary is None else json.loads(summary),
            trace_dir=self.root / (trace_dir or f"{TRACES_DIRNAME}/{int(id_)}"),
            ranks=int(ranks),
            parent_run=None if parent_run is None else int(parent_run),
        )
