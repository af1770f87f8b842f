"""What the magics do: run a cell on the neuron device under a mode, capture, store, and return a Profile.

Kept apart from magics.py (which only parses) so the CLI and tests can drive the same path.
"""
from __future__ import annotations

import ast
import html
import linecache
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import pandas as pd
import torch

from neuron_studio import device as _device
from neuron_studio.profiler.vocabulary import source_label
from neuron_studio.session import load_stored_profile, save_profile, session

__all__ = ["CellRun", "run_cell", "device_report", "runs_table", "show_run", "compare_runs", "porting_check"]


@dataclass(frozen=True)
class CellRun:
    source: str
    mode: str = "eager"
    chip: str | None = None
    steps: int = 1
    warmup: int = 0
    profile: bool = True
    name: str | None = None
    compare: str | None = None
    sync: bool = True
    options_line: str = ""
    memory_scale: float | None = None   # the memory forecast is for a model this many times larger (a replica's)


def _cell_filename(shell: Any) -> str:
    """`cell-<In number>` of the running cell: IPython caches each cell under its number before running it
    (its `execution_count` may already point at the next cell)."""
    fmap = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
    count = max(fmap.values()) if fmap else (getattr(shell, "execution_count", None) or 0)
    return f"cell-{count}"


def _cell_function(shell: Any, spec: CellRun) -> tuple[Callable[[], Any], str]:
    """Compile the cell body once; returns a callable that runs it in the user namespace."""
    source = shell.transform_cell(spec.source) if shell is not None else spec.source
    filename = _cell_filename(shell)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = shell.user_ns if shell is not None else {}
    if spec.mode != "compile":
        code = compile(source, filename, "exec")

        def run() -> Any:
            __tracebackhide__ = True  # noqa: F841 - IPython hides this frame: the user's cell comes first
            exec(code, ns)  # noqa: S102 - this is the user's own cell, as IPython runs it

        return run, filename
    # compile mode: the body becomes one function, compiled once per cell source so that re-running the cell
    # with new shapes is a Dynamo recompile. Names the cell assigns before it reads them are the function's
    # locals, returned and stored in the namespace after each run: a global store inside the traced frame is
    # invisible to a later line of the same frame ("Failed to find name `loss`": a graph break of the studio's
    # making, not the user's). Other assigned names (read first, or assigned in loops/branches) stay global.
    cache = session().compiled_cells
    key = (source, id(ns))
    if key in cache:
        return cache[key], filename
    tree = ast.parse(source, filename)
    local = _local_names(tree)
    assigned = sorted(_assigned_names(tree) - set(local))
    body = (tree.body or [ast.Pass()]) + [ast.Return(value=ast.Dict(
        keys=[ast.Constant(n) for n in local], values=[ast.Name(id=n, ctx=ast.Load()) for n in local]))]
    fn = ast.FunctionDef(
        name="__neuron_cell__", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                    defaults=[]),
        body=([ast.Global(names=assigned)] if assigned else []) + body, decorator_list=[], returns=None,
        type_params=[],
    )
    module = ast.Module(body=[fn], type_ignores=[])
    ast.fix_missing_locations(module)
    exec(compile(module, filename, "exec"), ns)  # noqa: S102 - defines the cell function
    from neuron_studio.modes import compile_cell_function

    cell = compile_cell_function(ns.pop("__neuron_cell__"))

    def compiled() -> Any:
        ns.update(cell())

    compiled.__wrapped__ = cell  # type: ignore[attr-defined]
    cache[key] = compiled
    return compiled, filename


