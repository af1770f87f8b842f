"""Capture: run code under torch.profiler and the device's op events (drained as columns); end in a `Trace` value.

Usable without IPython:

    with neuron_studio.profile(mode="adaptive", chip="trn2", warmup=1) as run:
        for _ in range(6):
            train_step()
            run.step()
    profile = run.profile        # analyses (op table, hot path, ...) built from run.trace

Warm-up steps execute but are dropped from the trace (as torch.profiler's schedule does), so the profile
shows the steady state; so are the ops after the last step mark (no step: the script's tail). Each profiled
step's window, from the previous step mark to its own, is `meta["step_windows"]`: the measured host step.
The module path of each op comes from global module forward hooks; backward ops are tagged by the autograd
engine's graph task.
"""
from __future__ import annotations

import dataclasses
import os
import time
import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from neuron_studio import device as _device
from neuron_studio.device.events import FLAG_BACKWARD, OpBatch
from neuron_studio.profiler.kineto_log import without_kineto_markers
from neuron_studio.profiler.memory_capture import MemoryRecorder, memory_frame
from neuron_studio.profiler.module_tracker import ModuleTracker
from neuron_studio.profiler.trace import COMPILE_COLUMNS, HOST_COLUMNS, Trace, ops_frame
from neuron_studio.profiler.vocabulary import MODES

__all__ = ["Capture", "profile", "sync_for_timing", "MODES"]



def _forward_sources(batch: OpBatch) -> tuple[np.ndarray, np.ndarray]:
    """(autograd sequence numbers, sorted; source line of the forward op that created each backward node)."""
    has = (batch.autograd_seq >= 0) & np.not_equal(batch.source, None)
    # the first op after the counter moved made the node
    seqs, first = np.unique(batch.autograd_seq[has], return_index=True)
    return seqs, batch.source[has][first]


