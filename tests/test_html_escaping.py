"""HTML output escapes every field: the profile view, the CLI report of a stored summary, the line-magic views.

The summary comes from a real `%%neuron` run (so fields added to the summary later are covered too);
blocks the small run leaves empty (fallbacks, recompiles, collectives, a kernel link) get one row each.
"""
from __future__ import annotations

import copy
import html
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pandas as pd
import pytest

from neuron_studio.cli import main, report_html
from neuron_studio.store import RunStore
from neuron_studio.ui.html import profile_tabs, render_html

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "\"'><script>alert(1)</script><img src=x onerror=alert(2)>"
RAW_MARKERS = ("<script", "<img", "onerror=alert(2)>")
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from IPython.testing import globalipapp

    from neuron_studio.cli import _ranks_summary
    from neuron_studio.session import session

    shell = globalipapp.get_ipython()   # the one test shell, shared with other modules
    session().use_store(tmp_path_factory.mktemp("store"))
    try:
        shell.run_line_magic("load_ext", "neuron_studio")
        assert shell.run_cell("import torch\nm = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), "
                              "torch.nn.Linear(32, 4)).to('neuron')\nx = torch.randn(8, 16, device='neuron')\n").success
        cell = "%%neuron --steps 2 --name escaping\nloss = m(x).sum(); loss.backward(); v = loss.item()\n"
        first = shell.run_cell(cell).result
        second = shell.run_cell(cell).result
    finally:
        session().use_store(None)
        shell.reset(new_session=False)  # the shell outlives this module: leave no tensors on the device
    s = copy.deepcopy(second.summary_payload)
    assert s["compare"] and s["compare"]["ops"], "the second run of a cell is compared with the first"
    s["ranks_analysis"] = _ranks_summary({0: first, 1: second})
    ra = s["ranks_analysis"]
    ra["straggler"] = ra.get("straggler") or {"rank": 1, "op": "c10d::allreduce_", "caused_wait_ns": 6e8,
                                               "compute_before_ns": 7e8, "others_compute_before_ns": 1e8,
                                               "op_before": "aten::mm"}
    ra["slowest_collective"] = ra.get("slowest_collective") or {"op": "c10d::allreduce_", "index": 0,
                                                                "bytes": 4096, "span_ns": 6e8, "last_rank": 1}
    ra["collectives"] = ra.get("collectives") or [{"op": "c10d::allreduce_", "index": 0, "bytes": 4096,
                                                   "last_rank": 1, "max_wait_ns": 5e8, "span_ns": 6e8}]
    s["fallbacks"] = s["fallbacks"] or [{"op": "aten::nonzero", "count": 2, "reason": "no lowering", "time_ns": 10}]
    s["recompiles"] = s["recompiles"] or [{"graph": "g0", "shape": "(8, 16)", "cause": "value",
                                           "reason": "a Python value changed", "detail": "0/0: n == 3"}]
    s["warnings"] = s["warnings"] or ["a warning"]
    s["hot_ops"][0]["kernel"] = s["hot_ops"][0]["kernel"] or {"name": "rmsnorm_kernel", "kind": "candidate",
                                                              "file": "kernels/rmsnorm.py", "line": 3,
                                                              "saving_ns": 12.0, "scope": "op"}
    return s


