"""Device executions of a hardware capture and the PyTorch op behind each one.

1. Executions: the `nc_exec_running` events of `SystemProfileEvents` (`trace_event_source` "neuron_hw"; the glossary's
   event that "bridges system and device views"). Each carries the Neuron runtime's sequence id: in a
   `nrt_sequence_id` column when Explorer has one, else in `extra_attributes_json` (the schema: unknown attributes
   land there until they get a column), else on the `neuron_rt` event sharing one of its `flow_id`s (flow ids "link
   a framework dispatch event to the corresponding runtime execution event"; `framework_stream_id` is "propagated
   ... via nrt_sequence_id"). Schema 7.4.0, `tools/neuron-explorer/profile-schema-reference.rst`, aws-neuron-sdk
   @81ce03ae. Which key holds the id in real output is not documented: it is read from any of the three.
2. `framework_mapping_<ts>.json` (TorchNeuron: `{"version": 1, "data": [{"nrta_seq_id", "framework_op_exec_ids":
   [{"seq_nr", "th_id", "stream_id"}]}]}`, `csrc/core/NeuronBindings.cpp::_get_profiler_mappings`) joins a runtime
   sequence id to the PyTorch ops it executed (several when Adaptive Eager fused them).
3. `(th_id, seq_nr)` -> the studio's `FrameworkLog` record of the op (name, module, source line, phase): records that
   launch device work, per key in dispatch order; the k-th execution with a key takes the k-th record with it.
   TorchNeuron's thread ids (RecordFunction's, numbered per process) are matched to the log's threads by the
   sequence numbers they share (`thread_map`), not assumed equal.

Every execution is labelled; one that cannot be joined keeps the runtime's own name for it and says why.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.values import int_col, num_col, str_col
from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["Executions", "FrameworkMapping", "ExecutionLabels", "device_executions", "read_framework_mapping",
           "label_executions", "instruction_windows", "MAPPING_GLOB", "SEQ_KEYS"]

DEVICE_EXEC = "nc_exec_running"
MAPPING_GLOB = "framework_mapping_*.json"
SEQ_KEYS = ("nrt_sequence_id", "nrta_seq_id", "nrt_seq_id", "sequence_id")


@dataclass(frozen=True)
class Executions:
    """One row per device execution, by start time: exact int64 epoch ns, LNC index, runtime sequence id (-1:
    none found), the NEFF it ran (from ExecutionInfo when the counts match, else "")."""

    start: np.ndarray
    end: np.ndarray
    nc: np.ndarray
    seq_id: np.ndarray
    neff: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


def _flow_ids(v: Any) -> list[str]:
    if v is None or (isinstance(v, float) and v != v):
        return []
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return [v]
    try:
        return [str(x) for x in list(v)]
    except TypeError:
        return [str(v)]


def _seq_from_attrs(raw: Any) -> int:
    if not raw or not isinstance(raw, str):
        return -1
    try:
        d = json.loads(raw)
    except ValueError:
        return -1
    for k in SEQ_KEYS:
        if isinstance(d, dict) and d.get(k) is not None:
            try:
                return int(d[k])
            except (TypeError, ValueError):
                return -1
    return -1


def device_executions(t: ExplorerTables) -> Executions | None:
    """The profile's device executions, or None when it has no SystemProfileEvents / nc_exec_running events."""
    ev = t.get("SystemProfileEvents")
    if ev is None or not len(ev) or "name" not in ev.columns:
        return None
    names = str_col(ev, "name")
    dev = np.flatnonzero(names == DEVICE_EXEC)
    if not len(dev):
        return None
    seq = np.full(len(ev), -1, dtype=np.int64)
    for k in SEQ_KEYS:
        if k in ev.columns:
            v = num_col(ev, k, -1.0).astype(np.int64)
            seq = np.where(seq >= 0, seq, v)
    if "extra_attributes_json" in ev.columns:
        attrs = ev["extra_attributes_json"].tolist()
        miss = np.flatnonzero(seq < 0)
        seq[miss] = [_seq_from_attrs(attrs[i]) for i in miss]
    if "flow_id" in ev.columns and (seq[dev] < 0).any():
        flows = ev["flow_id"].tolist()
        by_flow: dict[str, int] = {}
        for i in np.flatnonzero(seq >= 0):
            for f in _flow_ids(flows[i]):
                by_flow.setdefault(f, int(seq[i]))
        for i in dev[seq[dev] < 0]:
            seq[i] = next((by_flow[f] for f in _flow_ids(flows[i]) if f in by_flow), -1)
    sub = ev.iloc[dev]
    start = int_col(sub, "start_ts", "SystemProfileEvents.start_ts")
    end = int_col(sub, "end_ts", "SystemProfileEvents.end_ts") if "end_ts" in sub.columns else \
        start + num_col(sub, "duration_ns").astype(np.int64)
    order = np.argsort(start, kind="stable")
    neff = np.full(len(dev), "", dtype=object)
    info = t.get("ExecutionInfo")
    if info is not None and len(info) == len(dev) and "neff_name" in info.columns:
        idx = np.argsort(num_col(info, "execution_index"), kind="stable")
        neff = str_col(info, "neff_name")[idx]
    return Executions(start=start[order], end=end[order], nc=num_col(sub, "nc_idx").astype(np.int64)[order],
                      seq_id=seq[dev][order], neff=neff)


