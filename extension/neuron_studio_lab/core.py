"""What the server routes do, without tornado: resolve paths safely, read the run store, bin timelines.

Every function takes plain values and returns JSON-ready data or raises one of the typed errors below;
`routes.py` maps those to HTTP statuses in one place.

The run store is `neuron_studio.store`. It is loaded from its file without executing `neuron_studio`'s
package `__init__` (which registers the `neuron` torch device and so imports torch): the Jupyter server
only reads SQLite and Parquet and should not pay for, or depend on, torch.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

import numpy as np

from .run_cache import PreparedOps, RunOpsCache, prepare_ops

__all__ = [
    "ApiError",
    "BadRequest",
    "Forbidden",
    "NotFound",
    "TooLarge",
    "UnsupportedFile",
    "DEFAULT_BINS",
    "MAX_BINS",
    "MAX_PAGE_SIZE",
    "RunOpsCache",
    "run_store_module",
    "studio_module",
    "kernels_dir",
    "resolve_inside",
    "store_for_notebook",
    "store_label",
    "shown_path",
    "list_runs",
    "get_run",
    "timeline",
    "kernel_source",
]

DEFAULT_BINS = 200
MAX_BINS = 5000
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 5000
DEVICE_OPS_TABLE = "device_ops"
STORE_DIRNAME = ".neuron_studio"
#: kernel-source serves source files only, and none bigger than this.
SOURCE_SUFFIXES = (".py", ".pyi")
MAX_SOURCE_BYTES = 1 << 20
DEVICE_OPS_COLUMNS = (
    "seq", "name", "core", "engine", "start_ns", "end_ns", "flops", "bytes_read", "bytes_written",
    "bound", "module", "source",
)


class ApiError(Exception):
    """An error with an HTTP status; the message is safe to show the user."""

    status = 500


class BadRequest(ApiError):
    status = 400


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class TooLarge(ApiError):
    status = 413


class UnsupportedFile(ApiError):
    status = 415


# -- locating neuron_studio pieces without importing the package ----------------------------------


def _find_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """Ask the import system's finders for a spec without importing any parent package."""
    if fullname in sys.modules and getattr(sys.modules[fullname], "__spec__", None) is not None:
        return sys.modules[fullname].__spec__
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, None)
        except Exception:  # noqa: BLE001 - a finder that cannot answer is skipped
            continue
        if spec is not None:
            return spec
    return None


def _package_dir(fullname: str) -> Path | None:
    spec = _find_spec(fullname)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _subpackage_dir(sub: str) -> Path | None:
    """`neuron_studio.<sub>`'s directory: an editable install may map it anywhere; a wheel nests it."""
    found = _package_dir(f"neuron_studio.{sub}")
    if found is None:
        pkg = _package_dir("neuron_studio")
        found = None if pkg is None else pkg / sub
    return found


# Modules the server may load from their files: they import nothing from neuron_studio (so not torch)
# except the torch-free modules of _TORCH_FREE_IMPORTS.
_TORCH_FREE_MODULES = {
    "neuron_studio.store": (None, "store.py"),
    "neuron_studio.run_writer": (None, "run_writer.py"),
    "neuron_studio.profiler.vocabulary": ("profiler", "vocabulary.py"),
    "neuron_studio.profiler.analysis.binning": ("profiler", "analysis/binning.py"),
    "neuron_studio.profiler.analysis.trace_lod": ("profiler", "analysis/trace_lod.py"),
    "neuron_studio.profiler.kineto": ("profiler", "kineto.py"),
}


@lru_cache(maxsize=None)
def studio_module(name: str) -> ModuleType:
    """One of neuron_studio's torch-free modules: the imported module when present, else loaded from its file.

    The studio's single definitions (the run store, engine names, timeline binning) are shared this way
    instead of being copied into the extension.
    """
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    sub, rel = _TORCH_FREE_MODULES[name]
    base = _package_dir("neuron_studio") if sub is None else _subpackage_dir(sub)
    if base is None or not (base / rel).is_file():
        raise ApiError(f"{name} is not installed in the Jupyter server's environment (install neuron_studio)")
    spec = importlib.util.spec_from_file_location(f"neuron_studio_lab._{name.rpartition('.')[2]}", base / rel)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses need the module registered while it executes
    deps = {dep: studio_module(dep) for dep in _TORCH_FREE_IMPORTS.get(name, ())}
    if deps:
        mod.__dict__["__builtins__"] = _builtins_importing(deps)
    spec.loader.exec_module(mod)
    return mod


# The studio modules a torch-free module imports by their package name (`from neuron_studio.run_writer
# import ...` in store.py): importing them so would run neuron_studio/__init__.py, which imports torch (about
# 7 s and hundreds of MB in the Jupyter server, on the panel's first request). They are given the copies
# loaded from their files instead.
_TORCH_FREE_IMPORTS = {"neuron_studio.store": ("neuron_studio.run_writer",)}


