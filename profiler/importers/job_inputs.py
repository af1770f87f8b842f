"""A job's per-rank inputs: a directory, a glob or a list of paths → one `RankInput` per rank, each with the
rank its *name* says (file name, else folder) and the reader that takes it.

What counts as one rank's input (the forms the studio reads):

- a kineto / torch.profiler Chrome trace, or our own Chrome export: `*.json`, `*.json.gz`;
- our Parquet trace directory (a folder with `meta.json`);
- a Neuron Explorer output folder (Parquet tables or the JSON the Neuron tools write, possibly a few levels
  down: `neuron_profile.read.find_profile_dir`);
- a studio run directory from a store (`<store>/traces/<run id>/` holding `ops_r<k>.parquet`, ...): one input
  per stored rank.

The rank a trace names inside (kineto's `distributedInfo`) is only known once the trace is read, so it is
decided in the reduce (`analysis.ranks.resolve_ranks`): distributedInfo first, then the file name
(`rank-3`, `rank_3`, `rank3`, `_r3`), then the folder (the same, or a folder named by digits only), else the
input's position. Every rank carries which of these it came from.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["RankInput", "job_inputs", "is_job_target", "rank_from_name", "TRACE_SUFFIXES", "KINDS"]

TRACE_SUFFIXES = (".json", ".json.gz")
#: Reader per kind: "chrome" (read_trace on a file), "studio" (read_trace on our Parquet directory),
#: "neuron-explorer" (load_neuron_profile), "store-rank" (one rank's tables of a store run directory).
KINDS = ("chrome", "studio", "neuron-explorer", "store-rank")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])(?:rank|r)[-_]?(\d{1,6})(?=[^0-9]|$)", re.IGNORECASE)
_STORE_RANK = re.compile(r"ops_r(\d{1,6})\.parquet")
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class RankInput:
    """One rank's trace: where it is, how to read it, and the rank its name says (None: it says none)."""

    path: str
    kind: str
    position: int                 # its place in the job's input order (sorted paths)
    name_rank: int | None = None  # from the file or folder name
    name_source: str | None = None  # "file name" | "folder"
    store_rank: int | None = None   # kind "store-rank": the rank suffix of its tables

    @property
    def label(self) -> str:
        p = Path(self.path)
        return f"{p.name} (rank {self.store_rank})" if self.kind == "store-rank" else p.name


def rank_from_name(name: str) -> int | None:
    """The rank a file or folder name states (`trace_rank-3.json` → 3, `r12` → 12), None if it states none
    or more than one different rank."""
    found = {int(m.group(1)) for m in _RANK_IN_NAME.finditer(name)}
    return found.pop() if len(found) == 1 else None


def _is_trace_file(p: Path) -> bool:
    return p.is_file() and p.name.lower().endswith(TRACE_SUFFIXES)


def _explorer_dir(p: Path) -> bool:
    from neuron_studio.profiler.neuron_profile.read import find_profile_dir

    try:
        find_profile_dir(p)
    except TraceFormatError:
        return False
    return True


def _store_ranks(p: Path) -> list[int]:
    return sorted(int(m.group(1)) for f in p.glob("ops_r*.parquet") if (m := _STORE_RANK.fullmatch(f.name)))


def is_job_target(path: str | os.PathLike) -> bool:
    """Whether `path` names several ranks (a glob, a store run directory with per-rank tables, or a directory
    of per-rank traces) rather than one trace."""
    s = str(path)
    if _GLOB_CHARS & set(s) and not Path(s).exists():
        return True
    p = Path(s)
    if not p.is_dir() or (p / "meta.json").is_file():
        return False
    if _store_ranks(p):
        return True
    return any(_is_trace_file(c) or (c / "meta.json").is_file() or (c.is_dir() and _explorer_dir(c))
               for c in p.iterdir()) and not _explorer_dir_itself(p)


