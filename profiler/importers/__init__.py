"""Read traces back into the `Trace` model: our Parquet directories, our Chrome JSON, and plain
torch.profiler Chrome traces from any PyTorch program.

`read_trace(path)` looks at the content, not the file name:

- a directory with `meta.json` → our Parquet export (exact round trip);
- Chrome JSON (optionally gzip) whose `metadata.neuron_studio` names our format → exact round trip;
- any other Chrome JSON (object with `traceEvents`, or a bare event array) → `host` gets every complete
  event; `ops` gets the innermost `cpu_op` events, their sizes derived from "Input Dims"/"Input type" (output
  shapes inferred, FLOPs from the "flops" arg when recorded); `meta` says backend "imported", figures modeled.

Anything malformed raises `TraceFormatError` naming the file and what was wrong; strings are kept verbatim.
"""
from __future__ import annotations

from neuron_studio.profiler.importers.read import read_trace, read_trace_bytes, trace_from_chrome
from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["read_trace", "read_trace_bytes", "trace_from_chrome", "TraceFormatError"]
