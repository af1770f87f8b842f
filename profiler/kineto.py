"""What torch.profiler (kineto) Chrome traces mean, across the generations seen in the wild.

The importer reads events; this module knows how to interpret them:

- categories: 2021 traces (PyTorch 1.8/1.9, the TensorBoard plugin era) say `Operator`, `Kernel`, `Runtime`,
  `Memcpy`, `Memset`, `Python`; later ones `cpu_op`, `kernel`, `cuda_runtime`, `cuda_driver`, `gpu_memcpy`,
  `gpu_memset`, `user_annotation`, `gpu_user_annotation`, `python_function`; PrivateUse1 and MTIA backends
  write `privateuse1_runtime`/`privateuse1_driver`/`mtia_runtime`. `CATEGORIES` maps each spelling to one name;
- which CPU events are ops (`ns::op[.overload]`) and which are wrapper nodes that only contain ops
  (`torch::autograd::AccumulateGrad`, `torch::autograd::CppNode<...>`, `torch::distributed::reducer::mul_out`,
  `autograd::engine::evaluate_function: ...`);
- run identity: `distributedInfo` (rank, world size, backend), `baseTimeNanoseconds` (the wall clock of
  ts 0, written by kineto since 2023; older traces use epoch microseconds directly), `deviceProperties`,
  `record_shapes`;
- `M` (metadata) events naming processes and threads, `[memory]` instant events, flow events (`ac2g` links
  a runtime call to its GPU activity by the same id as the `correlation` arg; `fwdbwd` a forward op to its
  backward).
"""
from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CATEGORIES", "normal_category", "is_op_name", "GPU_CATEGORIES", "RUNTIME_CATEGORIES",
           "STEP_CATEGORIES", "device_kind", "is_collective_name", "is_backward_op", "is_autograd_thread_name", "TraceIdentity", "trace_identity", "metadata_names", "memory_summary",
           "MemoryTally", "flow_summary", "flow_summary_of_counts", "gpu_kind", "EPOCH_US_MIN"]

CATEGORIES: dict[str, str] = {
    # 2021 (PyTorch 1.8/1.9)
    "operator": "cpu_op", "kernel": "kernel", "runtime": "cuda_runtime", "memcpy": "gpu_memcpy",
    "memset": "gpu_memset", "python": "python_function", "user annotation": "user_annotation",
    "gpu user annotation": "gpu_user_annotation",
    # 2022 and later
    "cpu_op": "cpu_op", "cuda_runtime": "cuda_runtime", "cuda_driver": "cuda_driver", "gpu_memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "user_annotation": "user_annotation", "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function", "cpu_instant_event": "cpu_instant_event", "trace": "Trace",
    "overhead": "overhead", "ac2g": "ac2g", "fwdbwd": "fwdbwd", "async": "ac2g",
    # other backends through the same kineto schema
    "privateuse1_runtime": "cuda_runtime", "privateuse1_driver": "cuda_driver", "mtia_runtime": "cuda_runtime",
    "mtia_ccp_events": "kernel", "hip_runtime": "cuda_runtime",
}
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: where `ProfilerStep#N` sits on the CPU (a `gpu_user_annotation` copy on the GPU timeline is not a step)
STEP_CATEGORIES = ("user_annotation", "cpu_op")
#: ts values at or above this (µs) are wall-clock epoch microseconds (2001-09-09 onwards)
EPOCH_US_MIN = 1.0e15

#: `ns::name` with one namespace level; the name part is anything without a further `::` (a custom op may be
#: registered under any name: `mylib::my-op`, even with markup characters, is still an op)
_OP = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::(?!.*::)\S.*$", re.DOTALL)
#: the ranges a process group's backend records around its own collectives: ProcessGroupGloo writes
#: `gloo:all_reduce`, `gloo:broadcast`, ... (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, RECORD_PARAM_COMMS /
#: `"gloo:" + opType`); NCCL, UCC and MPI likewise
_COLLECTIVE_RANGE = re.compile(r"^(gloo|nccl|ucc|mpi|xccl):[a-z_0-9]+$")


