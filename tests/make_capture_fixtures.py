"""Neuron Explorer Parquet tables for a capture the fake TorchNeuron made: what the fake `neuron-explorer view`
writes (tests only; column names, types and units follow the schema reference 7.4.0,
`tools/neuron-explorer/profile-schema-reference.rst` in aws-neuron/aws-neuron-sdk @81ce03ae).

From the fake runtime's record in `ntrace.pb` (JSON in the fake; protobuf on hardware):

- `SystemProfileEvents`: per device execution a `neuron_rt` `nrt_execute` event carrying its runtime sequence id
  (`extra_attributes_json: {"nrt_sequence_id": ...}`) and the `neuron_hw` `nc_exec_running` event it led to, linked
  by a shared `flow_id` (the docs' "linking a framework dispatch event to the corresponding runtime execution");
- `Instruction`: two instructions inside each execution window (engine by op family), HLO names, FLOPs, HBM bytes;
- `Summary` (seconds; `total_time` = the span plus 2 ms of idle start-up as real captures show; `total_active_time`
  = union of the execution windows), `Metadata`, `ExecutionInfo` (NEFF per execution, times relative to the start);
- `SystemProfileHbmUsage`: HBM bytes by usage type at each execution end;
- the device's own records a CPU fake cannot produce, written as fixed rows so every reader runs: one `CcOp`
  (AllReduce, ring), two `Flow` edges, one `Warning` (small DMAs), one `Throttle` event (k/n = 1/2 for 3 us).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_explorer_fixtures import _metadata_frame  # noqa: E402

__all__ = ["write_capture_tables", "IDLE_START_NS", "engine_for", "HBM_COLUMNS"]

IDLE_START_NS = 2_000_000
HBM_COLUMNS = ("generic_bytes", "tensor_instructions_bytes", "scalar_instructions_bytes", "gpsimd_instructions_bytes",
               "io_bytes", "dram_spill_bytes", "weights_bytes", "profiler_buffers_bytes", "scalar_table_bytes",
               "vector_instructions_bytes", "sync_instructions_bytes", "shared_scratchpad_bytes", "tensors_bytes",
               "ucode_lib_bytes", "gpsimd_stdio_bytes", "collectives_bytes", "scratchpad_bytes",
               "dma_rings_runtime_bytes", "dma_rings_spill_bytes", "dma_rings_io_bytes", "dma_rings_collectives_bytes",
               "unknown_bytes")


def engine_for(op: str) -> str:
    base = op.split("::")[-1]
    if base in ("mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "_convolution"):
        return "Tensor"
    if base in ("exp", "tanh", "sigmoid", "gelu", "log", "_log_softmax", "_softmax", "silu", "gelu_backward",
                "_log_softmax_backward_data", "_softmax_backward_data"):
        return "Scalar"
    return "Vector"


def _union(s: np.ndarray, e: np.ndarray) -> int:
    total, end = 0, None
    for a, b in sorted(zip(s.tolist(), e.tolist())):
        if end is None or a >= end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def write_capture_tables(run_dir: str | Path, out_dir: str | Path) -> Path:
    rec = json.loads((Path(run_dir) / "ntrace.pb").read_text())
    ex = rec["executions"]
    if not ex:
        raise SystemExit("fake neuron-explorer: the capture holds no device execution")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = np.asarray([e["start_ns"] for e in ex], dtype=np.int64)
    e_ = np.asarray([e["end_ns"] for e in ex], dtype=np.int64)
    t0 = int(s.min())
    events, instr = [], []
    for i, x in enumerate(ex):
        sid = int(x["nrta_seq_id"])
        attrs = json.dumps({"nrt_sequence_id": sid})
        common = {"instance_id": rec["instance_id"], "process_id": 4242, "nc_idx": x["nc"], "pcore_idx": 0,
                  "worker_gid": 0, "framework_stream_id": "0"}
        events.append({"id": 2 * i, "name": "nrt_execute", "start_ts": x["start_ns"] - 5_000,
                       "end_ts": x["end_ns"] + 2_000, "duration_ns": x["end_ns"] - x["start_ns"] + 7_000,
                       "trace_event_source": "neuron_rt", "thread_id": 77, "flow_id": [str(sid)],
                       "extra_attributes_json": attrs, **common})
        events.append({"id": 2 * i + 1, "name": "nc_exec_running", "start_ts": x["start_ns"], "end_ts": x["end_ns"],
                       "duration_ns": x["end_ns"] - x["start_ns"], "trace_event_source": "neuron_hw", "thread_id": 0,
                       "flow_id": [str(sid)], "extra_attributes_json": None, **common})
        dur = x["end_ns"] - x["start_ns"]
        eng = engine_for(x["op"])
        short = x["op"].split("::")[-1]
        for k, (a, b) in enumerate(((0, dur // 2), (dur // 2, dur - dur // 10))):
            instr.append({"start_ts": x["start_ns"] + a, "end_ts": x["start_ns"] + b, "duration_ns": b - a,
                          "engine": eng, "opcode": "MATMUL" if eng == "Tensor" else "TENSOR_TENSOR",
                          "hlo_name": f"%{short}.{k} = f32[] {short}()", "id": len(instr),
                          "raw_flops": 2 * x["numel"] if eng == "Tensor" else 0, "flops_transpose": 0,
                          "hbm_read_bytes": 4 * x["numel"], "hbm_write_bytes": 2 * x["numel"],
                          "evt_wait_time_ns": 0})
    sys_events = pd.DataFrame(events)
    ins = pd.DataFrame(instr)
    active = _union(s, e_)
    span = int(e_.max()) - t0
    total_s = (span + IDLE_START_NS) * 1e-9
    row = {"total_time": total_s, "total_active_time": active * 1e-9, "total_active_time_percent": active * 1e-9 / total_s}
    for eng in ("tensor", "vector", "scalar", "gpsimd", "sync"):
        m = ins["engine"].str.lower() == eng
        busy = _union(ins.loc[m, "start_ts"].to_numpy(np.int64), ins.loc[m, "end_ts"].to_numpy(np.int64)) if m.any() else 0
        row[f"{eng}_engine_active_time"] = busy * 1e-9
        row[f"{eng}_engine_active_time_percent"] = busy * 1e-9 / total_s
    meta = _metadata_frame()
    meta["first_hw_timestamp"] = t0 - IDLE_START_NS
    meta["last_hw_timestamp"] = int(e_.max())
    hbm = pd.DataFrame([{c: int(h.get(c, 0)) for c in HBM_COLUMNS} | {"timestamp": int(h["timestamp"])}
                        for h in rec["hbm"]])
    hbm["total_bytes"] = hbm[list(HBM_COLUMNS)].sum(axis=1)
    hbm["device_idx"], hbm["hbm_idx"], hbm["instance_id"] = 0, 0, rec["instance_id"]
    mid = t0 + span // 2
    tables = {
        "SystemProfileEvents": sys_events, "Instruction": ins, "Summary": pd.DataFrame([row]), "Metadata": meta,
        "ExecutionInfo": pd.DataFrame({"execution_index": np.arange(len(ex), dtype=np.int32),
                                       "neff_name": [x["neff"] for x in ex],
                                       "execution_start_ts": s - (t0 - IDLE_START_NS),
                                       "execution_end_ts": e_ - (t0 - IDLE_START_NS)}),
        "SystemProfileHbmUsage": hbm,
        "CcOp": pd.DataFrame([{"start_ts": mid, "end_ts": mid + 40_000, "duration_ns": 40_000,
                               "operation": "AllReduce", "algorithm": "Ring", "num_elements": 1 << 20,
                               "dtype": "fp32", "op_id": 1, "stream_id": 0, "stream_index": 0,
                               "trigger_engine": "Pool", "input_size": 4 << 20, "output_size": 4 << 20,
                               "algorithm_bandwidth": (4 << 20) / 40e-6, "bus_bandwidth": 1.5 * (4 << 20) / 40e-6,
                               "cc_trigger_start_delay": 6_000, "replica_group": "[[0, 1]]"}]),
        "Flow": pd.DataFrame({"in_id": [0, 1], "out_id": [1, 2], "in_table": ["instruction", "instruction"],
                              "out_table": ["dma_block", "instruction"],
                              "dependency_type": ["FLOW_DEPENDENCE", "FLOW_DEPENDENCE"], "gap_time": [1_500, 250]}),
        "Warning": pd.DataFrame({"message": ["Small DMA transfers (average below 32768 bytes) limit DMA throughput"],
                                 "category": ["Performance"]}),
        "Throttle": pd.DataFrame({"duration": [3_000], "k": np.asarray([1], np.int32), "n": np.asarray([2], np.int32),
                                  "timestamp": [mid], "type": ["activity_0"], "pcore_idx": [0]}),
    }
    for name, df in tables.items():
        df.to_parquet(out / f"{name}.parquet", index=False)
    return out


if __name__ == "__main__":
    write_capture_tables(sys.argv[1], sys.argv[2])