def _local_names(tree: ast.Module) -> list[str]:
    """Names a cell assigns, in top-level statements (or `with` blocks), before any statement reads them: safe
    as locals of the compiled cell function (always bound when it returns, never read from the namespace)."""
    first_read: dict[str, int] = {}
    first_store: dict[str, int] = {}
    unconditional: set[str] = set()

    def visit(stmts: list[ast.stmt], top: bool, index: list[int]) -> None:
        for st in stmts:
            index[0] += 1
            k = index[0]
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                               ast.Global, ast.Nonlocal, ast.AugAssign)):
                for node in ast.walk(st):   # defined/augmented names stay global (read-modify-write, closures)
                    if isinstance(node, ast.Name):
                        first_read.setdefault(node.id, -1)
                if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                    first_read[st.target.id] = -1
                continue
            if isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    for node in ast.walk(item):
                        if isinstance(node, ast.Name):
                            (first_store if isinstance(node.ctx, ast.Store) else first_read).setdefault(node.id, k)
                            if isinstance(node.ctx, ast.Store) and top:
                                unconditional.add(node.id)
                visit(st.body, top, index)
                continue
            for node in ast.walk(st):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    first_read.setdefault(node.id, k)
            for node in ast.walk(st):
                if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    first_store.setdefault(node.id, k)
                    if top and isinstance(st, (ast.Assign, ast.AnnAssign)) and isinstance(node.ctx, ast.Store):
                        unconditional.add(node.id)
                    if isinstance(node.ctx, ast.Del):
                        first_read[node.id] = -1

    visit(tree.body, True, [0])
    return sorted(n for n in unconditional
                  if n in first_store and first_store[n] < first_read.get(n, 1 << 30) and first_read.get(n, 0) != -1)


def _assigned_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])
    return names


def _cell_namer(shell: Any) -> Callable[[str, int], str] | None:
    """How the device names user code: IPython's per-cell files ("/tmp/ipykernel_1/123.py") as
    "cell-<In number>:<line>", the cell this magic runs (compiled as "cell-<n>") and real files as "path:line"."""
    comp = getattr(shell, "compile", None)
    if comp is None:
        return None

    def name(filename: str, line: int) -> str:
        count = (getattr(comp, "_filename_map", None) or {}).get(filename)
        return f"cell-{count}:{line}" if count is not None else f"{filename}:{line}"

    return name


def _renamed(namer: Callable[[str, int], str] | None, source: Any) -> Any:
    """A "file:line" recorded outside the device (Dynamo's graph breaks), named as the device names op sources."""
    if namer is None or not isinstance(source, str):
        return source
    path, sep, line = source.rpartition(":")
    return namer(path, int(line)) if sep and line.isdigit() else source


class _Progress:
    """A progress bar that updates in place while the steps run and is cleared when they end.

    Shown as HTML (`<progress>`) with a plain-text alternative for text-only frontends; nothing without a
    display (a terminal). Never a Python string repr, never left behind in the saved notebook.
    """

    def __init__(self, total: int, label: str, live: bool) -> None:
        self.total = total
        self.label = label
        self.t0 = time.perf_counter()
        self.handle = None
        if total > 1 and live:
            try:
                from IPython.display import display

                self.handle = display(self._bundle(0), raw=True, display_id=True)
            except Exception:  # noqa: BLE001 - no display available: stay silent
                self.handle = None

    def _bundle(self, done: int) -> dict[str, str]:
        el = time.perf_counter() - self.t0
        eta = (el / done * (self.total - done)) if done else 0.0
        text = f"{self.label}: step {done}/{self.total}, {el:.1f}s elapsed, eta {eta:.1f}s"
        html_text = html.escape(text)
        return {"text/plain": text,
                "text/html": f"<div><progress value='{done}' max='{self.total}'></progress> {html_text}</div>"}

    def update(self, done: int) -> None:
        if self.handle is not None:
            self.handle.update(self._bundle(done), raw=True)

    def close(self) -> None:
        """Clear the bar (the run's result is displayed next)."""
        if self.handle is not None:
            self.handle.update({"text/plain": ""}, raw=True)
            self.handle = None


