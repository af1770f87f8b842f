"""Small torch.profiler (kineto) Chrome traces the project writes itself, in the formats real jobs produce.

The real traces recorded by others (`shared/traces`, see tests/shared_data.py) are not in the repository, so
every format trait the importer must read truthfully also has a generated trace here, and the tests that hold
the importer to the raw JSON (tests/trace_truth.py) run on both. Each trace is deterministic (seeded) and
small; the traits follow what kineto writes (field names and categories as in PyTorch's profiler output):

- ``synthetic_2021_v100.pt.trace.json``: the 2021 format: categories ``Operator`` / ``Runtime`` / ``Kernel`` /
  ``Memcpy`` / ``Memset``, ``ProfilerStep#N`` as an ``Operator``, string tids, lower-case ``external id``,
  ``[memory]`` instant events, integer µs timestamps, shapes recorded, a V100 in ``deviceProperties``.
- ``synthetic_no_shapes_nccl.json.gz``: recorded without ``record_shapes`` (no ``Input Dims``); timestamps
  relative to ``baseTimeNanoseconds`` with ns fractions; NCCL all-reduce kernels launched by
  ``c10d::allreduce_``; ``ac2g`` flows; a backward thread.
- ``synthetic_ns_rank-1.pt.trace.json.gz``: epoch µs timestamps with nanosecond fractions (more digits than a
  float64 holds: only an exact reader keeps them), ``distributedInfo`` holding only ``{"rank": 1}``.
- ``synthetic_ddp_rank-0.json.gz`` / ``synthetic_ddp_rank-1.json.gz``: two ranks of one DDP job with full
  ``distributedInfo`` (world size 4), clocks offset between the ranks, a separate autograd thread running the
  ``*_backward`` ops, ``torch::autograd::AccumulateGrad`` wrapper nodes around ``aten::add_``, an ``fbgemm::``
  op, a templated kernel name with ``<``/``>``, process names.
"""
from __future__ import annotations

import gzip
import json
import random
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

SYN_2021 = "synthetic_2021_v100.pt.trace.json"
SYN_NO_SHAPES = "synthetic_no_shapes_nccl.json.gz"
SYN_NS = "synthetic_ns_rank-1.pt.trace.json.gz"
SYN_RANK0 = "synthetic_ddp_rank-0.json.gz"
SYN_RANK1 = "synthetic_ddp_rank-1.json.gz"
SYNTHETIC = [SYN_2021, SYN_NO_SHAPES, SYN_NS, SYN_RANK0, SYN_RANK1]



@dataclass
class _Writer:
    """Events of one trace, with timestamps as exact Decimals in µs."""
    old_format: bool = False
    shapes: bool = True
    events: list[dict] = field(default_factory=list)
    corr: int = 1000
    ext: int = 1

    def cat(self, kind: str) -> str:
        new = {"op": "cpu_op", "runtime": "cuda_runtime", "kernel": "kernel", "memcpy": "gpu_memcpy",
               "memset": "gpu_memset", "step": "user_annotation"}
        old = {"op": "Operator", "runtime": "Runtime", "kernel": "Kernel", "memcpy": "Memcpy",
               "memset": "Memset", "step": "Operator"}
        return (old if self.old_format else new)[kind]

    def _ext_key(self) -> str:
        return "external id" if self.old_format else "External id"

    def x(self, cat: str, name: str, pid, tid, ts: Decimal, dur: Decimal, **args) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": str(tid) if self.old_format else tid,
             "ts": ts, "dur": dur, "args": args}
        self.events.append(e)
        return e

    def op(self, name: str, pid, tid, ts: Decimal, dur: Decimal, dims: list | None = None, **args) -> dict:
        self.ext += 1
        a = {self._ext_key(): self.ext, **args}
        if self.shapes:
            a["Input Dims"] = dims if dims is not None else [[8, 16]]
            a["Input type"] = ["float"] * len(a["Input Dims"])
        return self.x(self.cat("op"), name, pid, tid, ts, dur, **a)

    def launch(self, pid, tid, ts: Decimal, kernel: str, k_ts: Decimal, k_dur: Decimal, *, kind: str = "kernel",
               stream: int = 7, device: int = 0, nbytes: int = 0, flows: bool = False) -> None:
        """A runtime call at `ts` (inside the launching op) and the GPU activity it correlates with."""
        self.corr += 1
        api = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}[kind]
        self.x(self.cat("runtime"), api, pid, tid, ts, Decimal("3.5"), cbid=211, correlation=self.corr,
               **{self._ext_key(): self.ext})
        gpu_args = {"device": device, "context": 1, "stream": stream, "correlation": self.corr,
                    self._ext_key(): self.ext}
        if kind == "kernel":
            gpu_args.update(queued=0, grid=[64, 1, 1], block=[256, 1, 1])
        else:
            gpu_args.update(bytes=nbytes)
        self.x(self.cat(kind), kernel, 0, f"stream {stream}" if self.old_format else stream, k_ts, k_dur,
               **gpu_args)
        if flows:
            self.events.append({"ph": "s", "id": self.corr, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g",
                                "name": "ac2g"})
            self.events.append({"ph": "f", "id": self.corr, "pid": 0, "tid": stream, "ts": k_ts, "cat": "ac2g",
                                "name": "ac2g", "bp": "e"})