class Capture:
    """One profiled run. Use as a context manager; call `.step()` after each step of a loop."""

    def __init__(
        self,
        *,
        mode: str = "eager",
        chip: str | None = None,
        warmup: int = 0,
        name: str | None = None,
        host_events: bool = True,
        with_stack: bool = False,
        capacity: int = 2_000_000,
        record_memory: bool = True,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0; got {warmup}")
        reg = _device.register()
        self.registry = reg
        self.mode = mode
        self.chip = (chip or reg.target.chip).lower()
        from neuron_studio.device.targets import target_for

        target_for(self.chip)  # validates the chip name with a clear error
        self.warmup = warmup
        self.name = name
        self.host_events = host_events
        self.with_stack = with_stack
        self.capacity = capacity
        self.record_memory = record_memory
        self._memory = None
        self.trace: Trace | None = None
        self.status = "running"
        self._step = 0
        self._step_seq: list[int] = []
        self._step_ns: list[int] = []
        self._sub = None
        self._prof = None
        self._tracker = None
        self._compile_start = 0
        self._profile = None
        #: how the Python API was called (`profile`'s `api_call`), stamped into the trace's metadata: the advice
        #: writes its lines in that form. None: a `%%neuron` cell or a `neuron-studio run` script.
        self.api_call: dict[str, Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> "Capture":
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            status = "ok"
        elif issubclass(exc_type, KeyboardInterrupt):
            status = "interrupted"
        else:
            status = "error"
        self.stop(status=status)

    def start(self) -> None:
        # our global module hooks make torch.compile(module) warn on every call; they are observers only
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=r".*global hooks.*")
        bus = self.registry.bus
        self._sub = bus.subscribe(capacity=self.capacity, with_source=True)
        self._memory = MemoryRecorder(self.registry) if self.record_memory else None
        self._tracker = ModuleTracker(bus, self._memory if self._memory is not None and self._memory.active else None)
        self._tracker.start()
        if self._memory is not None:
            self._memory.start()
        self._compile_start = len(self.registry.compile_log)
        self._record_errors0 = bus.record_errors
        self._t_perf0 = time.perf_counter_ns()
        self._t_wall0 = time.time_ns()
        if self.host_events:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.registry.backend == "real":
                activities.append(torch.profiler.ProfilerActivity.PrivateUse1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # shapes and FLOPs come with the device's op events; asking torch.profiler for them too
                # doubles its parse time for nothing
                self._prof = torch.profiler.profile(
                    activities=activities, record_shapes=False, with_flops=False, with_stack=self.with_stack
                )
                with without_kineto_markers():
                    self._prof.__enter__()

    def step(self) -> None:
        """Mark the end of one step (like `torch.profiler.profile.step()`)."""
        if self._memory is not None:
            self._memory.settle()  # frees of this step land before its end mark (steps are split by time)
        self._step_seq.append(self.registry.bus.last_seq)
        self._step_ns.append(time.perf_counter_ns())
        self._step += 1

    def stop(self, status: str = "ok") -> Trace:
        """Stop recording and build the Trace (always: an error or interrupt keeps the partial run)."""
        if self.trace is not None:
            return self.trace
        if self._memory is not None:
            self._memory.settle()
        t_end = time.perf_counter_ns()
        host = None
        if self._prof is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with without_kineto_markers():
                        self._prof.__exit__(None, None, None)
                host = self._host_frame()
            except Exception as e:  # a broken host profile must not lose the device trace
                host = None
                self._host_error = f"{type(e).__name__}: {e}"
            self._prof = None
        batch = self._sub.drain_columns() if self._sub is not None else OpBatch.empty()
        dropped = self._sub.dropped if self._sub is not None else 0
        if self._sub is not None:
            self._sub.close()
        self._tracker.stop()
        if self._memory is not None:
            self._memory.stop()
        if getattr(self, "_warnings", None) is not None:
            self._warnings.__exit__(None, None, None)
            self._warnings = None
        seqs = batch.seq
        modules, phases = self._tracker.assign(seqs)
        modules = np.asarray(modules, dtype=object)
        phases = np.asarray(phases, dtype=object)
        backward = np.flatnonzero(batch.flags & FLAG_BACKWARD)
        source = batch.source
        if len(backward):
            phases[backward] = "backward"
            fwd = batch.fwd_seq[backward]
            known = fwd >= 0
            paths = np.full(len(backward), "", dtype=object)
            paths[known] = self._tracker.modules_of_forward(fwd[known])
            modules[backward] = np.where(paths != "", paths + " (backward)", "(backward)")
            # a backward op's source: the user line of the forward op it differentiates
            fwd_seqs, fwd_lines = _forward_sources(batch)
            if len(fwd_seqs):
                pos = np.minimum(np.searchsorted(fwd_seqs, fwd), len(fwd_seqs) - 1)
                fill = known & (fwd_seqs[pos] == fwd) & np.equal(source[backward], None)
                if fill.any():
                    source = source.copy()
                    source[backward[fill]] = fwd_lines[pos[fill]]
                    batch = dataclasses.replace(batch, source=source)
        in_graph = np.flatnonzero(batch.graph >= 0)
        if len(in_graph):   # ops inside compiled graphs: the module their graph's nodes name (no module hooks ran)
            paths, known = self._tracker.graph_modules(seqs[in_graph], batch.graph[in_graph])
            modules[in_graph[known]] = paths[known]
        steps = self._step_index(seqs)
        ops = ops_frame(batch, modules=modules, phases=phases, steps=steps)
        memory = None
        if self._memory is not None and self._memory.active:
            memory = memory_frame(self._memory, ops, step_times=self._step_ns, warmup=self.warmup,
                                  t0=self._t_perf0)
        t0 = self._t_perf0
        windows = self._step_windows(t0)
        keep = ops["step"] >= self.warmup
        tail = 0
        if windows and status == "ok":
            # ops after the last step mark (the script's tail: saving, evaluating) are no profiled step; counted
            # in, they stretch every per-step figure by an amount that depends on the number of steps. A failed
            # run keeps its partial step: it holds the op that failed
            after = (ops["step"] >= self._step).to_numpy()
            tail = int(after.sum())
            keep &= ~after
        if not keep.all():
            ops = ops[keep].reset_index(drop=True)
        ops["start_ns"] = ops["start_ns"] - t0
        ops["end_ns"] = ops["end_ns"] - t0
        compiles = pd.DataFrame(self.registry.compile_log[self._compile_start:], columns=list(COMPILE_COLUMNS))
        active_steps = max(1, self._step - self.warmup) if self._step else 1
        meta = {
            "format": "neuron-studio-trace",
            "version": 1,
            "backend": self.registry.backend,
            "chip": self.chip,
            "lnc": int(self.registry.target.lnc) if self.chip == self.registry.target.chip else None,
            "mode": self.mode,
            "name": self.name,
            "status": status,
            "steps": int(active_steps),
            "warmup": int(self.warmup),
            "torch_version": torch.__version__,
            "wall_ns": int(t_end - t0),
            **_job_size(),
            "dropped_events": int(dropped),
            "unrecorded_ops": int(self.registry.bus.record_errors - getattr(self, "_record_errors0", 0)),
            "figures": {
                "device_time": "measured" if self.registry.backend == "real" else "modeled",
                "engine_utilization": "measured" if self.registry.backend == "real" else "modeled",
                "host_time": "measured",
                "cost": "modeled",
            },
            "pid": os.getpid(),
            "module_classes": dict(self._tracker.classes),
        }
        if windows:
            meta["step_windows"] = windows
        if tail:
            meta["ops_after_last_step"] = tail
        if self.api_call is not None:
            meta["api_call"] = dict(self.api_call)
        from neuron_studio.profiler.model.config import ModelConfig

        switches = ModelConfig.adaptive_limit_from_env()   # the environment TorchNeuron would read
        if switches:
            meta["adaptive_switches"] = switches
        if getattr(self, "_host_error", None):
            meta["host_events_error"] = self._host_error
        if memory is not None:
            meta["memory"] = {"source": "emulator allocator", "devices": sorted(set(memory["device"].tolist())),
                              "saved_tensor_hooks": self.mode != "compile",
                              "released_from_earlier_bytes": int(memory.attrs.get("released", {}).get("bytes", 0))}
        self.trace = Trace(ops=ops, host=host, compiles=compiles, meta=meta, memory=memory)
        self.status = status
        return self.trace

    def _step_windows(self, t0: int) -> list[dict[str, int]]:
        """The profiled steps' windows, ns since the capture started: step k runs from the previous step mark (the
        capture's start for step 0) to its own mark, as torch.profiler's ProfilerStep#k does; [] without marks
        or without a step after the warm-up."""
        marks = self._step_ns
        return [{"step": k, "start_ns": int((marks[k - 1] if k else t0) - t0), "end_ns": int(marks[k] - t0)}
                for k in range(self.warmup, len(marks))]

    def _step_index(self, seqs: np.ndarray) -> np.ndarray:
        if not self._step_seq:
            return np.zeros(len(seqs), dtype=np.int32)
        bounds = np.asarray(self._step_seq, dtype=np.int64)
        return np.searchsorted(bounds, seqs, side="left").astype(np.int32)

    def _host_frame(self) -> pd.DataFrame:
        """Host events from the raw kineto results (skips torch's FunctionEvent tree: ~10x cheaper)."""
        prof = self._prof
        evs = prof.profiler.kineto_results.events() if prof is not None and prof.profiler is not None else []
        t0 = self._t_wall0  # kineto reports wall-clock ns; make them ns since the capture started
        rows: dict[str, list] = {k: [] for k in HOST_COLUMNS}
        cpu = torch.autograd.DeviceType.CPU
        for e in evs:
            if e.device_type() != cpu:
                continue
            rows["name"].append(e.name())
            rows["category"].append("user_annotation" if e.is_user_annotation() else "cpu_op")
            rows["thread"].append(int(e.start_thread_id()))
            rows["start_ns"].append(int(e.start_ns()) - t0)
            rows["dur_ns"].append(int(e.duration_ns()))
            rows["input_shapes"].append(None)
            rows["flops"].append(0.0)
            stack = e.stack() if self.with_stack else None
            rows["stack"].append("\n".join(stack) if stack else None)
        return pd.DataFrame(rows)

    # -- results ---------------------------------------------------------------------------------
    @property
    def profile(self):  # noqa: ANN201 - Profile (imported lazily: analysis is downstream of capture)
        if self.trace is None:
            raise RuntimeError("the capture is still running; leave the `with` block (or call stop()) first")
        if self._profile is None:
            from neuron_studio.profiler.profile import Profile

            self._profile = Profile.from_trace(self.trace)
        return self._profile


def sync_for_timing() -> None:
    """The studio's own device sync (the emulator tags it, so it is never reported as the user's sync point)."""
    sync = getattr(torch.neuron, "synchronize_for_timing", None)
    (sync or torch.neuron.synchronize)()


def _job_size() -> dict[str, int]:
    """World size and ranks per instance of the job this process belongs to, so collectives are sized right
    whether the capture runs under the CLI or inside a user's torch.distributed / torchrun job."""
    world, local = 1, 0
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = int(torch.distributed.get_world_size())
    except (RuntimeError, ValueError):
        world = 1
    env_world = os.environ.get("WORLD_SIZE", "")
    if world == 1 and env_world.isdigit():
        world = int(env_world)
    env_local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if env_local.isdigit():
        local = int(env_local)
    out = {"world_size": max(1, world)}
    if local:
        out["local_world_size"] = min(local, out["world_size"])
    return out


def _fn_name(fn: Callable[[], Any]) -> str | None:
    """The name a script calls `fn` by, as the advice repeats it (`profile(train_step, mode=...)`), or None when it
    has none to repeat (a lambda, a partial)."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else None


def profile(
    fn: Callable[[], Any] | None = None,
    *,
    mode: str = "eager",
    chip: str | None = None,
    steps: int = 1,
    warmup: int = 0,
    name: str | None = None,
    host_events: bool = True,
) -> Any:
    """`with profile(...) as run:` or `profile(fn, steps=5, warmup=2) -> Profile`."""
    api_call = {"fn": _fn_name(fn) if fn is not None else None, "form": "call" if fn is not None else "with"}
    if _device.backend() == "real":
        if fn is None:
            raise RuntimeError(
                "on real Trainium, profile a step function: neuron_studio.profile(step, steps=N) (it captures "
                "with torch.profiler + NeuronConfig and reads Neuron Explorer's measured figures); the `with` "
                "form records emulator op events, which TorchNeuron does not emit"
            )
        from neuron_studio.profiler.real_capture import capture_real

        prof = capture_real(fn, steps=steps, warmup=warmup, mode=mode, name=name).profile(chip=chip)
        prof.trace.meta["api_call"] = api_call
        return prof
    cap = Capture(mode=mode, chip=chip, warmup=warmup, name=name, host_events=host_events)
    cap.api_call = api_call
    if fn is None:
        return cap
    if steps < 1:
        raise ValueError(f"steps must be >= 1; got {steps}")
    from neuron_studio.modes import compile_cell_function, graph_breaks_recorded

    # compile mode compiles `fn` as `%%neuron --mode compile` compiles a cell: the model then charges its graphs
    run = compile_cell_function(fn) if mode == "compile" else fn
    with graph_breaks_recorded(enabled=mode == "compile") as breaks, cap:
        for _ in range(warmup + steps):
            run()
            sync_for_timing()   # every step ends synchronised: no fused region spans two steps
            cap.step()
    if mode == "compile":
        cap.trace.meta["graph_breaks"] = breaks.rows()
    return cap.profile