def _builtins_importing(modules: dict[str, ModuleType]) -> dict[str, Any]:
    """Builtins whose `__import__` answers the names in `modules` with those modules, any other normally."""
    import builtins

    real_import = builtins.__import__

    def studio_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name in modules:
            if not fromlist:
                raise ImportError(f"{name} is loaded from its file here; import names from it (from {name} import ...)")
            return modules[name]
        return real_import(name, globals, locals, fromlist, level)

    return {**builtins.__dict__, "__import__": studio_import}


def run_store_module() -> ModuleType:
    """`neuron_studio.store`: the imported module when present, else loaded from its file."""
    return studio_module("neuron_studio.store")


def kernels_dir() -> Path | None:
    """The installed `neuron_studio.kernels` package directory (resolved), or None.

    `NEURON_STUDIO_KERNELS_DIR` overrides (tests, unusual installs).
    """
    env = os.environ.get("NEURON_STUDIO_KERNELS_DIR")
    if env:
        return Path(env).resolve()
    found = _subpackage_dir("kernels")
    return found.resolve() if found is not None and found.is_dir() else None


# -- paths ------------------------------------------------------------------------------------------


def _real_root(root_dir: str | os.PathLike[str]) -> Path:
    return Path(os.path.expanduser(os.fspath(root_dir))).resolve()


def resolve_inside(root_dir: str | os.PathLike[str], rel_path: str) -> Path:
    """`rel_path` (relative to the server root, '/'-separated) resolved; Forbidden when it escapes."""
    if not isinstance(rel_path, str) or "\x00" in rel_path:
        raise BadRequest("invalid path")
    root = _real_root(root_dir)
    candidate = Path(rel_path.lstrip("/"))
    if candidate.is_absolute() or candidate.drive:
        raise Forbidden("absolute paths are not allowed")
    resolved = (root / candidate).resolve()
    if not resolved.is_relative_to(root):
        raise Forbidden("path is outside the server root")
    return resolved


def store_for_notebook(root_dir: str | os.PathLike[str], notebook_path: str) -> Any | None:
    """The run store the notebook's kernel writes to, opened read-only, or None if there is none yet.

    Located by the studio's own rule (`neuron_studio.store.resolve_store_root`: ``$NEURON_STUDIO_STORE``
    as the server's environment sets it, else ``<notebook dir>/.neuron_studio``). Reading never creates
    a store, takes no lock and never waits for a kernel that is writing one.
    """
    if not notebook_path:
        raise BadRequest("missing 'path' (the notebook path relative to the server root)")
    notebook = resolve_inside(root_dir, notebook_path)
    directory = notebook if notebook.is_dir() else notebook.parent
    store_mod = run_store_module()
    store_dir = store_mod.resolve_store_root(directory)
    if not (store_dir / store_mod.DB_FILENAME).is_file():
        return None
    try:
        return store_mod.RunStore(store_dir, read_only=True)
    except store_mod.SchemaVersionError as exc:
        raise ApiError(str(exc)) from exc


# -- runs -------------------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """JSON-safe copy: NaN/inf floats become None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _run_row(record: Any, root_dir: str | os.PathLike[str], *, with_summary: bool) -> dict[str, Any]:
    row = record.to_dict()
    row.pop("trace_dir", None)  # absolute server paths stay on the server
    if not with_summary:
        row.pop("summary", None)
    return _finite(_imported_paths_shown(row, root_dir))


def shown_path(root_dir: str | os.PathLike[str], path: str) -> str:
    """A server path as the browser may see it: relative to the server root ('/'-separated), or, outside the
    root, its file name (server paths stay on the server). A relative path is kept as given."""
    p = Path(path)
    if not p.is_absolute():
        return path
    root = _real_root(root_dir)
    for candidate in (Path(os.path.normpath(p)), p.resolve()):
        if candidate.is_relative_to(root):
            return candidate.relative_to(root).as_posix() or "."
    return p.name or path


