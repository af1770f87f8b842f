"""Work the server hands to the studio's own CLI in a child process: importing traces (a file, a folder of
per-rank traces or a glob) into the run store, and exporting a stored run for Perfetto.

Why a child process: both read whole traces with the studio's readers, which import torch and spawn the
per-rank map workers (`profiler.job_map`); the Jupyter server stays torch-free (see `core`) and its memory
does not grow with a job's size. One `neuron-studio` command at a time per server (`TaskRunner`), since
each one already sizes its worker pool to the machine.

Paths come from the browser, so they are checked here before any child starts: every target, glob match
and symlink under a target folder must resolve inside the server root (`core.resolve_inside`'s rule), and
the child is given the checked absolute paths, never the pattern. Like `core`, no tornado here: plain values
in, JSON-ready data or a typed `core.ApiError` out.
"""
from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import core

__all__ = ["ImportPlan", "TaskRunner", "plan_import", "import_traces", "perfetto_export", "GLOB_CHARS",
           "MAX_IMPORT_INPUTS", "MAX_WALK_ENTRIES", "PERFETTO_FILENAME"]

GLOB_CHARS = frozenset("*?[")
#: Glob matches one import takes at most (a job of more ranks: import its folder).
MAX_IMPORT_INPUTS = 4096
#: Entries a target folder is walked for at most when checking its symlinks stay inside the root.
MAX_WALK_ENTRIES = 200_000
#: The merged trace is kept next to the run's tables, re-made when the run's tables are newer.
PERFETTO_FILENAME = "perfetto-trace.json.gz"
_MAIN = "import sys; from neuron_studio.cli import main; sys.exit(main(sys.argv[1:]))"


@dataclass(frozen=True)
class ImportPlan:
    """What one import reads (checked absolute paths) and which store it writes."""

    targets: list[str]
    store_dir: Path
    label: str            # the target as the user gave it, for the run's name


def _is_glob(root: Path, target: str) -> bool:
    return bool(GLOB_CHARS & set(target)) and not (root / target).exists()


def _glob_anchor(target: str) -> str:
    """The leading '/'-separated parts of a pattern that hold no glob character ('' for the root)."""
    parts = []
    for part in target.split("/"):
        if GLOB_CHARS & set(part):
            break
        parts.append(part)
    return "/".join(parts)


