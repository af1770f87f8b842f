"""The per-process studio session: the run store in use and the last profile (the run store's state).

Also saving a profiled run into the store and loading it back, shared by the magics, the CLI and
`neuron_studio.last()`.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from neuron_studio.store import RunRecord, RunStore, resolve_store_root

__all__ = ["Session", "session", "save_profile", "load_stored_profile", "last", "DEVICE_OPS_COLUMNS"]

DEVICE_OPS_COLUMNS = ["seq", "name", "core", "engine", "start_ns", "end_ns", "flops", "bytes_read", "bytes_written",
                      "bound", "module", "source", "thread", "step", "launch_ns", "input_shapes", "output_shapes"]


@dataclass
class Session:
    store_root: Path | None = None
    last_profile: Any = None
    last_profile_store: Path | None = None  # root of the store `last_profile` was saved in (its run_id is there)
    compiled_cells: dict = field(default_factory=dict)  # (cell source, namespace id) -> compiled function
    _store: RunStore | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def store(self) -> RunStore:
        with self.lock:
            root = self.store_root or resolve_store_root()
            if self._store is None or self._store.root != Path(root).expanduser().absolute():
                self._store = RunStore(root)
            return self._store

    def remember(self, prof: Any, store: RunStore) -> None:
        """`prof` is the last profile, saved as its run_id in `store`."""
        self.last_profile, self.last_profile_store = prof, store.root

    def stored_profile(self, store: RunStore, rec: RunRecord) -> Any:
        """Run `rec` of `store` as a Profile: the last profile when it is that modeled run (what the store holds,
        already modeled in this process: reloading and re-modeling it gives the same figures), else loaded."""
        last = self.last_profile
        if (last is not None and self.last_profile_store == store.root and getattr(last, "run_id", None) == rec.id
                and getattr(last, "modeled_figures", False)):  # a measured run is rebuilt from what was saved
            return last
        return load_stored_profile(store, rec)

    def use_store(self, root: str | os.PathLike[str] | None) -> RunStore:
        """Point the session at another store directory (None: the working directory's .neuron_studio)."""
        self.store_root = Path(root) if root is not None else None
        self._store = None
        return self.store


_SESSION: Session | None = None
_SESSION_LOCK = threading.Lock()


def session() -> Session:
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = Session()
        return _SESSION


def last() -> Any:
    """The Profile of the last `%%neuron` cell (or `neuron_studio.profile(...)` call) in this process."""
    prof = session().last_profile
    if prof is None:
        raise LookupError("no profiled run yet in this process: run a %%neuron cell first")
    return prof


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def save_profile(store: RunStore, run_id: int, prof: Any) -> None:
    """Write the run's trace tables and the modeled device timeline (each file atomically)."""
    tr = prof.trace
    store.save_table(run_id, "ops", _objects_as_str(tr.ops))
    store.save_table(run_id, "host", _objects_as_str(tr.host))
    store.save_table(run_id, "compiles", _objects_as_str(tr.compiles))
    if len(tr.memory):
        store.save_table(run_id, "memory", _objects_as_str(tr.memory))
    store.save_table(run_id, "meta", pd.DataFrame({"json": [json.dumps(_json_safe(tr.meta))]}))
    m = prof.ops
    dev = pd.DataFrame({
        "seq": m["seq"].astype("int64"), "name": m["op"].astype(str), "core": m["core"].astype("int32"),
        "engine": m["engine"].astype(str), "start_ns": m["device_start_ns"].astype("int64"),
        "end_ns": m["device_end_ns"].astype("int64"), "flops": m["flops"].astype("int64"),
        "bytes_read": prof.device_run.ops["bytes_read"].astype("int64"),
        "bytes_written": prof.device_run.ops["bytes_written"].astype("int64"),
        "bound": m["bound"].astype(str), "module": m["module"].astype(str),
        "source": m["source"].fillna("").astype(str),
        # for the trace viewer: the host thread that launched the op, its step, the launch cost, the shapes
        "launch_ns": m["launch_ns"].fillna(0).astype("int64"),
        "input_shapes": m["input_shapes"].fillna("").astype(str),
    })
    host = tr.ops.set_index("seq")[["thread", "step", "output_shapes"]].reindex(dev["seq"])
    dev["thread"] = host["thread"].fillna(-1).astype("int64").to_numpy()
    dev["step"] = host["step"].fillna(-1).astype("int32").to_numpy()
    dev["output_shapes"] = host["output_shapes"].fillna("").astype(str).to_numpy()
    store.save_table(run_id, "device_ops", dev[DEVICE_OPS_COLUMNS])
    from neuron_studio.profiler.analysis.trace_overview import region_table

    regions = region_table(prof)   # launched regions (adaptive/compile): the trace viewer draws their boundaries
    if regions is not None:
        store.save_table(run_id, "regions", regions)


def _objects_as_str(df: pd.DataFrame) -> pd.DataFrame:
    """Parquet wants one type per column: keep None, stringify anything else that is not a str."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            out[c] = [None if (v is None or (isinstance(v, float) and v != v)) else (v if isinstance(v, str) else str(v))
                      for v in out[c]]
    return out


def load_stored_profile(store: RunStore, run: RunRecord | int | str) -> Any:
    """Rebuild a Profile from the store (re-modeled from the saved ops, so model changes apply)."""
    from neuron_studio.profiler.profile import Profile
    from neuron_studio.profiler.trace import Trace

    rec = run if isinstance(run, RunRecord) else store.get_run(run)
    tables = set(store.list_tables(rec.id))
    if "ops" not in tables:
        raise LookupError(f"run {rec.id} has no saved trace (status {rec.status}); nothing to show")
    ops = store.load_table(rec.id, "ops").to_pandas()
    host = store.load_table(rec.id, "host").to_pandas() if "host" in tables else None
    compiles = store.load_table(rec.id, "compiles").to_pandas() if "compiles" in tables else None
    meta = json.loads(store.load_table(rec.id, "meta").to_pandas()["json"].iloc[0]) if "meta" in tables else {}
    memory = store.load_table(rec.id, "memory").to_pandas() if "memory" in tables else None
    trace = Trace(ops=ops, host=host, compiles=compiles, meta=meta, memory=memory)
    if "measured_summary" in meta:  # a run measured on Trainium: keep its figures, never re-model them
        from neuron_studio.profiler.neuron_profile import profile_from_saved

        prof = profile_from_saved(trace, store.load_table(rec.id, "device_ops").to_pandas()
                                  if "device_ops" in tables else None)
    else:
        prof = Profile.from_trace(trace)
    prof.run_id = rec.id
    return prof


def list_session_runs(limit: int = 50) -> list[RunRecord]:
    """The latest runs in this session's store (the explorer's run picker)."""
    return session().store.list_runs(limit=limit)


def load_session_run(run: RunRecord | int | str) -> Any:
    """A Profile of `run` from this session's store."""
    return load_stored_profile(session().store, run)
