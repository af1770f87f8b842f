"""`%%neuron` and the `%neuron_*` line magics. Thin: parse options -> run (runner.py) -> display.

`%load_ext neuron_studio` registers them; loading twice is harmless.
"""
from __future__ import annotations

import contextlib
import shlex
from typing import Any, Iterator

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from neuron_studio.hardware import trainium_chips
from neuron_studio.modes import MODES

__all__ = ["NeuronMagics", "register_magics"]


@magics_class
class NeuronMagics(Magics):
    @magic_arguments()
    @argument("--mode", default="eager", help="eager | adaptive | compile (default: eager)")
    @argument("--chip", default=None, help="trn1 | trn2 | trn3: the chip to model (default: the device's target)")
    @argument("--steps", type=int, default=1, help="profile N runs of the cell body (steady state)")
    @argument("--warmup", type=int, default=None,
              help="unprofiled runs before the profiled ones (default: 1 with --steps > 1, else 0)")
    @argument("--no-profile", action="store_true", help="run on the neuron device without profiling")
    @argument("--name", default=None, help="a name for this run (used by %%neuron_show / --compare)")
    @argument("--compare", default=None, help="RUN (id or name) to diff against (default: the cell's previous run)")
    @argument("--memory-scale", type=float, default=None,
              help="forecast memory for a model whose every tensor is this many times larger than the one run "
                   "(a scaled-down replica: e.g. {K**2} for K times narrower, K times smaller vocabulary and batch)")
    @argument("--sync", dest="sync", action="store_true", default=True,
              help="synchronize the device before timing ends (default)")
    @argument("--no-sync", dest="sync", action="store_false", help="do not synchronize at the end")
    @cell_magic
    def neuron(self, line: str, cell: str) -> Any:
        """Run the cell on the `neuron` device in eager, adaptive-eager or compile mode, and profile it.

        Variables defined in the cell persist, as in any cell. With --steps N the body runs --warmup
        times unprofiled, then N times profiled (a progress bar shows progress); the result is a
        Profile (also in `_` and `neuron_studio.last()`), rendered as a summary with tabs.

        Examples::

            %%neuron --mode adaptive --steps 5
            loss = model(x).sum(); loss.backward(); opt.step(); opt.zero_grad()
        """
        try:
            args = parse_argstring(self.neuron, line)
        except UsageError as e:
            raise _usage_error(f"%%neuron: {e}") from None
        problems = _validate(args)
        if problems:
            raise _usage_error("%%neuron: " + "; ".join(problems))
        from neuron_studio.runner import CellRun, run_cell

        __tracebackhide__ = True  # noqa: F841 - a failing cell's traceback starts at the user's code
        spec = CellRun(
            source=cell, mode=args.mode, chip=args.chip, steps=args.steps,
            warmup=args.warmup if args.warmup is not None else (1 if args.steps > 1 else 0),
            profile=not args.no_profile, name=args.name, compare=args.compare, sync=args.sync,
            options_line=line, memory_scale=args.memory_scale,
        )
        return run_cell(self.shell, spec)

    @line_magic
    def neuron_device(self, line: str = "") -> Any:
        """Show the neuron device: backend (real/emulated), target chip, logical cores, memory."""
        from neuron_studio.runner import device_report

        return device_report(line.strip() or None)

    @line_magic
    def neuron_runs(self, line: str = "") -> Any:
        """List the runs in this notebook's run store (newest first): `%neuron_runs [LIMIT]`."""
        from neuron_studio.runner import runs_table

        limit = None
        if line.strip():
            try:
                limit = int(line.strip())
            except ValueError:
                raise UsageError(f"%neuron_runs: LIMIT must be an integer, got {line.strip()!r}") from None
        return runs_table(limit)

    @line_magic
    def neuron_show(self, line: str = "") -> Any:
        """Show a stored run as the profiled cell showed it: `%neuron_show RUN` (id or name)."""
        parts = _split(line, "%neuron_show")
        if len(parts) != 1:
            raise UsageError("usage: %neuron_show RUN   (a run id or name; see %neuron_runs)")
        from neuron_studio.runner import show_run

        with _lookup_as_usage("%neuron_show"):
            return show_run(parts[0])

    @line_magic
    def neuron_compare(self, line: str = "") -> Any:
        """Diff two runs: `%neuron_compare RUN_A RUN_B` (B relative to A: per op, per engine, step time)."""
        parts = _split(line, "%neuron_compare")
        if len(parts) != 2:
            raise UsageError("usage: %neuron_compare RUN_A RUN_B   (run ids or names; see %neuron_runs)")
        from neuron_studio.runner import compare_runs

        with _lookup_as_usage("%neuron_compare"):
            return compare_runs(parts[0], parts[1])

    @line_magic
    def neuron_check(self, line: str = "") -> Any:
        """Porting-readiness report for the last run: fallbacks, dynamic shapes, dtypes, syncs, MFU, cost."""
        parts = _split(line, "%neuron_check")
        if len(parts) > 1:
            raise UsageError("usage: %neuron_check [RUN]   (a run id or name; default: the last profiled cell)")
        from neuron_studio.runner import porting_check

        with _lookup_as_usage("%neuron_check"):
            return porting_check(parts[0] if parts else None)


_NEURON_USAGE = ("usage: %%neuron [--mode eager|adaptive|compile] [--chip trn1|trn2|trn3] [--steps N] [--warmup N]\n"
                 "                [--no-profile] [--name NAME] [--compare RUN] [--sync/--no-sync]   (see %%neuron?)")


def _usage_error(message: str) -> UsageError:
    """A bad option fails the cell (Run All, nbclient and papermill stop), as IPython's own magics do."""
    return UsageError(f"{message}\n{_NEURON_USAGE}")


@contextlib.contextmanager
def _lookup_as_usage(magic: str) -> Iterator[None]:
    """A run that is not there (`RunNotFound`, no profile yet) is the user's input, not a bug: its message alone,
    as a UsageError (the cell fails, no traceback), like IPython's own magics."""
    try:
        yield
    except LookupError as e:
        message = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        prefix = "" if message.startswith(magic) else f"{magic}: "
        raise UsageError(prefix + message) from None


def _split(line: str, magic: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as e:   # an unbalanced quote
        raise UsageError(f"{magic}: {e}") from None


def _validate(args: Any) -> list[str]:
    problems = []
    if args.mode not in MODES:
        problems.append(f"--mode must be one of {', '.join(MODES)} (got {args.mode!r})")
    if args.chip is not None and args.chip.lower() not in trainium_chips():
        problems.append(f"--chip must be one of {', '.join(trainium_chips())} (got {args.chip!r})")
    if args.steps < 1:
        problems.append(f"--steps must be >= 1 (got {args.steps})")
    if args.memory_scale is not None and not args.memory_scale > 0:
        problems.append(f"--memory-scale must be > 0 (got {args.memory_scale:g})")
    if args.warmup is not None and args.warmup < 0:
        problems.append(f"--warmup must be >= 0 (got {args.warmup})")
    return problems


def register_magics(ipython: Any) -> None:
    """Register the magics (idempotent: a second %load_ext replaces the same class)."""
    ipython.register_magics(NeuronMagics)

