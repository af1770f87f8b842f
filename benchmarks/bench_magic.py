"""%%neuron with vs without profiling, and the inline output's size and first render time (not a test).

    python benchmarks/bench_magic.py

(a) the transformer-block training step (d_model 512, seq 256, batch 8, fwd+bwd+AdamW) run by
    `%%neuron --steps 3 --warmup 1` with profiling vs `--no-profile`, interleaved, medians (goal <= 1.25x),
    with the load average (other work on the machine inflates both, not equally) and process CPU times;
(b) size of the MIME bundle a profiled cell stores in the notebook (custom JSON, HTML, text);
(c) first render of that HTML in headless Chromium (Debian's /usr/bin/chromium via Playwright), if present;
(d) the post-processing a profiled cell adds (model, compare diff, summary, HTML) on its own, CPU time.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMAND = "python benchmarks/bench_magic.py"
SETUP = """
import torch
from tests.models.blocks import TransformerBlock
torch.manual_seed(0)
model = TransformerBlock(512, 8).to("neuron")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(8, 256, 512, device="neuron")
"""
ROUNDS = 3              # interleaved no-profile / profiled pairs; medians
RENDER_TIMEOUT_MS = 30_000
BODY = "loss = model(x).pow(2).mean()\nloss.backward(); opt.step(); opt.zero_grad()\n"


def main() -> None:
    from IPython.testing.globalipapp import start_ipython

    from neuron_studio.session import session

    tmp = tempfile.mkdtemp()
    session().use_store(tmp)
    ip = start_ipython()
    ip.run_line_magic("load_ext", "neuron_studio")
    assert ip.run_cell(SETUP).success
    ip.display_formatter.active_types = ["text/plain"]
    load_before = os.getloadavg()
    plain, prof, plain_cpu, prof_cpu = [], [], [], []
    last = None
    for _ in range(ROUNDS):
        t0, c0 = time.perf_counter(), time.process_time()
        _run(ip, f"%%neuron --steps 3 --warmup 1 --no-profile\n{BODY}")
        plain.append(time.perf_counter() - t0)
        plain_cpu.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        res = _run(ip, f"%%neuron --steps 3 --warmup 1\n{BODY}")
        prof.append(time.perf_counter() - t0)
        prof_cpu.append(time.process_time() - c0)
        last = res.result
    a, b = statistics.median(plain), statistics.median(prof)
    print(f"$ {COMMAND}")
    print(f"load average (1/5/15 min) before {_load(load_before)}, after {_load(os.getloadavg())} on "
          f"{os.cpu_count()} cores")
    print(f"(a) %%neuron transformer step x3 (+1 warm-up): no-profile {a:.2f} s, profiled {b:.2f} s, "
          f"ratio {b / a:.2f}x (goal <= 1.25x)")
    print(f"    wall per round, no-profile / profiled: {_secs(plain)} / {_secs(prof)}; process CPU time "
          f"medians {statistics.median(plain_cpu):.2f} / {statistics.median(prof_cpu):.2f} s "
          f"(ratio {statistics.median(prof_cpu) / statistics.median(plain_cpu):.2f}x)")
    _post_processing(last)
    bundle = last._repr_mimebundle_()
    sizes = {k: len(json.dumps(v)) if not isinstance(v, str) else len(v.encode()) for k, v in bundle.items()}
    print("(b) inline output size: " + ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sizes.items())
          + f", total {sum(sizes.values()) / 1024:.1f} KiB")
    _render(bundle["text/html"])


def _post_processing(prof, rounds: int = 7) -> None:  # noqa: ANN001 - the last profiled cell's Profile
    """What a profiled cell adds after its steps, on its own: the model, the compare diff, the summary and the
    inline HTML, on the cell's own trace (one Python thread: CPU time is steadier than wall time under load)."""
    from neuron_studio.profiler.profile import Profile
    from neuron_studio.ui.html import render_html

    prev = Profile.from_trace(prof.trace)
    prev.to_summary()
    cpu, wall = [], []
    for _ in range(rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        p = Profile.from_trace(prof.trace)
        p.diff(prev)
        render_html(p.to_summary(run_id=prof.run_id))
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
        prev = p
    print(f"(d) post-processing of the cell's trace (model, compare diff, summary, inline HTML) x{rounds}: CPU min "
          f"{min(cpu):.3f} s, median {statistics.median(cpu):.3f} s; wall median {statistics.median(wall):.3f} s "
          f"(load {os.getloadavg()[0]:.2f})")


def _run(ip, cell: str):  # noqa: ANN001, ANN202 - IPython shell and its ExecutionResult
    res = ip.run_cell(cell)
    if not res.success:
        raise RuntimeError(f"the benchmark cell failed: {cell.splitlines()[0]!r}: "
                           f"{res.error_in_exec or res.error_before_exec!r}")
    return res


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in avg)


def _secs(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def _render(html: str) -> None:
    if not os.path.exists("/usr/bin/chromium"):
        print("(c) first render: skipped (no /usr/bin/chromium; `apt-get install chromium`)")
        return
    try:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("(c) first render: skipped (pip install playwright)")
        return
    page_file = Path(tempfile.mkdtemp()) / "out.html"
    page_file.write_text(f"<!doctype html><html><body>{html}</body></html>")
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run", "--disable-sync"])
        page = browser.new_page()
        for _ in range(5):
            t0 = time.perf_counter()
            page.goto(page_file.as_uri(), timeout=RENDER_TIMEOUT_MS)
            try:
                page.wait_for_selector(".nstu .kp", timeout=RENDER_TIMEOUT_MS)
            except PlaywrightTimeout as exc:
                raise RuntimeError(f"(c) the summary's key figures (.nstu .kp) did not appear within "
                                   f"{RENDER_TIMEOUT_MS / 1000:.0f} s of loading {page_file}") from exc
            times.append((time.perf_counter() - t0) * 1000)
        fcp = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null")
        browser.close()
    print(f"(c) first render in headless Chromium: load-to-summary median {statistics.median(times):.0f} ms "
          f"(first-contentful-paint {fcp if fcp is None else round(fcp)} ms)")


if __name__ == "__main__":
    main()