def _explorer_dir_itself(p: Path) -> bool:
    from neuron_studio.profiler.neuron_profile.parquet import has_tables
    from neuron_studio.profiler.neuron_profile.read import json_files_in

    try:
        return has_tables(p) or any(json_files_in(p))
    except TraceFormatError:   # several device profiles in one folder: not one rank's folder either
        return False


def _classify(p: Path) -> tuple[str, Path, Path | None] | None:
    """(kind, path to read, the per-rank folder it is) of one candidate; None when it is no trace the studio
    reads."""
    if _is_trace_file(p):
        return "chrome", p, None
    if not p.is_dir():
        return None
    if (p / "meta.json").is_file():
        return "studio", p, p
    if _explorer_dir(p):
        return "neuron-explorer", p, p
    files = [c for c in p.iterdir() if _is_trace_file(c)]
    if len(files) == 1:              # a per-rank folder holding one Chrome trace
        return "chrome", files[0], p
    return None


def _natural(p: Path) -> list[Any]:
    """Sort key: digit runs as numbers (`rank-2` before `rank-10`)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def _expand(target: str | os.PathLike) -> tuple[list[Path], list[str]]:
    """Candidate paths of one target and what was skipped (names, with why)."""
    s = str(target)
    if _GLOB_CHARS & set(s) and not Path(s).exists():
        return sorted((Path(m) for m in glob.glob(s)), key=_natural), []
    p = Path(s)
    if not p.exists():
        raise TraceFormatError(f"{s}: no such file or directory")
    if p.is_dir() and not (p / "meta.json").is_file() and not _store_ranks(p) and not _explorer_dir_itself(p):
        kids = sorted(p.iterdir(), key=_natural)
        keep = [c for c in kids if _classify(c) is not None]
        skipped = [c.name for c in kids if c not in keep and not c.name.startswith(".")]
        return keep, skipped
    return [p], []


def job_inputs(targets: str | os.PathLike | Sequence[str | os.PathLike], *,
               skipped: list[str] | None = None) -> list[RankInput]:
    """One `RankInput` per rank of the job the targets name (a directory, a glob, a store run directory, or
    files/folders one per rank), in path order. `skipped`, when given, receives the directory entries that are
    no trace the studio reads. Raises TraceFormatError when nothing readable is found."""
    if isinstance(targets, (str, os.PathLike)):
        targets = [targets]
    out: list[RankInput] = []
    skipped = [] if skipped is None else skipped
    for target in targets:
        paths, skip = _expand(target)
        skipped.extend(skip)
        for p in paths:
            ranks = _store_ranks(p) if p.is_dir() and not (p / "meta.json").is_file() else []
            if ranks:
                out.extend(RankInput(str(p), "store-rank", len(out) + i, r, "file name", r)
                           for i, r in enumerate(ranks))
                continue
            kind_path = _classify(p)
            if kind_path is None:
                raise TraceFormatError(f"{p}: not a trace the studio reads (expected {', '.join(TRACE_SUFFIXES)} "
                                       "Chrome traces, a studio trace directory with meta.json, or a Neuron "
                                       "Explorer output folder)")
            kind, path, folder = kind_path
            r, src = rank_from_name(path.name if path.is_file() else ""), "file name"
            if r is None and folder is not None:
                r, src = _folder_rank(folder), "folder"
            out.append(RankInput(str(path), kind, len(out), r, src if r is not None else None))
    if not out:
        where = ", ".join(str(t) for t in targets)
        raise TraceFormatError(f"{where}: no per-rank traces found (expected {', '.join(TRACE_SUFFIXES)} files, "
                               "studio trace directories or Neuron Explorer output folders)"
                               + (f"; skipped: {', '.join(skipped[:10])}" if skipped else ""))
    return out


def _folder_rank(folder: Path) -> int | None:
    """The rank a per-rank folder's name states: `rank_3/`, `r3/`, or a folder named `3/`."""
    name = folder.name
    if name.isdigit() and len(name) <= 6:
        return int(name)
    return rank_from_name(name)
