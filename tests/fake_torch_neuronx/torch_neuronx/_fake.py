"""State of the fake: what ran (op tracking), what compiled (metrics), what the "runtime" executed while a profiler
was on, and the log of API calls.

The fake's runtime is a `TorchDispatchMode` pushed when `torch_neuronx` is imported: every aten op a cell runs
(on CPU tensors; there is no device) is classified the way TorchNeuron would report it:

- ops named in `FAKE_NEURONX_FALLBACK_OPS` (comma list) run on CPU silently: `get_fallback_ops()` lists them,
  nothing else does (the tensors still report whatever device they report);
- every other op is "executed"; the first time an (op, shapes, dtypes) key is seen a NEFF is compiled (the fake
  sleeps `COMPILE_S` and records TorchNeuron's CompilationCache counters and samples), later calls are in-memory
  cache hits;
- while runtime profiling is on, each op that launches device work (not a view, not a metadata op) becomes one
  device execution: a runtime sequence id, its window in epoch ns, and the framework ids TorchNeuron stamps on it
  at enqueue (`at::sequence_number::peek()`, the thread in first-use order, stream 0).
"""
from __future__ import annotations

import os
import threading
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

AVAILABLE = os.environ.get("FAKE_NEURONX_AVAILABLE", "1") == "1"
API = os.environ.get("FAKE_NEURONX_API", "shipped")          # "shipped" (Neuron 2.32 docs) or "april" (source)
FALLBACK_OPS = frozenset(x.strip() for x in os.environ.get("FAKE_NEURONX_FALLBACK_OPS", "").split(",") if x.strip())
COMPILE_S = 0.002
CALLS: list[tuple[str, object]] = []
EXECUTED: set[str] = set()
FALLBACK: set[str] = set()
DYNAMO: dict[str, object] = {}
MEMORY: dict[str, int] = {"allocated": 0, "peak": 0}  # what torch.neuron.memory_allocated()/max_... report

# torch_neuronx.metrics state (TORCH_NEURONX_METRICS_ENABLED: off unless "1"/"true"/"yes")
METRICS_ENABLED = [os.environ.get("TORCH_NEURONX_METRICS_ENABLED", "").lower() in ("1", "true", "yes")]
COUNTERS: dict[str, int] = {}
SAMPLES: dict[str, list[dict]] = {}
NEFF_KEYS: set[tuple] = set()

# the runtime's profiling state
PROFILING = {"on": False, "mapping": False}
EXECUTIONS: list[dict] = []              # one per device execution while profiling
MAPPING: list[dict] = []                 # framework_mapping "data" entries
_NEXT_SEQ = [1000]
_THREADS: dict[int, int] = {}
_DEVICE_FREE = [0]
_NO_DEVICE_WORK = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::detach", "aten::alias",
                   "aten::lift_fresh", "aten::_local_scalar_dense", "aten::set_", "aten::resize_"}


def allocate(nbytes: int) -> None:
    """What a test cell calls to pretend device tensors of `nbytes` were allocated (negative: freed)."""
    MEMORY["allocated"] += nbytes
    MEMORY["peak"] = max(MEMORY["peak"], MEMORY["allocated"])


def run_op(name: str, fallback: bool = False) -> None:
    """What a test cell calls to pretend TorchNeuron ran an op (on the device, or on CPU as a fallback)."""
    (FALLBACK if fallback else EXECUTED).add(name)


def compiled(graphs: int = 1) -> None:
    DYNAMO["graphs_compiled"] = int(DYNAMO.get("graphs_compiled", 0)) + graphs
    DYNAMO["neff_cache_hits"] = 0


def _counter(name: str, v: int = 1) -> None:
    if METRICS_ENABLED[0]:
        COUNTERS[name] = COUNTERS.get(name, 0) + v


def _sample(name: str, value: float) -> None:
    if METRICS_ENABLED[0]:
        SAMPLES.setdefault(name, []).append({"timestamp_ns": time.monotonic_ns(), "value": float(value)})


def _compile_if_new(name: str, args: tuple) -> None:
    key = (name,) + tuple((tuple(a.shape), str(a.dtype)) for a in args if isinstance(a, torch.Tensor))
    if key in NEFF_KEYS:
        _counter("CompilationCache.InMemoryHits")
        return
    NEFF_KEYS.add(key)
    _counter("CompilationCache.InMemoryMisses")
    _counter("CompilationCache.PersistentMisses")
    t0 = time.monotonic_ns()
    time.sleep(COMPILE_S)
    _counter("CompilationCache.TotalCompilations")
    _sample("CompilationCache.NeffSize", 4096 + 64 * len(key))
    _sample("CompilationCache.CompilationTime", time.monotonic_ns() - t0)


class _Runtime(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        name = str(func._schema.name)
        if name in FALLBACK_OPS:
            FALLBACK.add(name)
            return func(*args, **kwargs)
        EXECUTED.add(name)
        device = not getattr(func, "is_view", False) and name not in _NO_DEVICE_WORK and \
            not name.startswith("profiler::")
        if not device:
            return func(*args, **kwargs)
        _compile_if_new(name, args)
        seq = int(torch._C._autograd._get_sequence_nr())
        th = _THREADS.setdefault(threading.get_ident(), len(_THREADS) + 1)
        t0 = max(time.time_ns(), _DEVICE_FREE[0])         # one queue: the device runs executions one at a time
        out = func(*args, **kwargs)
        t1 = max(time.time_ns(), t0 + 1000)
        _DEVICE_FREE[0] = t1
        if PROFILING["on"]:
            sid = _NEXT_SEQ[0]
            _NEXT_SEQ[0] += 1
            EXECUTIONS.append({"nrta_seq_id": sid, "op": name, "start_ns": t0, "end_ns": t1,
                               "nc": 0, "neff": f"neff_{abs(hash(name)) % 10**8:08d}_vnc_0.neff",
                               "numel": sum(int(a.numel()) for a in args if isinstance(a, torch.Tensor))})
            if PROFILING["mapping"]:
                MAPPING.append({"nrta_seq_id": sid, "framework_op_exec_ids": [
                    {"seq_nr": seq, "th_id": th, "stream_id": 0}]})
        return out


_RUNTIME = _Runtime()


def install() -> None:
    """Push the fake runtime (called once by `import torch_neuronx`)."""
    _RUNTIME.__enter__()


def reset_capture() -> tuple[list[dict], list[dict]]:
    """Hand over and clear what the runtime recorded while profiling."""
    ex, mp = list(EXECUTIONS), list(MAPPING)
    EXECUTIONS.clear()
    MAPPING.clear()
    return ex, mp
