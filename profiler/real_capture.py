"""Capture on real Trainium with TorchNeuron's documented profiler API, then Neuron Explorer -> a measured Profile.

    run = capture_real(step_fn, steps=1, warmup=3, out_dir="neuron_profile")
    prof = run.profile()          # Neuron Explorer Parquet -> neuron_studio.profiler.neuron_profile.load_neuron_profile

The profiler API generation is detected from what `torch_neuronx.profiling` exports, never guessed
(`detect_profiler_api`):

- "shipped" (Neuron 2.32 docs, `tools/neuron-explorer/how-to-profile-workload.rst` §PyTorch profiling):
  `torch.profiler.profile(activities=[CPU, PrivateUse1], experimental_config=NeuronConfig(modes=..., profile_output_dir=
  ..., max_events_per_nc=..., capture_enabled_for_nc=..., neff_cache_dir=...), record_shapes=True,
  on_trace_ready=NeuronProfiler(cfg).export_trace)`;
- "april" (pre-release source `torch_neuronx/profiling.py`, `parmoham-aws/test-repo-parmoham` @98154b86): the
  `NeuronProfiler(pytorch_activities=[CPU], record_shapes=True, neuron_output_dir=..., event_filters={"nc": [...]})`
  context manager (always device + system profile; `max_events_per_nc`/`neff_cache_dir`/`modes` do not exist there).

What happens:
1. `NEURON_RT_INSPECT_ENABLE=1` in the environment is refused (`CaptureConfigError`): the docs forbid combining it
   with torch.profiler (`environment-variables.rst`). For eager and adaptive cells
   `NEURON_RT_INSPECT_DEVICE_PROFILE=session` is set for the capture (and restored after) unless the user set it:
   eager runs one NEFF per op and session mode puts all of them in one NTFF (`troubleshooting.rst`).
2. warm-up: at least `MIN_WARMUP` (3) calls outside the profiler (fewer -> `WarmupWarning`, raised to 3), then
   `torch.neuron.synchronize()`;
3. the profiled steps, `torch.neuron.synchronize()` before the profiler stops and exports (execution is async);
4. the run directory `<out>/<instance-id>_pid_<pid>/<timestamp>/` is located (newest for this pid; with
   `WORLD_SIZE` > 1 `<out>` is `<out>/rank<RANK>`, so every rank has its own), with TorchNeuron's
   `framework_mapping_<ts>.json` (in the run directory or, April, in the output directory);
5. `neuron-explorer view -d <run dir> --output-format parquet --output-file <run dir>/explorer` turns the
   NTFF/NEFF/ntrace files into Parquet tables; without the CLI, `ExplorerNotFoundError` says what to install.

Around the whole cell (warm-up included): op tracking (`torch_neuronx.clear_op_tracking/get_executed_ops/
get_fallback_ops`), the studio's `FrameworkLog` (each aten op's sequence number, thread, module and source line: the
PyTorch side of the framework mapping, and where each NEFF compile happened) and `CompileCacheWatch`
(`torch_neuronx.metrics`). This module is only imported on the real backend: it imports `torch_neuronx` inside
functions.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.timebase import rebase_ns, us_to_ns
from neuron_studio.profiler.trace import COMPILE_COLUMNS, HOST_COLUMNS

__all__ = [
    "MIN_WARMUP", "HbmReservationWarning", "WarmupWarning", "ExplorerNotFoundError", "ExplorerError",
    "ProfileOutputError", "NeuronCaptureOptions", "RealRun", "capture_real", "locate_run_dir", "run_explorer",
    "explorer_install_message", "EXPECTED_FILES", "CaptureConfigError", "UnsupportedProfilerError",
    "detect_profiler_api", "capture_environment", "PROFILER_APIS",
]

MIN_WARMUP = 3
"""Neuron's profiling guide: profile after >= 3 warm-up iterations (the first calls compile and load NEFFs)."""

# How much HBM ProfileMode.DEVICE reserves is a hardware figure: neuron_studio/hardware/specs.json
# (`device_profile_hbm_reserve_bytes`), used by the memory forecast.

EXPLORER_TIMEOUT_S = 900.0

