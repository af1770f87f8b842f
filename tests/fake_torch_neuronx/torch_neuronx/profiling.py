"""Fake torch_neuronx.profiling in either documented generation (`FAKE_NEURONX_API`):

- "shipped" (Neuron 2.32 docs, `tools/neuron-explorer/how-to-profile-workload.rst`): `NeuronConfig`,
  `ProfileMode`, `NeuronProfiler(cfg).export_trace` as `on_trace_ready` of a stock `torch.profiler.profile(...,
  experimental_config=cfg)`. The Kineto plugin's session start/stop (`csrc/profiler/Session.cpp`) is stood in for
  by wrapping `_KinetoProfile.start_trace/stop_trace`: a profile with PrivateUse1 and a NeuronConfig starts the
  runtime's capture; stopping it writes the runtime's files; `export_trace` writes `trace.json` next to them.
- "april" (pre-release source, `torch_neuronx/profiling.py`): `NeuronProfiler(pytorch_activities=...,
  record_shapes=..., pytorch_trace_file=..., neuron_output_dir=..., event_filters=...)` as a context manager that
  starts runtime profiling and its own `torch.profiler.profile`, writes `pytorch_trace.json` and
  `framework_mapping_<ts>.json` into `neuron_output_dir`; no `NeuronConfig` / `ProfileMode`.

Either way the runtime writes the documented per-rank layout `<out>/<instance-id>_pid_<pid>/<timestamp>/` with
`ntrace.pb` (here: JSON the fake `neuron-explorer` reads: executions, HBM samples), `trace_info.pb`, the NTFF(s)
(one `profile_nc_0_session_0.ntff` under NEURON_RT_INSPECT_DEVICE_PROFILE=session, else one per NEFF), one
`neff_<hash>_vnc_0.neff` per NEFF executed, `cpu_util.pb` / `host_mem.pb` when asked for.
"""
from __future__ import annotations

import enum
import json
import os
import time
from datetime import datetime
from pathlib import Path

from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile

from torch_neuronx import _fake
from torch_neuronx._fake import CALLS

INSTANCE = "i-0fake"
MiB = 1 << 20


def _stamp() -> str:
    now = datetime.now()
    return now.strftime("%Y%m%d_%H%M%S") + f"_{now.microsecond // 1000:03d}"


def _begin_runtime(mapping: bool) -> None:
    if os.environ.get("NEURON_RT_INSPECT_ENABLE") == "1":
        raise RuntimeError("fake NRT: NEURON_RT_INSPECT_ENABLE=1 conflicts with framework profiling")
    CALLS.append(("nrt_begin", {"device_profile": os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE"),
                                "mapping": mapping}))
    _fake.reset_capture()
    _fake.PROFILING.update(on=True, mapping=mapping)


def _hbm(executions: list[dict], device: bool) -> list[dict]:
    rows = []
    for i, e in enumerate(executions):
        rows.append({"timestamp": e["end_ns"], "tensors_bytes": 64 * MiB + (i % 10) * MiB, "weights_bytes": 256 * MiB,
                     "io_bytes": 8 * MiB, "tensor_instructions_bytes": 2 * MiB,
                     "dma_rings_runtime_bytes": MiB, "profiler_buffers_bytes": (5 << 30) if device else 0})
    return rows


def _stop_runtime(out_dir: str, modes: list[str]) -> Path | None:
    """Stop the runtime's capture and write its files; returns the run directory (None: nothing to write)."""
    executions, mapping = _fake.reset_capture()
    _fake.PROFILING.update(on=False, mapping=False)
    CALLS.append(("nrt_stop", len(executions)))
    if os.environ.get("FAKE_NEURONX_NO_OUTPUT") == "1":
        return None
    run = Path(out_dir) / f"{INSTANCE}_pid_{os.getpid()}" / _stamp()
    while run.exists():
        time.sleep(0.002)
        run = run.with_name(_stamp())
    run.mkdir(parents=True)
    skip = os.environ.get("FAKE_NEURONX_SKIP")
    session = os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE") == "session"
    neffs = sorted({e["neff"] for e in executions})
    if "DEVICE" in modes and skip != "DEVICE":
        for n in neffs or ["neff_00000000_vnc_0.neff"]:
            (run / n).write_bytes(b"fake neff")
        ntffs = ["profile_nc_0_session_0.ntff"] if session else \
            [f"profile_nc_0_session_{k}.ntff" for k in range(max(1, len(neffs)))]
        for n in ntffs:
            (run / n).write_bytes(b"fake ntff")
    if "RUNTIME" in modes and skip != "RUNTIME":
        (run / "ntrace.pb").write_text(json.dumps({
            "fake": True, "device_profile": os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE"),
            "executions": executions, "hbm": _hbm(executions, "DEVICE" in modes), "instance_id": INSTANCE}))
        (run / "trace_info.pb").write_bytes(b"fake")
    if "CPU_UTIL" in modes:
        (run / "cpu_util.pb").write_bytes(b"fake")
    if "HOST_MEMORY" in modes:
        (run / "host_mem.pb").write_bytes(b"fake")
    _fake.LAST_RUN_DIR = run
    _fake.LAST_MAPPING = mapping
    return run


