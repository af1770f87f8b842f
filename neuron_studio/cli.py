"""`neuron-studio`: profile scripts and torchrun jobs, write reports, list runs, start JupyterLab.

    neuron-studio run [--mode M] [--chip C] [--steps N] [--warmup N] [--store DIR] [--name NAME] -- python train.py
    neuron-studio run --steps 5 -- torchrun --nproc-per-node 2 train.py
    neuron-studio report [RUN|TRACE|DIR] -o report.html [--scheduler tcp://host:8786]   (no target: latest run)
    neuron-studio import TRACE...|DIR|'GLOB' [--scheduler tcp://host:8786]
    neuron-studio runs [--store DIR]
    neuron-studio lab [jupyter lab options, e.g. --port 8899 --no-browser]

`run` never edits the script: the child processes find the studio's `sitecustomize` first on PYTHONPATH and
start a capture when NEURON_STUDIO_ACTIVATE is set (neuron_studio._activate documents steps, saving and
the per-rank table names). The parent creates one store run for the job (`ranks=N`), waits, then builds the
summary (rank 0's profile plus the multi-rank analysis), prints it and writes a self-contained HTML report.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from neuron_studio.profiler.vocabulary import MODES

__all__ = ["main", "build_parser", "load_rank_profiles", "report_html", "job_ranks", "EXIT_INTERRUPTED"]

EXIT_INTERRUPTED = 130
#: Seconds the parent waits for the job to save its traces after forwarding Ctrl-C, before SIGTERM/SIGKILL.
INTERRUPT_GRACE_S = 60.0
_LAUNCHERS = ("torchrun",)
_LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")


class CliError(Exception):
    """A user mistake on the command line: printed without a traceback, exit status 2."""


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-studio", description="Neuron Studio: profile PyTorch on AWS Trainium "
                                "(real or emulated neuron device).")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="profile an unmodified script or torchrun job: neuron-studio run -- python x.py")
    r.add_argument("--mode", default="eager", choices=MODES)
    r.add_argument("--chip", default=None, help="trn1, trn2 or trn3 (default: the device's target)")
    r.add_argument("--steps", type=int, default=None, help="record this many steps after warm-up, then stop "
                   "recording (default: the whole script)")
    r.add_argument("--warmup", type=int, default=0, help="steps to run before recording (default 0)")
    r.add_argument("--store", default=None, help="run store directory (default $NEURON_STUDIO_STORE or "
                   "./.neuron_studio)")
    r.add_argument("--name", default=None, help="a name for the run")
    r.add_argument("--report", default=None, help="where to write the HTML report (default: "
                   "<store>/reports/run-<id>.html)")
    r.add_argument("--no-host-events", action="store_true", help="skip torch.profiler host events (faster)")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")

    rep = sub.add_parser("report", help="write the HTML report of a run (id or name; default the latest run) "
                         "or of trace files")
    rep.add_argument("target", nargs="*", help="run id or name in the store (default: the latest run), or trace "
                     "path(s): several files, a directory or a quoted glob of per-rank traces are one job's ranks "
                     "(ordered by the rank each names, aligned on one clock)")
    rep.add_argument("-o", "--output", default=None, help="output file (default report-<run>.html)")
    rep.add_argument("--store", default=None)
    rep.add_argument("--perfetto", default=None, metavar="PATH", help="also write the trace(s) as one Chrome "
                     "trace for Perfetto (a job: every rank on the aligned clock, collectives linked; .gz: gzip)")
    _job_arguments(rep)

    imp = sub.add_parser("import", help="store torch.profiler trace file(s) recorded elsewhere as a run (one per "
                         "rank), so the JupyterLab panel lists it")
    imp.add_argument("traces", nargs="+", help="Chrome-trace JSON (.json/.json.gz) files one per rank, a "
                     "directory of them (or of studio trace directories / Neuron Explorer output folders), or "
                     "a quoted glob")
    imp.add_argument("--name", default=None, help="a name for the run (default: the first file's name)")
    imp.add_argument("--store", default=None)
    imp.add_argument("--json", action="store_true", help="print only the stored run as JSON (run_id, name, "
                     "ranks, store), for programs such as the JupyterLab extension")
    _job_arguments(imp)

    ls = sub.add_parser("runs", help="list the runs in the store")
    ls.add_argument("--store", default=None)
    ls.add_argument("--limit", type=int, default=50)

    lab = sub.add_parser("lab", help="start JupyterLab on working copies of the tutorials; every other option "
                         "goes to jupyter lab (e.g. neuron-studio lab --port 8899 --no-browser)")
    lab.add_argument("args", nargs=argparse.REMAINDER, help="jupyter lab options")
    return p


def _job_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", default=None, metavar="ADDRESS", help="run the per-rank map on this Dask "
                   "scheduler (tcp://host:8786; needs neuron-studio[dask], traces readable by its workers)")
    p.add_argument("--workers", type=int, default=None, help="local worker processes for the per-rank map "
                   "(default: sized to the CPUs and the available memory)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (a job prints one per rank mapped)")


def _map_progress(command: str, quiet: bool) -> Any:
    """A job's progress on stderr, a line per rank mapped (a 64-rank job maps for minutes). Not prefixed
    "neuron-studio: ", the prefix of the error line programs running the CLI show (the extension's import)."""
    if quiet:
        return None
    t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"neuron-studio {command}: {done}/{total} ranks mapped ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)

    return progress


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lab"] and not {"-h", "--help"} & set(argv[1:2]):
        # Everything after `lab` is JupyterLab's: argparse's REMAINDER would refuse a leading `--port`.
        args = argparse.Namespace(command="lab", args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "runs":
            return cmd_runs(args)
        if args.command == "import":
            return cmd_import(args)
        return cmd_lab(args)
    except CliError as e:
        print(f"neuron-studio: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # TraceFormatError / TraceSetError name the file and what was wrong
        if type(e).__name__ not in ("TraceFormatError", "TraceSetError", "RankIdentityError"):
            raise
        print(f"neuron-studio: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # JobMapError: a rank could not be read (names it)
        if type(e).__name__ != "JobMapError":
            raise
        print(f"neuron-studio: {e}", file=sys.stderr)
        return 2
    except LookupError as e:  # RunNotFound, TableNotFound, nothing saved
        print(f"neuron-studio: {str(e.args[0]) if e.args else e}", file=sys.stderr)
        return 1


# -------------------------------------------------------------------------------------------------- run
def job_ranks(cmd: Sequence[str]) -> tuple[bool, int]:
    """(is a launcher, number of ranks) of a command: torchrun's --nproc-per-node × --nnodes, else (False, 1)."""
    if not cmd:
        return False, 1
    exe = os.path.basename(cmd[0])
    rest = list(cmd[1:])
    launcher = exe in _LAUNCHERS
    if not launcher and exe.startswith("python") and len(rest) >= 2 and rest[0] == "-m" and rest[1] in _LAUNCH_MODULES:
        launcher, rest = True, rest[2:]
    if not launcher:
        return False, 1

    def opt(*names: str) -> str | None:
        for i, a in enumerate(rest):
            for n in names:
                if a == n and i + 1 < len(rest):
                    return rest[i + 1]
                if a.startswith(n + "="):
                    return a.split("=", 1)[1]
            if not a.startswith("-"):
                break  # the training script: its own arguments follow
        return None

    def as_int(v: str | None) -> int:
        try:
            return max(1, int(str(v).split(":")[-1])) if v is not None else 1
        except ValueError:
            return 1

    return True, as_int(opt("--nproc-per-node", "--nproc_per_node")) * as_int(opt("--nnodes"))


def _activate_dir() -> str:
    import neuron_studio._activate as act

    return os.path.dirname(os.path.abspath(act.__file__))


def _child_env(opts: Any) -> dict[str, str]:
    from neuron_studio._activate import ENV_ACTIVATE

    env = dict(os.environ)
    paths = [_activate_dir()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[ENV_ACTIVATE] = opts.to_env()
    return env


def cmd_run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CliError("run: give the command after --, e.g. neuron-studio run -- python train.py")
    if args.steps is not None and args.steps < 1:
        raise CliError(f"run: --steps must be >= 1, got {args.steps}")
    if args.warmup < 0:
        raise CliError(f"run: --warmup must be >= 0, got {args.warmup}")
    from neuron_studio import device
    from neuron_studio._activate import ActivateOptions
    from neuron_studio.store import RunStore

    if args.chip:
        from neuron_studio.device.targets import target_for

        try:
            target_for(args.chip)
        except Exception as e:  # noqa: BLE001 - the target names the valid chips
            raise CliError(str(e)) from None
    name = args.name or script_name(cmd)
    typed = tuple(cmd)
    cmd = _this_python(cmd)
    launcher, ranks = job_ranks(cmd)
    store = RunStore(args.store)
    reg = device.registry()
    chip = (args.chip or reg.target.chip).lower()
    source = shlex.join(cmd)
    run_id = store.begin_run(
        cell_source=source, name=name, notebook=None, mode=args.mode, chip=chip, backend=reg.backend,
        ranks=ranks, options={"cli": True, "command": cmd, "steps": args.steps, "warmup": args.warmup,
                              "mode": args.mode, "chip": chip, "cwd": os.getcwd()},
    )
    opts = ActivateOptions(run_id=run_id, store=str(store.root), mode=args.mode, chip=chip, steps=args.steps,
                           warmup=args.warmup, name=name, ranks=ranks, launcher=launcher,
                           run_start_wall_ns=time.time_ns(), progress=not args.quiet,
                           host_events=not args.no_host_events, command=typed)
    print(f"neuron-studio: run {run_id} ({ranks} rank{'s' if ranks > 1 else ''}, {args.mode}, {chip}, "
          f"{reg.backend}) store {store.root}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rc, interrupted = _run_child(cmd, _child_env(opts))
    wall = time.perf_counter() - t0
    summary, prof_ok = _finish(store, run_id, rc, interrupted, wall, name)
    if summary is not None:
        from neuron_studio.ui.text import render_text

        print(render_text(summary))  # includes the per-rank lines of a multi-rank run
        out = Path(args.report) if args.report else store.root / "reports" / f"run-{run_id}.html"
        _write_report(out, store, run_id, summary)
        print(f"HTML report: {out}")
    else:
        print(f"neuron-studio: run {run_id} saved no trace (no op ran on the neuron device?)", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return rc


def script_name(cmd: Sequence[str]) -> str | None:
    """What a CLI run is called when `--name` is not given: its script (`train.py`) or module (`-m pkg.train`),
    looked up past the interpreter and a launcher's own options (`torchrun --nproc-per-node 2 train.py`)."""
    rest = list(cmd[1:])
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "-m" and i + 1 < len(rest):
            if rest[i + 1] in _LAUNCH_MODULES:   # python -m torch.distributed.run ... train.py
                i += 2
                continue
            return rest[i + 1]
        if a.startswith("-"):
            # an option of the interpreter or launcher; `--opt value` takes the next word unless it is a script
            if "=" not in a and i + 1 < len(rest) and not rest[i + 1].startswith("-") \
                    and not rest[i + 1].endswith(".py") and a not in ("-u", "-O", "-B", "-E", "-s", "-S", "-I"):
                i += 2
            else:
                i += 1
            continue
        return os.path.basename(a)
    return os.path.basename(cmd[0]) if cmd else None


def _this_python(cmd: list[str]) -> list[str]:
    """`python`/`python3`/`torchrun` mean this interpreter's (where neuron_studio is installed), even when the
    virtual environment is not activated; explicit paths are left alone."""
    head = cmd[0]
    if head in ("python", "python3"):
        return [sys.executable, *cmd[1:]]
    if head == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *cmd[1:]]
    return cmd


def _run_child(cmd: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run the job; forward SIGINT/SIGTERM to it and wait for it to save. Returns (exit code, interrupted)."""
    try:
        proc = subprocess.Popen(cmd, env=env)
    except FileNotFoundError:
        raise CliError(f"run: command not found: {cmd[0]}") from None
    state = {"interrupted": False, "deadline": None}

    def forward(signum: int, frame: Any) -> None:
        state["interrupted"] = True
        if state["deadline"] is None:
            state["deadline"] = time.monotonic() + INTERRUPT_GRACE_S
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                dl = state["deadline"]
                if dl is not None and time.monotonic() > dl:
                    proc.terminate()
                    try:
                        rc = proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        rc = proc.wait()
                    break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if rc < 0:
        rc = 128 - rc
    return rc, bool(state["interrupted"])


def load_rank_profiles(store: Any, rec: Any) -> dict[int, Any]:
    """Profiles of a run's ranks, rebuilt from the store (rank -> Profile); {} if nothing was saved."""
    from neuron_studio._activate import rank_table
    from neuron_studio.profiler.profile import Profile
    from neuron_studio.profiler.trace import Trace
    from neuron_studio.session import load_stored_profile

    tables = set(store.list_tables(rec.id))
    if rec.ranks <= 1:
        if "ops" not in tables:
            return {}
        return {0: load_stored_profile(store, rec)}
    out = {}
    for r in range(rec.ranks):
        name = rank_table("ops", r, rec.ranks)
        if name not in tables:
            continue

        def table(base: str) -> Any:
            t = rank_table(base, r, rec.ranks)
            return store.load_table(rec.id, t).to_pandas() if t in tables else None

        meta_df = table("meta")
        meta = json.loads(meta_df["json"].iloc[0]) if meta_df is not None else {"rank": r}
        prof = Profile.from_trace(Trace(ops=table("ops"), host=table("host"), compiles=table("compiles"), meta=meta,
                                          memory=table("memory")))
        prof.run_id = rec.id
        out[r] = prof
    return out


def _rank_metas(store: Any, rec: Any) -> list[dict]:
    from neuron_studio._activate import rank_table

    tables = set(store.list_tables(rec.id))
    metas = []
    for r in range(max(1, rec.ranks)):
        t = rank_table("meta", r, rec.ranks)
        if t in tables:
            metas.append(json.loads(store.load_table(rec.id, t).to_pandas()["json"].iloc[0]))
    return metas


def _finish(store: Any, run_id: int, rc: int, interrupted: bool, wall: float, name: str | None
            ) -> tuple[dict | None, bool]:
    rec = store.get_run(run_id)
    metas = _rank_metas(store, rec)
    statuses = {m.get("status") for m in metas}
    if interrupted or "interrupted" in statuses:
        status = "interrupted"
    elif rc != 0 or "error" in statuses:
        status = "error"
    else:
        status = "ok"
    profiles = load_rank_profiles(store, rec)
    warnings = []
    if rec.ranks > 1 and len(profiles) < rec.ranks:
        missing = sorted(set(range(rec.ranks)) - set(profiles))
        warnings.append(f"no trace from rank(s) {missing}")
    if rc != 0 and not interrupted:
        warnings.append(f"the command exited with status {rc}")
    summary = None
    if profiles:
        first = profiles[min(profiles)]
        summary = first.to_summary(run_id=run_id, name=name, status=status, warnings=warnings)
        if len(profiles) > 1:
            summary["ranks_analysis"] = _ranks_summary(profiles, store=store, run_id=run_id)
        summary["ranks"] = rec.ranks
    store.finish_run(run_id, status=status, summary=summary,
                     step_time_ns=int(summary["step_time_ns"]) if summary and summary.get("step_time_ns") else None,
                     mfu=summary.get("mfu") if summary else None, wall_s=wall)
    return summary, bool(profiles)


def _ranks_summary(profiles: dict[int, Any], *, store: Any = None, run_id: int | None = None) -> dict:
    """The ranks section; with a store, also the job timeline's tables (`job_tables`)."""
    from neuron_studio.profiler.analysis.ranks import analyze_ranks
    from neuron_studio.profiler.profile_summary import _finite

    ranks = sorted(profiles)
    ra = analyze_ranks([profiles[r].trace for r in ranks], profiles, ranks=ranks)
    if store is not None and run_id is not None:
        from neuron_studio.job_tables import save_job_tables

        save_job_tables(store, run_id, ra, positions=ranks)
    return _finite(ra.to_summary())


# ---------------------------------------------------------------------------------------------- report
def report_html(summary: dict) -> str:
    """A standalone HTML document: the notebook's profile view plus, for multi-rank runs, the rank section."""
    from markupsafe import Markup

    from neuron_studio.ui.html import render_html
    from neuron_studio.ui.templating import render_template

    run = summary.get("run_id")
    title = f"Neuron Studio report · {f'run {run}' if run is not None else summary.get('name') or 'trace'}"
    return render_template("report.html", title=title,
                           body=Markup(render_html(summary)))   # already escaped by its own templates


def _write_report(out: Path, store: Any, run_id: int, summary: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(report_html(summary), encoding="utf-8")
    os.replace(tmp, out)


def cmd_report(args: argparse.Namespace) -> int:
    targets = list(args.target)
    target = targets[0] if targets else None
    path = Path(target) if target is not None else None
    if path is not None and (len(targets) > 1 or path.exists() or _is_glob(target)):
        missing = [t for t in targets if not Path(t).exists() and not _is_glob(t)]
        if missing:
            raise CliError(f"report: no such trace file(s): {', '.join(missing)} (several targets must be files)")
        from neuron_studio.imported_runs import job_summary

        summary = job_summary(targets, name=path.name, scheduler=args.scheduler, workers=args.workers,
                              perfetto=args.perfetto, progress=_map_progress("report", args.quiet))
        default = f"report-{path.name.split('.')[0] or 'job'}.html"
    else:
        from neuron_studio.store import RunStore

        store = RunStore(args.store, read_only=True)
        if target is None:
            latest = store.list_runs(limit=1)
            if not latest:
                raise LookupError(f"no runs in {store.root}: give a run id or trace file, or record one with "
                                  "`neuron-studio run -- python train.py`")
            rec = latest[0]
            print(f"neuron-studio: reporting the latest run, {rec.id}"
                  f"{f' ({rec.name})' if rec.name else ''}", file=sys.stderr)
        else:
            rec = store.get_run(int(target) if target.isdigit() else target)
        summary = rec.summary
        # a stored job's summary has its ranks section already: its ranks are not loaded again (bounded memory)
        stale = summary is None or (rec.ranks > 1 and not summary.get("ranks_analysis"))
        profiles = load_rank_profiles(store, rec) if stale or (args.perfetto and rec.ranks <= 1) else {}
        if args.perfetto and rec.ranks > 1 and "job_ranks" in store.list_tables(rec.id):
            from neuron_studio.profiler.job_export import export_stored_job

            export_stored_job(store, rec.id, args.perfetto, workers=args.workers)   # from its job tables
        elif args.perfetto and rec.ranks > 1:          # a job stored without job tables: map its ranks again
            from neuron_studio.imported_runs import job_summary

            job_summary([store.table_path(rec.id, "ops").parent], scheduler=args.scheduler, workers=args.workers,
                        perfetto=args.perfetto, progress=_map_progress("report", args.quiet))
        elif args.perfetto and profiles:
            profiles[min(profiles)].export_chrome_trace(args.perfetto)
        if stale:
            if not profiles:
                raise LookupError(f"run {rec.id} has no saved trace (status {rec.status}); nothing to report")
            first = profiles[min(profiles)]
            summary = first.to_summary(run_id=rec.id, name=rec.name, status=rec.status)
            if len(profiles) > 1:
                summary["ranks_analysis"] = _ranks_summary(profiles)
        default = f"report-{rec.id}.html"
    out = Path(args.output or default)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(report_html(summary), encoding="utf-8")
    os.replace(tmp, out)
    print(out)
    return 0


def _is_glob(target: str) -> bool:
    return bool(set("*?[") & set(target)) and not Path(target).exists()


def cmd_import(args: argparse.Namespace) -> int:
    from neuron_studio.imported_runs import store_imported
    from neuron_studio.store import RunStore
    from neuron_studio.ui.text import render_text

    missing = [t for t in args.traces if not Path(t).is_file() and not Path(t).is_dir() and not _is_glob(t)]
    if missing:
        raise CliError(f"import: no such trace file(s): {', '.join(missing)}")
    store = RunStore(args.store)
    run_id, summary = store_imported(store, args.traces, name=args.name, scheduler=args.scheduler,
                                     workers=args.workers, progress=_map_progress("import", args.quiet))
    if args.json:
        rec = store.get_run(run_id)
        print(json.dumps({"run_id": run_id, "name": rec.name, "ranks": rec.ranks, "store": str(store.root)}))
        return 0
    print(render_text(summary))
    print(f"neuron-studio: stored as run {run_id} in {store.root} (open it in the Neuron Profiler panel)")
    return 0


# ------------------------------------------------------------------------------------------------ runs
def cmd_runs(args: argparse.Namespace) -> int:
    from neuron_studio.store import RunStore
    from neuron_studio.ui.formatting import fmt_ns

    store = RunStore(args.store)
    recs = store.list_runs(limit=args.limit)
    if not recs:
        print(f"no runs in {store.root}")
        return 0
    head = ("id", "name", "mode", "chip", "status", "ranks", "step time", "MFU")
    rows = [(str(r.id), r.name or "", r.mode, r.chip, r.status, str(r.ranks),
             fmt_ns(r.step_time_ns) if r.step_time_ns is not None else "-",
             f"{r.mfu * 100:.1f}%" if r.mfu is not None else "-") for r in recs]
    widths = [max(len(h), *(len(x[i]) for x in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for row in rows:
        print("  ".join(x.ljust(w) for x, w in zip(row, widths)))
    return 0


# ------------------------------------------------------------------------------------------------- lab
def _notebooks_dir() -> Path:
    """The directory `lab` serves: working copies of the repository's tutorials (as `bash run.sh lab` makes
    them, in `workspace/` or `$NEURON_STUDIO_WORKSPACE`), so running them never changes the tracked files;
    without a repository checkout, `./notebooks`."""
    import neuron_studio

    repo = Path(neuron_studio.__file__).resolve().parent.parent
    if not (repo / "notebooks").is_dir():
        return Path.cwd() / "notebooks"
    workspace = Path(os.environ.get("NEURON_STUDIO_WORKSPACE") or "workspace")
    workspace = workspace if workspace.is_absolute() else repo / workspace
    copy_missing_tutorials(repo / "notebooks", workspace)
    return workspace


def copy_missing_tutorials(source: Path, workspace: Path) -> list[Path]:
    """Copy every file of `source` that `workspace` lacks (never overwriting a copy); returns the copies."""
    copied = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if not path.is_file() or {".ipynb_checkpoints", ".neuron_studio"} & set(rel.parts):
            continue
        target = workspace / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied.append(target)
    return copied


def lab_argv(directory: Path, extra: list[str], *, uid: int | None = None,
             python: str | None = None) -> list[str]:
    """JupyterLab of this environment (`python -m jupyterlab`, so an unactivated venv works) serving
    `directory`, bound to 127.0.0.1; `--allow-root` only when running as root.

    The directory goes in as `--ServerApp.root_dir`, never as a positional argument: `jupyter lab workspace`
    is JupyterLab's own `workspace` subcommand.
    """
    uid = os.geteuid() if uid is None and hasattr(os, "geteuid") else uid
    root = ["--allow-root"] if uid == 0 and "--allow-root" not in extra else []
    return [python or sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={directory}", "--ip", "127.0.0.1",
            *root, *extra]


def cmd_lab(args: argparse.Namespace) -> int:
    extra = list(args.args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    import importlib.util

    if importlib.util.find_spec("jupyterlab") is None:
        raise CliError(f"lab: JupyterLab is not installed in this environment ({sys.prefix}); install the lab "
                       "extra: pip install 'neuron-studio[lab]' (or use `bash run.sh lab` in the repository)")
    argv = lab_argv(_notebooks_dir(), extra)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
