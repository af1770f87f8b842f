"""Shared helpers of the browser tests: a JupyterLab server, a Chromium page, the renderer's formatting.

Importable without playwright or chromium (the test modules skip themselves when those are missing).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = HERE.parent / "tests" / "fixtures"
ARTIFACTS = Path(os.environ.get("NEURON_STUDIO_ARTIFACTS", REPO / "test-artifacts"))
#: The images the README and docs/ show are made by these tests: with NEURON_STUDIO_DOC_IMAGES=1 they are
#: written into docs/img/ too (commit them); otherwise only into ARTIFACTS.
DOC_IMAGES = REPO / "docs" / "img"


def doc_screenshot(target, name: str) -> Path:  # noqa: ANN001 - a playwright Page or Locator
    """Screenshot `target` as `name` into ARTIFACTS, and into docs/img when NEURON_STUDIO_DOC_IMAGES=1."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / name
    target.screenshot(path=str(out))
    if os.environ.get("NEURON_STUDIO_DOC_IMAGES") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        tmp = DOC_IMAGES / f".{name}.tmp"
        tmp.write_bytes(out.read_bytes())
        os.replace(tmp, DOC_IMAGES / name)
    return out
CHROMIUM = os.environ.get("NEURON_STUDIO_CHROMIUM", "/usr/bin/chromium")
TOKEN = "neuron-ui-test"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--disable-sync"]
VENV_BIN = Path(sys.executable).parent


PROFILE_MIME = "application/vnd.neuron-studio.profile+json"
#: true once the current notebook's kernel (the venv's ipykernel) is up and idle
KERNEL_IDLE = """() => {
    const w = window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle';
}"""


def code_cell(cell_id: str, source: str, payload: dict | None = None, text: str = "<Profile>",
              extra: dict | None = None) -> dict:
    """A notebook code cell: not run, or (with `payload`) run once, its saved output that profile summary (plus
    `extra` MIME data), as a notebook saved after a `%%neuron` cell ran holds it."""
    outputs = [] if payload is None else [{
        "output_type": "execute_result", "execution_count": 1, "metadata": {},
        "data": {PROFILE_MIME: payload, **(extra or {}), "text/plain": text}}]
    return {"cell_type": "code", "execution_count": None if payload is None else 1, "id": cell_id, "metadata": {},
            "source": source, "outputs": outputs}


def notebook(cells: list[dict]) -> str:
    """A notebook's JSON (nbformat 4.5, the `python3` kernel) holding `cells`."""
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5,
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}}})


def open_notebook(page, base: str, path: str, workspace: str, *,  # noqa: ANN001 - a playwright Page
                  kernel_timeout: float | None = None) -> None:
    """Open `path` in a fresh JupyterLab workspace (`?reset`: no layout from an earlier test) and wait for its
    first cell; with `kernel_timeout` (ms), also for its kernel to be up and idle."""
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{path}?reset&token={TOKEN}")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=60_000)
    if kernel_timeout is not None:
        page.wait_for_function(KERNEL_IDLE, timeout=kernel_timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def lab_server(root: Path, home: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Iterator[str]:
    """JupyterLab on 127.0.0.1 with a token, serving `root`, with a private HOME/config; yields its base URL.

    The venv's bin directory comes first on PATH, so the `python3` kernelspec (argv `python`) runs the
    venv's ipykernel (the one with torch and neuron_studio).
    """
    port = free_port()
    full_env = dict(os.environ, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
                    JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                    PATH=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]))
    full_env.pop("JPY_SESSION_NAME", None)
    full_env.update(env or {})
    labconfig = home / ".jupyter" / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))  # no news toast
    jupyter = shutil.which("jupyter", path=str(VENV_BIN)) or "jupyter"
    log_path = home / f"lab-{port}.log"
    log = open(log_path, "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [jupyter, "lab", "--no-browser", "--allow-root", "--ip", "127.0.0.1", f"--port={port}",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
         "--LabApp.expose_app_in_browser=True", "--KernelSpecManager.ensure_native_kernel=True"],
        env=full_env, cwd=str(root), stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"JupyterLab did not start; see {log_path}") from None
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture(scope="module")
def page():  # noqa: ANN201 - a playwright Page with `.errors` (page errors and dialogs)
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))  # an alert() would be XSS
        pg.errors = errors  # type: ignore[attr-defined]
        yield pg
        browser.close()


# -- the renderer's formatting (src/mime.ts), to derive expected text from a payload -----------------


def fmt_ns(ns: float | None) -> str:
    if ns is None or not math.isfinite(ns):
        return "—"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{round(ns)} ns"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x * 100:.{digits}f}%"


def fmt_usd(x: float | None) -> str:
    """As the summary's own dollar text (3 significant digits, plain decimals)."""
    from neuron_studio.profiler.summary_numbers import usd_text

    return "—" if x is None else usd_text(x)


def fmt_signed(x: float | None, suffix: str = "%") -> str:
    return "—" if x is None else f"{'+' if x > 0 else ''}{x:.1f}{suffix}"


def assert_line_in_view(page, scroller: str, line: str, timeout: float = 10_000) -> None:  # noqa: ANN001
    """Wait until the element `line` inside the scrolling box `scroller` is wholly inside that box's visible area
    (a source line opened at a location must not be half hidden at an edge); fail naming both boxes if not."""
    script = """([scroller, line]) => {
        const box = document.querySelector(scroller);
        const row = box && box.querySelector(line);
        if (!row) return false;
        const a = row.getBoundingClientRect(), b = box.getBoundingClientRect();
        return a.height > 0 && a.top >= b.top && a.bottom <= b.bottom;
    }"""
    try:
        page.wait_for_function(script, arg=[scroller, line], timeout=timeout)
    except Exception as exc:  # playwright's TimeoutError: say where the line is
        where = page.evaluate("""([scroller, line]) => {
            const box = document.querySelector(scroller);
            const row = box && box.querySelector(line);
            return row ? [row.getBoundingClientRect().toJSON(), box.getBoundingClientRect().toJSON()] : null;
        }""", [scroller, line])
        raise AssertionError(f"{line} not wholly visible in {scroller}: (line box, visible box) = {where}") from exc


def cursor(page) -> dict:  # noqa: ANN001
    """Path, 0-based cursor line and its text of the current widget's editor (file editor or active cell)."""
    return page.evaluate(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const editor = w.content.activeCell ? w.content.activeCell.editor : w.content.editor;
            const pos = editor.getCursorPosition();
            return {path: w.context.path, line: pos.line, text: editor.getLine(pos.line)};
        }"""
    )