# what each ProfileMode writes into the run directory (trainium.md §2.1)
EXPECTED_FILES: dict[str, tuple[str, ...]] = {
    "DEVICE": ("*.ntff", "*.neff"),
    "RUNTIME": ("ntrace.pb", "trace_info.pb"),
    "CPU_UTIL": ("cpu_util.pb",),
    "HOST_MEMORY": ("host_mem.pb",),
}


class HbmReservationWarning(UserWarning):
    """Device profiling reserves ~5 GB of HBM on Trn2: a model that barely fits may run out of memory."""


class WarmupWarning(UserWarning):
    """Fewer than MIN_WARMUP warm-up steps were asked for; the capture raised them to MIN_WARMUP."""


class ExplorerNotFoundError(RuntimeError):
    """The `neuron-explorer` CLI is not on PATH (names the package to install and the command to run)."""


class ExplorerError(RuntimeError):
    """`neuron-explorer` failed or timed out (carries its stderr)."""


class CaptureConfigError(RuntimeError):
    """The environment conflicts with a torch.profiler capture (names the variable and what to do)."""


class UnsupportedProfilerError(ImportError):
    """`torch_neuronx.profiling` exports neither documented profiler API (names what it does export)."""


PROFILER_APIS = ("shipped", "april")


def detect_profiler_api(profiling: Any) -> str:
    """"shipped" when `torch_neuronx.profiling` has NeuronConfig, ProfileMode and NeuronProfiler (Neuron 2.32 docs);
    "april" when it has only NeuronProfiler taking `pytorch_activities` / `neuron_output_dir` (April source)."""
    import inspect

    names = {n for n in ("NeuronConfig", "ProfileMode", "NeuronProfiler") if hasattr(profiling, n)}
    if names == {"NeuronConfig", "ProfileMode", "NeuronProfiler"}:
        return "shipped"
    if "NeuronProfiler" in names:
        try:
            params = set(inspect.signature(profiling.NeuronProfiler).parameters)
        except (TypeError, ValueError):
            params = set()
        if {"pytorch_activities", "neuron_output_dir"} <= params:
            return "april"
    exported = sorted(n for n in dir(profiling) if not n.startswith("_"))
    raise UnsupportedProfilerError(
        "torch_neuronx.profiling exports neither documented profiler API (NeuronConfig + ProfileMode + "
        "NeuronProfiler(config), or NeuronProfiler(pytorch_activities=..., neuron_output_dir=...)); it exports "
        f"{exported}. Update torch-neuronx, or import a capture with load_neuron_profile")


_SESSION_MODES = ("eager", "adaptive")


class capture_environment:
    """The NEURON_RT_INSPECT_* environment a torch.profiler capture needs, set for the capture and restored after:
    refuses NEURON_RT_INSPECT_ENABLE=1; sets NEURON_RT_INSPECT_DEVICE_PROFILE=session for eager/adaptive when unset."""

    VAR = "NEURON_RT_INSPECT_DEVICE_PROFILE"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.notes: list[str] = []
        self._old: str | None = None
        self._set = False

    def __enter__(self) -> "capture_environment":
        if os.environ.get("NEURON_RT_INSPECT_ENABLE", "").strip() not in ("", "0"):
            raise CaptureConfigError(
                "NEURON_RT_INSPECT_ENABLE is set: the Neuron docs forbid combining environment-variable capture with "
                "torch.profiler (they conflict). Unset NEURON_RT_INSPECT_ENABLE in the kernel's environment and "
                "restart the kernel, or capture with the environment variables alone and load the result with "
                "load_neuron_profile")
        self._old = os.environ.get(self.VAR)
        if self.mode in _SESSION_MODES:
            if self._old is None or self._old.strip() == "":
                os.environ[self.VAR] = "session"
                self._set = True
                self.notes.append(f"{self.VAR}=session for the capture: eager runs one NEFF per op, session mode "
                                  "captures all of them in one NTFF")
            elif self._old.strip() != "session":
                self.notes.append(f"{self.VAR}={self._old} (set in the environment) kept: eager runs one NEFF per op "
                                  "and only session mode captures every execution in one NTFF")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._set:
            if self._old is None:
                os.environ.pop(self.VAR, None)
            else:
                os.environ[self.VAR] = self._old


class ProfileOutputError(FileNotFoundError):
    """The Neuron profiler output directory is not where, or not what, it should be (names what was expected)."""


