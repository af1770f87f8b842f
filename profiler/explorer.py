"""Neuron Explorer output -> the studio's `Trace` and a measured `Profile`, so every panel works on hardware data.

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

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.model.run_summary import RunSummary, cost_per_step, ratio
from neuron_studio.profiler.profile import Profile, default_kernel_lookup
from neuron_studio.profiler.trace import HOST_COLUMNS, Trace, TraceFormatError

__all__ = [
    "ExplorerTables", "MeasuredRun", "MeasuredProfile", "read_tables", "find_profile_dir", "load_neuron_profile",
    "measured_run", "trace_from_tables", "profile_from_saved", "REQUIRED_TABLES", "OP_TABLES",
    "OPTIONAL_TABLES",
]

REQUIRED_TABLES = ("Summary",)
OP_TABLES = ("Instruction", "FrameworkNode")          # at least one
OPTIONAL_TABLES = ("Metadata", "FrameworkInstruction", "ActiveTime", "KernelInstructions", "KernelStackFrames",
                   "ExecutionInfo", "OpcodeSummary")
_KNOWN = REQUIRED_TABLES + OP_TABLES + OPTIONAL_TABLES
_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
_STUDIO_ENGINE = {"tensor": "tensor", "vector": "vector", "scalar": "scalar", "gpsimd": "gpsimd", "sync": "dma",
                  "dma": "dma", "none": "none"}
_ENGINE_ALIASES = {
    "tensor": "tensor", "pe": "tensor", "tensormatrix": "tensor", "tensorengine": "tensor", "matmul": "tensor",
    "vector": "vector", "dve": "vector", "vectorengine": "vector",
    "scalar": "scalar", "act": "scalar", "activation": "scalar", "scalarengine": "scalar",
    "gpsimd": "gpsimd", "pool": "gpsimd", "gpsimdengine": "gpsimd",
    "sync": "sync", "sp": "sync", "syncengine": "sync",
    "dma": "dma", "qsyncio": "dma",
}
ENGINE_NOTE = "dma: Sync engine (SP) instructions and Summary.dma_active_time_percent (DMA queues active)"
FALLBACK_REASON = "cpu fallback (reported by torch_neuronx.get_fallback_ops)"


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_CANON = {_norm(t): t for t in _KNOWN}


# -- reading ---------------------------------------------------------------------------------------------
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


def _has_summary(d: Path) -> bool:
    return any(_CANON.get(_norm(_split_stem(p.stem)[0])) == "Summary" for p in d.glob("*.parquet"))


def _has_tables(d: Path) -> bool:
    return any(_norm(_split_stem(p.stem)[0]) in _CANON for p in d.glob("*.parquet"))


def _split_stem(stem: str) -> tuple[str, int]:
    m = re.fullmatch(r"(.+?)_(\d+)", stem)
    return (m.group(1), int(m.group(2))) if m else (stem, -1)


def find_profile_dir(path: str | Path) -> Path:
    """The directory that holds the Explorer tables: `path` itself or its newest sub-directory that does."""
    p = Path(path).expanduser()
    if not p.exists():
        raise TraceFormatError(f"Neuron Explorer output {str(p)!r} does not exist")
    if p.is_file():
        return p
    if _has_tables(p) or _legacy_json_in(p) is not None:
        return p
    found = [d for depth in ("*", "*/*", "*/*/*") for d in p.glob(depth) if d.is_dir() and _has_summary(d)]
    if found:
        return max(found, key=lambda d: d.stat().st_mtime)
    raise TraceFormatError(
        f"no Neuron Explorer output in {str(p)!r}: expected Summary.parquet plus Instruction.parquet or "
        "FrameworkNode.parquet (from `neuron-explorer view -d <capture dir> --output-format parquet`), "
        "or a legacy system_profile.json / neuron-profile JSON file"
    )


def _legacy_json_in(d: Path) -> Path | None:
    for name in ("system_profile.json", "profile.json"):
        if (d / name).is_file():
            return d / name
    return None


def read_tables(path: str | Path) -> ExplorerTables:
    """Read an Explorer output (Parquet directory or legacy JSON) into `ExplorerTables`; checks required tables."""
    d = find_profile_dir(path)
    if d.is_file():
        return _require(read_legacy_json(d))
    if not _has_tables(d):
        legacy = _legacy_json_in(d)
        if legacy is not None:
            return _require(read_legacy_json(legacy))
    import pyarrow.parquet as pq

    parts: dict[str, list[tuple[int, Path]]] = {}
    for p in sorted(d.glob("*.parquet")):
        base, n = _split_stem(p.stem)
        canon = _CANON.get(_norm(base))
        if canon is not None and p.is_file():
            parts.setdefault(canon, []).append((n, p))
    tables: dict[str, pd.DataFrame] = {}
    files: dict[str, list[str]] = {}
    for name, lst in parts.items():
        lst.sort(key=lambda t: t[0])
        frames = []
        for _, p in lst:
            try:
                frames.append(pq.read_table(p).to_pandas())
            except Exception as e:  # noqa: BLE001 - any pyarrow failure becomes a format error naming the file
                raise TraceFormatError(f"cannot read Neuron Explorer table {name!r} from {str(p)!r}: {e}") from None
        tables[name] = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        files[name] = [p.name for _, p in lst]
    return _require(ExplorerTables(directory=d, tables=tables, files=files))


def _require(t: ExplorerTables) -> ExplorerTables:
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


# -- legacy JSON -----------------------------------------------------------------------------------------
def read_legacy_json(path: str | Path) -> ExplorerTables:
    """`system_profile.json` or an old `neuron-profile` JSON, mapped onto Summary/Instruction-shaped tables."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise TraceFormatError(f"cannot read {str(p)!r} as JSON: {e}") from None
    if isinstance(doc, dict) and isinstance(doc.get("instruction"), list):
        return _from_neuron_profile_json(doc, p)
    events = _system_events(doc)
    if events is not None:
        return _from_system_profile(events, p)
    raise TraceFormatError(
        f"{str(p)!r} is neither a neuron-profile JSON (with 'summary' and 'instruction' lists) nor a "
        "system_profile.json (with Neuron_Runtime_API_Event / Framework_Event records)")


