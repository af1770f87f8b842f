"""The extension in a real JupyterLab and Chromium (Python playwright, system /usr/bin/chromium).

Run: `pytest extension/ui-tests -q` (needs `pip install playwright` and `apt-get install chromium`;
never `playwright install`). Screenshots go to `test-artifacts/`.
"""
from __future__ import annotations

import json
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

playwright_sync = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("NEURON_STUDIO_CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixtures" / "profile.json"
ARTIFACTS = Path(os.environ.get("NEURON_STUDIO_ARTIFACTS", HERE.parents[1] / "test-artifacts"))
TOKEN = "neuron-ui-test"
HOSTILE = "<script>alert(1)</script>"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--disable-sync"]

sys.path.insert(0, str(HERE.parent))
from neuron_studio_lab import core  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seed(root: Path) -> dict:
    """A notebook whose saved output is the profile payload, a store with two runs of that cell,
    a device trace for the second, and the kernel file the hot op links to."""
    import pyarrow as pa

    payload = json.loads(FIXTURE.read_text())
    (root / "kernels").mkdir()
    (root / "kernels" / "matmul.py").write_text(
        "".join(f"# matmul kernel line {i}\n" for i in range(1, 41))
    )
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    src = "%%neuron --name train-step\nloss = step()"
    first = store.begin_run(cell_source=src, options={}, name="warmup", notebook="02.ipynb",
                            mode="eager", chip="trn2", backend="emulated")
    earlier = dict(payload, run_id=first, name="warmup", mode="eager", step_time_ns=1_500_000, mfu=0.25)
    earlier["op_table"] = [dict(r, device_ns=r["device_ns"] * 2) for r in payload["op_table"]]
    store.finish_run(first, status="ok", summary=earlier, step_time_ns=1_500_000, mfu=0.25)
    second = store.begin_run(cell_source=src, options={}, name="train-step", notebook="02.ipynb",
                             mode="adaptive", chip="trn2", backend="emulated")
    payload["run_id"] = second
    store.finish_run(second, status="ok", summary=payload, step_time_ns=payload["step_time_ns"],
                     mfu=payload["mfu"])
    n = 500
    engines = ["tensor", "vector", "scalar", "gpsimd", "dma"]
    store.save_table(second, "device_ops", pa.table({
        "seq": pa.array(range(n), pa.int64()),
        "name": [HOSTILE if i % 7 == 0 else "aten::mm" for i in range(n)],
        "core": pa.array([i % 2 for i in range(n)], pa.int32()),
        "engine": [engines[i % 5] for i in range(n)],
        "start_ns": pa.array([i * 40 for i in range(n)], pa.int64()),
        "end_ns": pa.array([i * 40 + 100 for i in range(n)], pa.int64()),
        "flops": pa.array([1000] * n, pa.int64()),
        "bytes_read": pa.array([64] * n, pa.int64()),
        "bytes_written": pa.array([64] * n, pa.int64()),
        "bound": ["compute"] * n,
        "module": ["block.attn.q_proj"] * n,
        "source": ["cell:1"] * n,
    }))
    notebook = {
        "cells": [{
            "cell_type": "code", "execution_count": 1, "id": "cell-1", "metadata": {}, "source": src,
            "outputs": [{
                "output_type": "execute_result", "execution_count": 1, "metadata": {},
                "data": {
                    "application/vnd.neuron-studio.profile+json": payload,
                    "text/html": "<b>HTML fallback</b>",
                    "text/plain": "<Profile train-step>",
                },
            }],
        }],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    (root / "02.ipynb").write_text(json.dumps(notebook))
    return {"first": first, "second": second, "payload": payload}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("lab-root")
    seeded = _seed(root)
    home = tmp_path_factory.mktemp("home")
    port = _free_port()
    env = dict(os.environ, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    labconfig = home / ".jupyter" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))  # no news toast
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    log = open(root.parent / f"lab-{port}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [jupyter, "lab", "--no-browser", "--allow-root", "--ip", "127.0.0.1", f"--port={port}",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
         "--LabApp.expose_app_in_browser=True"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.terminate()
                raise RuntimeError(f"JupyterLab did not start; see {log.name}") from None
            time.sleep(0.3)
    try:
        yield {"base": base, "root": root, **seeded}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(lab: dict):  # noqa: ANN201
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))  # an alert() would be XSS
        page.errors = errors  # type: ignore[attr-defined]
        yield page
        browser.close()


