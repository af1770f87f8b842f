"""Profiling inside a process launched by `neuron-studio run` (each torchrun rank, or the one script).

The parent passes the options as JSON in NEURON_STUDIO_ACTIVATE (see `ActivateOptions`); the shipped
`sitecustomize.py` calls `activate_from_env()` at interpreter start-up, before the user's script runs.

Steps. A script may call `neuron_studio.step()` once per training step. Until it does, each
`optimizer.step()` counts as one step (a global optimizer post-hook). Warm-up steps run but are dropped
from the trace; after `warmup + steps` steps recording stops and the rank's trace is saved, while the
script runs on.

Saving: one store run per job (created by the parent with `ranks=N`). Rank r of an N-rank job (N > 1)
writes its tables with a rank suffix: `ops_r<r>`, `host_r<r>`, `compiles_r<r>`, `meta_r<r>`,
`device_ops_r<r>`; rank 0 also writes the unsuffixed tables (`ops`, `device_ops`, ...), so every tool that
shows one run (`%neuron_show`, the JupyterLab panel, `load_stored_profile`) shows rank 0. A one-process job writes
the unsuffixed tables only, exactly like a `%%neuron` cell. `rank_table()` is the naming rule.

Exit. At interpreter exit (atexit), on SIGTERM, and on KeyboardInterrupt the capture is stopped and what
was recorded is saved, with status "ok", "error" (an uncaught exception) or "interrupted".
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["ENV_ACTIVATE", "ActivateOptions", "activate_from_env", "step", "rank_table", "save_rank",
           "active", "TABLES"]

ENV_ACTIVATE = "NEURON_STUDIO_ACTIVATE"
TABLES = ("ops", "host", "compiles", "meta", "device_ops", "memory", "regions")
#: Minimum seconds between two progress lines on the terminal.
PROGRESS_INTERVAL_S = 0.5


@dataclass(frozen=True)
class ActivateOptions:
    """What the parent tells each child process (JSON in NEURON_STUDIO_ACTIVATE)."""

    run_id: int
    store: str
    mode: str = "eager"
    chip: str | None = None
    steps: int | None = None        # record this many steps after warm-up, then stop recording
    warmup: int = 0
    name: str | None = None
    ranks: int = 1
    launcher: bool = False          # the command is a launcher (torchrun): activate only where RANK is set
    run_start_wall_ns: int = 0      # the parent's clock at launch: the common time origin of all ranks
    progress: bool = True
    host_events: bool = True
    command: tuple[str, ...] = ()   # the command as the user typed it after `--` (the advisor's run lines repeat it)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, raw: str) -> "ActivateOptions":
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def rank_table(base: str, rank: int, world: int) -> str:
    """Store table name of a rank's table: `ops_r1` in multi-rank jobs, `ops` in one-process jobs."""
    return base if world <= 1 else f"{base}_r{int(rank)}"


class _RankStore:
    """The run store seen through a rank suffix (so `session.save_profile` writes `ops_r<r>`, ...)."""

    def __init__(self, store: Any, rank: int, world: int) -> None:
        self.store, self.rank, self.world = store, rank, world

    def save_table(self, run_id: int, name: str, table: Any) -> Any:
        return self.store.save_table(run_id, rank_table(name, self.rank, self.world), table)


def save_rank(store: Any, run_id: int, prof: Any, rank: int, world: int) -> None:
    """Write one rank's trace tables (and, for rank 0 of a multi-rank job, the unsuffixed copies)."""
    from neuron_studio.session import save_profile

    save_profile(_RankStore(store, rank, world), run_id, prof)
    if world > 1 and rank == 0:
        save_profile(store, run_id, prof)