def _from_neuron_profile_json(doc: dict, p: Path) -> ExplorerTables:
    rows = [r for r in doc["instruction"] if isinstance(r, dict)]
    ts = _num_list([r.get("timestamp") for r in rows], "instruction.timestamp", p)
    dur = _num_list([r.get("duration", 0) for r in rows], "instruction.duration", p)
    ins = pd.DataFrame({
        "start_ts": ts.astype(np.int64), "end_ts": (ts + dur).astype(np.int64), "duration_ns": dur.astype(np.int64),
        "engine": [_engine_of(r.get("label") or r.get("engine") or "") for r in rows],
        "timeline_track": [str(r.get("label") or "") for r in rows],
        "opcode": [str(r.get("opcode") or "") for r in rows],
        "operands": [str(r.get("operands") or "") for r in rows],
        "hlo_name": [str(r.get("hlo_name") or "") for r in rows],
    })
    summ = doc.get("summary")
    srow = summ[0] if isinstance(summ, list) and summ and isinstance(summ[0], dict) else (
        summ if isinstance(summ, dict) else {})
    srow = {k: v for k, v in srow.items() if isinstance(v, (int, float, str, bool)) or v is None}
    if "total_time" not in srow and len(ins):
        srow["total_time"] = float(ins["end_ts"].max() - ins["start_ts"].min()) * 1e-9
    tables = {"Summary": pd.DataFrame([srow]) if srow else pd.DataFrame({"total_time": [0.0]}), "Instruction": ins}
    return ExplorerTables(directory=p.parent, tables=tables, source="neuron-profile-json", files={"*": [p.name]})


def _num_list(vals: list, what: str, p: Path) -> np.ndarray:
    try:
        a = np.asarray([float(v) for v in vals], dtype=np.float64)
    except (TypeError, ValueError):
        raise TraceFormatError(f"{str(p)!r}: {what} has a non-numeric value") from None
    if len(a) and not np.all(np.isfinite(a)):
        raise TraceFormatError(f"{str(p)!r}: {what} has a non-finite value")
    return a


def _system_events(doc: Any) -> dict[str, list[dict]] | None:
    kinds = ("Neuron_Runtime_API_Event", "Framework_Event")
    out: dict[str, list[dict]] = {k: [] for k in kinds}
    seen = False
    if isinstance(doc, dict):
        for k in kinds:
            v = doc.get(k)
            if v is None:
                continue
            seen = True
            out[k].extend([e for e in (v if isinstance(v, list) else [v]) if isinstance(e, dict)])
    elif isinstance(doc, list):
        for rec in doc:
            if isinstance(rec, dict):
                for k in kinds:
                    if isinstance(rec.get(k), dict):
                        seen = True
                        out[k].append(rec[k])
    return out if seen else None


def _from_system_profile(events: dict[str, list[dict]], p: Path) -> ExplorerTables:
    rt, fw = events["Neuron_Runtime_API_Event"], events["Framework_Event"]

    def frame(evs: list[dict], what: str) -> pd.DataFrame:
        ts = _num_list([e.get("timestamp") for e in evs], f"{what}.timestamp", p)
        dur = _num_list([e.get("duration", 0) for e in evs], f"{what}.duration", p)
        return pd.DataFrame({"name": [str(e.get("name") or "") for e in evs], "start": ts.astype(np.int64),
                             "dur": dur.astype(np.int64), "group": [str(e.get("group") or "") for e in evs]})

    r, f = frame(rt, "Neuron_Runtime_API_Event"), frame(fw, "Framework_Event")
    execs = r[r["name"].str.contains("exec", case=False)] if len(r) else r
    t0 = int(min([x for x in (r["start"].min() if len(r) else None, f["start"].min() if len(f) else None)
                  if x is not None], default=0))
    rows = []
    ex_s = execs["start"].to_numpy(np.int64) if len(execs) else np.zeros(0, np.int64)
    ex_e = ex_s + (execs["dur"].to_numpy(np.int64) if len(execs) else np.zeros(0, np.int64))
    for ev in f.itertuples(index=False):
        s, e = int(ev.start), int(ev.start + ev.dur)
        if len(ex_s):
            cs, ce = np.clip(ex_s, s, e), np.clip(ex_e, s, e)
            active = _union_len(cs[ce > cs], ce[ce > cs])
        else:
            active = e - s
        rows.append({"framework_name": ev.name, "start_ts": s, "end_ts": e, "active_ns": active})
    ops = pd.DataFrame(rows, columns=["framework_name", "start_ts", "end_ts", "active_ns"])
    if len(ex_s):
        total = (int(ex_e.max()) - int(ex_s.min())) * 1e-9
    elif len(f):
        total = float((f["start"] + f["dur"]).max() - f["start"].min()) * 1e-9
    else:
        total = 0.0
    host = pd.DataFrame({
        "name": list(r["name"]) + list(f["name"]),
        "category": ["neuron_rt"] * len(r) + ["framework"] * len(f),
        "thread": np.zeros(len(r) + len(f), dtype=np.int64),
        "start_ns": np.concatenate([r["start"].to_numpy(np.int64), f["start"].to_numpy(np.int64)]) - t0,
        "dur_ns": np.concatenate([r["dur"].to_numpy(np.int64), f["dur"].to_numpy(np.int64)]),
        "input_shapes": [None] * (len(r) + len(f)), "flops": np.zeros(len(r) + len(f)),
        "stack": [None] * (len(r) + len(f)),
    })
    tables = {"Summary": pd.DataFrame({"total_time": [total]}), "_SystemOps": ops}
    # registered under FrameworkNode's slot so `_require` accepts it; `measured_run` reads the marker source
    tables["FrameworkNode"] = pd.DataFrame({"node_name": ops["framework_name"], "children_names": ["[]"] * len(ops),
                                            "start_ts": ops["start_ts"], "end_ts": ops["end_ts"],
                                            "time_intervals": [f"[[{a}, {a + d}]]" for a, d in
                                                               zip(ops["start_ts"], ops["active_ns"])]})
    return ExplorerTables(directory=p.parent, tables=tables, source="system-profile-json",
                          files={"*": [p.name]}, host=host)