def test_renderer_panel_and_kernel_link(lab: dict, page) -> None:  # noqa: ANN001
    page.goto(f"{lab['base']}/lab/workspaces/ns-ui/tree/02.ipynb?reset&token={TOKEN}")
    profile = page.locator(".jp-OutputArea-output .ns-Profile")
    profile.wait_for(timeout=30_000)

    # -- the MIME renderer, from the saved output (no kernel needed) --
    text = profile.inner_text()
    for expected in ["train-step", f"run #{lab['second']}", "mode: adaptive", "chip: trn2",
                     "backend: emulated", "modeled", "1.235 ms", "31.0%", "12.0%", "-12.5% vs run #6",
                     "2 CPU fallbacks", "1 sync points", "0 recompiles", "Cost per 1,000 steps (modeled)",
                     "trn2: $1.20", "H100: $2.30", "Open in Neuron Profiler"]:
        assert expected in text, expected
    tabs = profile.locator(".ns-Tab").all_inner_texts()
    assert tabs == ["Summary", "Hot path", "Op table", "Fallbacks & syncs"]
    assert page.locator(".jp-OutputArea-output", has_text="HTML fallback").count() == 0  # rank 0 wins
    page.screenshot(path=str(ARTIFACTS / "01-renderer-summary.png"))

    profile.locator(".ns-Tab", has_text="Hot path").click()
    hot = profile.locator(".ns-TabPage[data-tab='Hot path']")
    assert HOSTILE in hot.inner_text()  # shown as text ...
    assert profile.locator("script").count() == 0  # ... never as markup
    profile.locator(".ns-Tab", has_text="Op table").click()
    assert "aten::softmax" in profile.locator(".ns-OpTable").inner_text()
    profile.locator(".ns-Tab", has_text="Fallbacks & syncs").click()
    assert "aten::nonzero" in profile.inner_text()
    page.screenshot(path=str(ARTIFACTS / "02-renderer-fallbacks.png"))

    # -- the status bar follows the last profile rendered --
    status = page.locator(".ns-StatusItem")
    assert status.inner_text() == "Neuron: emulated · trn2 · adaptive"

    # -- the Neuron Profiler panel, opened on this run --
    profile.locator(".ns-OpenProfiler").click()
    panel = page.locator(".ns-ProfilerPanel")
    panel.wait_for()
    rows = panel.locator(".ns-RunRow")
    rows.first.wait_for()
    assert rows.count() == 2
    detail = panel.locator(".ns-Detail")
    detail.locator(".ns-Timeline").wait_for(timeout=15_000)
    assert f"train-step — #{lab['second']}" in detail.inner_text()
    assert detail.locator(".ns-Timeline rect").count() > 0
    ops_text = detail.locator(".ns-OpsPage").inner_text()
    assert HOSTILE in ops_text and "page 1 of 5 (500 ops)" in detail.locator(".ns-Pager").inner_text()
    detail.locator(".ns-Pager button", has_text="Next").click()
    page.wait_for_function("document.querySelector('.ns-Pager span').textContent.startsWith('page 2')")
    page.screenshot(path=str(ARTIFACTS / "03-profiler-panel.png"))

    # -- compare the two runs --
    panel.locator(f".ns-RunRow[data-run-id='{lab['first']}'] input").check()
    panel.locator(f".ns-RunRow[data-run-id='{lab['second']}'] input").check()
    panel.locator(".ns-Compare-button").click()
    compare = panel.locator(".ns-Compare")
    compare.wait_for()
    ctext = compare.inner_text()
    assert f"Compare #{lab['first']} → #{lab['second']}" in ctext
    assert "-17.7%" in ctext  # 1.5 ms -> 1.234567 ms
    assert "+6.0 pts" in ctext  # MFU 25 % -> 31 %
    assert "aten::mm" in ctext
    page.screenshot(path=str(ARTIFACTS / "04-compare.png"))

    # -- a hot op's kernel link opens the file in the editor at the line --
    rows.nth(0).click()  # newest run first
    detail.locator(".ns-KernelLink").first.wait_for()
    detail.locator(".ns-HotOps .ns-KernelLink").first.click()
    page.wait_for_selector("[data-neuron-line='12']", timeout=15_000)
    assert page.locator(".lm-TabBar-tab.jp-mod-current", has_text="matmul.py").count() >= 1
    cursor = page.evaluate(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const editor = w.content.editor;
            const pos = editor.getCursorPosition();
            return {path: w.context.path, line: pos.line, text: editor.getLine(pos.line)};
        }"""
    )
    assert cursor == {"path": "kernels/matmul.py", "line": 11, "text": "# matmul kernel line 12"}
    assert page.locator("[data-neuron-line='12'] .cm-content", has_text="matmul kernel line 12").count() == 1
    page.screenshot(path=str(ARTIFACTS / "05-kernel-editor.png"))

    assert page.errors == []  # type: ignore[attr-defined]