def _notebook_and_cell(shell: Any) -> tuple[str | None, str | None]:
    notebook = os.environ.get("JPY_SESSION_NAME") or (shell.user_ns.get("__session__") if shell is not None else None)
    cell_id = None
    try:
        kernel = getattr(shell, "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
        cell_id = ((parent or {}).get("metadata") or {}).get("cellId")
    except Exception:  # noqa: BLE001 - outside a kernel there is no cell id
        cell_id = None
    return (str(notebook) if notebook else None), cell_id


def run_cell(shell: Any, spec: CellRun) -> Any:
    """Run a `%%neuron` cell. Exceptions propagate after the partial run is saved (status error/interrupted);
    the studio's frames are hidden from their traceback (`__tracebackhide__`, as IPython hides its own)."""
    __tracebackhide__ = True  # noqa: F841
    reg = _device.register()
    if spec.chip:
        from neuron_studio.device.targets import target_for

        target_for(spec.chip)
    fn, filename = _cell_function(shell, spec)
    if not spec.profile:
        for _ in range(spec.warmup + spec.steps):
            fn()
        if spec.sync:
            torch.neuron.synchronize()
        return None
    if reg.backend == "real":
        return _run_cell_real(shell, spec, fn, (spec.chip or reg.target.chip).lower())

    from neuron_studio.modes import graph_breaks_recorded
    from neuron_studio.profiler.capture import Capture, sync_for_timing

    chip = (spec.chip or reg.target.chip).lower()
    sess, run_id, notebook, cell_key, settings = _begin_cell_run(shell, spec, chip, reg.backend)
    store = sess.store
    # Dynamo reports a graph break when it compiles, usually in the warm-up: record from before it
    breaks = graph_breaks_recorded(enabled=spec.mode == "compile", key=fn)
    breaks.__enter__()
    try:
        for _ in range(spec.warmup):
            fn()
    except BaseException as e:
        breaks.__exit__(None, None, None)
        store.finish_run(run_id, status="interrupted" if isinstance(e, KeyboardInterrupt) else "error",
                         summary=None)
        raise
    namer = _cell_namer(shell)
    reg.bus.set_source_namer(namer)     # op sources and memory rows: `cell-<In>:<line>` once, here
    cap = Capture(mode=spec.mode, chip=chip, name=spec.name)
    progress = _Progress(spec.steps, f"%%neuron {spec.mode}", live=getattr(shell, "kernel", None) is not None)
    t0 = time.perf_counter()
    error: BaseException | None = None
    try:
        with cap:
            for i in range(spec.steps):
                fn()
                if spec.sync:  # every step ends synchronised: no fused region or queue spans two steps
                    sync_for_timing()
                cap.step()
                progress.update(i + 1)
    except BaseException as e:  # noqa: BLE001 - saved, then re-raised unchanged
        error = e
    finally:
        progress.close()
        breaks.__exit__(None, None, None)
    wall = time.perf_counter() - t0
    status = cap.status if cap.trace is not None else "error"
    if cap.trace is not None:
        cap.trace.meta["cell"] = _origin(shell, spec, notebook)
        if spec.memory_scale is not None:
            cap.trace.meta["memory_scale"] = float(spec.memory_scale)
    warnings: list[str] = list(settings.notes)
    if spec.mode == "compile" and cap.trace is not None:
        rows = breaks.rows(source_of=lambda s: _renamed(namer, s))
        cap.trace.meta["graph_breaks"] = rows
        for b in rows:
            warnings.append(f"graph break at {source_label(b['source']) or '?'} ({b['count']}x): {b['reason']}")
    prof = None
    summary = None
    try:
        if cap.trace is not None and len(cap.trace.ops):
            prof = cap.profile
            prof.run_id = run_id
            compare = _compare_block(sess, store, run_id, spec.compare, prof)
            summary = prof.to_summary(run_id=run_id, name=spec.name, cell_key=cell_key, notebook=notebook,
                                      status=status, compare=compare, warnings=warnings)
            save_profile(store, run_id, prof)
            prof.summary_payload = summary
            sess.remember(prof, store)
    finally:
        store.finish_run(run_id, status=status, summary=summary,
                         step_time_ns=int(prof.step_time_ns) if prof is not None else None,
                         mfu=float(prof.mfu) if prof is not None else None, wall_s=wall)
    if error is not None:
        raise error
    if prof is None:
        print(f"%%neuron: the cell ran no op on the neuron device (run {run_id} saved with no trace). "
              "Move tensors and models with .to('neuron').")
        return None
    return prof


def _origin(shell: Any, spec: CellRun, notebook: str | None) -> dict[str, Any]:
    """The cell this run came from, for the what-if advisor's variant cells (`cell_origin`)."""
    from neuron_studio.cell_origin import cell_origin

    _, cell_id = _notebook_and_cell(shell)
    body = shell.transform_cell(spec.source) if shell is not None else spec.source
    return cell_origin(options_line=spec.options_line, body=spec.source, transformed_body=body, notebook=notebook,
                       cell_id=cell_id, namespace=shell.user_ns if shell is not None else {})


def _begin_cell_run(shell: Any, spec: CellRun, chip: str, backend: str) -> tuple[Any, int, str | None, str, Any]:
    """Open the cell's run in the session's store: (session, run id, notebook, cell key, mode settings)."""
    from neuron_studio.modes import mode_settings
    from neuron_studio.store import make_cell_key

    sess = session()
    notebook, cell_id = _notebook_and_cell(shell)
    cell_key = make_cell_key(notebook, cell_id=cell_id or (f"name:{spec.name}" if spec.name else None),
                             cell_source=spec.source)
    settings = mode_settings(spec.mode)
    run_id = sess.store.begin_run(
        cell_source=spec.source, options={**asdict(spec), "source": None, "switches": settings.switches},
        name=spec.name, cell_key=cell_key, notebook=notebook, mode=spec.mode, chip=chip, backend=backend,
    )
    return sess, run_id, notebook, cell_key, settings


def _run_cell_real(shell: Any, spec: CellRun, fn: Callable[[], Any], chip: str) -> Any:
    """On Trainium: torch.profiler + NeuronConfig capture, op tracking, then Neuron Explorer's measured figures."""
    from neuron_studio.profiler.real_capture import ExplorerNotFoundError, NeuronCaptureOptions, capture_real

    sess, run_id, notebook, cell_key, settings = _begin_cell_run(shell, spec, chip, "real")
    store = sess.store
    try:
        run = capture_real(fn, steps=spec.steps, warmup=spec.warmup, mode=spec.mode, name=spec.name, chip=chip,
                           options=NeuronCaptureOptions(out_dir=store.root / "neuron_profile" / str(run_id)),
                           sync=spec.sync)
    except BaseException as e:
        store.finish_run(run_id, status="interrupted" if isinstance(e, KeyboardInterrupt) else "error", summary=None)
        raise
    try:
        prof = run.profile(chip=spec.chip)
    except ExplorerNotFoundError as e:
        store.finish_run(run_id, status="ok", summary=None, wall_s=run.wall_ns / 1e9)
        print(f"%%neuron: profile captured in {run.run_dir}; {e}")
        if run.compile_cache is not None:
            print(f"%%neuron: {run.compile_cache.line} (measured: torch_neuronx.metrics)")
        if run.tracking is not None and run.tracking.fallback:
            print("%%neuron: ran on CPU (torch_neuronx.get_fallback_ops): " + ", ".join(run.tracking.fallback_ops))
        return run
    prof.run_id = run_id
    prof.trace.meta["cell"] = _origin(shell, spec, notebook)
    summary = prof.to_summary(run_id=run_id, name=spec.name, cell_key=cell_key, notebook=notebook, status="ok",
                              compare=_compare_block(sess, store, run_id, spec.compare, prof),
                              warnings=list(settings.notes) + list(run.notes))
    save_profile(store, run_id, prof)
    prof.summary_payload = summary
    sess.remember(prof, store)
    store.finish_run(run_id, status="ok", summary=summary, step_time_ns=int(prof.step_time_ns),
                     mfu=float(prof.mfu), wall_s=run.wall_ns / 1e9)
    return prof


def _compare_block(sess: Any, store: Any, run_id: int, compare: str | None, prof: Any) -> dict | None:
    try:
        if compare is not None:
            other_rec = store.get_run(int(compare) if compare.isdigit() else compare)
        else:
            other_rec = store.previous_run(run_id)
            while other_rec is not None and other_rec.status != "ok":
                other_rec = store.previous_run(other_rec.id)
        if other_rec is None:
            return None
        other = sess.stored_profile(store, other_rec)
    except (LookupError, KeyError):
        if compare is not None:
            raise
        return None
    d = prof.diff(other)
    from neuron_studio.profiler.analysis.variant_cell import prediction_for

    # the run is a what-if row's cell of the run it compares with: what that row predicted, beside what it measured
    prediction = prediction_for(((other_rec.summary or {}).get("what_if") or {}).get("rows") or [],
                                (prof.trace.meta.get("cell") or {}).get("source"), float(prof.step_time_ns))
    return {
        "prediction": prediction,
        "run_id": other_rec.id,
        "name": other_rec.name,
        "step_time_before_ns": d.step_time_before_ns,
        "step_time_after_ns": d.step_time_after_ns,
        "step_time_delta_pct": None if d.step_time_change_pct != d.step_time_change_pct else d.step_time_change_pct,
        "mfu_before": other.mfu,
        "ops": [{"op": r.key, "before_ns": float(r.before_ns), "after_ns": float(r.after_ns),
                 "delta_ns": float(r.delta_ns), "status": r.status} for r in d.ops.head(15).itertuples(index=False)],
    }


# -- line magics ---------------------------------------------------------------------------------------
def device_report(chip: str | None = None) -> Any:
    info = _device.info(chip)
    from neuron_studio.ui.views import DeviceView

    mem = {}
    if info.backend == "emulated":
        mem = {"allocated": torch.neuron.memory_allocated(), "peak": torch.neuron.max_memory_allocated()}
    return DeviceView(info, mem)


def runs_table(limit: int | None = None) -> pd.DataFrame:
    recs = session().store.list_runs(limit=limit)
    rows = [{
        "id": r.id, "name": r.name, "mode": r.mode, "chip": r.chip, "status": r.status,
        "step_time_us": (r.step_time_ns / 1e3) if r.step_time_ns is not None else None,
        "mfu": r.mfu, "cell": (r.cell_source.strip().splitlines() or [""])[0][:60], "previous": r.parent_run,
        "ranks": r.ranks,
    } for r in recs]
    return pd.DataFrame(rows, columns=["id", "name", "mode", "chip", "status", "step_time_us", "mfu", "cell",
                                       "previous", "ranks"]).set_index("id")


def _run_key(run: str) -> int | str:
    return int(run) if run.isdigit() else run


def show_run(run: str) -> Any:
    store = session().store
    rec = store.get_run(_run_key(run))
    prof = load_stored_profile(store, rec)
    prof.summary_payload = rec.summary or prof.to_summary(run_id=rec.id, name=rec.name)
    return prof


def compare_runs(run_a: str, run_b: str) -> Any:
    store = session().store
    a = load_stored_profile(store, _run_key(run_a))
    b = load_stored_profile(store, _run_key(run_b))
    from neuron_studio.ui.views import CompareView

    return CompareView(b.diff(a), a.run_id, b.run_id)


def porting_check(run: str | None = None) -> Any:
    if run is None:
        prof = session().last_profile
        if prof is None:
            raise LookupError("%neuron_check: no profiled run yet; run a %%neuron cell first (or pass a RUN)")
    else:
        prof = load_stored_profile(session().store, _run_key(run))
    from neuron_studio.profiler.analysis.porting_report import porting_report
    from neuron_studio.ui.views import CheckView

    return CheckView(porting_report(prof))