def explorer_install_message(run_dir: str | Path | None = None) -> str:
    d = str(run_dir) if run_dir is not None else "DIR"
    return (
        "the `neuron-explorer` command is not on PATH. Install the Neuron SDK's neuron-explorer "
        "(aws-neuronx-tools package, e.g. `sudo apt-get install aws-neuronx-tools`; it installs into "
        "/opt/aws/neuron/bin, so add that to PATH), then run: "
        f"neuron-explorer view -d {d} --output-format parquet "
        f"and load the result with neuron_studio.profiler.neuron_profile.load_neuron_profile('{d}')"
    )


@dataclass(frozen=True)
class NeuronCaptureOptions:
    """Arguments of TorchNeuron's `NeuronConfig` (None = TorchNeuron's default)."""

    out_dir: str | Path = "neuron_profile"
    modes: Sequence[str] = ("DEVICE", "RUNTIME")
    max_events_per_nc: int | None = None
    capture_enabled_for_nc: str | None = None     # e.g. "0,1,2-5"
    neff_cache_dir: str | None = None
    explorer: bool = True                        # run neuron-explorer after the capture
    explorer_timeout_s: float = EXPLORER_TIMEOUT_S

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m.upper() not in EXPECTED_FILES]
        if bad:
            raise ValueError(f"unknown ProfileMode(s) {bad}; valid: {', '.join(EXPECTED_FILES)}")
        if self.max_events_per_nc is not None and self.max_events_per_nc < 1:
            raise ValueError(f"max_events_per_nc must be >= 1; got {self.max_events_per_nc}")


def neuron_config(opts: NeuronCaptureOptions) -> Any:
    """Build TorchNeuron's NeuronConfig from the options (only arguments that are set are passed)."""
    from torch_neuronx.profiling import NeuronConfig, ProfileMode

    kwargs: dict[str, Any] = {
        "modes": [getattr(ProfileMode, m.upper()) for m in opts.modes],
        "profile_output_dir": str(opts.out_dir),
    }
    if opts.max_events_per_nc is not None:
        kwargs["max_events_per_nc"] = int(opts.max_events_per_nc)
    if opts.capture_enabled_for_nc is not None:
        kwargs["capture_enabled_for_nc"] = str(opts.capture_enabled_for_nc)
    if opts.neff_cache_dir is not None:
        kwargs["neff_cache_dir"] = str(opts.neff_cache_dir)
    return NeuronConfig(**kwargs)


# -- output directory ------------------------------------------------------------------------------------
def locate_run_dir(out_dir: str | Path, *, pid: int | None = None, modes: Sequence[str] = ("DEVICE", "RUNTIME"),
                   since: float | None = None) -> Path:
    """The newest `<out>/<instance-id>_pid_<pid>/<timestamp>/` for `pid` (default: this process) holding the
    files `modes` write. `since` (epoch seconds) ignores older run directories."""
    out = Path(out_dir)
    pid = os.getpid() if pid is None else pid
    layout = f"{out}/<instance-id>_pid_{pid}/<timestamp>/"
    wanted = [pat for m in modes for pat in EXPECTED_FILES[m.upper()]]
    if not out.is_dir():
        raise ProfileOutputError(f"Neuron profiler output directory {str(out)!r} does not exist; expected "
                                 f"{layout} with {', '.join(wanted)} (was NeuronConfig.profile_output_dir set?)")
    runs = [d for p in out.glob(f"*_pid_{pid}") if p.is_dir() for d in p.iterdir() if d.is_dir()]
    if since is not None:
        runs = [d for d in runs if d.stat().st_mtime >= since - 1.0]
    if not runs:
        present = sorted(p.name for p in out.iterdir())[:10]
        raise ProfileOutputError(f"no run directory for pid {pid} in {str(out)!r}: expected {layout} "
                                 f"(found: {present or 'nothing'})")
    run = max(runs, key=lambda d: (d.stat().st_mtime, d.name))
    missing = [pat for pat in wanted if not any(run.glob(pat))]
    if missing:
        present = sorted(p.name for p in run.iterdir())
        raise ProfileOutputError(f"run directory {str(run)!r} lacks {', '.join(missing)} (modes "
                                 f"{', '.join(modes)} write {', '.join(wanted)}); it holds: {present or 'nothing'}")
    return run