@dataclass(frozen=True)
class FrameworkMapping:
    """runtime sequence id -> [(seq_nr, th_id, stream_id)], from the framework_mapping files read."""

    by_seq_id: dict[int, list[tuple[int, int, int]]]
    files: list[str]


def read_framework_mapping(dirs: Iterable[str | Path], *, since_s: float | None = None) -> FrameworkMapping | None:
    """Every `framework_mapping_*.json` in `dirs` (not recursive) written at or after `since_s` (epoch s); None when
    there is none. A malformed file is a `TraceFormatError` naming it."""
    files: list[Path] = []
    for d in dirs:
        p = Path(d)
        if p.is_dir():
            files += [f for f in sorted(p.glob(MAPPING_GLOB))
                      if since_s is None or f.stat().st_mtime >= since_s - 1.0]
    if not files:
        return None
    by: dict[int, list[tuple[int, int, int]]] = {}
    for f in files:
        try:
            doc = json.loads(f.read_text())
            for entry in doc["data"]:
                ids = [(int(x["seq_nr"]), int(x["th_id"]), int(x.get("stream_id", 0)))
                       for x in entry["framework_op_exec_ids"]]
                by.setdefault(int(entry["nrta_seq_id"]), []).extend(ids)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TraceFormatError(f"cannot read TorchNeuron's framework mapping {str(f)!r}: expected "
                                   '{"version": 1, "data": [{"nrta_seq_id", "framework_op_exec_ids": [{"seq_nr", '
                                   f'"th_id", "stream_id"}}]}}]}} ({type(e).__name__}: {e})') from None
    return FrameworkMapping(by_seq_id=by, files=[str(f) for f in files])


@dataclass
class ExecutionLabels:
    """Per execution: the PyTorch op(s) (" + "-joined when fused), module, source line, phase, and whether joined."""

    name: np.ndarray
    module: np.ndarray
    source: np.ndarray
    phase: np.ndarray
    joined: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


def thread_map(mapping: FrameworkMapping, keys: dict[tuple[int, int], int]) -> dict[int, int]:
    """TorchNeuron thread id -> the op log's thread: each mapping thread (most ops first) takes the free log thread
    whose (sequence number -> op count) it overlaps most; a thread sharing nothing keeps its own id."""
    from collections import Counter

    th: dict[int, Counter] = {}
    for ids in mapping.by_seq_id.values():
        for seq_nr, th_id, _s in ids:
            th.setdefault(th_id, Counter())[seq_nr] += 1
    logs: dict[int, Counter] = {}
    for (thread, seq), n in keys.items():
        logs.setdefault(thread, Counter())[seq] += n
    out: dict[int, int] = {}
    free = set(logs)
    for th_id in sorted(th, key=lambda t: -sum(th[t].values())):
        best = max(free, key=lambda lt: (sum((th[th_id] & logs[lt]).values()), lt == th_id), default=None)
        if best is not None and sum((th[th_id] & logs[best]).values()) > 0:
            out[th_id] = best
            free.discard(best)
        else:
            out[th_id] = th_id
    return out