def _json(v: object) -> str:
    """JSON text with Decimals written verbatim (exact µs with ns fractions, as kineto writes them)."""
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_json(x) for x in v) + "]"
    return json.dumps(v)


def _dump(doc: dict, path: Path) -> None:
    events = doc.pop("traceEvents")
    head = _json(doc)[:-1]
    text = head + (", " if doc else "") + '"traceEvents": [\n' + ",\n".join(_json(e) for e in events) + "\n]}\n"
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


def _us(rng: random.Random, lo: float, hi: float, places: int) -> Decimal:
    q = Decimal(1).scaleb(-places)
    return Decimal(str(rng.uniform(lo, hi))).quantize(q)


def _training_steps(w: _Writer, rng: random.Random, *, pid: int, main_tid: int, bwd_tid: int | None,
                    t0: Decimal, steps: int, places: int, allreduce: bool, fbgemm: bool, templated: bool,
                    first_step: int = 1, step_scale: float = 1.0) -> None:
    """`steps` ProfilerSteps: forward ops on the main thread, backward ops (on their own thread when
    `bwd_tid` is set), an optional all-reduce, an optimizer step; each op launching GPU work."""
    t = t0
    for s in range(steps):
        step_start = t
        t += _us(rng, 2, 5, places)
        fwd = [("aten::linear", [[32, 64], [128, 64], [128]]), ("aten::relu", [[32, 128]]),
               ("aten::linear", [[32, 128], [10, 128], [10]]), ("aten::cross_entropy_loss", [[32, 10], [32]])]
        if fbgemm:
            fwd.insert(0, ("fbgemm::permute_2D_sparse_data", [[4, 8]]))
        for name, dims in fwd:
            dur = _us(rng, 20, 60, places) * Decimal(str(step_scale)).quantize(Decimal("0.01"))
            w.op(name, pid, main_tid, t, dur, dims)
            # an inner op (not outermost: not counted as an op of its own)
            w.op("aten::empty", pid, main_tid, t + Decimal(1), Decimal(2), [[]])
            kname = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
                     "launch_clamp_scalar<float>(...)>(int, float*)") if templated and name == "aten::relu" \
                else f"{name.split('::')[1]}_kernel"
            w.launch(pid, main_tid, t + Decimal(4), kname, t + _us(rng, 8, 12, places), _us(rng, 5, 30, places),
                     flows=True)
            t += dur + _us(rng, 1, 3, places)
        # backward: the autograd engine's thread (or the main thread in single-thread traces)
        btid = bwd_tid if bwd_tid is not None else main_tid
        for name in ("aten::nll_loss_backward", "aten::threshold_backward", "aten::mm", "aten::mm"):
            dur = _us(rng, 15, 50, places)
            w.x(w.cat("op"), "autograd::engine::evaluate_function: MmBackward0", pid, btid, t - Decimal(1),
                dur + Decimal(2), **{w._ext_key(): 0, "Sequence number": 100 + s, "Fwd thread id": 1})
            w.op(name, pid, btid, t, dur, [[32, 128], [128, 64]])
            w.launch(pid, btid, t + Decimal(3), f"{name.split('::')[1]}_bwd_kernel", t + _us(rng, 6, 9, places),
                     _us(rng, 5, 25, places), flows=True)
            t += dur + _us(rng, 1, 2, places)
        # gradient accumulation: a wrapper node around aten::add_ (the wrapper is not an op)
        acc = w.x(w.cat("op"), "torch::autograd::AccumulateGrad", pid, btid, t, Decimal(12), **{w._ext_key(): 0})
        w.op("aten::add_", pid, btid, acc["ts"] + Decimal(1), Decimal(8), [[128, 64], [128, 64], []])
        w.launch(pid, btid, acc["ts"] + Decimal(2), "add_kernel", acc["ts"] + Decimal(5), Decimal(4))
        t += Decimal(14)
        if allreduce:
            dur = _us(rng, 40, 90, places)
            w.x("user_annotation", "nccl:all_reduce", pid, btid, t, dur + Decimal(1), **{w._ext_key(): 0})
            w.op("c10d::allreduce_", pid, btid, t + Decimal("0.5"), dur, [[8192]])
            w.launch(pid, btid, t + Decimal(2), "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
                     t + Decimal(6), dur * 2, stream=20, flows=True)
            t += dur + Decimal(2)
        # optimizer: a device-to-device copy and a memset
        w.op("aten::copy_", pid, main_tid, t, Decimal(10), [[128, 64], [128, 64], []])
        w.launch(pid, main_tid, t + Decimal(2), "Memcpy DtoD (Device -> Device)", t + Decimal(4), Decimal(3),
                 kind="memcpy", nbytes=32768)
        t += Decimal(11)
        w.op("aten::zero_", pid, main_tid, t, Decimal(6), [[128, 64]])
        w.launch(pid, main_tid, t + Decimal(1), "Memset (Device)", t + Decimal(3), Decimal(2), kind="memset",
                 nbytes=32768)
        t += Decimal(8)
        w.x(w.cat("step"), f"ProfilerStep#{first_step + s}", pid, main_tid, step_start, t - step_start,
            **{w._ext_key(): 0})
        t += _us(rng, 3, 8, places)
    # an op outside every step window (step 0)
    w.op("aten::ones", pid, main_tid, t + Decimal(5), Decimal(3), [[4]])


