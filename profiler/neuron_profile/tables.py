"""The Neuron Explorer tables this package reads: their names, how file names match them, and the
`ExplorerTables` record every reader returns (Parquet or legacy JSON alike)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["ExplorerTables", "REQUIRED_TABLES", "OP_TABLES", "OPTIONAL_TABLES", "CANON", "norm_name", "require_tables",
           "PARQUET_SOURCE", "SUMMARY_ONLY_SOURCES", "SYSTEM_SOURCES"]

REQUIRED_TABLES = ("Summary",)
OP_TABLES = ("Instruction", "FrameworkNode")          # at least one
OPTIONAL_TABLES = ("Metadata", "FrameworkInstruction", "ActiveTime", "KernelInstructions", "KernelStackFrames",
                   "ExecutionInfo", "OpcodeSummary", "DmaActivity",       # DmaActivity: the JSON `dma` rows
                   # schema 7.4.0 tables that answer a studio question (device_records, executions)
                   "SystemProfileEvents", "SystemProfileHbmUsage", "CcOp", "Flow", "Warning", "Throttle",
                   "ThrottleSummary")
_KNOWN = REQUIRED_TABLES + OP_TABLES + OPTIONAL_TABLES


def norm_name(name: str) -> str:
    """Table names match case-insensitively and ignoring `_`/`-`."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


CANON = {norm_name(t): t for t in _KNOWN}


PARQUET_SOURCE = "neuron-explorer-parquet"
SUMMARY_ONLY_SOURCES = ("summary-json",)                          # no op rows in the format
SYSTEM_SOURCES = ("system-profile-json", "system-trace-json")      # no Summary in the format


@dataclass
class ExplorerTables:
    """The tables of one Neuron profile, by canonical name (only the tables this package uses), whatever the
    format they came from, plus what that format does and does not hold."""

    directory: Path
    tables: dict[str, pd.DataFrame]
    source: str = PARQUET_SOURCE
    files: dict[str, list[str]] = field(default_factory=dict)
    host: pd.DataFrame | None = None     # system profiles: runtime/framework events, ns from `origin_ns`
    labels: dict[str, str] = field(default_factory=dict)   # table -> how the file spells it ("summary", "metadata[0]")
    origin_ns: int | None = None         # system profiles: the epoch ns every timestamp is rebased on
    device_time_ns: int | None = None    # system profiles: union of the nc_exec_running windows (None: none)
    launches: int | None = None          # system profiles: number of nc_exec_running events
    not_captured: list[str] = field(default_factory=list)  # what this format does not hold
    notes: list[str] = field(default_factory=list)         # reader warnings shown with the profile

    def label(self, name: str) -> str:
        """How the file names table `name` (Parquet: the table name itself)."""
        return self.labels.get(name, name)

    def get(self, name: str) -> pd.DataFrame | None:
        df = self.tables.get(name)
        return df if df is not None and len(df.columns) else None

    def has(self, name: str) -> bool:
        return self.get(name) is not None


def require_tables(t: ExplorerTables) -> ExplorerTables:
    """`t` itself, once the required tables and at least one op table are known to be there (a summary-json has
    no op rows and a system profile no Summary by design: each says so in `not_captured`)."""
    for name in REQUIRED_TABLES:
        if name not in t.tables and t.source not in SYSTEM_SOURCES:
            raise TraceFormatError(
                f"Neuron Explorer table {name!r} is missing in {str(t.directory)!r} (expected {name}.parquet); "
                "re-run `neuron-explorer view -d <capture dir> --output-format parquet`")
    if not any(t.has(n) for n in OP_TABLES) and t.source not in SUMMARY_ONLY_SOURCES:
        raise TraceFormatError(
            f"Neuron Explorer tables 'Instruction' and 'FrameworkNode' are both missing in {str(t.directory)!r} "
            "(need one of Instruction.parquet, FrameworkNode.parquet for the per-op rows)")
    return t