def label_executions(ex: Executions, mapping: FrameworkMapping | None, log: Any | None,
                     fallback_names: Sequence[str], cpu_ops: Iterable[str] = ()) -> ExecutionLabels:
    """Join each execution to the PyTorch op(s) behind it (module docstring); `fallback_names` are the runtime's
    own names per execution, kept when the join fails. `log`: a `FrameworkLog.ops` record (profiled steps only).
    `cpu_ops`: op names TorchNeuron's op tracking reports as CPU fallbacks; they launch no device work, so they are
    no candidates (an op that runs both ways in one cell cannot be told apart: it is matched as a device op)."""
    cpu = set(cpu_ops)
    n = len(ex)
    name = np.asarray(fallback_names, dtype=object).copy()
    module = np.full(n, "", dtype=object)
    source = np.full(n, None, dtype=object)
    phase = np.full(n, "", dtype=object)
    joined = np.zeros(n, dtype=bool)
    reasons: dict[str, int] = {}
    queues: dict[tuple[int, int], deque] = {}
    if log is not None:
        for i in range(len(log)):
            if log.device[i] and log.step[i] is not None and log.step[i] >= 0 and log.name[i] not in cpu:
                queues.setdefault((int(log.thread[i]), int(log.seq[i])), deque()).append(i)
    tmap = thread_map(mapping, {k: len(q) for k, q in queues.items()}) if mapping is not None else {}
    for k in range(n):
        sid = int(ex.seq_id[k])
        why = None
        if sid < 0:
            why = "the execution carries no runtime sequence id"
        elif mapping is None:
            why = "no framework_mapping file (TorchNeuron writes it only with PyTorch and runtime profiling both on)"
        elif sid not in mapping.by_seq_id:
            why = "its runtime sequence id is not in the framework mapping"
        elif log is None:
            why = "no record of the PyTorch ops (capture not made by the studio)"
        elif not queues:
            why = ("the op log holds no device ops (in compile mode it logs Dynamo's compiles only: a dispatch mode "
                   "would stop torch.compile from compiling)")
        if why is None:
            recs = []
            for seq_nr, th_id, _stream in mapping.by_seq_id[sid]:
                q = queues.get((tmap.get(th_id, th_id), seq_nr))
                if q:
                    recs.append(q.popleft())
            if not recs:
                why = "no PyTorch op with its (thread, sequence number) is left to match"
            else:
                name[k] = " + ".join(dict.fromkeys(log.name[i] for i in recs))
                first = recs[0]
                module[k], source[k], phase[k] = log.module[first], log.source[first], log.phase[first]
                joined[k] = True
        if why is not None:
            reasons[why] = reasons.get(why, 0) + 1
    left = sum(len(q) for q in queues.values())
    stats_threads = tmap
    stats = {"executions": n, "joined": int(joined.sum()), "unjoined": {k: v for k, v in reasons.items()},
             "ops_without_execution": int(left),
             "mapping_files": list(mapping.files) if mapping is not None else [],
             "with_source": int(sum(1 for s in source if s)),
             "thread_map": {str(k): v for k, v in stats_threads.items()}}
    return ExecutionLabels(name=name, module=module, source=source, phase=phase, joined=joined, stats=stats)


def instruction_windows(ins: pd.DataFrame, ex: Executions) -> np.ndarray:
    """Per instruction, the index of the execution window holding its start (-1: none)."""
    s = int_col(ins, "start_ts", "Instruction.start_ts")
    k = np.searchsorted(ex.start, s, side="right") - 1
    inside = (k >= 0) & (s < ex.end[np.clip(k, 0, max(len(ex) - 1, 0))]) if len(ex) else np.zeros(len(s), bool)
    return np.where(inside, k, -1)
