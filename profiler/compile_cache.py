"""NEFF compiles and compile-cache traffic of one cell on real TorchNeuron, attributed to the op and line that caused
each compile.

Source: `torch_neuronx.metrics` (pre-release TorchNeuron `torch_neuronx/metrics.py`, counters and metrics recorded in
`csrc/core/compilation/CompilationCache.cpp`, `parmoham-aws/test-repo-parmoham` @98154b86):
counters `CompilationCache.{InMemoryHits, InMemoryMisses, PersistentHits, PersistentMisses, TotalCompilations,
Evictions}`; metrics `CompilationCache.CompilationTime` (one sample per compile, value in ns, from
`TORCH_NEURONX_TIME_METRIC`) and `CompilationCache.NeffSize` (bytes per compile). Each sample is stamped with
`std::chrono::steady_clock` ns at the end of the compile (`NeuronMetrics.cpp::GetCurrentTimeNs`), on Linux the clock
behind Python's `time.monotonic_ns()`: compile start = stamp - duration, matched to the op the studio's
`FrameworkLog` saw running then. Metrics are off unless `TORCH_NEURONX_METRICS_ENABLED` is set; the watch turns them
on for the cell (`metrics.set_enabled`) and restores the previous state after.

A compile inside one of Dynamo's compiles (compile mode) takes that compile's cause from the studio's `neuron`
backend log (`Trace.compiles`, classified once by `profiler/recompile_causes.py`): "new shape" only when new input
shapes caused it. Otherwise a compile in a later iteration of the cell by an (op, module, line) that already ran in
an earlier iteration is a "new shape" when the op's input shapes differ from that earlier iteration's, and a
recompile with unchanged shapes when they do not (the first iteration's compiles are first calls).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from neuron_studio.profiler.recompile_causes import SHAPES, UNKNOWN
from neuron_studio.profiler.vocabulary import source_label

__all__ = ["CompileCache", "CompileCacheWatch", "COUNTERS", "TIME_METRIC", "SIZE_METRIC", "compile_line"]

COUNTERS = {
    "in_memory_hits": "CompilationCache.InMemoryHits", "in_memory_misses": "CompilationCache.InMemoryMisses",
    "persistent_hits": "CompilationCache.PersistentHits", "persistent_misses": "CompilationCache.PersistentMisses",
    "compilations": "CompilationCache.TotalCompilations", "evictions": "CompilationCache.Evictions",
}
TIME_METRIC = "CompilationCache.CompilationTime"
SIZE_METRIC = "CompilationCache.NeffSize"


@dataclass
class CompileCache:
    """Measured compile-cache figures of one cell (deltas over the cell), and one entry per NEFF compiled."""

    in_memory_hits: int = 0
    in_memory_misses: int = 0
    persistent_hits: int = 0
    persistent_misses: int = 0
    compilations: int = 0
    evictions: int = 0
    compile_time_ns: int = 0
    neff_bytes: int = 0
    graphs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    line: str = ""
    source: str = ("measured: torch_neuronx.metrics CompilationCache counters and CompilationTime/NeffSize "
                   "samples over the cell (warm-up included)")

    @property
    def hits(self) -> int:
        return self.in_memory_hits + self.persistent_hits

    @property
    def misses(self) -> int:
        """Lookups that found the NEFF in neither cache (an in-memory miss is then looked up on disk)."""
        return max(self.in_memory_misses - self.persistent_hits, 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hits": self.hits, "misses": self.misses}


def _fmt_s(ns: float) -> str:
    s = ns / 1e9
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s" if s >= 0.01 else f"{ns / 1e6:.2g} ms"


def _where(source: Any) -> str:
    """The graph's source in the one source format (`cell [N] line L` / `file.py:L`)."""
    return source_label(source) or "an unknown line"


def compile_line(cc: CompileCache) -> str:
    """'this cell compiled 3 NEFFs: 41 s; new shape at train.py:88' (or where most compile time went)."""
    if cc.compilations <= 0 and not cc.graphs:
        return f"this cell compiled no NEFF ({cc.hits} compile-cache hits)"
    n = max(cc.compilations, len(cc.graphs))
    out = f"this cell compiled {n} NEFF{'s' if n != 1 else ''}: {_fmt_s(cc.compile_time_ns)}"
    new = list(dict.fromkeys(_where(g["source"]) for g in cc.graphs if g.get("new_shape")))
    again = list(dict.fromkeys(f"{_where(g['source'])} ({g.get('reason') or 'unchanged shapes'})" for g in cc.graphs
                               if g.get("recompile") and not g.get("new_shape")))
    if new:
        out += "; new shape at " + ", ".join(new[:3]) + (f" (+{len(new) - 3} more)" if len(new) > 3 else "")
    if again:
        out += ("; recompiled with unchanged input shapes at " + ", ".join(again[:3])
                + (f" (+{len(again) - 3} more)" if len(again) > 3 else ""))
    if not new and not again and cc.graphs:
        by: dict[str, int] = {}
        for g in cc.graphs:
            by[_where(g["source"])] = by.get(_where(g["source"]), 0) + int(g["time_ns"])
        top = max(by, key=by.get)
        out += f"; most at {top}"
    inside = sum(1 for g in cc.graphs if g.get("step") is not None and g["step"] >= 0)
    if inside:
        out += f"; {inside} inside the profiled steps (their time is in the measured step)"
    return out


