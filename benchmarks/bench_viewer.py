"""The trace viewer on a 1M-op run in headless Chromium: first paint, payload, zoom/pan frame times.

    python benchmarks/bench_viewer.py                  # 1,000,000 ops
    python benchmarks/bench_viewer.py --ops 200000

Seeds a temporary run store with one run whose `device_ops` table holds `--ops` synthetic ops (two cores,
five engines, two host threads launching, five steps), starts JupyterLab on it (this checkout's server
code first on PYTHONPATH; the labextension as installed in this venv, so install the extension first:
`bash run.sh test` or `pip install ./extension`), opens the Neuron Profiler panel on the run in Chromium
(/usr/bin/chromium) and measures:
- first paint: from the viewer's creation in the panel to its first boxes drawn (the run's stored overview,
  which the seeded summary carries like a profiled run's), cold (a fresh server) and warm (a second open of
  the same run); and to the server's own whole-run answer drawn (cold: the server reads and prepares the
  table); the panel's own requests before it (the run list and the run's detail) are printed apart, and
  what the panel showed over time;
- payload: the bytes of every level-of-detail answer the viewer asked for;
- frames: the time between animation frames while wheel-zooming, dragging and panning with the keyboard
  (every frame, including those that swap in a new level-of-detail answer).
Goals (issue 18): first paint <= 2 s, payload <= 5 MB, a zoom/pan frame <= 50 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_server  # noqa: E402  (the 1M-op table and the store seeding are shared with it)

CHROMIUM = "/usr/bin/chromium"
GOALS = {"first paint (ms)": 2000.0, "payload (MB)": 5.0, "frame (ms)": 50.0}


def _with_host_columns(table: pa.Table, steps: int = 5) -> pa.Table:
    """The viewer's columns: two host threads, a launch cost on a third of the ops, `steps` steps."""
    n = table.num_rows
    rng = np.random.default_rng(1)
    launch = np.where(rng.random(n) < 0.33, rng.integers(200, 3000, n), 0)
    return (table.append_column("thread", pa.array(np.where(np.arange(n) % 7 == 0, 2, 1), pa.int64()))
            .append_column("step", pa.array(np.arange(n) * steps // n + 1, pa.int32()))
            .append_column("launch_ns", pa.array(launch, pa.int64()))
            .append_column("input_shapes", pa.array(["8x64;64x128"] * n))
            .append_column("output_shapes", pa.array(["8x128"] * n)))


def _seed(root: Path, n_ops: int) -> tuple[int, int]:
    """The store with the run; its summary carries the whole-run overview a profiled run stores (`trace_view`,
    the same lanes and boxes at the overview's width), computed here by the server's own code from the table.
    Returns the run id and the overview's JSON size."""
    sys.path.insert(0, str(ROOT / "extension"))  # this checkout's server code, not an installed copy
    from neuron_studio.profiler.analysis.trace_overview import OVERVIEW_WIDTH_PX
    from neuron_studio_lab import core, trace_view

    original = bench_server._device_ops
    bench_server._device_ops = lambda n, seed=0: _with_host_columns(original(n, seed))
    try:
        rid, _, _ = bench_server._seed_store(root, n_ops)
    finally:
        bench_server._device_ops = original
    overview = trace_view.trace_window(root, "bench.ipynb", rid, start_ns=None, end_ns=None, width_px=OVERVIEW_WIDTH_PX)
    overview["clock"] = "modeled"
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    store.finish_run(rid, status="ok", summary={"step_time_ns": 1029, "trace_view": overview}, step_time_ns=1029,
                     mfu=0.3)
    return rid, len(json.dumps(overview))


def _start_lab(root: Path, port: int, token: str, home: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "extension"), os.environ.get("PYTHONPATH", "")])}
    env.pop("NEURON_STUDIO_STORE", None)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
           f"--port={port}", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
           "--LabApp.expose_app_in_browser=True"]
    # the server's log goes to a file: a pipe nobody reads fills up and blocks the server
    with open(log, "w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def _log_tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.is_file() else "(no log)"


def _wait(base: str, token: str, proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"jupyter lab exited with {proc.returncode} before answering; its log:\n{_log_tail(log)}")
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise BenchError(f"jupyter lab did not answer {base}/api/status within {timeout:.0f} s; its log:\n{_log_tail(log)}")


class BenchError(RuntimeError):
    """A wait that timed out or a page that failed: what was waited for and what the page showed."""


def _installed_labextension() -> str:
    """Where this venv's labextension is and whether its bundle has the trace viewer (a stale install has not)."""
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        static = Path(base) / "neuron-studio-lab" / "static"
        if static.is_dir():
            has_viewer = any("ns-TraceViewer" in f.read_text(errors="replace") for f in static.glob("*.js"))
            built = time.strftime("%Y-%m-%d %H:%M", time.localtime(static.stat().st_mtime))
            return (f"installed labextension {static.parent} (built {built}) "
                    f"{'has' if has_viewer else 'has NO'} trace viewer in its bundle")
    return "no neuron-studio-lab labextension is installed in this environment"


#: Wraps a page script so that it rejects after `timeoutMs` naming what it waited for.
WITH_TIMEOUT = """async ([script, args, what, timeoutMs]) => {
  const fn = eval(script);
  let timer;
  const limit = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('TIMEOUT ' + what)), timeoutMs); });
  try { return await Promise.race([fn(args), limit]); } finally { clearTimeout(timer); }
}"""


OPEN_RUN = """async ([rid, timeoutMs]) => {
  document.querySelectorAll('.ns-PanelTrace').forEach(n => n.remove());
  const t0 = performance.now();
  const viewer = () => document.querySelector('.ns-PanelTrace .ns-TraceViewer');
  if (viewer()) { throw new Error('TIMEOUT removing the previous viewer: it is still on the page'); }
  const text = sel => { const n = document.querySelector(sel); return n ? n.textContent.trim().slice(0, 300) : null; };
  let created = null;
  const steps = [];   // [ms since the command, what the panel showed] at each change
  const note = () => {
    const v = viewer();
    const state = v ? 'viewer: ' + (v.querySelector('.ns-TraceStatus').textContent || '(no status)') + ' from=' + v.getAttribute('data-from')
                    : 'panel: ' + (text('.ns-ProfilerPanel .ns-Loading') || text('.ns-ProfilerPanel .ns-DetailHeader') || text('.ns-ProfilerPanel') || '(none)');
    if (!steps.length || steps[steps.length - 1][1] !== state) { steps.push([Math.round(performance.now() - t0), state.slice(0, 160)]); }
  };
  const opened = window.jupyterapp.commands.execute('neuron-studio:open-profiler', {path: 'bench.ipynb', runId: rid});
  let failed = null;
  opened.catch(e => { failed = String(e); });
  while (!(viewer() && viewer().hasAttribute('data-first-paint-ms'))) {
    note();
    if (created === null && viewer()) { created = performance.now(); }
    if (failed !== null || performance.now() - t0 > timeoutMs) {
      const state = {
        waited_ms: Math.round(performance.now() - t0), open_profiler_failed: failed,
        panel: !!document.querySelector('.ns-ProfilerPanel'), viewer: !!viewer(),
        detail_header: text('.ns-ProfilerPanel .ns-DetailHeader'), status: text('.ns-PanelTrace .ns-TraceStatus'),
        errors: [...document.querySelectorAll('.ns-ProfilerPanel .ns-Error')].map(n => n.textContent.trim().slice(0, 300)),
        loading: text('.ns-ProfilerPanel .ns-Loading'), message: text('.ns-ProfilerPanel .ns-Message'),
      };
      throw new Error('TIMEOUT ' + JSON.stringify(state));
    }
    await new Promise(r => setTimeout(r, 5));
  }
  if (created === null) { created = performance.now(); }  // it appeared and drew between two polls
  // the viewer notes when (ms after its creation) it first drew boxes, and when the server's own answer
  const total = Number(viewer().getAttribute('data-first-paint-ms'));
  // the server's own first answer drawn (the first paint may be the run's stored overview)
  while (!viewer().hasAttribute('data-source-paint-ms')) {
    note();
    if (performance.now() - t0 > timeoutMs) {
      throw new Error('TIMEOUT ' + JSON.stringify({what: "the server's whole-run answer drawn (data-source-paint-ms)",
        waited_ms: Math.round(performance.now() - t0), status: text('.ns-PanelTrace .ns-TraceStatus'),
        from: viewer().getAttribute('data-from')}));
    }
    await new Promise(r => setTimeout(r, 5));
  }
  const detail = Number(viewer().getAttribute('data-source-paint-ms'));
  note();
  await opened;
  const trace = performance.getEntriesByType('resource').filter(e => /\/trace\?/.test(e.name) && e.startTime >= t0);
  const first = trace.length ? trace[0] : null;
  performance.clearResourceTimings();
  return [total, first ? first.startTime - t0 : null, first ? first.duration : null, detail, (created ?? t0) - t0, steps];
}"""

INTERACT = """async () => {
  if (!document.querySelector('.ns-PanelTrace .ns-TraceViewer .ns-TraceCanvas')) {
    throw new Error('TIMEOUT the viewer canvas: none on the page');
  }
  const v = document.querySelector('.ns-PanelTrace .ns-TraceViewer');
  const canvas = v.querySelector('.ns-TraceCanvas');
  const stage = v.querySelector('.ns-TraceStage');
  const box = canvas.getBoundingClientRect();
  const gaps = [], latency = [];
  let last = performance.now(), running = true;
  const loop = now => { gaps.push(now - last); last = now; if (running) requestAnimationFrame(loop); };
  requestAnimationFrame(loop);
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  // an interaction's frame: from the event to the end of the animation frame that draws it (the chart
  // renders in a requestAnimationFrame callback queued by the event, before ours)
  const frame = async (target, event) => {
    const t0 = performance.now();
    target.dispatchEvent(event);
    await new Promise(r => requestAnimationFrame(() => r()));
    latency.push(performance.now() - t0);
  };
  const at = {clientX: box.left + box.width * 0.4, clientY: box.top + 40, bubbles: true, cancelable: true};
  canvas.dispatchEvent(new MouseEvent('mousemove', at));
  for (let i = 0; i < 40; i++) {          // wheel zoom in, 40 notches, a LOD answer now and then
    await frame(canvas, new WheelEvent('wheel', {...at, deltaY: -120}));
    await sleep(i % 8 === 7 ? 400 : 30);
  }
  canvas.dispatchEvent(new MouseEvent('mousedown', at));
  for (let i = 1; i < 20; i++) {          // drag to pan
    await frame(canvas, new MouseEvent('mousemove', {...at, clientX: at.clientX - i * 15}));
    await sleep(30);
  }
  canvas.dispatchEvent(new MouseEvent('mouseup', at));
  stage.focus();
  for (const key of ['d', 'd', 'a', 's', 's', 'w', 'f']) {   // keyboard pan, zoom, fit
    await frame(stage, new KeyboardEvent('keydown', {key, bubbles: true, cancelable: true}));
    await sleep(400);
  }
  for (let i = 0; i < 20; i++) {          // wheel zoom out again
    await frame(canvas, new WheelEvent('wheel', {...at, deltaY: 240}));
    await sleep(40);
  }
  await sleep(500);
  running = false;
  return [latency, gaps.slice(1), Number(v.getAttribute('data-swap-ms') || 0)];
}"""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    args = ap.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ns-bench-viewer-") as tmp:
        root, home = Path(tmp) / "root", Path(tmp) / "home"
        root.mkdir()
        home.mkdir()
        t = time.perf_counter()
        rid, overview_bytes = _seed(root, args.ops)
        print(f"store seeded: {args.ops:,} ops in {time.perf_counter() - t:.1f} s; the run's stored overview "
              f"(summary trace_view) is {overview_bytes / 1e6:.2f} MB of JSON")
        port, token = bench_server._free_port(), secrets.token_hex(16)
        base = f"http://127.0.0.1:{port}"
        log = home / "lab.log"
        proc = _start_lab(root, port, token, home, log)
        payloads: list[int] = []
        console: list[str] = []
        try:
            _wait(base, token, proc, log)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1600, "height": 1000})

                def on_response(resp) -> None:  # noqa: ANN001
                    if "/neuron-studio/runs/" in resp.url and "/trace?" in resp.url:
                        payloads.append(len(resp.body()))

                page.on("response", on_response)
                page.on("console", lambda m: console.append(f"{m.type}: {m.text}")
                        if m.type in ("error", "warning") else None)
                page.on("pageerror", lambda e: console.append(f"page error: {e}"))

                def fail(what: str, detail: str) -> BenchError:
                    return BenchError(f"timed out waiting for {what}: {detail}\n{_installed_labextension()}\n"
                                      f"browser console errors/warnings (last 10): {console[-10:]}\n"
                                      f"server log tail:\n{_log_tail(log, 1500)}")

                def run(script: str, args: list, what: str, timeout_s: float):  # noqa: ANN202
                    try:
                        return page.evaluate(WITH_TIMEOUT, [script, args, what, timeout_s * 1000])
                    except PlaywrightError as exc:
                        if "TIMEOUT" in str(exc):
                            raise fail(what, str(exc).split("TIMEOUT", 1)[1].strip()) from None
                        raise

                page.goto(f"{base}/lab/workspaces/bench-{secrets.token_hex(4)}?reset&token={token}", timeout=120_000)
                for what, wait in (("the JupyterLab shell (.jp-LabShell)", lambda: page.wait_for_selector(
                                        ".jp-LabShell", timeout=120_000)),
                                   ("the command neuron-studio:open-profiler (is the labextension installed?)",
                                    lambda: page.wait_for_function(
                                        "() => window.jupyterapp && window.jupyterapp.commands"
                                        ".hasCommand('neuron-studio:open-profiler')", timeout=120_000))):
                    try:
                        wait()
                    except PlaywrightTimeout:
                        raise fail(what, f"page title {page.title()!r}") from None
                what = f"run {rid}'s trace viewer to show boxes (.ns-TraceStatus '… boxes …')"
                cold = run(OPEN_RUN, [rid, 170_000], what, 180)
                warm = run(OPEN_RUN, [rid, 50_000], what, 60)
                frames = run(INTERACT, [], "the zoom/pan interaction script to finish", 180)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(30)
    for label, got in (("cold", cold), ("warm", warm)):
        print(f"{label} open, what the panel showed (ms since the open command: state):")
        for ms, state in got[5]:
            print(f"  {ms:>7} {state}")
    latency, gaps, swap = frames
    print(f"\nload average before the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min, 2 cores)")
    print(f"{'figure':<44}{'measured':>10}{'goal':>8}{'measured / goal':>17}")
    rows = [("first paint, cold server (ms)", cold[0], GOALS["first paint (ms)"]),
            ("first paint, warm: table cached (ms)", warm[0], GOALS["first paint (ms)"]),
            ("server's whole-run boxes drawn, cold (ms)", cold[3], GOALS["first paint (ms)"]),
            ("server's whole-run boxes drawn, warm (ms)", warm[3], GOALS["first paint (ms)"]),
            ("largest payload (MB)", max(payloads) / 1e6, GOALS["payload (MB)"]),
            ("whole-run payload (MB)", payloads[0] / 1e6, GOALS["payload (MB)"]),
            ("zoom/pan frame, event to drawn, p50 (ms)", _pct(latency, 0.5), GOALS["frame (ms)"]),
            ("zoom/pan frame, event to drawn, p95 (ms)", _pct(latency, 0.95), GOALS["frame (ms)"]),
            ("zoom/pan frame, event to drawn, max (ms)", max(latency), GOALS["frame (ms)"]),
            ("largest slice swapping in a LOD answer (ms)", swap, GOALS["frame (ms)"]),
            ("gap between animation frames, p95 (ms)", _pct(gaps, 0.95), GOALS["frame (ms)"])]
    for label, value, goal in rows:
        print(f"{label:<44}{value:>10.1f}{goal:>8.1f}{value / goal:>16.2f}x")
    print("\nfirst paint: from the viewer's creation to its first boxes drawn (the run's stored overview when "
          "its summary has one, else the server's answer); the server's boxes: to its whole-run answer drawn")
    print(f"the whole-run request took {cold[2]:.0f} ms cold, {warm[2]:.0f} ms warm, sent {cold[1]:.0f} / "
          f"{warm[1]:.0f} ms after the open command; the panel's run list and run detail (before the viewer exists) "
          f"took {cold[4]:.0f} ms (cold server) / {warm[4]:.0f} ms")
    print(f"{len(payloads)} level-of-detail answers ({sum(payloads) / 1e6:.2f} MB in all); {len(latency)} "
          f"interactions; {len(gaps)} animation frames (their gaps include other processes on this shared machine)")


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"bench_viewer FAILED: {exc}")
