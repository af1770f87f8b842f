"""One kernel launch as torch.profiler (kineto) writes it, streamed as Chrome-trace text: a `cpu_op` with
"Input Dims" / "Input type", its `cuda_runtime` cudaLaunchKernel, the GPU `kernel`, and the `ac2g` flow pair
linking them (field names and categories as PyTorch's profiler output has them).

Each op's five events are one %-template built once (its name, shapes and kernel already in JSON), so a
launch costs one string format: the writers of big synthetic traces (`synthetic_job`, the scale benchmark)
write millions of events without building an object per event.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence, TextIO

__all__ = ["LaunchOp", "LaunchWriter", "EventStream", "EVENTS_PER_LAUNCH"]

EVENTS_PER_LAUNCH = 5
#: What torch.profiler adds to a cpu_op and a kernel beyond what the studio reads (`detailed=True`).
_CPU_DETAIL = ', "Fwd thread id": 0, "Record function id": 0'
_KERNEL_DETAIL = (', "registers per thread": 64, "shared memory": 0, "blocks per SM": 4.0, "warps per SM": 16.0, '
                  '"grid": [128, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %%": 50')
_KERNEL_PLAIN = ', "grid": [128, 1, 1], "block": [256, 1, 1]'


@dataclass(frozen=True)
class LaunchOp:
    """An aten op and the kernel it launches."""

    name: str
    dims: Sequence[Sequence[int]]
    types: Sequence[str]
    kernel: str
    flops: int | None = None      # the `flops` arg kineto records for matmuls


def _q(text: str) -> str:
    """`text` as a JSON string, with % doubled for the template."""
    return json.dumps(text).replace("%", "%%")


class LaunchWriter:
    """The five events of a launch of `ops[i]` by host thread (`pid`, `tid`) onto GPU `stream`."""

    def __init__(self, ops: Sequence[LaunchOp], *, pid: int, tid: int, stream: int, detailed: bool = False) -> None:
        self._templates = [self._template(op, pid, tid, stream, detailed) for op in ops]
        self._detailed = detailed

    @staticmethod
    def _template(op: LaunchOp, pid: int, tid: int, stream: int, detailed: bool) -> str:
        flops = f', "flops": {op.flops}' if op.flops is not None else ""
        dims = json.dumps([list(d) for d in op.dims])
        types = json.dumps(list(op.types)).replace("%", "%%")
        ev_idx = ', "Ev Idx": %d' if detailed else ""
        cpu = (f'{{"ph": "X", "cat": "cpu_op", "name": {_q(op.name)}, "pid": {pid}, "tid": {tid}, '
               f'"ts": %.3f, "dur": %.3f, "args": {{"External id": %d, "Sequence number": %d'
               f'{_CPU_DETAIL if detailed else ""}, "Input Dims": {dims}, "Input type": {types}{ev_idx}{flops}}}}}')
        launch = (f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {tid}, '
                  f'"ts": %.3f, "dur": 5.0, "args": {{"External id": %d, "cbid": 211, "correlation": %d}}}}')
        flow_s = f'{{"ph": "s", "id": %d, "pid": {pid}, "tid": {tid}, "ts": %.3f, "cat": "ac2g", "name": "ac2g"}}'
        kernel = (f'{{"ph": "X", "cat": "kernel", "name": {_q(op.kernel)}, "pid": 0, "tid": {stream}, '
                  f'"ts": %.3f, "dur": %.3f, "args": {{"External id": %d, "queued": 0, "device": 0, "context": 1, '
                  f'"stream": {stream}, "correlation": %d{_KERNEL_DETAIL if detailed else _KERNEL_PLAIN}}}}}')
        flow_f = (f'{{"ph": "f", "id": %d, "pid": 0, "tid": {stream}, "ts": %.3f, "cat": "ac2g", "name": "ac2g", '
                  f'"bp": "e"}}')
        return ",\n".join((cpu, launch, flow_s, kernel, flow_f))

    def launch(self, op: int, seq: int, ext: int, corr: int, ts: float, dur: float, launch_ts: float,
               kernel_ts: float, kernel_dur: float) -> str:
        """The launch's events (µs times), comma-separated, without a trailing comma."""
        cpu = (ts, dur, ext, seq, seq) if self._detailed else (ts, dur, ext, seq)
        return self._templates[op] % (*cpu, launch_ts, ext, corr, corr, launch_ts, kernel_ts, kernel_dur, ext,
                                      corr, corr, kernel_ts)


class EventStream:
    """Events appended to a Chrome trace being written to `fh` (whose header already holds one event), kept
    in batches of `batch` texts so memory stays bounded; `close` writes the batch left and ends the document."""

    def __init__(self, fh: TextIO, batch: int = 4000) -> None:
        self._fh, self._batch, self._buf = fh, batch, []

    def add(self, text: str) -> None:
        self._buf.append(text)
        if len(self._buf) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self._fh.write(",\n" + ",\n".join(self._buf))
            self._buf = []

    def close(self) -> None:
        self.flush()
        self._fh.write("\n]}\n")