def normal_category(cat: str) -> str:
    """One name per category across trace generations (unknown categories are kept as written)."""
    return CATEGORIES.get(cat.lower(), cat) if isinstance(cat, str) else cat


def is_op_name(name: str) -> bool:
    """`aten::mm`, `c10d::allreduce_`, `fbgemm::jagged_to_padded_dense.default`, a custom op of any name
    (`mylib::fused-rope`): an operator of a library namespace; and a backend's collective range
    (`gloo:all_reduce`, the only record of a collective in a CPU-only gloo trace). Not
    `autograd::engine::evaluate_function: X`, nor C++ wrapper nodes with nested namespaces or template
    arguments (`torch::autograd::AccumulateGrad`, `torch::distributed::reducer::mul_out`)."""
    if not isinstance(name, str):
        return False
    m = _OP.match(name)
    return (m is not None and m.group(1) != "autograd") or _COLLECTIVE_RANGE.match(name) is not None


def is_collective_name(name: str) -> bool:
    """A collective: a c10d op (`c10d::allreduce_`) or a backend's collective range (`gloo:all_reduce`)."""
    return isinstance(name, str) and (name.startswith("c10d::") or _COLLECTIVE_RANGE.match(name) is not None)


def is_backward_op(name: str) -> bool:
    """An autograd backward kernel by its name (`aten::convolution_backward`, `aten::native_layer_norm_backward.default`):
    what marks the backward pass in traces that have no `autograd::engine::evaluate_function` ranges."""
    return isinstance(name, str) and name.split(".", 1)[0].endswith("_backward")


def is_autograd_thread_name(name: str) -> bool:
    """The autograd engine's device threads, as PyTorch names them (`pt_autograd_0`)."""
    return isinstance(name, str) and "autograd" in name


def gpu_kind(category: str, name: str) -> str:
    """compute | communication | memory, as HTA classifies GPU activity (collective kernels by name)."""
    if category in ("gpu_memcpy", "gpu_memset"):
        return "memory"
    low = name.lower()
    if "nccl" in low or "rccl" in low:
        return "communication"
    return "compute"


def device_kind(raw_categories: Any, has_device_activity: bool) -> str | None:
    """What ran the trace's device activity, named as it is: "MTIA" (kineto's `mtia_*` categories), a
    PrivateUse1 backend ("accelerator", `privateuse1_*`), "GPU" (CUDA, ROCm); None when the trace has no device
    activity (a CPU-only trace)."""
    low = {str(c).lower() for c in raw_categories}
    if any(c.startswith("mtia") for c in low):
        return "MTIA"
    if any(c.startswith("privateuse1") for c in low):
        return "accelerator"
    return "GPU" if has_device_activity else None


@dataclass
class TraceIdentity:
    """Who wrote the trace: rank and job, the clock base, the devices."""

    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    base_time_ns: int | None = None          # wall clock (epoch ns) of ts == 0, when kineto wrote it
    devices: list[dict] = field(default_factory=list)
    record_shapes: bool | None = None
    schema_version: Any = None
    notes: list[str] = field(default_factory=list)


def _as_obj(v: Any) -> Any:
    """Some writers store dicts as their Python repr; read those literally (never evaluated)."""
    if isinstance(v, str) and v[:1] in "{[":
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    return v


def _int(v: Any) -> int | None:
    if type(v) is int:
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit() and len(v) < 25:
        return int(v)
    return None


def trace_identity(doc: dict) -> TraceIdentity:
    ident = TraceIdentity()
    info = _as_obj(doc.get("distributedInfo"))
    if isinstance(info, dict):
        ident.rank, ident.world_size = _int(info.get("rank")), _int(info.get("world_size"))
        ident.backend = info.get("backend") if isinstance(info.get("backend"), str) else None
        # `{"rank": N}` alone is what many jobs write: the rank stands, the world size stays unknown
        if ident.rank is None or ident.rank < 0 or (ident.world_size is not None
                                                    and not ident.rank < max(ident.world_size, 1)):
            ident.notes.append(f"distributedInfo is incomplete or inconsistent (rank {info.get('rank')!r}, "
                               f"world_size {info.get('world_size')!r}); rank identity not used")
            ident.rank = ident.world_size = None
        elif ident.world_size is None:
            ident.notes.append(f"distributedInfo names rank {ident.rank} but no world_size: the job's size is "
                               "not known from this trace")
    base = _int(doc.get("baseTimeNanoseconds"))
    ident.base_time_ns = base if base is not None and base > 0 else None
    props = _as_obj(doc.get("deviceProperties"))
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict):
                ident.devices.append({k: v for k, v in p.items() if type(v) in (str, int, float, bool)})
    rs = doc.get("record_shapes")
    if rs is not None:
        ident.record_shapes = str(rs).strip().lower() in ("1", "true")
    ident.schema_version = doc.get("schemaVersion") if type(doc.get("schemaVersion")) in (int, str) else None
    return ident