def _natural(path: str) -> list[Any]:
    """Sort key: digit runs as numbers (`rank-2` before `rank-10`), as the studio orders a glob's ranks."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", Path(path).name)]


def _check_tree_inside(root: Path, top: Path) -> None:
    """Refuse a folder holding a symlink that leads outside the root (the child would read through it)."""
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in (*dirnames, *filenames):
            seen += 1
            if seen > MAX_WALK_ENTRIES:
                raise core.BadRequest(f"{top.relative_to(root).as_posix() or '.'} holds over {MAX_WALK_ENTRIES} "
                                      "entries: import the per-rank traces' own folder")
            p = Path(dirpath) / name
            if p.is_symlink() and not p.resolve().is_relative_to(root):
                raise core.Forbidden(f"{p.relative_to(root).as_posix()} links outside the server root")


def plan_import(root_dir: str | os.PathLike[str], notebook_path: str, target: str) -> ImportPlan:
    """Check an import's target (relative to the server root: a trace file, a folder of per-rank traces, or a
    glob) and find the store the panel of `notebook_path` reads (`core.store_for_notebook`'s rule)."""
    if not isinstance(target, str) or not target.strip() or "\x00" in target:
        raise core.BadRequest("missing 'target': a trace file, a folder of per-rank traces or a glob, relative "
                              "to the server root")
    target = target.strip()
    if not notebook_path:
        raise core.BadRequest("missing 'path' (the notebook whose store the run goes into)")
    root = core._real_root(root_dir)
    notebook = core.resolve_inside(root_dir, notebook_path)
    if _is_glob(root, target.lstrip("/")):
        pattern = target.lstrip("/")
        core.resolve_inside(root_dir, _glob_anchor(pattern))           # Forbidden when the fixed part escapes
        # matched under the root (its own name is no pattern), in the order `neuron-studio import` sorts a glob
        matches = sorted((str(root / m) for m in glob.glob(pattern, root_dir=root)), key=_natural)
        if not matches:
            raise core.NotFound(f"nothing matches {target!r} under the server root")
        if len(matches) > MAX_IMPORT_INPUTS:
            raise core.BadRequest(f"{target!r} matches {len(matches)} paths; at most {MAX_IMPORT_INPUTS} are "
                                  "imported at once (import the job's folder instead)")
        for m in matches:
            if not Path(m).resolve().is_relative_to(root):
                raise core.Forbidden(f"{Path(m).relative_to(root).as_posix()} leads outside the server root")
            if Path(m).is_dir():
                _check_tree_inside(root, Path(m))
        targets = matches                 # the checked paths, never the pattern again
    else:
        found = core.resolve_inside(root_dir, target)
        if not found.exists():
            raise core.NotFound(f"no such file or folder: {target}")
        if found.is_dir():
            _check_tree_inside(root, found)
        targets = [str(found)]
    store_mod = core.run_store_module()
    store_dir = store_mod.resolve_store_root(notebook if notebook.is_dir() else notebook.parent)
    label = target.rstrip("/").rsplit("/", 1)[-1] or target
    return ImportPlan(targets, Path(store_dir), label)


class TaskRunner:
    """Runs `neuron-studio` commands one at a time (each sizes its own worker pool to the machine)."""

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    async def run(self, args: Sequence[str], root_dir: str | os.PathLike[str]) -> str:
        """The command's stdout; its failure as the ApiError its exit status means, with its message (paths
        under the server root said relative to it: server paths stay on the server)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            try:
                return await _run_cli(args)
            except core.ApiError as exc:
                root = f"{core._real_root(root_dir)}{os.sep}"
                raise type(exc)(str(exc).replace(root, "")) from None


async def _run_cli(args: Sequence[str]) -> str:
    if core._find_spec("neuron_studio") is None:
        raise core.ApiError("neuron_studio is not installed in the Jupyter server's environment")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _MAIN, *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode == 0:
        return out.decode("utf-8", "replace")
    message = _cli_message(err.decode("utf-8", "replace"))
    if proc.returncode == 2:      # the CLI's user errors: bad trace, not one job, unreadable rank
        raise core.BadRequest(message)
    if proc.returncode == 1:      # no such run / nothing saved
        raise core.NotFound(message)
    raise core.ApiError(f"neuron-studio {args[0]} failed (exit status {proc.returncode}): {message}")


def _cli_message(stderr: str) -> str:
    """What the CLI said went wrong: its `neuron-studio: ...` line, else a traceback's last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln[len("neuron-studio: "):] for ln in lines if ln.startswith("neuron-studio: ")]
    return (said[-1] if said else lines[-1] if lines else "no message")[:2000]


async def import_traces(runner: TaskRunner, root_dir: str | os.PathLike[str], notebook_path: str, target: str,
                        name: str | None = None) -> dict[str, Any]:
    """Import `target` as one run (`neuron-studio import --json`) into the notebook's store."""
    plan = await asyncio.to_thread(plan_import, root_dir, notebook_path, target)
    args = ["import", "--json", "--store", str(plan.store_dir), f"--name={(name or '').strip() or plan.label}",
            "--", *plan.targets]
    out = await runner.run(args, root_dir)
    try:
        stored = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise core.ApiError(f"neuron-studio import answered no run: {out[-300:]!r}") from None
    return {"run_id": int(stored["run_id"]), "name": stored.get("name"), "ranks": int(stored.get("ranks") or 1),
            "store": core.store_label(root_dir, plan.store_dir)}


async def perfetto_export(runner: TaskRunner, root_dir: str | os.PathLike[str], notebook_path: str,
                          run_id: int) -> Path:
    """The run as one Chrome trace for Perfetto (`neuron-studio report RUN --perfetto`): a job's every rank on
    its aligned clock with collectives linked, else the run's trace. Made once per run and kept next to its
    tables until they change."""
    store, record = await asyncio.to_thread(core._get_record, root_dir, notebook_path, run_id)
    if "ops" not in store.list_tables(record.id):     # a job stores its first rank's as `ops` too
        raise core.NotFound(f"run {record.id} has no stored host trace (table 'ops') to export for Perfetto")
    tables = store.table_path(record.id, "ops").parent
    out = tables / PERFETTO_FILENAME
    newest = max(f.stat().st_mtime for f in tables.glob("*.parquet"))
    if out.is_file() and out.stat().st_mtime >= newest:
        return out
    with tempfile.TemporaryDirectory(prefix="neuron-studio-export-") as tmp:
        part = tables / f".{PERFETTO_FILENAME}.{os.getpid()}.tmp.json.gz"
        try:
            await runner.run(["report", str(record.id), "--store", str(store.root), "--perfetto", str(part),
                              "-o", str(Path(tmp) / "report.html")], root_dir)
            if not part.is_file():
                raise core.ApiError(f"neuron-studio report wrote no Perfetto trace for run {record.id}")
            os.replace(part, out)
        finally:
            part.unlink(missing_ok=True)
    return out
