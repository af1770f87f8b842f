"""Fake torch_neuronx.profiling: NeuronConfig records its arguments; export_trace writes the documented layout."""
from __future__ import annotations

import enum
import os
import time
from pathlib import Path

from torch._C._profiler import _ExperimentalConfig

from torch_neuronx._fake import CALLS

__all__ = ["NeuronConfig", "ProfileMode", "NeuronProfiler"]


class ProfileMode(enum.Enum):
    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(_ExperimentalConfig):
    def __init__(self, modes=None, max_events_per_nc=None, capture_enabled_for_nc=None, profile_output_dir=None,
                 neff_cache_dir=None, precache_node_info=True):
        super().__init__()
        self.modes = list(modes or [ProfileMode.DEVICE, ProfileMode.RUNTIME])
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.profile_output_dir = profile_output_dir
        self.neff_cache_dir = neff_cache_dir
        CALLS.append(("NeuronConfig", {
            "modes": [m.name for m in self.modes], "max_events_per_nc": max_events_per_nc,
            "capture_enabled_for_nc": capture_enabled_for_nc, "profile_output_dir": profile_output_dir,
            "neff_cache_dir": neff_cache_dir}))


_FILES = {
    ProfileMode.DEVICE: ("profile_nc_0_session_0.ntff", "neff_123abc_vnc_0.neff"),
    ProfileMode.RUNTIME: ("ntrace.pb", "trace_info.pb"),
    ProfileMode.CPU_UTIL: ("cpu_util.pb",),
    ProfileMode.HOST_MEMORY: ("host_mem.pb",),
}


class NeuronProfiler:
    def __init__(self, config: NeuronConfig):
        self.config = config

    def export_trace(self, prof) -> None:
        CALLS.append(("export_trace", None))
        if os.environ.get("FAKE_NEURONX_NO_OUTPUT") == "1":
            return
        run = Path(self.config.profile_output_dir) / f"i-0fake_pid_{os.getpid()}" / time.strftime("%Y%m%d_%H%M%S")
        run.mkdir(parents=True, exist_ok=True)
        for m in self.config.modes:
            if os.environ.get("FAKE_NEURONX_SKIP") and m.name == os.environ["FAKE_NEURONX_SKIP"]:
                continue
            for f in _FILES[m]:
                (run / f).write_bytes(b"fake")
        (run / "trace.json").write_text('{"traceEvents": []}')
