"""Small Neuron Explorer outputs generated from the documented schema (profile schema reference, trainium.md §3.3).

Tests call these into tmp_path (nothing generated is committed). Column names and types follow the schema
reference; a few plausible extra columns (and an unknown table) check forward compatibility.

    python tests/make_explorer_fixtures.py OUT_DIR [variant]      # also used by the fake `neuron-explorer`

Variants: full, split (Instruction in numbered parts, snake_case file names), minimal (Summary +
FrameworkNode only), no_summary (invalid), no_ops (invalid).

The profile (times in ns after Metadata.first_hw_timestamp = T0, epoch ns as real captures write them;
total_time 110 us; Summary `*_percent` fields are 0-1 fractions as in every real summary):
  Model/RMSNorm[0]/nki_ops.rmsnorm  NKI kernel: Vector+Scalar, union 0..50 us, kernel file rmsnorm.py lines 42/47
  Model/Linear[0]/aten.mm           Tensor 60..90 us (+ a transpose)
  Model/aten.add                    Vector 90..100 us
  Model/aten.exp                    Scalar 100..105 us
  (unattributed)                    Sync 105 us + 57 ns (a window float64 loses at epoch-ns magnitude)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

__all__ = ["write_explorer_fixture", "write_system_profile_json", "write_neuron_profile_json", "EXPECTED", "T0",
           "NKI_FILE", "SYNC_NS"]

T0 = 1_729_888_371_056_597_613       # epoch ns, as the profiler writes them (beyond float64's exact range)
SYNC_NS = 57                           # a window float64 cannot hold at epoch-ns magnitude (it would read 0 ns)
NKI_FILE = "/home/ubuntu/kernels/rmsnorm.py"
MM_FLOPS = 2 * 512 * 512 * 512

# (framework id, framework name, hlo name, engine, start, end, raw_flops, flops_transpose, hbm_read, hbm_write,
#  kernel_instruction_name)
_INSTRUCTIONS = [
    (3, "Model/RMSNorm[0]/nki_ops.rmsnorm", "custom-call.3", "Vector", 0, 20_000, 0, 0, 262_144, 0, "inst.1:0"),
    (3, "Model/RMSNorm[0]/nki_ops.rmsnorm", "custom-call.3", "Scalar", 5_000, 25_000, 0, 0, 0, 0, "inst.2:0"),
    (3, "Model/RMSNorm[0]/nki_ops.rmsnorm", "custom-call.3", "Vector", 25_000, 50_000, 0, 0, 0, 262_144, "inst.3:0"),
    (1, "Model/Linear[0]/aten.mm", "dot.1", "Tensor", 60_000, 75_000, MM_FLOPS // 2, 0, 1_048_576, 0, None),
    (1, "Model/Linear[0]/aten.mm", "dot.1", "Tensor", 75_000, 88_000, MM_FLOPS // 2, 0, 0, 524_288, None),
    (1, "Model/Linear[0]/aten.mm", "dot.1", "Tensor", 88_000, 90_000, 2 * 128 * 128 * 128, 2 * 128 * 128 * 128,
     0, 0, None),
    (2, "Model/aten.add", "add.2", "Vector", 90_000, 100_000, 0, 0, 524_288, 262_144, None),
    (4, "Model/aten.exp", "exponential.4", "Scalar", 100_000, 105_000, 0, 0, 131_072, 131_072, None),
    (None, None, None, "Sync", 105_000, 105_000 + SYNC_NS, 0, 0, 0, 0, None),
]

EXPECTED = {
    "chip": "trn2",
    "total_time_ns": 110_000,
    "mfu": 0.125,
    "mbu": 0.40,
    "util": {"tensor": 0.2727, "vector": 0.50, "scalar": 0.2273, "gpsimd": 0.0, "dma": 0.35},
    "ops": {  # (op, module) -> device ns (union of instruction intervals), engine
        ("nki_ops.rmsnorm", "Model.RMSNorm[0]"): (50_000, "vector"),
        ("aten::mm", "Model.Linear[0]"): (30_000, "tensor"),
        ("aten::add", "Model"): (10_000, "vector"),
        ("aten::exp", "Model"): (5_000, "scalar"),
        ("(unattributed)", ""): (SYNC_NS, "dma"),
    },
    "hot_kernel": {"kernel": "kernels.rmsnorm.rmsnorm_kernel", "file": NKI_FILE, "line": 42,
                   "function": "kernels.rmsnorm._normalize_tile"},
    "peak_flops": 2.4e9 * 128 * 128 * 2 * 2,
    "hbm": 7.25e11,
}


def _instruction_frame(extra: bool = True) -> pd.DataFrame:
    rows = []
    for i, (fid, _fname, hlo, eng, s, e, fl, ft, rd, wr, kin) in enumerate(_INSTRUCTIONS):
        rows.append({
            "start_ts": T0 + s, "end_ts": T0 + e, "duration_ns": e - s, "engine": eng,
            "timeline_track": {"Tensor": "TensorMatrix", "Vector": "Vector", "Scalar": "Scalar", "Sync": "Sync"}[eng],
            "pcore_idx": 0, "opcode": {"Tensor": "MATMUL", "Vector": "TENSOR_TENSOR", "Scalar": "ACTIVATE",
                                       "Sync": "EVENT_SEMAPHORE"}[eng],
            "operands": "src=sb[0:128] dst=sb[0:128]", "id": i, "pc": i, "bir_id": f"sg0000:{1000 + i}",
            "hlo_name": hlo, "raw_hlo_id": None if fid is None else 100 + fid, "raw_framework_id": fid,
            "layer": _fname, "kernel_instruction_name": kin,
            "nki_source_location": None if kin is None else f"['{Path(NKI_FILE).name}:42']",
            "hbm_read_bytes": rd, "hbm_write_bytes": wr, "raw_flops": fl, "flops_transpose": ft,
            "adjusted_flops": fl, "evt_wait_time_ns": 0, "dma_wait_time_ns": 0,
        })
        if extra:
            rows[-1]["future_thermal_state"] = "nominal"  # an unknown extra column
    df = pd.DataFrame(rows)
    for c in ("raw_framework_id", "raw_hlo_id"):
        df[c] = df[c].astype("Int64")
    return df


def _framework_instruction_frame() -> pd.DataFrame:
    seen: dict[int, str] = {}
    for fid, fname, *_ in _INSTRUCTIONS:
        if fid is not None:
            seen.setdefault(fid, fname)
    return pd.DataFrame({
        "id": list(seen), "raw_bir_id": list(seen), "raw_penguin_id": list(seen), "raw_hlo_id": [100 + f for f in seen],
        "raw_framework_id": list(seen), "framework_name": list(seen.values()),
        "start_ts": [T0] * len(seen), "end_ts": [T0] * len(seen), "time_intervals": ["[]"] * len(seen),
        "hbm_read_bytes": [0] * len(seen), "hbm_write_bytes": [0] * len(seen),
    })


def _framework_node_frame() -> pd.DataFrame:
    """Hierarchy nodes: Model -> RMSNorm[0] -> nki_ops.rmsnorm, Model -> Linear[0] -> aten.mm, Model -> aten.add..."""
    def span(eng: str, fid: int) -> str:
        xs = [(s, e) for f, _n, _h, en, s, e, *_ in _INSTRUCTIONS if f == fid and en.lower() == eng]
        return f"[{T0 + min(s for s, _ in xs)}, {T0 + max(e for _, e in xs)}]" if xs else "[]"

    def intervals(fid: int) -> str:
        xs = sorted((s, e) for f, _n, _h, _en, s, e, *_ in _INSTRUCTIONS if f == fid)
        merged: list[list[int]] = []
        for s, e in xs:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        return json.dumps([[T0 + s, T0 + e] for s, e in merged])

    leaves = {3: ("nki_ops.rmsnorm", "RMSNorm[0]"), 1: ("aten.mm", "Linear[0]"), 2: ("aten.add", "Model"),
              4: ("aten.exp", "Model")}
    rows = [
        {"node_name": "Model", "children_names": "[RMSNorm[0], Linear[0], aten.add, aten.exp]", "parent_name": "",
         "children_ids": "[1, 2, 3, 4]", "start_ts": T0, "end_ts": T0 + 105_000},
        {"node_name": "RMSNorm[0]", "children_names": "[nki_ops.rmsnorm]", "parent_name": "Model",
         "children_ids": "[3]", "start_ts": T0, "end_ts": T0 + 50_000},
        {"node_name": "Linear[0]", "children_names": "[aten.mm]", "parent_name": "Model", "children_ids": "[1]",
         "start_ts": T0 + 60_000, "end_ts": T0 + 90_000},
    ]
    for fid, (node, parent) in leaves.items():
        xs = [(s, e, rd, wr, fl, ft) for f, _n, _h, _en, s, e, fl, ft, rd, wr, _k in _INSTRUCTIONS if f == fid]
        rows.append({
            "node_name": node, "children_names": "[]", "parent_name": parent, "children_ids": f"[{fid}]",
            "start_ts": T0 + min(x[0] for x in xs), "end_ts": T0 + max(x[1] for x in xs),
            "time_intervals": intervals(fid),
            "element_count_per_interval": f"[{sum(x[4] - x[5] for x in xs) // 2}]",
            "transpose_element_count_per_interval": "[0]",
            "hbm_read_bytes": sum(x[2] for x in xs), "hbm_write_bytes": sum(x[3] for x in xs),
            "mfu": 25.0 if fid == 1 else 0.0,
            **{f"total_time_{e}": span(e, fid) for e in ("tensor", "scalar", "sync", "gpsimd", "vector")},
        })
    df = pd.DataFrame(rows)
    for e in ("tensor", "scalar", "sync", "gpsimd", "vector"):
        df[f"total_time_{e}"] = df[f"total_time_{e}"].fillna("[]")
    df["time_intervals"] = df["time_intervals"].fillna("[]")
    return df


def _summary_frame(extra: bool = True) -> pd.DataFrame:
    """Summary as Explorer writes it: times in seconds, every `*_percent` a 0-1 fraction (= active / total)."""
    total = 110_000e-9
    row = {
        "total_time": total, "neuroncore_cycle_count": 132_000, "model_flops": MM_FLOPS,
        "hardware_flops": MM_FLOPS + 2 * 128 * 128 * 128, "transpose_flops": 2 * 128 * 128 * 128,
        "mfu_estimated_percent": 0.125, "mfu_max_achievable_estimated_percent": 0.60, "hfu_estimated_percent": 0.13,
        "mbu_estimated_percent": 0.40, "mm_arithmetic_intensity": 85.3, "peak_flops_bandwidth_ratio": 217.0,
        "hbm_read_bytes": 1_966_080, "hbm_write_bytes": 1_179_648,
        "tensor_engine_instruction_time": 30_000e-9, "tensor_engine_instruction_count": 3,
        "matmul_instruction_count": 3, "total_active_time": 106_000e-9,
    }
    for eng, busy_s in (("tensor", 30_000e-9), ("vector", 55_000e-9), ("scalar", 25_000e-9), ("gpsimd", 0.0),
                        ("sync", SYNC_NS * 1e-9)):
        row[f"{eng}_engine_active_time"] = busy_s
        row[f"{eng}_engine_active_time_percent"] = busy_s / total
    row["dma_active_time"] = 38_500e-9
    row["dma_active_time_percent"] = 38_500e-9 / total
    row["total_active_time_percent"] = row["total_active_time"] / total
    if extra:
        row["ai_recommendation_count"] = 3  # an unknown extra column
    return pd.DataFrame([row])


def _metadata_frame() -> pd.DataFrame:
    return pd.DataFrame([{
        "profile_schema_version": "12.0.1", "ntff_version": 6, "num_physical_cores": 2, "vnc_enabled": True,
        "first_hw_timestamp": T0, "last_hw_timestamp": T0 + 110_000, "first_ts": "2026-11-01 00:00:00+00:00",
        "last_ts": "2026-11-01 00:00:00+00:00", "dma_ddr_bandwidth": 3.5e11, "num_dma_engines_per_neuroncore": 16,
        "hbm_ddr_bandwidth": 7.25e11, "tensor_engine_num_rows": 128, "tensor_engine_num_cols": 128,
        "tensor_engine_clock_freq": 2.4, "vector_engine_clock_freq": 0.96, "vector_engine_num_channels": 128,
        "scalar_engine_clock_freq": 1.2, "scalar_engine_num_channels": 128, "gpsimd_engine_clock_freq": 1.2,
        "gpsimd_engine_num_channels": 128, "neuroncore_clock_freq": 1.2, "ticks_per_nanosec": 1,
        "instance_type": "trn2.48xlarge", "runtime_version": "2.29.0", "explorer_version": "2.33.0",
        "compiler_version": "2.22.0", "neuroncore_idx": 0, "neuron_device_idx": 0,
    }])


def _active_time_frame() -> pd.DataFrame:
    rows = []
    for eng, ivs in {"tensor": [(60_000, 90_000)], "vector": [(0, 20_000), (25_000, 50_000), (90_000, 100_000)],
                     "scalar": [(5_000, 25_000), (100_000, 105_000)], "sync": [(105_000, 105_000 + SYNC_NS)]}.items():
        for s, e in ivs:
            rows.append({"start_ts": T0 + s, "end_ts": T0 + e, "engine": eng, "pcore_idx": 0, "duration_ns": e - s})
    return pd.DataFrame(rows)


def _kernel_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    ki = pd.DataFrame({
        "kernel_instruction_name": ["inst.1:0", "inst.2:0", "inst.3:0"],
        "stack_frame_id": pd.array([2, 2, 2], dtype="Int64"), "stack_frame_depth": [2, 2, 2],
        "iteration_variables_id": pd.array([None, None, None], dtype="Int64"), "iteration_variable_depth": [0, 0, 0],
        "pcore_idx": [0, 0, 0], "file_path": [NKI_FILE] * 3, "line_number": [42, 47, 42],
    })
    frames = pd.DataFrame({
        "stack_frame_id": [1, 2],
        "fully_qualified_function_name": ["kernels.rmsnorm.rmsnorm_kernel", "kernels.rmsnorm._normalize_tile"],
        "parent_stack_frame_id": pd.array([None, 1], dtype="Int64"), "pcore_idx": [0, 0],
        "file_path": [NKI_FILE, NKI_FILE], "line_number": [30, 38],
    })
    return ki, frames


def write_explorer_fixture(directory: str | Path, variant: str = "full") -> Path:
    """Write one Explorer Parquet output into `directory` (created); returns it."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ki, frames = _kernel_frames()
    tables: dict[str, pd.DataFrame] = {
        "Summary": _summary_frame(), "Metadata": _metadata_frame(), "Instruction": _instruction_frame(),
        "FrameworkInstruction": _framework_instruction_frame(), "FrameworkNode": _framework_node_frame(),
        "ActiveTime": _active_time_frame(), "KernelInstructions": ki, "KernelStackFrames": frames,
        "ExecutionInfo": pd.DataFrame({"execution_index": [0], "neff_name": ["neff_123_vnc_0.neff"],
                                       "execution_start_ts": [T0], "execution_end_ts": [T0 + 110_000]}),
        "DmaPacket": pd.DataFrame({"queue_name": ["qSyncIO0"], "size": [4096]}),   # a table we do not read
        "SchemaFields": pd.DataFrame({"table": ["Summary"], "field": ["total_time"], "unit": ["seconds"]}),
    }
    if variant == "minimal":
        tables = {"Summary": _summary_frame(extra=False), "FrameworkNode": _framework_node_frame()}
    elif variant == "no_summary":
        tables.pop("Summary")
    elif variant == "no_ops":
        tables.pop("Instruction")
        tables.pop("FrameworkNode")
    if variant == "split":
        ins = tables.pop("Instruction")
        ins.iloc[:4].to_parquet(d / "Instruction_0.parquet", index=False)
        ins.iloc[4:].to_parquet(d / "Instruction_1.parquet", index=False)
        tables["framework_node"] = tables.pop("FrameworkNode")
        tables["kernel-stack-frames"] = tables.pop("KernelStackFrames")
    elif variant not in ("full", "minimal", "no_summary", "no_ops"):
        raise ValueError(f"unknown fixture variant {variant!r}")
    for name, df in tables.items():
        df.to_parquet(d / f"{name}.parquet", index=False)
    return d


