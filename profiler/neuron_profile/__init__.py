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
- **JSON** (the format is recognised by content; `read.json_files_in` names the files a directory may hold):
  neuron-profile JSON (`ntff.json`, `device_profile_model_<id>.json`: `"summary"` + `"instruction"`, 2.x with
  `subgroup`, `layer`, NKI/source locations, `active_time`, `dma`, `metadata`), summary-json (the Summary row
  alone), `system_profile.json` (`Neuron_Runtime_API_Event` / `Framework_Event`) and the system trace
  (`{"trace_event": [...]}`). All are mapped onto the same tables (`profiler_json`, `system_profile`).

Units as the tools write them (the schema page calls `*_percent` "percent", real output holds 0-1 fractions; each
summary is checked against its own times, see `figures`): timestamps and `duration_ns` in integer ns, kept int64
and rebased in integers (`profiler.timebase`: epoch ns do not fit float64); Summary times in **seconds**; clocks
in GHz; bandwidths in bytes/s; HBM bandwidth per HBM stack (Explorer's MBU denominator).

Op rows: with `Instruction`, instructions are grouped per framework op (`raw_framework_id`, named from
`FrameworkInstruction.framework_name`, else `layer`) or else per HLO instruction name (`hlo_name` is a whole HLO
statement: "%add.1 = ..." -> "add.1"), else per NKI kernel file; an op's device time is the union of its
instruction intervals (exact active time), its engine the one with the most instruction time, its start the
first instruction's start and its end `start + active time` (the last instruction's end is kept as
`span_end_ns`). Without `Instruction`, the leaves of `FrameworkNode` are the ops: device time = union of
`time_intervals`, engine = the engine with the widest `total_time_<engine>` span (`[min_ts, max_ts]`; a plain
number is read as a duration in ns). The Sync engine's (SP) instructions are shown in the op
rows' `dma` engine column; the summary keeps `sync` apart and its `dma` utilization is DMA only
(`dma_active_time*` or the JSON `dma` rows), else "not captured".
"""
from __future__ import annotations

from neuron_studio.profiler.neuron_profile.mapping import FALLBACK_REASON, measured_run, trace_from_tables
from neuron_studio.profiler.neuron_profile.measured_profile import (
    MeasuredProfile, load_neuron_profile, profile_from_saved,
)
from neuron_studio.profiler.neuron_profile.measured_run import MeasuredGroups, MeasuredRun
from neuron_studio.profiler.neuron_profile.read import find_profile_dir, read_legacy_json, read_neuron_json, read_tables
from neuron_studio.profiler.neuron_profile.tables import OP_TABLES, OPTIONAL_TABLES, REQUIRED_TABLES, ExplorerTables
from neuron_studio.profiler.neuron_profile.values import ENGINE_NOTE, chip_from_instance_type

__all__ = [
    "ExplorerTables", "MeasuredRun", "MeasuredGroups", "MeasuredProfile", "read_tables", "read_legacy_json", "read_neuron_json",
    "find_profile_dir", "load_neuron_profile", "measured_run", "trace_from_tables", "profile_from_saved",
    "chip_from_instance_type", "REQUIRED_TABLES", "OP_TABLES", "OPTIONAL_TABLES", "FALLBACK_REASON", "ENGINE_NOTE",
]