def _meta(pid: int, ts: Decimal, name: str) -> list[dict]:
    return [{"name": "process_name", "ph": "M", "ts": ts, "pid": pid, "tid": 0, "args": {"name": name}},
            {"name": "thread_name", "ph": "M", "ts": ts, "pid": pid, "tid": pid, "args": {"name": "thread 1 (python)"}}]


def _device_properties(name: str) -> list[dict]:
    return [{"id": 0, "name": name, "totalGlobalMem": 34089730048, "computeMajor": 7, "computeMinor": 0,
             "maxThreadsPerBlock": 1024, "numSms": 80}]


def _trace_2021(path: Path) -> None:
    rng = random.Random(2021)
    w = _Writer(old_format=True)
    pid = 25738
    t0 = Decimal(1623142623460111)
    _training_steps(w, rng, pid=pid, main_tid=pid, bwd_tid=None, t0=t0, steps=3, places=0, allreduce=False,
                    fbgemm=False, templated=True, first_step=0)
    for i in range(4):   # the allocator's instant events
        w.events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": pid, "tid": pid, "ts": t0 + i * 50,
                         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 4096 * (1 if i % 2 else -1)}})
    w.events += _meta(pid, t0, "python")
    _dump({"schemaVersion": 1, "deviceProperties": _device_properties("Tesla V100-SXM2-32GB"),
           "traceEvents": w.events}, path)


def _trace_no_shapes(path: Path) -> None:
    rng = random.Random(7)
    w = _Writer(shapes=False)
    pid = 2910249
    _training_steps(w, rng, pid=pid, main_tid=pid, bwd_tid=2919752, t0=Decimal("4458676388068.751"), steps=3,
                    places=3, allreduce=True, fbgemm=False, templated=False)
    w.events += _meta(pid, Decimal("4458676388068.751"), "python3.10")
    _dump({"schemaVersion": 1, "deviceProperties": _device_properties("NVIDIA A100-SXM4-40GB"),
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "displayTimeUnit": "ms",
           "baseTimeNanoseconds": 1711964646000000000, "traceEvents": w.events}, path)


def _trace_ns(path: Path) -> None:
    rng = random.Random(1102)
    w = _Writer()
    pid = 1102
    _training_steps(w, rng, pid=pid, main_tid=pid, bwd_tid=1262, t0=Decimal("1712195495406752.817"), steps=2,
                    places=3, allreduce=True, fbgemm=False, templated=False, first_step=11)
    w.events += _meta(pid, Decimal("1712195495406752.817"), "python")
    _dump({"schemaVersion": 1, "deviceProperties": _device_properties("Tesla V100-SXM2-32GB"),
           "distributedInfo": {"rank": 1}, "displayTimeUnit": "ns", "traceEvents": w.events}, path)


def _trace_ddp(path: Path, rank: int) -> None:
    rng = random.Random(100 + rank)
    w = _Writer()
    pid = 4037 + rank
    t0 = Decimal(1682725898082212) + Decimal(rank * 137)        # the ranks' clocks start apart
    _training_steps(w, rng, pid=pid, main_tid=pid, bwd_tid=23695 + rank, t0=t0, steps=3, places=0, allreduce=True,
                    fbgemm=True, templated=True, first_step=5, step_scale=1.0 + 0.5 * rank)
    w.events += _meta(pid, t0, f"pyper:trainer:{rank}:0")
    _dump({"schemaVersion": 1, "record_shapes": 1, "deviceProperties": _device_properties("NVIDIA A100-SXM4-80GB"),
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4}, "traceEvents": w.events}, path)


@lru_cache(maxsize=None)
def synthetic_dir() -> Path:
    """A directory (made once per process) holding every synthetic trace."""
    d = Path(tempfile.mkdtemp(prefix="ns-synthetic-traces-"))
    _trace_2021(d / SYN_2021)
    _trace_no_shapes(d / SYN_NO_SHAPES)
    _trace_ns(d / SYN_NS)
    _trace_ddp(d / SYN_RANK0, 0)
    _trace_ddp(d / SYN_RANK1, 1)
    return d