def _write_mapping(directory: Path, mapping: list[dict]) -> None:
    if mapping:
        (directory / f"framework_mapping_{_stamp()}.json").write_text(json.dumps({"version": 1, "data": mapping}))


if _fake.API == "shipped":
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
            self.precache_node_info = precache_node_info
            CALLS.append(("NeuronConfig", {
                "modes": [m.name for m in self.modes], "max_events_per_nc": max_events_per_nc,
                "capture_enabled_for_nc": capture_enabled_for_nc, "profile_output_dir": profile_output_dir,
                "neff_cache_dir": neff_cache_dir}))

    class NeuronProfiler:
        def __init__(self, config: NeuronConfig):
            self.config = config

        def export_trace(self, prof) -> None:
            CALLS.append(("export_trace", None))
            run = getattr(_fake, "LAST_RUN_DIR", None)
            if run is None or os.environ.get("FAKE_NEURONX_NO_OUTPUT") == "1":
                return
            prof.export_chrome_trace(str(run / "trace.json"))
            _write_mapping(run, getattr(_fake, "LAST_MAPPING", []))

    from torch.profiler.profiler import _KinetoProfile

    _orig_start, _orig_stop = _KinetoProfile.start_trace, _KinetoProfile.stop_trace

    def _neuron_config(p) -> NeuronConfig | None:
        cfg = getattr(p, "experimental_config", None)
        acts = set(getattr(p, "activities", ()) or ())
        return cfg if isinstance(cfg, NeuronConfig) and ProfilerActivity.PrivateUse1 in acts else None

    def _start_trace(self) -> None:
        _orig_start(self)
        cfg = _neuron_config(self)
        if cfg is not None:
            _fake.LAST_RUN_DIR = None
            _begin_runtime(mapping=ProfilerActivity.CPU in set(self.activities))

    def _stop_trace(self) -> None:
        cfg = _neuron_config(self)
        if cfg is not None:
            _stop_runtime(cfg.profile_output_dir or ".", [m.name for m in cfg.modes])
        _orig_stop(self)

    _KinetoProfile.start_trace = _start_trace
    _KinetoProfile.stop_trace = _stop_trace

else:
    __all__ = ["NeuronProfiler", "NRTProfilerError"]

    class NRTProfilerError(Exception):
        pass

    class NeuronProfiler:  # type: ignore[no-redef]
        def __init__(self, pytorch_activities=None, record_shapes=False, pytorch_trace_file=None,
                     neuron_output_dir="./output", event_filters=None):
            self.pytorch_activities = list(pytorch_activities or [])
            self.record_shapes = record_shapes
            self.neuron_output_dir = neuron_output_dir
            self.pytorch_trace_file = (f"{neuron_output_dir}/{pytorch_trace_file or 'pytorch_trace.json'}"
                                       if self.pytorch_activities else None)
            self.event_filters = event_filters
            self._prof = None
            CALLS.append(("NeuronProfiler", {"pytorch_activities": [a.name for a in self.pytorch_activities],
                                             "record_shapes": record_shapes, "neuron_output_dir": neuron_output_dir,
                                             "event_filters": event_filters}))

        def __enter__(self):
            _begin_runtime(mapping=bool(self.pytorch_activities))
            if self.pytorch_activities:
                self._prof = profile(activities=self.pytorch_activities, record_shapes=self.record_shapes)
                self._prof.__enter__()
            return self

        def __exit__(self, exc_type, exc, tb):
            mapping = list(_fake.MAPPING)
            if self._prof is not None:
                self._prof.__exit__(None, None, None)
                os.makedirs(self.neuron_output_dir, exist_ok=True)
                self._prof.export_chrome_trace(self.pytorch_trace_file)
                _write_mapping(Path(self.neuron_output_dir), mapping)   # dumped as mapping turns off
            _stop_runtime(self.neuron_output_dir, ["DEVICE", "RUNTIME"])
            return False

        def get_nrt_output_directory(self) -> str:
            return self.neuron_output_dir