def metadata_names(m_events: list) -> dict[str, dict[str, str]]:
    """Process and thread names from the `M` events: {"processes": {pid: name}, "threads": {"pid/tid": name},
    "labels": {pid: label}} (keys as strings, JSON-safe)."""
    out: dict[str, dict[str, str]] = {"processes": {}, "threads": {}, "labels": {}}
    for ev in m_events:
        args = ev.get("args")
        if type(args) is not dict:
            continue
        kind = ev.get("name")
        if kind == "process_name" and isinstance(args.get("name"), str):
            out["processes"][str(ev.get("pid"))] = args["name"]
        elif kind == "thread_name" and isinstance(args.get("name"), str):
            out["threads"][f"{ev.get('pid')}/{ev.get('tid')}"] = args["name"]
        elif kind == "process_labels" and isinstance(args.get("labels"), str):
            out["labels"][str(ev.get("pid"))] = args["labels"]
    return out


def memory_summary(i_events: list) -> list[dict]:
    """Per device, from the `[memory]` instant events: allocations, frees and the peak allocated bytes (the
    "Total Allocated" kineto writes since 2022, else the running sum of "Bytes", which starts at the first
    recorded event and so is a lower bound)."""
    tally = MemoryTally()
    tally.add(i_events)
    return tally.summary()


class MemoryTally:
    """`memory_summary` fed in pieces (a trace read in chunks), in event order."""

    def __init__(self) -> None:
        self.per: dict[tuple, dict] = {}

    def add(self, i_events: list) -> None:
        per = self.per
        for ev in i_events:
            if ev.get("name") != "[memory]":
                continue
            a = ev.get("args")
            if type(a) is not dict:
                continue
            b = a.get("Bytes")
            if type(b) not in (int, float):
                continue
            key = (a.get("Device Type"), a.get("Device Id"))
            d = per.setdefault(key, {"device_type": key[0], "device_id": key[1], "events": 0, "allocated_bytes": 0,
                                     "freed_bytes": 0, "running": 0, "peak_bytes": 0, "from": "running sum"})
            d["events"] += 1
            if b >= 0:
                d["allocated_bytes"] += b
            else:
                d["freed_bytes"] -= b
            total = a.get("Total Allocated")
            if type(total) in (int, float):
                d["from"] = "Total Allocated"
                d["peak_bytes"] = max(d["peak_bytes"], total)
            else:
                d["running"] += b
                d["peak_bytes"] = max(d["peak_bytes"], d["running"])

    def summary(self) -> list[dict]:
        out = []
        for d in self.per.values():
            d = {k: v for k, v in d.items() if k != "running"}
            d["device"] = "cpu" if d["device_type"] in (0, None) else f"device {d['device_id']}"
            out.append(d)
        return out


def flow_summary(s_events: list) -> dict[str, int]:
    """Flow event pairs by kind (their start events counted): `ac2g` (runtime → GPU, the same ids as the
    `correlation` args the analyses join on) and `fwdbwd` (forward op → its backward)."""
    return flow_summary_of_counts(Counter(str(ev.get("cat", "")) for ev in s_events))


def flow_summary_of_counts(counts: Counter) -> dict[str, int]:
    """`flow_summary` from the start events' counts per category as written (in order of first appearance)."""
    out: dict[str, int] = {}
    for cat, k in counts.items():
        name = normal_category(cat)
        out[name] = out.get(name, 0) + k
    return out