class _Activation:
    """The capture of this process and its step accounting."""

    def __init__(self, opts: ActivateOptions, rank: int, local_rank: int, world: int) -> None:
        self.opts, self.rank, self.local_rank, self.world = opts, rank, local_rank, world
        self.capture: Any = None
        self.lock = threading.RLock()
        self.explicit_steps = False
        self.done = 0
        self.finished = False
        self.status = "ok"
        self.t0 = time.perf_counter()
        self.t_record_ns: int | None = None  # when recording of kept steps began (end of warm-up)
        self.last_progress = 0.0
        self.hook = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        from neuron_studio import device  # importing the package registers the neuron device

        if device.backend() == "emulated":
            from neuron_studio.device.emulator import distributed

            distributed.install()
        from neuron_studio.profiler.capture import Capture

        self.capture = Capture(mode=self.opts.mode, chip=self.opts.chip, warmup=self.opts.warmup,
                               name=self.opts.name, host_events=self.opts.host_events)
        self.capture.start()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.hook = register_optimizer_step_post_hook(self._optimizer_step)
        atexit.register(self.finish)
        self._wrap_excepthook()
        self._install_signal_handlers()

    def _wrap_excepthook(self) -> None:
        previous = sys.excepthook

        def hook(exc_type, exc, tb):  # noqa: ANN001, ANN202
            self.status = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "error"
            previous(exc_type, exc, tb)

        sys.excepthook = hook

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum, frame):  # noqa: ANN001, ANN202
            self.status = "interrupted"
            self.finish()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        try:
            signal.signal(signal.SIGTERM, on_term)
        except (ValueError, OSError):  # not settable here: atexit still saves on a normal exit
            pass

    # -- steps -------------------------------------------------------------------------------------
    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.explicit_steps:
            self._step()

    def step(self) -> None:
        self.explicit_steps = True
        self._step()

    def _step(self) -> None:
        with self.lock:
            if self.finished or self.capture is None:
                return
            self.capture.step()
            self.done += 1
            if self.done == self.opts.warmup:
                self.t_record_ns = time.perf_counter_ns()
            total = self.opts.warmup + self.opts.steps if self.opts.steps else None
            self._progress(total)
            if total is not None and self.done >= total:
                self.finish()

    def _progress(self, total: int | None) -> None:
        if not self.opts.progress or self.rank != 0:
            return
        now = time.perf_counter()
        final = total is not None and self.done >= total
        if not final and now - self.last_progress < PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        el = now - self.t0
        per = el / self.done if self.done else 0.0
        if total is not None:
            eta = per * (total - self.done)
            text = f"step {self.done}/{total} (warm-up {self.opts.warmup})  {el:.1f}s  eta {eta:.1f}s"
        else:
            text = f"step {self.done}  {el:.1f}s  {per:.2f}s/step"
        print(f"neuron-studio [run {self.opts.run_id}]: {text}", file=sys.stderr, flush=True)

    # -- saving ------------------------------------------------------------------------------------
    def finish(self) -> None:
        """Stop recording and save this rank's trace (once)."""
        with self.lock:
            if self.finished or self.capture is None:
                return
            self.finished = True
            if self.hook is not None:
                self.hook.remove()
            status = self.status
            if status == "ok" and self.opts.steps and self.done < self.opts.warmup + self.opts.steps:
                status = "ok"  # the script ended early: what ran is the run
            trace = self.capture.stop(status=status)
            try:
                self._save(trace, status)
            except Exception as e:  # noqa: BLE001 - report, never raise at exit
                print(f"neuron-studio: rank {self.rank} could not save its trace: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)

    def _save(self, trace: Any, status: str) -> None:
        from neuron_studio.profiler.profile import Profile
        from neuron_studio.store import RunStore

        if self.t_record_ns is not None and self.opts.warmup:
            # host time per step counts the kept steps only, not the warm-up nor the interpreter start
            t_end = self.capture._t_perf0 + int(trace.meta.get("wall_ns", 0))
            trace.meta["wall_ns"] = max(0, t_end - self.t_record_ns)
        trace.meta.update({
            "rank": self.rank, "local_rank": self.local_rank, "world_size": self.world,
            "start_wall_ns": int(self.capture._t_wall0), "run_start_wall_ns": int(self.opts.run_start_wall_ns),
            "steps_seen": int(self.done), "explicit_steps": self.explicit_steps, "status": status,
            "argv": list(sys.argv), "cli_command": list(self.opts.command),
        })
        store = RunStore(self.opts.store)
        if len(trace.ops) == 0:
            from neuron_studio.session import _json_safe

            import pandas as pd

            store.save_table(self.opts.run_id, rank_table("meta", self.rank, self.world),
                             pd.DataFrame({"json": [json.dumps(_json_safe(trace.meta))]}))
            return
        prof = Profile.from_trace(trace)
        save_rank(store, self.opts.run_id, prof, self.rank, self.world)


_ACTIVE: _Activation | None = None


def active() -> _Activation | None:
    """This process's activation, or None when it was not started by `neuron-studio run`."""
    return _ACTIVE


def activate_from_env() -> _Activation | None:
    """Start profiling in this process if NEURON_STUDIO_ACTIVATE asks for it (called by sitecustomize)."""
    global _ACTIVE
    raw = os.environ.get(ENV_ACTIVATE)
    if not raw or _ACTIVE is not None:
        return _ACTIVE
    opts = ActivateOptions.from_env(raw)
    if opts.launcher and "RANK" not in os.environ:
        return None  # the launcher itself (torchrun): its workers are the ranks
    # one activation per job process: subprocesses of this one (data loader workers, ...) are not ranks
    os.environ.pop(ENV_ACTIVATE, None)

    def env(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    act = _Activation(opts, env("RANK", 0), env("LOCAL_RANK", 0), env("WORLD_SIZE", 1))
    _ACTIVE = act
    act.start()
    return act


def step() -> None:
    """Mark the end of one training step (no-op outside `neuron-studio run`)."""
    if _ACTIVE is not None:
        _ACTIVE.step()
