"""The Neuron Explorer tables this package reads: their names, how file names match them, and the
`ExplorerTables` record every reader returns (Parquet or legacy JSON alike)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["ExplorerTables", "REQUIRED_TABLES", "OP_TABLES", "OPTIONAL_TABLES", "CANON", "norm_name", "require_tables"]

REQUIRED_TABLES = ("Summary",)
OP_TABLES = ("Instruction", "FrameworkNode")          # at least one
OPTIONAL_TABLES = ("Metadata", "FrameworkInstruction", "ActiveTime", "KernelInstructions", "KernelStackFrames",
                   "ExecutionInfo", "OpcodeSummary")
_KNOWN = REQUIRED_TABLES + OP_TABLES + OPTIONAL_TABLES


def norm_name(name: str) -> str:
    """Table names match case-insensitively and ignoring `_`/`-`."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


CANON = {norm_name(t): t for t in _KNOWN}


@dataclass
class ExplorerTables:
    """The tables of one Explorer profile, by canonical name (only the tables this module uses)."""

    directory: Path
    tables: dict[str, pd.DataFrame]
    source: str = "neuron-explorer-parquet"
    files: dict[str, list[str]] = field(default_factory=dict)
    host: pd.DataFrame | None = None     # legacy system-profile JSON: runtime/framework events

    def get(self, name: str) -> pd.DataFrame | None:
        df = self.tables.get(name)
        return df if df is not None and len(df.columns) else None

    def has(self, name: str) -> bool:
        return self.get(name) is not None


def require_tables(t: ExplorerTables) -> ExplorerTables:
    """`t` itself, once the required tables and at least one op table are known to be there."""
    for name in REQUIRED_TABLES:
        if name not in t.tables:
            raise TraceFormatError(
                f"Neuron Explorer table {name!r} is missing in {str(t.directory)!r} (expected {name}.parquet); "
                "re-run `neuron-explorer view -d <capture dir> --output-format parquet`")
    if not any(t.has(n) for n in OP_TABLES):
        raise TraceFormatError(
            f"Neuron Explorer tables 'Instruction' and 'FrameworkNode' are both missing in {str(t.directory)!r} "
            "(need one of Instruction.parquet, FrameworkNode.parquet for the per-op rows)")
    return t
