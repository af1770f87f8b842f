"""Neuron Explorer output -> the studio's `Trace` and a measured `Profile`, so every panel works on hardware data.

One module per input format (`parquet`, `profiler_json`, `system_profile`; `read` picks one), all producing
`ExplorerTables` (`tables`); `op_rows` and `nki_kernels` turn those rows into ops; `mapping` maps them onto
the studio's `Trace` and a `MeasuredRun` (`measured_run`); `measured_profile` builds the `Profile`.

Accepted inputs (`load_neuron_profile(path)`):

- **Parquet** (`neuron-explorer view -d DIR --output-format parquet`): a directory with one file per table,
  named after the table: `<Table>.parquet`, or split as `<Table>_<n>.parquet` (read together in `n` order).
  Names match case-insensitively and ignoring `_`/`-` (`FrameworkNode.parquet`, `framework_node.parquet`).
  If `path` holds no `Summary*.parquet` itself, the newest sub-directory (up to 3 levels, e.g.
  `<data-path>/profiles/global/<name>@latest/`) that does is used.
  Required: `Summary`, plus `Instruction` or `FrameworkNode` (the op rows). Optional: `Metadata`,
  `FrameworkInstruction` (names for `Instruction.raw_framework_id`), `ActiveTime` (utilization timeline),
  `KernelInstructions` + `KernelStackFrames` (NKI file/line and function), `ExecutionInfo` (launch count).
  Unknown tables are not read; unknown columns are ignored; missing optional columns take neutral values.
- **Legacy JSON**: `system_profile.json` (`Neuron_Runtime_API_Event` / `Framework_Event` records) and the
  old `neuron-profile` JSON (`"summary"` and `"instruction"` lists). Both are mapped onto the same tables.

Units follow the schema reference (profile schema 7.4 / 12.0): timestamps and `duration_ns` in ns; Summary
times in **seconds**; `*_percent` in percent (0-100); clocks in GHz; bandwidths in bytes/s; HBM bandwidth
per HBM stack (Explorer's MBU denominator).

Op rows: with `Instruction`, instructions are grouped per framework op (`raw_framework_id`, named from
`FrameworkInstruction.framework_name`) or else per `hlo_name`; an op's device time is the union of its
instruction intervals (exact active time), its engine the one with the most instruction time, its start the
first instruction's start and its end `start + active time` (the last instruction's end is kept as
`span_end_ns`). Without `Instruction`, the leaves of `FrameworkNode` are the ops: device time = union of
`time_intervals`, engine = the engine with the widest `total_time_<engine>` span (`[min_ts, max_ts]`; a plain
number is read as a duration in ns). The Sync engine (SP, which drives DMA queues and semaphores) is shown
in the studio's `dma` engine column; Summary's `dma_active_time_percent` is the `dma` utilization.
"""
from __future__ import annotations

from neuron_studio.profiler.neuron_profile.mapping import FALLBACK_REASON, measured_run, trace_from_tables
from neuron_studio.profiler.neuron_profile.measured_profile import (
    MeasuredProfile, load_neuron_profile, profile_from_saved,
)
from neuron_studio.profiler.neuron_profile.measured_run import MeasuredGroups, MeasuredRun
from neuron_studio.profiler.neuron_profile.read import find_profile_dir, read_legacy_json, read_tables
from neuron_studio.profiler.neuron_profile.tables import OP_TABLES, OPTIONAL_TABLES, REQUIRED_TABLES, ExplorerTables
from neuron_studio.profiler.neuron_profile.values import ENGINE_NOTE, chip_from_instance_type

__all__ = [
    "ExplorerTables", "MeasuredRun", "MeasuredGroups", "MeasuredProfile", "read_tables", "read_legacy_json",
    "find_profile_dir", "load_neuron_profile", "measured_run", "trace_from_tables", "profile_from_saved",
    "chip_from_instance_type", "REQUIRED_TABLES", "OP_TABLES", "OPTIONAL_TABLES", "FALLBACK_REASON", "ENGINE_NOTE",
]