# -- small parsers ----------------------------------------------------------------------------------------
def _engine_of(v: Any) -> str:
    s = _norm(str(v or ""))
    if s in _ENGINE_ALIASES:
        return _ENGINE_ALIASES[s]
    for k in ("tensor", "vector", "scalar", "gpsimd", "pool", "act", "sync", "dma"):
        if k in s:
            return _ENGINE_ALIASES.get(k, k)
    return "none"


_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _numbers(v: Any) -> list[float]:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, (int, float, np.integer, np.floating)):
        return [float(v)]
    if isinstance(v, (list, tuple, np.ndarray)):
        out: list[float] = []
        for x in v:
            out.extend(_numbers(x))
        return out
    return [float(x) for x in _NUM.findall(str(v))]


def _span(v: Any) -> float:
    """`total_time_<engine>`: "[min_ts, max_ts]" -> max - min; a plain number is already a duration (ns)."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not (isinstance(v, float) and math.isnan(v)):
        return max(0.0, float(v))
    xs = _numbers(v)
    return max(0.0, xs[-1] - xs[0]) if len(xs) >= 2 else 0.0


def _union_len(s: np.ndarray, e: np.ndarray) -> int:
    if len(s) == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    prev = np.maximum.accumulate(np.concatenate([[s[0]], e[:-1]]))
    return int(np.maximum(0, e - np.maximum(s, prev)).sum())


def _intervals_len(v: Any) -> int | None:
    xs = _numbers(v)
    if len(xs) < 2:
        return None
    a = np.asarray(xs[: len(xs) // 2 * 2], dtype=np.float64).reshape(-1, 2)
    return _union_len(a[:, 0], a[:, 1])


def _op_name(seg: str) -> str:
    seg = seg.strip()
    base = re.sub(r"\[\d+\]$", "", seg)
    if base.startswith("aten."):
        return "aten::" + base[5:].split(".")[0]
    return base or seg


def _split_path(name: str) -> tuple[str, str]:
    parts = [x for x in str(name).split("/") if x]
    if not parts:
        return "(unattributed)", ""
    return _op_name(parts[-1]), ".".join(parts[:-1])


def _col(df: pd.DataFrame, name: str, default: float = 0.0) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), default, dtype=np.float64)
    return pd.to_numeric(df[name], errors="coerce").fillna(default).to_numpy(np.float64)


def _strs(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), "", dtype=object)
    return np.asarray([("" if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v))
                       for v in df[name].tolist()], dtype=object)


def _row(df: pd.DataFrame | None) -> dict[str, Any]:
    if df is None or not len(df):
        return {}
    out = {}
    for k, v in df.iloc[0].to_dict().items():
        if isinstance(v, (np.integer,)):
            v = int(v)
        elif isinstance(v, (np.floating,)):
            v = float(v)
        elif isinstance(v, (np.bool_,)):
            v = bool(v)
        out[str(k)] = v
    return out


def _f(d: Mapping[str, Any], key: str) -> float | None:
    v = d.get(key)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def chip_from_instance_type(instance_type: str | None) -> str | None:
    """'trn2.48xlarge' -> 'trn2', 'trn1n.32xlarge' -> 'trn1', 'trn3...' -> 'trn3'; None when not Trainium."""
    m = re.match(r"\s*trn(\d)", str(instance_type or "").lower())
    return f"trn{m.group(1)}" if m else None


# -- op rows ----------------------------------------------------------------------------------------------
@dataclass
class _Ops:
    name: np.ndarray
    module: np.ndarray
    start: np.ndarray
    active: np.ndarray
    span_end: np.ndarray
    engine: np.ndarray
    flops: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    count: np.ndarray                      # instructions (or 1 per framework node)
    hlo: np.ndarray
    keys: list                             # per op: the grouping key (for kernel attribution)
    kernels: dict = field(default_factory=dict)   # key -> list of kernel dicts


def _ops_from_instructions(t: ExplorerTables) -> _Ops:
    ins = t.get("Instruction")
    assert ins is not None
    n = len(ins)
    start = _col(ins, "start_ts")
    end = _col(ins, "end_ts")
    dur = _col(ins, "duration_ns", np.nan) if "duration_ns" in ins.columns else end - start
    dur = np.where(np.isnan(dur), end - start, dur)
    if "end_ts" not in ins.columns:
        end = start + dur
    engine = np.asarray([_engine_of(v) for v in _strs(ins, "engine")], dtype=object)
    fid = _col(ins, "raw_framework_id", -1).astype(np.int64)
    hlo = _strs(ins, "hlo_name")
    layer = _strs(ins, "layer")
    fnames: dict[int, str] = {}
    fi = t.get("FrameworkInstruction")
    if fi is not None and "raw_framework_id" in fi.columns and "framework_name" in fi.columns:
        for k, v in zip(_col(fi, "raw_framework_id", -1).astype(np.int64), _strs(fi, "framework_name")):
            if v and int(k) not in fnames:
                fnames[int(k)] = v
    label = np.empty(n, dtype=object)
    for i in range(n):
        f = int(fid[i])
        label[i] = fnames.get(f) or hlo[i] or layer[i] or (f"framework_op[{f}]" if f >= 0 else "(unattributed)")
    df = pd.DataFrame({"fid": fid, "label": label, "start": start, "end": end, "dur": dur, "engine": engine,
                       "flops": np.maximum(_col(ins, "raw_flops") - _col(ins, "flops_transpose"), 0.0),
                       "rd": _col(ins, "hbm_read_bytes"), "wr": _col(ins, "hbm_write_bytes"), "hlo": hlo})
    df["g"] = df.groupby(["fid", "label"], sort=False).ngroup()
    # exact union of each op's instruction intervals: sum of max(0, end - max(start, max end so far in the op))
    srt = df.sort_values(["g", "start"], kind="stable")
    prev = srt.groupby("g")["end"].cummax().groupby(srt["g"]).shift(1)
    srt_active = np.maximum(0.0, srt["end"] - np.maximum(srt["start"], prev.fillna(-np.inf)))
    agg = pd.DataFrame({"g": srt["g"], "a": srt_active}).groupby("g")["a"].sum()
    grp = df.groupby("g", sort=True)
    first = grp.agg(label=("label", "first"), fid=("fid", "first"), start=("start", "min"), span_end=("end", "max"),
                    flops=("flops", "sum"), rd=("rd", "sum"), wr=("wr", "sum"), count=("dur", "size"))
    first["hlo"] = grp["hlo"].agg(lambda s: next((x for x in s if x), ""))
    eng_time = df.pivot_table(index="g", columns="engine", values="dur", aggfunc="sum", fill_value=0.0)
    engine_g = eng_time.idxmax(axis=1).reindex(first.index).fillna("none")
    names, modules = zip(*[_split_path(x) for x in first["label"]]) if len(first) else ((), ())
    keys = [(int(f), str(lbl)) for f, lbl in zip(first["fid"], first["label"])]
    ops = _Ops(
        name=np.asarray(names, dtype=object), module=np.asarray(modules, dtype=object),
        start=first["start"].to_numpy(np.float64), active=agg.reindex(first.index).to_numpy(np.float64),
        span_end=first["span_end"].to_numpy(np.float64),
        engine=np.asarray([_STUDIO_ENGINE.get(e, "none") for e in engine_g], dtype=object),
        flops=first["flops"].to_numpy(np.float64), bytes_read=first["rd"].to_numpy(np.float64),
        bytes_written=first["wr"].to_numpy(np.float64), count=first["count"].to_numpy(np.int64),
        hlo=first["hlo"].to_numpy(object), keys=keys,
    )
    ops.kernels = _kernels(t, df["g"].to_numpy(), dur, keys)
    return ops


def _kernels(t: ExplorerTables, g: np.ndarray, dur: np.ndarray, keys: list) -> dict:
    """Per op key: the NKI kernels that ran it, hottest first, with the source line that took the most time."""
    ins = t.get("Instruction")
    ki, frames = t.get("KernelInstructions"), t.get("KernelStackFrames")
    n = len(ins)
    file = np.full(n, "", dtype=object)
    line = np.full(n, -1, dtype=np.int64)
    func = np.full(n, "", dtype=object)
    kern = np.full(n, "", dtype=object)
    names: dict[int, tuple[str, int | None]] = {}
    if frames is not None and "stack_frame_id" in frames.columns:
        for sid, fq, parent in zip(_col(frames, "stack_frame_id", -1).astype(np.int64),
                                   _strs(frames, "fully_qualified_function_name"),
                                   _col(frames, "parent_stack_frame_id", -1).astype(np.int64)):
            names[int(sid)] = (fq, int(parent) if parent >= 0 else None)

    def outermost(sid: int) -> tuple[str, str]:
        deepest = names.get(sid, ("", None))[0]
        top, cur, seen = deepest, sid, set()
        while cur is not None and cur in names and cur not in seen:
            seen.add(cur)
            fq, parent = names[cur]
            top = fq or top
            cur = parent
        return top, deepest

    if ki is not None and "kernel_instruction_name" in ki.columns and "kernel_instruction_name" in ins.columns:
        kfile, kline = _strs(ki, "file_path"), _col(ki, "line_number", -1).astype(np.int64)
        ksid = _col(ki, "stack_frame_id", -1).astype(np.int64)
        index = {nm: i for i, nm in enumerate(_strs(ki, "kernel_instruction_name")) if nm}
        cache: dict[int, tuple[str, str]] = {}
        for i, nm in enumerate(_strs(ins, "kernel_instruction_name")):
            j = index.get(nm) if nm else None
            if j is None:
                continue
            file[i], line[i] = kfile[j], kline[j]
            sid = int(ksid[j])
            if sid >= 0:
                if sid not in cache:
                    cache[sid] = outermost(sid)
                kern[i], func[i] = cache[sid]
    if "nki_source_location" in ins.columns:  # fallback: "file.py:42" or a list of such strings
        for i, loc in enumerate(_strs(ins, "nki_source_location")):
            if file[i] or not loc:
                continue
            m = re.search(r"([^'\"\[\],\s][^'\"\[\],]*?):(\d+)", loc)
            if m:
                file[i], line[i] = m.group(1).strip(), int(m.group(2))
    has = np.asarray([bool(f) for f in file])
    if not has.any():
        return {}
    df = pd.DataFrame({"g": g[has], "file": file[has], "line": line[has], "func": func[has], "kern": kern[has],
                       "dur": dur[has]})
    df["kern"] = [k or Path(f).stem for k, f in zip(df["kern"], df["file"])]
    out: dict = {}
    for (gi, k), sub in df.groupby(["g", "kern"], sort=False):
        lines = sub.groupby(["file", "line", "func"], sort=False)["dur"].sum().sort_values(ascending=False)
        (f0, l0, fn0), _t = lines.index[0], lines.iloc[0]
        out.setdefault(keys[int(gi)], []).append({
            "kernel": k, "name": k, "kind": "runs_as", "file": f0, "line": int(l0) if l0 >= 0 else None,
            "function": fn0 or k, "saving_ns": None, "measured": True, "instruction_ns": float(sub["dur"].sum()),
            "lines": [{"file": f, "line": int(ln) if ln >= 0 else None, "function": fn or None,
                       "instruction_ns": float(v)} for (f, ln, fn), v in lines.head(5).items()],
        })
    for v in out.values():
        v.sort(key=lambda k: -k["instruction_ns"])
    return out


def _ops_from_framework_nodes(t: ExplorerTables) -> _Ops:
    fn = t.get("FrameworkNode")
    assert fn is not None
    if "framework_name" in fn.columns:
        paths = list(_strs(fn, "framework_name"))
        leaf = np.ones(len(fn), dtype=bool)
    else:
        node, parent = _strs(fn, "node_name"), _strs(fn, "parent_name")
        parent_of: dict[str, str] = {}
        for a, b in zip(node, parent):
            parent_of.setdefault(a, b)
        paths = []
        for a in node:
            segs, cur, seen = [a], parent_of.get(a), {a}
            while cur and cur not in seen and cur in parent_of:
                segs.append(cur)
                seen.add(cur)
                cur = parent_of.get(cur)
            paths.append("/".join(reversed(segs)))
        kids = _strs(fn, "children_names") if "children_names" in fn.columns else np.full(len(fn), "")
        leaf = np.asarray([not re.sub(r"[\[\]\s,]", "", k) for k in kids], dtype=bool)
    sel = np.flatnonzero(leaf)
    start = _col(fn, "start_ts")[sel]
    end = _col(fn, "end_ts")[sel] if "end_ts" in fn.columns else start
    ti = _strs(fn, "time_intervals")[sel] if "time_intervals" in fn.columns else np.full(len(sel), "")
    active = np.asarray([(_intervals_len(v) if v else None) for v in ti], dtype=object)
    active = np.asarray([a if a is not None else max(0.0, e - s) for a, s, e in zip(active, start, end)],
                        dtype=np.float64)
    spans = np.zeros((len(sel), len(_ENGINES)))
    for j, e in enumerate(_ENGINES):
        c = f"total_time_{e}"
        if c in fn.columns:
            spans[:, j] = [_span(v) for v in fn[c].to_numpy(object)[sel]]
        elif f"{e}_engine_instruction_count" in fn.columns:
            spans[:, j] = _col(fn, f"{e}_engine_instruction_count")[sel] * 1e-9  # tie-break only
    engine = np.asarray([_STUDIO_ENGINE[_ENGINES[int(np.argmax(r))]] if r.max() > 0 else "none" for r in spans],
                        dtype=object)
    elems = np.asarray([sum(_numbers(v)) for v in _strs(fn, "element_count_per_interval")[sel]]) \
        if "element_count_per_interval" in fn.columns else np.zeros(len(sel))
    telems = np.asarray([sum(_numbers(v)) for v in _strs(fn, "transpose_element_count_per_interval")[sel]]) \
        if "transpose_element_count_per_interval" in fn.columns else np.zeros(len(sel))
    flops = 2.0 * np.maximum(elems - telems, 0.0)
    names, modules = zip(*[_split_path(paths[i]) for i in sel]) if len(sel) else ((), ())
    return _Ops(
        name=np.asarray(names, dtype=object), module=np.asarray(modules, dtype=object), start=start, active=active,
        span_end=end, engine=engine, flops=flops, bytes_read=_col(fn, "hbm_read_bytes")[sel],
        bytes_written=_col(fn, "hbm_write_bytes")[sel], count=np.ones(len(sel), dtype=np.int64),
        hlo=np.full(len(sel), "", dtype=object), keys=[(-1, paths[i]) for i in sel],
    )


# -- measured run -----------------------------------------------------------------------------------------
class MeasuredGroups(Sequence):
    """Measured runs have no modeled fusion groups: an empty sequence with the same `to_frame()`."""

    COLUMNS = ("id", "core", "first_row", "last_row", "n_ops", "launches", "start_ns", "end_ns", "reason",
               "boundary_row", "boundary_reason")

    def __len__(self) -> int:
        return 0

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return []
        raise IndexError(i)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series([], dtype="object" if c == "boundary_reason" else "int64")
                             for c in self.COLUMNS})


@dataclass(frozen=True)
class MeasuredRun:
    """Measured stand-in for `ModeledRun`: the same interface `Profile` reads (`ops`, `ops_frame()`, `groups`,
    `summary`, `config`), filled from Neuron Explorer tables instead of the cost model.

    `ops` columns: seq, name, core, engine, start_ns, end_ns, duration_ns, compute_ns, memory_ns,
    launch_overhead_ns (0: measured time already includes it), flops, bytes_read, bytes_written, bound
    (the roof the op is closer to, from its measured FLOP/s and bytes/s), group (-1), launch, fallback.
    `kernels`: {(op, module): [kernel dicts]} from KernelInstructions/KernelStackFrames.
    `active_time`: ActiveTime rows (engine, core, start_ns, end_ns) rebased like the ops, or None.
    """

    ops: dict[str, np.ndarray]
    groups: MeasuredGroups
    summary: RunSummary
    config: Any
    kernels: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
    active_time: pd.DataFrame | None = None
    modeled: bool = False

    def ops_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.ops)

    def kernels_for(self, op: str, module: str) -> list[dict]:
        return [dict(k) for k in self.kernels.get((op, module), [])]


@dataclass(frozen=True)
class _Peaks:
    flops_per_s: float
    hbm_bytes_per_s: float
    lnc: int
    source: str


def _peaks(meta: Mapping[str, Any], chip: str) -> _Peaks:
    clock, rows, cols = _f(meta, "tensor_engine_clock_freq"), _f(meta, "tensor_engine_num_rows"), \
        _f(meta, "tensor_engine_num_cols")
    pcores = int(_f(meta, "num_physical_cores") or 0)
    hbm = _f(meta, "hbm_ddr_bandwidth")
    from neuron_studio.profiler.specs import chip_spec

    spec = chip_spec(chip)
    lnc = pcores or spec.lnc_default
    if clock and rows and cols:
        flops = clock * 1e9 * rows * cols * 2.0 * lnc
        src = "Metadata: tensor_engine_clock_freq x num_rows x num_cols x 2 FLOP/MAC x num_physical_cores"
    else:
        flops = spec.core_tensor_bf16_flops_per_s * lnc
        src = f"spec table ({chip}): per-core BF16 Tensor Engine peak x {lnc} physical cores (no Metadata)"
    if hbm:
        src += "; HBM: Metadata.hbm_ddr_bandwidth (one HBM stack, Explorer's MBU denominator)"
    else:
        hbm = spec.hbm_bandwidth_bytes_per_s / max(1, spec.logical_cores_per_chip(lnc))
        src += f"; HBM: spec table ({chip}) chip bandwidth / logical cores (no Metadata)"
    return _Peaks(float(flops), float(hbm), int(lnc), src)


def _bound(engine: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, active: np.ndarray, peaks: _Peaks,
           fallback: np.ndarray) -> np.ndarray:
    t = np.maximum(active, 1.0) * 1e-9
    comp = flops / t / max(peaks.flops_per_s, 1.0)
    mem = nbytes / t / max(peaks.hbm_bytes_per_s, 1.0)
    out = np.where(mem > comp, "memory", "compute").astype(object)
    out[(active <= 0)] = "none"
    out[fallback] = "fallback"
    return out


def measured_run(t: ExplorerTables, *, chip: str | None = None, mode: str = "eager",
                 tracking: Any = None) -> tuple[MeasuredRun, dict[str, Any], pd.DataFrame]:
    """Tables -> (MeasuredRun, the trace metadata it implies, the trace's `ops` rows)."""
    from neuron_studio.profiler.model.config import ModelConfig
    from neuron_studio.profiler.specs import chip_spec

    meta_row = _row(t.get("Metadata"))
    summ = _row(t.get("Summary"))
    chip_found = chip_from_instance_type(meta_row.get("instance_type"))
    chip = (chip or chip_found or "trn2").lower()
    peaks = _peaks(meta_row, chip)
    ops = _ops_from_instructions(t) if t.has("Instruction") else _ops_from_framework_nodes(t)
    core = int(_f(meta_row, "neuroncore_idx") or 0)

    # timeline origin: first hardware timestamp, else the first op
    t0 = _f(meta_row, "first_hw_timestamp")
    if t0 is None or (len(ops.start) and t0 > ops.start.min()):
        t0 = float(ops.start.min()) if len(ops.start) else 0.0
    order = np.argsort(ops.start, kind="stable")
    fb_names = list((tracking.fallback.items() if tracking is not None else []))
    n_dev, n_fb = len(order), sum(int(c) for _, c in fb_names)
    n = n_dev + n_fb
    start = np.concatenate([ops.start[order] - t0, np.zeros(n_fb)]).astype(np.int64)
    active = np.concatenate([ops.active[order], np.zeros(n_fb)])
    end = start + active.astype(np.int64)
    if n_fb:
        start[n_dev:] = end[n_dev:] = int(end[:n_dev].max()) if n_dev else 0
    fb_rows = [name for name, c in fb_names for _ in range(int(c))]
    name = np.concatenate([ops.name[order], np.asarray(fb_rows, dtype=object)]).astype(object)
    module = np.concatenate([ops.module[order], np.full(n_fb, "", dtype=object)]).astype(object)
    engine = np.concatenate([ops.engine[order], np.full(n_fb, "none", dtype=object)]).astype(object)
    flops = np.concatenate([ops.flops[order], np.zeros(n_fb)])
    rd = np.concatenate([ops.bytes_read[order], np.zeros(n_fb)])
    wr = np.concatenate([ops.bytes_written[order], np.zeros(n_fb)])
    fallback = np.concatenate([np.full(n_dev, None, dtype=object), np.full(n_fb, FALLBACK_REASON, dtype=object)])
    is_fb = np.concatenate([np.zeros(n_dev, bool), np.ones(n_fb, bool)])
    bound = _bound(engine, flops, rd + wr, active, peaks, is_fb)
    seq = np.arange(n, dtype=np.int64)
    launch = np.zeros(n, dtype=bool)
    if n_dev:
        launch[0] = True
    run_ops = {
        "seq": seq, "name": name, "core": np.full(n, core, dtype=np.int64), "engine": engine,
        "start_ns": start.astype(np.float64), "end_ns": end.astype(np.float64), "duration_ns": active,
        "compute_ns": np.where(bound == "compute", active, 0.0), "memory_ns": np.where(bound == "memory", active, 0.0),
        "launch_overhead_ns": np.zeros(n), "flops": flops, "bytes_read": rd, "bytes_written": wr, "bound": bound,
        "group": np.full(n, -1, dtype=np.int64), "launch": launch, "fallback": fallback,
    }

    # summary: Explorer's own figures first, derived ones only where a column is absent
    step_s = _f(summ, "total_time") or _f(summ, "total_exec_time")
    if not step_s:
        step_s = float(end.max() - start.min()) * 1e-9 if n_dev else 0.0
    step_ns = step_s * 1e9
    busy: dict[str, float] = {}
    util: dict[str, float] = {}
    derived: list[str] = []
    dev_busy = {e: float(active[:n_dev][engine[:n_dev] == e].sum()) for e in ("tensor", "vector", "scalar",
                                                                               "gpsimd", "dma")}
    for e in ("tensor", "vector", "scalar", "gpsimd", "sync"):
        pct, sec = _f(summ, f"{e}_engine_active_time_percent"), _f(summ, f"{e}_engine_active_time")
        key = e
        if pct is None and sec is None:
            if e == "sync":
                continue
            derived.append(e)
            busy[key] = dev_busy[e]
            util[key] = min(1.0, ratio(busy[key], step_ns))
            continue
        util[key] = (pct / 100.0) if pct is not None else min(1.0, ratio((sec or 0) * 1e9, step_ns))
        busy[key] = (sec * 1e9) if sec is not None else util[key] * step_ns
    dpct, dsec = _f(summ, "dma_active_time_percent"), _f(summ, "dma_active_time")
    if dpct is not None or dsec is not None:
        util["dma"] = (dpct / 100.0) if dpct is not None else min(1.0, ratio((dsec or 0) * 1e9, step_ns))
        busy["dma"] = (dsec * 1e9) if dsec is not None else util["dma"] * step_ns
    elif "sync" in util:
        util["dma"], busy["dma"] = util["sync"], busy["sync"]
    else:
        busy["dma"] = dev_busy["dma"]
        util["dma"] = min(1.0, ratio(busy["dma"], step_ns))
        derived.append("dma")
    total_bytes = (_f(summ, "hbm_read_bytes") or 0.0) + (_f(summ, "hbm_write_bytes") or 0.0)
    if not total_bytes:
        total_bytes = float((rd + wr).sum())
    total_flops = _f(summ, "model_flops") or (
        max(0.0, (_f(summ, "hardware_flops") or 0.0) - (_f(summ, "transpose_flops") or 0.0))) or float(flops.sum())
    mfu_pct, mbu_pct = _f(summ, "mfu_estimated_percent"), _f(summ, "mbu_estimated_percent")
    mfu = mfu_pct / 100.0 if mfu_pct is not None else ratio(total_flops, peaks.flops_per_s * step_s)
    mbu = mbu_pct / 100.0 if mbu_pct is not None else ratio(total_bytes, peaks.hbm_bytes_per_s * step_s)
    ai = _f(summ, "mm_arithmetic_intensity") or ratio(total_flops, total_bytes)
    execs = t.get("ExecutionInfo")
    launches = len(execs) if execs is not None and len(execs) else int(n_dev > 0)
    spec = chip_spec(chip)
    price = spec.price_per_chip_hour_usd
    c_step = cost_per_step(step_ns, price, 1)
    nan = float("nan")
    has_fw_sys = t.source == "system-profile-json"
    figures = {
        "device_time": "measured",
        "engine_utilization": "unavailable" if has_fw_sys else ("measured" if not derived else "measured (partly "
                                                                "derived from op rows)"),
        "mfu": "measured" if mfu_pct is not None else ("unavailable" if has_fw_sys else "derived"),
        "mbu": "measured" if mbu_pct is not None else ("unavailable" if has_fw_sys else "derived"),
        "host_time": "unavailable",
        "cost": "modeled",
    }
    summary = RunSummary(
        chip=chip, mode=mode, n_ops=n, step_time_ns=step_ns, launches=launches, groups=0, cores_used=1,
        chips_used=1, lnc=peaks.lnc, engine_busy_ns=busy, engine_utilization=util, mfu=float(mfu), mbu=float(mbu),
        arithmetic_intensity=float(ai), total_flops=float(total_flops), total_bytes=float(total_bytes),
        peak_flops_per_s=peaks.flops_per_s, hbm_bytes_per_s=peaks.hbm_bytes_per_s, fallback_ops=n_fb,
        host_fallback_ns=0.0, recompiles=0, compile_time_ns=0.0, h100_step_time_ns=nan, h100_gpus=0,
        price_per_chip_hour_usd=price, h100_price_per_chip_hour_usd=nan, cost_per_step_usd=c_step,
        cost_per_1000_steps_usd=c_step * 1000, h100_cost_per_step_usd=nan, h100_cost_per_1000_steps_usd=nan,
        price_sources={chip: spec.sources.get("price_per_chip_hour_usd", "")},
        assumptions={
            "source": f"measured: Neuron Explorer tables in {t.directory} ({t.source})",
            "peaks": peaks.source,
            "mfu": "Summary.mfu_estimated_percent" if mfu_pct is not None else
                   "model FLOPs / (peak x Summary.total_time) (Summary has no mfu_estimated_percent)",
            "mbu": "Summary.mbu_estimated_percent" if mbu_pct is not None else
                   "HBM bytes / (HBM peak x Summary.total_time)",
            "engines": ENGINE_NOTE,
            "h100": "no H100 comparison for measured runs",
            "cost": "price per chip-hour x measured device time (one chip)",
        },
        modeled=False,
    )
    # kernels keyed by (op, module) of the rows they belong to
    kernels: dict[tuple[str, str], list[dict]] = {}
    for i, key in enumerate(ops.keys):
        ks = ops.kernels.get(key)
        if ks:
            kernels.setdefault((str(ops.name[i]), str(ops.module[i])), []).extend(ks)
    active_time = None
    at = t.get("ActiveTime")
    if at is not None and {"start_ts", "end_ts", "engine"} <= set(at.columns):
        active_time = pd.DataFrame({
            "engine": [_STUDIO_ENGINE.get(_engine_of(e), "none") for e in _strs(at, "engine")],
            "core": _col(at, "pcore_idx").astype(np.int64),
            "start_ns": (_col(at, "start_ts") - t0).astype(np.int64),
            "end_ns": (_col(at, "end_ts") - t0).astype(np.int64),
        })
    run = MeasuredRun(ops=run_ops, groups=MeasuredGroups(), summary=summary, config=ModelConfig(), kernels=kernels,
                      active_time=active_time)
    trace_ops = pd.DataFrame({
        "seq": seq, "name": name, "overload": np.full(n, "", dtype=object),
        "start_ns": start, "end_ns": start,  # no host timing per device op: host duration 0
        "thread": np.zeros(n, dtype=np.int64), "device_index": np.full(n, core, dtype=np.int32),
        "input_shapes": np.full(n, "", dtype=object), "input_dtypes": np.full(n, "", dtype=object),
        "output_shapes": np.full(n, "", dtype=object), "output_dtypes": np.full(n, "", dtype=object),
        "flops": flops, "in_bytes": rd, "out_bytes": wr, "elems": np.zeros(n), "itemsize": np.zeros(n, np.int8),
        "dtype_class": np.zeros(n, np.int8), "is_view": np.zeros(n, bool), "is_inplace": np.zeros(n, bool),
        "sync": np.full(n, None, dtype=object), "transfer": np.full(n, None, dtype=object),
        "transfer_bytes": np.zeros(n), "fallback": fallback, "source": np.full(n, None, dtype=object),
        "graph": np.zeros(n, np.int64), "deterministic": np.zeros(n, bool),
        "phase": np.asarray(["backward" if "backward" in str(x).lower() else "forward" for x in name], dtype=object),
        "module": module, "step": np.zeros(n, np.int32),
        # extra (measured-only) columns, kept by Trace
        "device_ns": active.astype(np.int64), "span_end_ns": np.concatenate(
            [ops.span_end[order] - t0, end[n_dev:]]).astype(np.int64),
        "engine": engine, "instructions": np.concatenate([ops.count[order], np.zeros(n_fb, np.int64)]),
        "hlo_name": np.concatenate([ops.hlo[order], np.full(n_fb, "", dtype=object)]).astype(object),
    })
    meta = {
        "format": "neuron-studio-trace", "version": 1, "backend": "real", "chip": chip, "mode": mode,
        "status": "ok", "figures": figures, "engine_aliases": {"dma": ENGINE_NOTE},
        "source": {"kind": t.source, "directory": str(t.directory), "tables": sorted(t.tables),
                   "files": t.files, "profile_schema_version": meta_row.get("profile_schema_version"),
                   "explorer_version": meta_row.get("explorer_version"),
                   "instance_type": meta_row.get("instance_type"),
                   "runtime_version": meta_row.get("runtime_version"),
                   "compiler_version": meta_row.get("compiler_version"),
                   "chip_from": "Metadata.instance_type" if chip_found and chip == chip_found else "argument/default"},
        "measured_summary": summary.to_dict(),
        "measured_kernels": [{"op": k[0], "module": k[1], "kernels": v} for k, v in kernels.items()],
    }
    return run, meta, trace_ops


# -- the measured Profile ---------------------------------------------------------------------------------
class MeasuredProfile(Profile):
    """A `Profile` over measured data: same analyses; the hot path leads with the NKI kernels (file/line) the
    profile saw run each op, and the utilization timeline comes from Explorer's `ActiveTime` when present."""

    def _hot_path(self, top_share: float, max_ops: int) -> list:
        hot = super()._hot_path(top_share, max_ops)
        for h in hot:
            measured = self.device_run.kernels_for(h.op, h.module)
            if measured:
                h.kernels = measured + [k for k in h.kernels if not k.get("measured")]
        return hot

    def engine_utilization(self, bins: int = 100) -> pd.DataFrame:
        at = getattr(self.device_run, "active_time", None)
        if at is None or not len(at):
            return super().engine_utilization(bins=bins)
        from neuron_studio.profiler.analysis import utilization as _util

        frame = pd.DataFrame({"device_start_ns": at["start_ns"], "device_end_ns": at["end_ns"],
                              "engine": at["engine"], "core": at["core"]})
        lo = int(min(frame["device_start_ns"].min(), self.ops["device_start_ns"].min() if len(self.ops) else 0))
        hi = int(max(frame["device_end_ns"].max(), self.ops["device_end_ns"].max() if len(self.ops) else 0,
                     self.summary.step_time_ns))  # the whole measured device time (Summary.total_time)
        return _util.engine_utilization(frame, bins=bins, cores=max(1, int(at["core"].nunique())), start_ns=lo,
                                        end_ns=hi)


def trace_from_tables(t: ExplorerTables, *, chip: str | None = None, mode: str = "eager", steps: int = 1,
                      name: str | None = None, tracking: Any = None,
                      extra_meta: Mapping[str, Any] | None = None) -> tuple[Trace, MeasuredRun]:
    run, meta, ops = measured_run(t, chip=chip, mode=mode, tracking=tracking)
    meta.update({"name": name, "steps": int(max(1, steps)), "warmup": 0, "dropped_events": 0,
                 "wall_ns": 0, "module_classes": {}})
    if tracking is not None:
        meta["op_tracking"] = tracking.to_dict()
    if extra_meta:
        meta.update(dict(extra_meta))
    host = t.host if t.host is not None else None
    if host is not None:
        host = host[list(HOST_COLUMNS)]
    return Trace(ops=ops, host=host, meta=meta), run


def load_neuron_profile(path: str | Path, *, chip: str | None = None, mode: str = "eager", steps: int = 1,
                 name: str | None = None, tracking: Any = None, extra_meta: Mapping[str, Any] | None = None,
                 kernel_lookup: Callable[..., list[dict]] | None = default_kernel_lookup) -> MeasuredProfile:
    """A measured `Profile` from Neuron Explorer output (Parquet directory, system_profile.json or
    neuron-profile JSON). `chip` overrides Metadata.instance_type; `steps` divides per-step figures;
    `tracking` (an `OpTracking`) adds the ops TorchNeuron ran on CPU as fallback rows."""
    tables = read_tables(path)
    trace, run = trace_from_tables(tables, chip=chip, mode=mode, steps=steps, name=name, tracking=tracking,
                                   extra_meta=extra_meta)
    return MeasuredProfile(trace, run, kernel_lookup=kernel_lookup)


def profile_from_saved(trace: Trace, device_ops: pd.DataFrame | None = None, *,
                       kernel_lookup: Callable[..., list[dict]] | None = default_kernel_lookup) -> MeasuredProfile:
    """Rebuild a measured Profile from a stored run (trace tables + `device_ops`, as `save_profile` writes them).

    Needs `trace.meta["measured_summary"]`; kernels come from `trace.meta["measured_kernels"]`. The
    utilization timeline falls back to the op rows (ActiveTime is not stored)."""
    from neuron_studio.profiler.model.config import ModelConfig

    ms = trace.meta.get("measured_summary")
    if not isinstance(ms, Mapping):
        raise TraceFormatError("trace has no 'measured_summary' in its metadata: not a measured (real) run")
    fields = {f for f in RunSummary.__dataclass_fields__}
    summary = RunSummary(**{k: v for k, v in ms.items() if k in fields})
    n = len(trace.ops)
    if device_ops is not None and len(device_ops) == n:
        d = device_ops
        start, end = d["start_ns"].to_numpy(np.float64), d["end_ns"].to_numpy(np.float64)
        engine, core, bound = d["engine"].astype(str).to_numpy(object), d["core"].to_numpy(np.int64), \
            d["bound"].astype(str).to_numpy(object)
        rd, wr = d["bytes_read"].to_numpy(np.float64), d["bytes_written"].to_numpy(np.float64)
    else:
        o = trace.ops
        start = o["start_ns"].to_numpy(np.float64)
        end = start + (o["device_ns"].to_numpy(np.float64) if "device_ns" in o else 0.0)
        engine = o["engine"].astype(str).to_numpy(object) if "engine" in o else np.full(n, "none", dtype=object)
        core = o["device_index"].to_numpy(np.int64)
        bound = np.full(n, "none", dtype=object)
        rd, wr = o["in_bytes"].to_numpy(np.float64), o["out_bytes"].to_numpy(np.float64)
    dur = end - start
    fb = trace.ops["fallback"].to_numpy(object)
    ops = {"seq": trace.ops["seq"].to_numpy(np.int64), "name": trace.ops["name"].to_numpy(object), "core": core,
           "engine": engine, "start_ns": start, "end_ns": end, "duration_ns": dur,
           "compute_ns": np.where(bound == "compute", dur, 0.0), "memory_ns": np.where(bound == "memory", dur, 0.0),
           "launch_overhead_ns": np.zeros(n), "flops": trace.ops["flops"].to_numpy(np.float64), "bytes_read": rd,
           "bytes_written": wr, "bound": bound, "group": np.full(n, -1, dtype=np.int64),
           "launch": np.arange(n) == 0, "fallback": fb}
    kernels = {(k["op"], k["module"]): list(k["kernels"]) for k in trace.meta.get("measured_kernels") or []
               if isinstance(k, Mapping)}
    run = MeasuredRun(ops=ops, groups=MeasuredGroups(), summary=summary, config=ModelConfig(), kernels=kernels)
    return MeasuredProfile(trace, run, kernel_lookup=kernel_lookup)