def _dynamo_compile_id(shapes: Any) -> str:
    """The Dynamo compile id the op log gives a compile-mode record ("compile id 0/1" -> "0/1")."""
    s = str(shapes or "")
    return s[len("compile id "):].strip("[] ") if s.startswith("compile id ") else ""


class CompileCacheWatch:
    """`with CompileCacheWatch(torch_neuronx.metrics) as w: run()` then `w.result(framework_log)`."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics
        self.notes: list[str] = []
        self._was_enabled: bool | None = None
        self._before: dict[str, int] = {}
        self._after: dict[str, int] = {}
        self._t0 = 0
        self._samples: dict[str, list[dict]] = {}

    def _counters(self) -> dict[str, int]:
        out = {}
        for key, name in COUNTERS.items():
            v = self.metrics.get_counter_value(name)
            out[key] = int(v) if v is not None else 0
        return out

    def _new_samples(self, name: str) -> list[dict]:
        data = self.metrics.get_metric_data(name)
        if not data:
            return []
        return [s for s in data.get("samples") or [] if int(s.get("timestamp_ns", 0)) >= self._t0]

    def __enter__(self) -> "CompileCacheWatch":
        import time

        self._was_enabled = bool(self.metrics.is_enabled())
        if not self._was_enabled:
            self.metrics.set_enabled(True)
            self.notes.append("TorchNeuron metrics were off (TORCH_NEURONX_METRICS_ENABLED unset): the studio turned "
                              "them on for this cell and restored the setting after")
        self._before = self._counters()
        self._t0 = time.monotonic_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._after = self._counters()
        self._samples = {TIME_METRIC: self._new_samples(TIME_METRIC), SIZE_METRIC: self._new_samples(SIZE_METRIC)}
        if self._was_enabled is False:
            self.metrics.set_enabled(False)

    def result(self, log: Any = None, compiles: Any = None) -> CompileCache:
        """The cell's figures; with the studio's `FrameworkLog`, each compile attributed to its op and line.
        `compiles`: the `neuron` backend's compile log of the cell (`Trace.compiles`), whose causes a compile inside
        a Dynamo compile takes."""
        d = {k: self._after.get(k, 0) - self._before.get(k, 0) for k in COUNTERS}
        times, sizes = self._samples.get(TIME_METRIC, []), self._samples.get(SIZE_METRIC, [])
        cc = CompileCache(**d, compile_time_ns=int(sum(float(s["value"]) for s in times)),
                          neff_bytes=int(sum(float(s["value"]) for s in sizes)), notes=list(self.notes))
        if d["compilations"] != len(times):
            cc.notes.append(f"TorchNeuron counted {d['compilations']} compilations but kept {len(times)} timed "
                            "samples for them: per-compile rows cover only those")
        ops = log.ops if log is not None else None
        first_iter: dict[tuple, tuple[int, Any]] = {}
        if ops is not None:
            for j in range(len(ops)):
                if ops.step[j] is not None:
                    first_iter.setdefault((ops.name[j], ops.module[j], ops.source[j]), (ops.step[j], ops.shapes[j]))
        dynamo = {}
        if compiles is not None and len(compiles) and "compile_id" in compiles:
            dynamo = {str(r.compile_id): r for r in compiles.itertuples(index=False) if r.compile_id}
        for k, s in enumerate(times):
            start = int(s["timestamp_ns"]) - int(float(s["value"]))
            i = log.at_time(start) if log is not None else -1
            g = {"time_ns": int(float(s["value"])), "neff_bytes": int(float(sizes[k]["value"])) if k < len(sizes)
                 else None, "op": None, "module": None, "source": None, "shapes": None, "step": None,
                 "new_shape": False, "recompile": False, "cause": None, "reason": None}
            if i >= 0:
                it = ops.step[i]
                g.update(op=ops.name[i], module=ops.module[i] or None, source=ops.source[i], shapes=ops.shapes[i],
                         step=it)
                cid = _dynamo_compile_id(ops.shapes[i])   # "compile id 0/1": inside a Dynamo compile
                rec = dynamo.get(cid)
                if rec is not None:       # its one classification
                    g.update(new_shape=rec.cause == SHAPES, recompile=bool(rec.recompile), cause=rec.cause,
                             reason=rec.reason)
                elif cid:
                    again = not cid.endswith("/0")
                    g.update(recompile=again, cause=UNKNOWN if again else None,
                             reason="Dynamo recompiled; its cause was not logged (not compiled by the studio's "
                                    "neuron backend)" if again else None)
                else:
                    first = first_iter.get((ops.name[i], ops.module[i], ops.source[i]))
                    again = it is not None and first is not None and it > first[0]
                    new_shape = again and ops.shapes[i] != first[1]
                    g.update(new_shape=new_shape, recompile=again, cause=SHAPES if new_shape else UNKNOWN if again
                             else None, reason=None if not again else "new input shapes" if new_shape else
                             "unchanged input shapes: a new dtype or argument value, or an evicted NEFF "
                             "(TorchNeuron's metrics do not say which)")
            cc.graphs.append(g)
        if times and log is None:
            cc.notes.append("compiles not attributed to ops: no op log of the cell")
        cc.line = compile_line(cc)
        return cc