def _leaves(o: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _leaves(v, (*path, i))
    else:
        yield path, o


def _set(o: Any, path: tuple, value: Any) -> Any:
    o = copy.deepcopy(o)
    cur = o
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return o


def _assert_no_raw_markup(out: str, where: object) -> None:
    for marker in RAW_MARKERS:
        assert marker not in out, f"unescaped {marker!r} from {where}"


def test_every_field_hostile_at_once_is_escaped(summary: dict) -> None:
    hostile = copy.deepcopy(summary)
    for path, _ in list(_leaves(summary)):
        hostile = _set(hostile, path, HOSTILE)
    out = render_html(hostile)
    _assert_no_raw_markup(out, "the all-hostile summary")
    assert out.count(ESCAPED) > 100


def test_each_field_alone_is_escaped_and_every_count_is_shown(summary: dict) -> None:
    shown: set[tuple] = set()
    leaves = list(_leaves(summary))
    assert len(leaves) > 300
    for path, _ in leaves:
        out = render_html(_set(summary, path, HOSTILE))
        _assert_no_raw_markup(out, path)
        if "alert(" in out:                     # shown (escaped; a source path shows only its file name)
            shown.add(path)
    counts = {p for p, _ in leaves if p[-1] == "count" and p[0] in ("op_table", "fallbacks")}
    assert counts and counts <= shown, sorted(counts - shown)          # the fields of issue 14 item 12
    shown_keys = {p[-1] if not isinstance(p[-1], int) else p[-2] for p in shown}
    for key in ("name", "mode", "chip", "backend", "status", "op", "module", "source", "why", "bound", "engine",
                "reason", "graph", "shape", "warnings", "rank", "collectives_per_step", "wait_per_step_ns",
                "last_share", "index",
                "last_rank", "op_before", "kind", "file", "line", "run_id", "device_ns", "host_ns", "share",
                "flops", "bytes", "time_ns", "step_time_ns", "mfu", "launches", "per_1m_steps_usd"):
        assert key in shown_keys, f"field {key!r} is not shown (or not escaped) in the HTML"


def test_report_of_a_stored_summary_escapes_it(summary: dict, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    rid = store.begin_run(cell_source="x", options={}, name="hostile", mode="eager", chip="trn2",
                          backend="emulated")
    stored = _set(_set(summary, ("op_table", 0, "count"), HOSTILE), ("fallbacks", 0, "count"), HOSTILE)
    store.finish_run(rid, status="ok", summary={**stored, "name": HOSTILE, "run_id": HOSTILE})
    out = tmp_path / "r.html"
    assert main(["report", str(rid), "--store", str(tmp_path / "store"), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    _assert_no_raw_markup(text, "the stored summary")
    assert text.count(ESCAPED) >= 4                     # both counts, the name (title + header), the run id
    assert text.startswith("<!DOCTYPE html>") and "<title>Neuron Studio report · run &#34;&#39;&gt;&lt;script" in text
    _assert_no_raw_markup(report_html({"run_id": HOSTILE}), "report title")


def test_line_magic_views_escape_every_field() -> None:
    from neuron_studio.profiler.analysis.porting_report import CheckItem, PortingReport
    from neuron_studio.ui.views import CheckView, CompareView, DeviceView

    item = CheckItem(HOSTILE, HOSTILE, HOSTILE, HOSTILE, [HOSTILE, HOSTILE])
    check = CheckView(PortingReport(HOSTILE, HOSTILE, HOSTILE, [item], 0.1, 1.0, 2.0))._repr_html_()
    assert check.count(ESCAPED) == 9
    ops = pd.DataFrame({"key": [HOSTILE], "before_ns": [1.0], "after_ns": [2.0], "delta_ns": [1.0],
                        "status": [HOSTILE]})
    engines = pd.DataFrame({"engine": [HOSTILE], "before_ns": [1.0], "after_ns": [2.0], "delta_ns": [1.0]})
    diff = SimpleNamespace(ops=ops, engines=engines, step_time_before_ns=1.0, step_time_after_ns=2.0,
                           step_time_change_pct=100.0)
    compare = CompareView(diff, HOSTILE, HOSTILE)._repr_html_()
    assert compare.count(ESCAPED) == 5
    device = DeviceView(SimpleNamespace(describe=lambda: HOSTILE))._repr_html_()
    assert device.count(ESCAPED) == 1
    for out in (check, compare, device):
        _assert_no_raw_markup(out, "a line-magic view")


def test_output_stays_self_contained(summary: dict) -> None:
    out = render_html(summary)
    assert "<script" not in out.lower() and "<link" not in out.lower()
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", out), "nothing is loaded from the network"
    labels = re.findall(r"<label for='[^']+'>([^<]+)</label>", out)
    assert labels == [html.escape(t.label) for t in profile_tabs(summary)] and labels[1] == "Ranks (2)"
    assert out.count("<div class='pane p") == len(labels)


def test_jinja2_is_a_core_dependency_and_templates_are_package_data() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(re.match(r"jinja2\b", d, re.I) for d in meta["project"]["dependencies"])
    assert not any(re.match(r"jinja2\b", d, re.I) for d in meta["project"]["optional-dependencies"]["lab"])


@pytest.mark.slow
def test_the_built_wheel_ships_every_template(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("neuron_studio", "profiler", "kernels"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = ROOT / "neuron_studio" / "ui" / "templates"
    expected = {f"neuron_studio/ui/templates/{p.relative_to(templates).as_posix()}"
                for p in templates.rglob("*") if p.is_file()}
    assert len(expected) >= 10 and expected <= names, sorted(expected - names)


def test_measured_provenance_is_escaped(summary: dict) -> None:
    measured = {**summary, "modeled": False,
                "provenance": {"measured_from": HOSTILE, "not_captured": [HOSTILE, "host time"],
                               "figures": {HOSTILE: "derived", "mfu": "measured"}}}
    out = render_html(measured)
    _assert_no_raw_markup(out, "provenance")
    assert out.count(ESCAPED) == 3 and "host time: not captured" in out and "Modeled:" not in out


def test_a_measured_profile_labels_its_device_times_measured(summary: dict) -> None:
    """A profile measured on Trainium has measured device times: the hot table's and the op table's columns say
    so (the hot table said "(modeled)" whatever the profile)."""
    modeled_out, measured_out = render_html(summary), render_html({**summary, "modeled": False})
    assert "<th>device/step (modeled)</th>" in modeled_out and "device/step (measured)" not in modeled_out
    assert "<th>device/step (measured)</th>" in measured_out and "device/step (modeled)" not in measured_out


def test_hot_op_names_stay_on_one_line_with_the_full_name_as_tooltip(summary: dict) -> None:
    """Walk F3/F8: the hot table broke words mid-word ("comput|e", "aten::|mul") and cut module names without an
    ellipsis; names are one-line spans capped with an ellipsis, the full (escaped) name their tooltip."""
    s = copy.deepcopy(summary)
    h = s["hot_ops"][0]
    h.update(op="aten::_log_softmax_backward_data", module="GPT.blocks.11.mlp.<gate_proj> (backward)", bound="compute")
    out = render_html(s)
    esc = html.escape(h["module"], quote=True).replace("&#x27;", "&#39;")
    assert f"<span class='nm' title='{h['op']}'>{h['op']}</span>" in out
    assert f"title='{esc}'>{esc}</span>" in out and "<gate_proj>" not in out
    css = re.search(r"\.nstu \.hot \.nm\{([^}]*)\}", out)
    assert css and "text-overflow:ellipsis" in css.group(1) and "white-space:nowrap" in css.group(1)
    assert re.search(r"\.hot td\.bd[^{]*\{white-space:nowrap\}", out)     # "compute" / "memory" never wrap
    assert "<td class='bd'><span" in out