def write_system_profile_json(path: str | Path) -> Path:
    """`system_profile.json` as `neuron-profile view -d DIR --output-format json` writes it: runtime API events
    (host-side `nrt_*` calls, and the device's `nc_exec_running` executions) and framework events, epoch-ns
    timestamps. Device time is the two `nc_exec_running` windows only (40 us + 10 us), never `nrt_execute`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)

    def ev(name: str, start: int, dur: int, group: str = "nrt-nc-000", **extra: object) -> dict:
        return {"duration": dur, "group": group, "instance_id": "i-0f207fb2a99bd2d08", "name": name,
                "process_id": "1627711", "thread_id": 1627711, "timestamp": T0 + start, **extra}

    rt = [
        ev("nrt_tensor_write", 1_000, 2_000, type=11),
        ev("nrt_execute", 9_000, 42_000, type=11),
        ev("nc_exec_running", 10_000, 40_000, type=11),
        ev("nrt_execute", 59_000, 12_000, type=11),
        ev("nc_exec_running", 60_000, 10_000, type=11),
    ]
    fw = [
        ev("aten::mm", 8_000, 45_000, group="framework-80375131", type=99999),
        ev("aten::add", 58_000, 15_000, group="framework-80375131", type=99999),
    ]
    p.write_text(json.dumps({"Neuron_Runtime_API_Event": rt, "Framework_Event": fw, "mem_usage": [],
                             "cpu_util": []}))
    return p


def write_neuron_profile_json(path: str | Path) -> Path:
    """`neuron-profile view --output-format json` (default file name ntff.json): a "summary" list (fractions, times
    in seconds) and an "instruction" list with the engine in `label` and `hlo_name` as a whole HLO statement."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    t0 = 10_261_883_214
    ins = [
        {"timestamp": t0, "duration": 30_000, "label": "TensorMatrix", "hlo_name": "%dot.1 = f32[64,64]{1,0} "
         "dot(%p0, %p1)", "opcode": "MATMUL", "operands": "a b"},
        {"timestamp": t0 + 30_000, "duration": 10_000, "label": "Vector", "hlo_name": "%add.2 = f32[64,64]{1,0} "
         "add(%dot.1, %p2)", "opcode": "TENSOR_TENSOR", "operands": "a b"},
        {"timestamp": t0 + 35_000, "duration": 5_000, "label": "Scalar", "hlo_name": "%exponential.3 = "
         "f32[64,64]{1,0} exponential(%add.2)", "opcode": "ACTIVATE", "operands": "a"},
    ]
    p.write_text(json.dumps({"summary": [{"total_time": 50_000e-9, "mfu_estimated_percent": 0.05,
                                          "instance_type": "trn1.2xlarge"}], "instruction": ins}))
    return p


if __name__ == "__main__":
    out = write_explorer_fixture(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "full")
    print(out)