# -- neuron-explorer -------------------------------------------------------------------------------------
def run_explorer(run_dir: str | Path, *, output_dir: str | Path | None = None, timeout_s: float = EXPLORER_TIMEOUT_S,
                 executable: str | None = None) -> Path:
    """`neuron-explorer view -d RUN_DIR --output-format parquet --output-file OUT` -> OUT (the Parquet tables)."""
    exe = executable or shutil.which("neuron-explorer")
    if exe is None:
        raise ExplorerNotFoundError(explorer_install_message(run_dir))
    out = Path(output_dir) if output_dir is not None else Path(run_dir) / "explorer"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [exe, "view", "-d", str(run_dir), "--output-format", "parquet", "--output-file", str(out)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise ExplorerError(f"`{' '.join(cmd)}` timed out after {timeout_s:.0f} s; raise explorer_timeout_s or "
                            f"run it by hand. stderr: {_tail(e.stderr)}") from None
    except OSError as e:
        raise ExplorerError(f"`{' '.join(cmd)}` could not start: {e}") from None
    if res.returncode != 0:
        raise ExplorerError(f"`{' '.join(cmd)}` exited with {res.returncode}. stderr: {_tail(res.stderr)}")
    return out


def _tail(s: Any, n: int = 2000) -> str:
    if s is None:
        return ""
    if isinstance(s, bytes):
        s = s.decode(errors="replace")
    return s[-n:].strip()


# -- the capture -----------------------------------------------------------------------------------------
@dataclass
class RealRun:
    """What one real capture produced: where the files are, what TorchNeuron reported, and how to analyse it."""

    run_dir: Path | None
    parquet_dir: Path | None
    tracking: Any                                    # neuron_studio.device.real.OpTracking
    switches: dict[str, Any]
    dynamo_metrics: dict[str, Any]
    mode: str
    steps: int
    warmup: int
    host: pd.DataFrame | None = None
    memory: dict[str, Any] | None = None             # measured_memory(): the allocator's peak over the steps
    wall_ns: int = 0
    explorer_message: str | None = None              # why there is no Parquet (CLI missing / failed)
    notes: list[str] = field(default_factory=list)
    name: str | None = None
    api: str | None = None                           # "shipped" | "april" (detect_profiler_api)
    rank: int = 0
    framework_log: Any = None                        # FrameworkLog.ops of the cell
    mapping: Any = None                              # neuron_profile.executions.FrameworkMapping, or None
    compile_cache: Any = None                        # compile_cache.CompileCache, or None
    compiles: pd.DataFrame | None = None             # Trace.compiles: the neuron backend's graph compiles, with causes

    def meta(self) -> dict[str, Any]:
        return {
            "op_tracking": self.tracking.to_dict() if self.tracking is not None else None,
            "switches": {k: v.to_dict() for k, v in self.switches.items()},
            "dynamo_metrics": self.dynamo_metrics, "capture_dir": str(self.run_dir) if self.run_dir else None,
            "warmup": self.warmup, "wall_ns": self.wall_ns, "capture_notes": list(self.notes),
            "memory_measured": self.memory, "profiler_api": self.api, "rank": self.rank,
            "compile_cache": self.compile_cache.to_dict() if self.compile_cache is not None else None,
        }

    def profile(self, *, chip: str | None = None) -> Any:
        """The measured Profile (needs the Explorer Parquet; raises ExplorerNotFoundError otherwise)."""
        if self.parquet_dir is None:
            raise ExplorerNotFoundError(self.explorer_message or explorer_install_message(self.run_dir))
        from neuron_studio.profiler.neuron_profile import load_neuron_profile
        from neuron_studio.profiler.trace import Trace

        prof = load_neuron_profile(self.parquet_dir, chip=chip, mode=self.mode, steps=self.steps, name=self.name,
                                   tracking=self.tracking, extra_meta=self.meta(), mapping=self.mapping,
                                   framework_log=self.framework_log, compiles=self.compiles)
        if self.host is not None and len(self.host):
            tr = prof.trace
            tr.meta["figures"]["host_time"] = "measured"
            tr.meta.setdefault("figure_sources", {})["host_time"] = "torch.profiler CPU events of the profiled steps"
            tr.meta["not_captured"] = [x for x in tr.meta.get("not_captured") or [] if x != "host time"]
            prof.trace = Trace(ops=tr.ops, host=self.host, compiles=tr.compiles, meta=tr.meta)
        return prof


def _host_frame(prof: Any, t_wall0: int) -> pd.DataFrame:
    rows: dict[str, list] = {k: [] for k in HOST_COLUMNS}
    try:
        evs = prof.events() or []
        start_ns = prof.profiler.kineto_results.trace_start_ns()
    except Exception:  # noqa: BLE001 - host events are optional on the real path
        return pd.DataFrame(rows)
    for e in evs:
        rows["name"].append(e.name)
        rows["category"].append("user_annotation" if e.is_user_annotation else "cpu_op")
        rows["thread"].append(int(e.thread))
        rows["start_ns"].append(int(e.time_range.start * 1000) + start_ns - t_wall0)
        rows["dur_ns"].append(int((e.time_range.end - e.time_range.start) * 1000))
        rows["input_shapes"].append(None)
        rows["flops"].append(0.0)
        rows["stack"].append(None)
    return pd.DataFrame(rows)


def _host_from_chrome_trace(path: Path) -> pd.DataFrame | None:
    """Host events of the April profiler's `pytorch_trace.json` (torch's Chrome trace: complete "X" events of the
    `cpu_op` / `user_annotation` categories, `ts`/`dur` in us), rebased on the first event in integer ns. None when
    the file is missing or unreadable (host time is then "not captured")."""
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    evs = [e for e in (doc.get("traceEvents") if isinstance(doc, dict) else None) or []
           if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
           and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    if not evs:
        return None
    start, _ = rebase_ns(us_to_ns(np.asarray([float(e["ts"]) for e in evs])))   # epoch us: exact in integers
    dur = us_to_ns(np.asarray([float(e["dur"]) for e in evs]))
    rows: dict[str, list] = {k: [] for k in HOST_COLUMNS}
    for i, e in enumerate(evs):
        rows["name"].append(str(e.get("name", "")))
        rows["category"].append(str(e["cat"]))
        tid = e.get("tid")
        rows["thread"].append(int(tid) if isinstance(tid, int) else 0)
        rows["start_ns"].append(int(start[i]))
        rows["dur_ns"].append(int(dur[i]))
        rows["input_shapes"].append(None)
        rows["flops"].append(0.0)
        rows["stack"].append(None)
    return pd.DataFrame(rows)


def _reset_peak_memory(torch: Any) -> int | None:
    """Reset TorchNeuron's peak counter before the profiled steps; the bytes live then (None: no such API)."""
    nx = getattr(torch, "neuron", None)
    reset = getattr(nx, "reset_peak_memory_stats", None)
    if reset is None or not hasattr(nx, "max_memory_allocated") or not hasattr(nx, "memory_allocated"):
        return None
    reset()
    return int(nx.memory_allocated())


def measured_memory(torch: Any, start: int | None) -> dict[str, Any] | None:
    """What real Trainium tells about device memory over the profiled steps: TorchNeuron's allocator counters
    (`torch.neuron.max_memory_allocated()` after a reset, `memory_allocated()` before and after). There is no
    per-allocation record, so no timeline, categories or levers; the forecast uses the peak alone."""
    if start is None:
        return None
    nx = torch.neuron
    return {"peak_bytes": int(nx.max_memory_allocated()), "allocated_start_bytes": start,
            "allocated_end_bytes": int(nx.memory_allocated()),
            "source": "torch.neuron.max_memory_allocated() over the profiled steps (TorchNeuron's allocator; "
                      "the HBM DEVICE profiling itself reserves is not in it)"}


def _rank() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment (0, 1 outside a distributed launch)."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def _nc_list(spec: str | None) -> list[str] | None:
    return [x.strip() for x in spec.split(",") if x.strip()] if spec else None


class _Profiler:
    """Start/stop TorchNeuron's profiler in the detected API generation (one object, two shapes)."""

    def __init__(self, api: str, opts: NeuronCaptureOptions, out_dir: Path) -> None:
        import torch

        self.api, self.opts, self.out_dir = api, opts, out_dir
        self.notes: list[str] = []
        self.torch_prof: Any = None
        self._ctx: Any = None
        self.cpu = torch.profiler.ProfilerActivity.CPU
        self.pu1 = torch.profiler.ProfilerActivity.PrivateUse1

    def start(self) -> None:
        import torch
        from torch_neuronx import profiling

        if self.api == "shipped":
            cfg = neuron_config(dataclasses.replace(self.opts, out_dir=self.out_dir))
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*privateuseone.*")
                self.torch_prof = torch.profiler.profile(
                    activities=[self.cpu, self.pu1], experimental_config=cfg, record_shapes=True,
                    on_trace_ready=profiling.NeuronProfiler(cfg).export_trace)
                self.torch_prof.__enter__()
            self._ctx = self.torch_prof
            return
        unsupported = [n for n, v in (("max_events_per_nc", self.opts.max_events_per_nc),
                                      ("neff_cache_dir", self.opts.neff_cache_dir)) if v is not None]
        if tuple(m.upper() for m in self.opts.modes) != ("DEVICE", "RUNTIME"):
            unsupported.append("modes")
        if unsupported:
            self.notes.append(f"this TorchNeuron's NeuronProfiler (April API) has no {', '.join(unsupported)}: "
                              "ignored (it always captures the device and system profiles)")
        nc = _nc_list(self.opts.capture_enabled_for_nc)
        self._ctx = profiling.NeuronProfiler(pytorch_activities=[self.cpu], record_shapes=True,
                                             neuron_output_dir=str(self.out_dir),
                                             event_filters={"nc": nc} if nc else None)
        self._ctx.__enter__()

    def stop(self) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)

    def host(self, t_wall0: int) -> pd.DataFrame | None:
        if self.torch_prof is not None:
            return _host_frame(self.torch_prof, t_wall0)
        trace = getattr(self._ctx, "pytorch_trace_file", None)     # the April profiler's exported CPU trace
        host = _host_from_chrome_trace(Path(trace)) if trace else None
        if host is None:
            self.notes.append(f"host time not captured: no readable PyTorch trace from the April NeuronProfiler "
                              f"({trace or 'no pytorch_trace_file'})")
        return host


def _neff_cache_dir(opts: NeuronCaptureOptions, notes: list[str]) -> NeuronCaptureOptions:
    """The shipped docs: for eager, set neff_cache_dir so the many per-op NEFFs are copied into the profile. Taken
    from TORCH_NEURONX_NEFF_CACHE_DIR when the options leave it unset; else TorchNeuron's default applies (noted)."""
    if opts.neff_cache_dir is not None:
        return opts
    env = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", "").strip()
    if env:
        return dataclasses.replace(opts, neff_cache_dir=env)
    notes.append("neff_cache_dir not set (nor TORCH_NEURONX_NEFF_CACHE_DIR): if Explorer cannot match executions to "
                 "NEFFs, set NeuronCaptureOptions(neff_cache_dir=...) to TorchNeuron's NEFF cache directory")
    return opts


def capture_real(fn: Callable[[], Any], *, steps: int = 1, warmup: int = MIN_WARMUP, mode: str = "eager",
                 options: NeuronCaptureOptions | None = None, name: str | None = None, chip: str = "trn2",
                 on_step: Callable[[int], None] | None = None, sync: bool = True) -> RealRun:
    """Run `fn` `warmup` times, then `steps` times under the Neuron profiler; locate the output, run Explorer.

    Op tracking, the op log and the compile-cache watch cover the whole call (warm-up included): they answer
    "what ran where, and what compiled, in this cell". `sync` (default, as on the emulated device): every step
    ends with `torch.neuron.synchronize()`, so TorchNeuron's asynchronous execution cannot carry one step's
    device work into the next step's window (per-step device times stay the step's own).
    """
    import torch

    from neuron_studio import device as _device
    from neuron_studio.device import real as _real
    from neuron_studio.profiler.compile_cache import CompileCacheWatch
    from neuron_studio.profiler.framework_log import FrameworkLog
    from neuron_studio.profiler.neuron_profile.executions import read_framework_mapping

    if steps < 1:
        raise ValueError(f"steps must be >= 1; got {steps}")
    opts = options or NeuronCaptureOptions()
    opts = dataclasses.replace(opts, out_dir=Path(opts.out_dir).expanduser().resolve())  # cwd may change later
    if warmup < MIN_WARMUP:
        warnings.warn(f"warm-up raised from {warmup} to {MIN_WARMUP} steps: Neuron profiles should start after "
                      f">= {MIN_WARMUP} warm-up iterations (the first calls compile and load NEFFs)",
                      WarmupWarning, stacklevel=2)
        warmup = MIN_WARMUP
    if any(m.upper() == "DEVICE" for m in opts.modes):
        warnings.warn("ProfileMode.DEVICE reserves about 5 GB of HBM on Trn2 while the profiler runs: a model "
                      "that nearly fills HBM may fail with out-of-memory under capture only",
                      HbmReservationWarning, stacklevel=2)
    nx = _real._nx()  # fails early (ImportError) when TorchNeuron is absent
    from torch_neuronx import profiling

    api = detect_profiler_api(profiling)
    cache_notes: list[str] = []
    if mode in _SESSION_MODES and api == "shipped":
        opts = _neff_cache_dir(opts, cache_notes)
    rank, world = _rank()
    out_dir = Path(opts.out_dir) / f"rank{rank}" if world > 1 else Path(opts.out_dir)
    env = capture_environment(mode)
    metrics = getattr(nx, "metrics", None)
    watch = CompileCacheWatch(metrics) if metrics is not None else None
    out_dir.mkdir(parents=True, exist_ok=True)
    if mode == "compile":
        _real.reset_dynamo_metrics()
    tracker = _real.OpTracker()
    started = time.time()
    t_wall0 = time.time_ns()
    t0 = time.perf_counter_ns()
    log = FrameworkLog(compile_mode=mode == "compile")
    compile_log = _device.registry().compile_log   # the neuron backend logs each graph compile with its cause here
    compile_start = len(compile_log)
    prof = _Profiler(api, opts, out_dir)
    with env, tracker, log, (watch if watch is not None else contextlib.nullcontext()):
        for w in range(warmup):
            log.step = w - warmup
            fn()
            if sync:
                torch.neuron.synchronize()
        log.step = None
        torch.neuron.synchronize()
        prof.start()
        mem_start = _reset_peak_memory(torch)
        try:
            for i in range(steps):
                log.step = i
                fn()
                if sync:  # every step ends synchronised, as on the emulated device: no step's work spills over
                    torch.neuron.synchronize()
                if on_step is not None:
                    on_step(i + 1)
        finally:
            log.step = None
            torch.neuron.synchronize()  # execution is asynchronous: sync before the profiler stops and exports
            prof.stop()
        memory = measured_memory(torch, mem_start)
        host = prof.host(t_wall0)
    wall = time.perf_counter_ns() - t0
    compiles = pd.DataFrame(compile_log[compile_start:], columns=list(COMPILE_COLUMNS))
    run = RealRun(run_dir=None, parquet_dir=None, tracking=tracker.result,
                  switches=_real.eager_switches(chip=chip),
                  dynamo_metrics=_real.dynamo_metrics() if mode == "compile" else {}, mode=mode, steps=steps,
                  warmup=warmup, host=host, wall_ns=int(wall), name=name, memory=memory, api=api, rank=rank,
                  framework_log=log.ops, compiles=compiles,
                  compile_cache=watch.result(log, compiles) if watch is not None else None)
    run.notes += env.notes + prof.notes + cache_notes
    if watch is None:
        run.notes.append("compile-cache figures not captured: this torch_neuronx has no metrics module")
    if _real.deterministic_mode():
        run.notes.append("deterministic algorithms are on: TorchNeuron disables Adaptive Eager fusion")
    run.run_dir = locate_run_dir(out_dir, modes=opts.modes if api == "shipped" else ("DEVICE", "RUNTIME"),
                                 since=started)
    run.mapping = read_framework_mapping([run.run_dir, out_dir], since_s=started)
    if run.mapping is None:
        run.notes.append("no framework_mapping_<ts>.json from TorchNeuron: device executions cannot be joined to "
                         "PyTorch ops (it is written only with PyTorch and runtime profiling both on, and not with "
                         "NEURON_LAUNCH_BLOCKING=1 in the April source's tests)")
    if opts.explorer:
        try:
            run.parquet_dir = run_explorer(run.run_dir, timeout_s=opts.explorer_timeout_s)
        except (ExplorerNotFoundError, ExplorerError) as e:
            run.explorer_message = str(e)
    else:
        run.explorer_message = explorer_install_message(run.run_dir) if shutil.which("neuron-explorer") is None \
            else f"explorer disabled: run neuron-explorer view -d {run.run_dir} --output-format parquet"
    return run