def _imported_paths_shown(row: dict[str, Any], root_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """An imported run names its traces by the absolute paths it read (its `cell_source`, `options.imported`, a
    job's `ranks_analysis.inputs`, a Neuron profile's `measured_from` and notes): each of those paths, wherever the
    row holds it, as `shown_path` says it. Other runs are returned as they are."""
    if row.get("backend") != "imported":
        return row
    options = row.get("options") if isinstance(row.get("options"), dict) else {}
    read = [line.strip() for line in str(row.get("cell_source") or "").splitlines()]
    read += [str(p) for p in options.get("imported") or () if isinstance(p, (str, os.PathLike))]
    shown = {p.rstrip("/"): shown_path(root_dir, p) for p in read if os.path.isabs(p) and p.rstrip("/")}
    if not shown:
        return row
    # longest first (a trace inside an imported folder is said as itself); a whole path only, never a prefix of a
    # longer name ("job-1" inside "job-10")
    found = re.compile("(?:" + "|".join(map(re.escape, sorted(shown, key=len, reverse=True))) + r")(?![^\s/:;,'\")\]])")

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            return found.sub(lambda m: shown[m.group(0)], value)
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(row)


def list_runs(root_dir: str | os.PathLike[str], notebook_path: str, *, limit: int | None = None) -> dict[str, Any]:
    store = store_for_notebook(root_dir, notebook_path)
    if store is None:
        return {"runs": [], "store": None}
    runs = [_run_row(r, root_dir, with_summary=False) for r in store.list_runs(limit=limit)]
    return {"runs": runs, "store": store_label(root_dir, store.root)}


def store_label(root_dir: str | os.PathLike[str], store_root: str | os.PathLike[str]) -> str:
    """A store as the browser may see it: its path under the server root, or, outside it (NEURON_STUDIO_STORE),
    the variable's name (server paths stay on the server)."""
    root = _real_root(root_dir)
    where = Path(store_root).resolve()
    return where.relative_to(root).as_posix() if where.is_relative_to(root) else "$NEURON_STUDIO_STORE"


def _get_record(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int) -> tuple[Any, Any]:
    store = store_for_notebook(root_dir, notebook_path)
    if store is None:
        raise NotFound(f"no Neuron Studio runs next to {notebook_path!r}")
    store_mod = run_store_module()
    try:
        return store, store.get_run(int(run_id))
    except store_mod.RunNotFound as exc:
        raise NotFound(str(exc)) from exc


def get_run(root_dir: str | os.PathLike[str], notebook_path: str, run_id: int) -> dict[str, Any]:
    store, record = _get_record(root_dir, notebook_path, run_id)
    previous = store.previous_run(record.id)
    return {
        "run": _run_row(record, root_dir, with_summary=True),
        "tables": store.list_tables(record.id),
        "previous_run": None if previous is None else previous.id,
    }


# -- timeline ---------------------------------------------------------------------------------------


def _prepared_ops(store: Any, record: Any, cache: RunOpsCache | None) -> PreparedOps:
    """The run's device ops table, prepared for timeline queries (from `cache` when it is current)."""
    import pyarrow.parquet as pq

    path = store.table_path(record.id, DEVICE_OPS_TABLE)
    if not path.is_file():
        tables = ", ".join(store.list_tables(record.id)) or "(none)"
        raise NotFound(f"run {record.id} has no table {DEVICE_OPS_TABLE!r}; tables: {tables}")
    sorted_intervals = studio_module("neuron_studio.profiler.analysis.binning").SortedIntervals

    def load() -> PreparedOps:
        names = set(pq.read_schema(path).names)
        missing = [c for c in ("engine", "start_ns", "end_ns", "core") if c not in names]
        if missing:
            raise ApiError(f"run {record.id}'s {DEVICE_OPS_TABLE} table lacks columns: {', '.join(missing)}")
        table = pq.read_table(path, columns=[c for c in DEVICE_OPS_COLUMNS if c in names])
        return prepare_ops(table, sorted_intervals)

    try:
        return load() if cache is None else cache.get(path, load)
    except FileNotFoundError:  # deleted between the check and the read
        raise NotFound(f"run {record.id} has no table {DEVICE_OPS_TABLE!r}") from None


def timeline(
    root_dir: str | os.PathLike[str],
    notebook_path: str,
    run_id: int,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    bins: int = DEFAULT_BINS,
    page: int | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    cache: RunOpsCache | None = None,
) -> dict[str, Any]:
    """Per-engine utilization in `bins` equal bins over [start_ns, end_ns) and, when `page` is given,
    one page of the ops overlapping that window ordered by start time.

    Utilization of an engine in a bin = busy time of that engine summed over cores / (bin width × cores).
    With a `cache`, the run's table is read and sorted once; each zoom then costs O(bins log n + page).
    """
    if not 1 <= bins <= MAX_BINS:
        raise BadRequest(f"bins must be between 1 and {MAX_BINS}")
    if page is not None and page < 0:
        raise BadRequest("page must be >= 0")
    if page_size < 1:
        raise BadRequest("page_size must be >= 1")
    page_size = min(page_size, MAX_PAGE_SIZE)
    store, record = _get_record(root_dir, notebook_path, run_id)
    ops = _prepared_ops(store, record, cache)
    starts, ends = ops.starts, ops.ends

    lo = ops.first_start if start_ns is None else int(start_ns)
    hi = ops.last_end if end_ns is None else int(end_ns)
    if hi < lo:
        raise BadRequest("end_ns must be >= start_ns")
    span = max(hi - lo, 1)
    edges = np.linspace(0.0, float(span), bins + 1)  # offsets from lo; exact integer origin
    bin_ns = span / bins

    # engines in display order; ops on other engines are reported under their own name, except the ops that
    # occupy no engine (views, metadata: zero-length, NO_ENGINE) which are no track
    vocabulary = studio_module("neuron_studio.profiler.vocabulary")
    device_engines = vocabulary.DEVICE_ENGINES
    present = [e for e in ops.engines if e not in device_engines and e != vocabulary.NO_ENGINE]
    util: dict[str, list[float]] = {}
    for engine in (*device_engines, *sorted(present)):
        intervals = ops.engines.get(engine)
        if intervals is None:
            util[engine] = [0.0] * bins
            continue
        busy = intervals.coverage(lo, edges)
        util[engine] = np.clip(busy / (bin_ns * ops.n_cores), 0.0, 1.0).round(6).tolist()

    out: dict[str, Any] = {
        "run_id": record.id,
        "start_ns": lo,
        "end_ns": hi,
        "bins": bins,
        "bin_ns": bin_ns,
        "cores": ops.n_cores,
        "engines": util,
        "total_ops": ops.num_rows,
    }
    if page is not None:
        # ops overlapping [lo, hi]: start <= hi and end >= lo; in start order the candidates are one slice
        first = int(np.searchsorted(starts, lo - ops.max_duration, side="left"))
        last = int(np.searchsorted(starts, hi, side="right"))
        window = first + np.flatnonzero(ends[first:last] >= lo)
        chosen = ops.order[window[page * page_size:(page + 1) * page_size]]
        rows = ops.table.take(chosen).to_pylist() if chosen.size else []
        out["ops"] = {
            "page": page,
            "page_size": page_size,
            "total": int(window.size),
            "pages": int(math.ceil(window.size / page_size)),
            "rows": _finite(rows),
        }
    return out


# -- kernel sources ---------------------------------------------------------------------------------


def _allowed_roots(root_dir: str | os.PathLike[str]) -> Iterable[tuple[str, Path]]:
    yield "server_root", _real_root(root_dir)
    kd = kernels_dir()
    if kd is not None:
        yield "kernels", kd


def kernel_source(root_dir: str | os.PathLike[str], file: str, line: int | None) -> dict[str, Any]:
    """Validate a kernel file reference from a profile.

    Allowed: Python source files (`SOURCE_SUFFIXES`) up to `MAX_SOURCE_BYTES`, inside the server root
    tree or inside the installed `neuron_studio/kernels` package directory, after resolving symlinks. Returns the path relative to the server root (when it
    is inside it; the front end opens it in the editor) or, for kernels outside the root, the source text.
    """
    if not file or "\x00" in file:
        raise BadRequest("missing or invalid 'file'")
    if line is None:
        line = 1
    if line < 1:
        raise BadRequest("line must be >= 1")
    root = _real_root(root_dir)
    candidate = Path(os.path.expanduser(file)) if os.path.isabs(os.path.expanduser(file)) else root / file
    try:
        real = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        # do not reveal whether files outside the allowed trees exist
        if not any(candidate.resolve().is_relative_to(r) for _, r in _allowed_roots(root_dir)):
            raise Forbidden("file is outside the server root and the Neuron Studio kernels") from None
        raise NotFound("no such file") from None
    where = next((name for name, r in _allowed_roots(root_dir) if real.is_relative_to(r)), None)
    if where is None:
        raise Forbidden("file is outside the server root and the Neuron Studio kernels")
    if real.suffix.lower() not in SOURCE_SUFFIXES:
        raise UnsupportedFile(f"only Python source files ({', '.join(SOURCE_SUFFIXES)}) can be opened as kernels")
    if not real.is_file():
        raise NotFound("not a file")
    size = real.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise TooLarge(f"{real.name} is {size} bytes; kernel sources are served up to {MAX_SOURCE_BYTES} bytes")
    with real.open("r", encoding="utf-8", errors="replace") as fh:
        text = fh.read(MAX_SOURCE_BYTES + 1)
    if len(text) > MAX_SOURCE_BYTES:  # grew since the size check
        raise TooLarge(f"{real.name} is over {MAX_SOURCE_BYTES} bytes; kernel sources are served up to that size")
    n_lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    out: dict[str, Any] = {"line": min(line, max(n_lines, 1)), "lines": n_lines, "in_root": real.is_relative_to(root)}
    if out["in_root"]:
        out["path"] = real.relative_to(root).as_posix()
    else:
        out["path"] = None
        out["name"] = real.name
        out["source"] = text
    return out
