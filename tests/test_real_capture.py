"""Real-Trainium capture as TorchNeuron ships it, against the fake `torch_neuronx` of either documented profiler API
generation (subprocesses: the backend is chosen once per process), and the readers of the Explorer tables that
join device executions to PyTorch ops, built from the documented schema (no /work/shared data needed).

What the fake cannot prove about hardware: that real TorchNeuron's `seq_nr`/`th_id` match the studio's op log
one to one, where Explorer puts the runtime sequence id, and real timings. Those are the studio's reading of the
April source and the schema page; these tests hold the studio to that reading.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from neuron_studio.profiler.compile_cache import CompileCacheWatch, compile_line
from neuron_studio.profiler.framework_log import FrameworkLog
from neuron_studio.profiler.neuron_profile.device_records import HBM_GROUPS, hbm_usage, throttling
from neuron_studio.profiler.neuron_profile.executions import (
    FrameworkMapping, device_executions, label_executions, read_framework_mapping,
)
from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.real_capture import (
    CaptureConfigError, UnsupportedProfilerError, capture_environment, detect_profiler_api,
)
from neuron_studio.profiler.trace import TraceFormatError

TESTS = Path(__file__).resolve().parent
FAKE = TESTS / "fake_torch_neuronx"

# a training step in a %%neuron cell; the third warm-up iteration gets a smaller batch (a new shape)
CELL_SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sizes = iter([8, 8, 6, 8, 8])
"""
CELL = """%%neuron --steps 2 --warmup 3 --name train
n = next(sizes)
x, y = torch.randn(n, 16), torch.randint(0, 4, (n,))
opt.zero_grad()
loss = torch.nn.functional.cross_entropy(model(x), y)
loss.backward()
opt.step()
"""


def _explorer_bin(tmp_path: Path) -> Path:
    """A `neuron-explorer` that turns the fake's capture into the documented Parquet tables."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "neuron-explorer"
    exe.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from make_capture_fixtures import write_capture_tables
        a = sys.argv[1:]
        assert a[0] == "view" and a[a.index("--output-format") + 1] == "parquet", a
        write_capture_tables(a[a.index("-d") + 1], a[a.index("--output-file") + 1])
    """))
    exe.chmod(0o755)
    return bindir


def _run(code: str, tmp_path: Path, env: dict[str, str]) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON", "TORCH_NEURONX", "FAKE_NEURONX"))}
    e.update(NEURON_STUDIO_BACKEND="real", NEURON_STUDIO_STORE=str(tmp_path / "store"),
             PYTHONPATH=os.pathsep.join([str(FAKE), str(TESTS), e.get("PYTHONPATH", "")]),
             PATH=os.pathsep.join([str(_explorer_bin(tmp_path)), str(Path(sys.executable).parent), "/usr/bin", "/bin"]))
    e.update(env)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                         cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


MAGIC = """
import json, warnings
warnings.simplefilter("ignore")
from IPython.testing import globalipapp
import torch_neuronx
from torch_neuronx import _fake
ip = globalipapp.get_ipython()
ip.run_line_magic("load_ext", "neuron_studio")
assert ip.run_cell(SETUP).success
res = ip.run_cell(CELL)
assert res.success, res.error_in_exec
prof = res.result
s = prof.summary_payload
ops = prof.trace.ops
dev = ops[ops["fallback"].isna()]
check = ip.run_line_magic("neuron_check", "")
stored = ip.run_line_magic("neuron_check", "train")          # the same run, rebuilt from the store
from neuron_studio.ui.html import render_html
html = render_html(s)
run_dir = prof.trace.meta["capture_dir"]
from pathlib import Path
out_root = Path(run_dir).parent.parent
print(json.dumps({
    "backend": s["backend"], "modeled": s["modeled"], "api": prof.trace.meta["profiler_api"],
    "join": prof.trace.meta["framework_join"],
    "rows": [[r.name, r.module, r.source, r.phase, int(r.device_ns)] for r in dev.itertuples()],
    "fallbacks": s["fallbacks"], "hardware": s["hardware"], "memory": s["memory"],
    "notes": s["breakdown"]["notes"], "warnings": s["warnings"],
    "check": [[i.topic, i.severity, i.message, i.details] for i in check.report.items],
    "stored_check": [[i.topic, i.severity, i.message, i.details] for i in stored.report.items],
    "html": html,
    "calls": [c for c, _ in _fake.CALLS], "nrt": [a for c, a in _fake.CALLS if c == "nrt_begin"],
    "files": sorted(p.name for p in Path(run_dir).iterdir()),
    "root_files": sorted(p.name for p in out_root.iterdir()),
    "cell_file": prof.trace.meta.get("cell", {}).get("source", "")[:20],
    "loss": float(ip.user_ns["loss"]),
    "host_label": prof.trace.meta["figures"]["host_time"], "host_ns": s["host_time_ns"],
}))
"""


@pytest.fixture(scope="module", params=["shipped", "april"])
def magic_run(request, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp(f"magic_{request.param}")
    code = f"SETUP = {CELL_SETUP!r}\nCELL = {CELL!r}\n" + MAGIC
    out = _run(code, tmp, {"FAKE_NEURONX_API": request.param, "FAKE_NEURONX_FALLBACK_OPS": "aten::nll_loss_forward"})
    out["param"] = request.param
    return out


def _plain_cpu_loss() -> float:
    """The same cell's last loss on plain CPU PyTorch (no studio, no fake)."""
    ns: dict = {}
    exec(CELL_SETUP, ns)   # noqa: S102 - the test's own cell
    body = CELL.split("\n", 1)[1]
    for _ in range(5):
        exec(body, ns)     # noqa: S102
    return float(ns["loss"])


def test_magic_detects_the_api_generation_and_measures_on_the_device(magic_run: dict) -> None:
    assert magic_run["api"] == magic_run["param"]
    assert magic_run["backend"] == "real" and magic_run["modeled"] is False
    # host time measured in both generations (the April profiler's own pytorch_trace.json)
    assert magic_run["host_label"] == "measured" and magic_run["host_ns"] > 0
    # the studio's op log and the capture do not change what the step computes
    assert magic_run["loss"] == pytest.approx(_plain_cpu_loss(), rel=0, abs=0)
    # eager: one NTFF for the whole session, the variable set only for the capture
    assert magic_run["nrt"] and all(a["device_profile"] == "session" and a["mapping"] for a in magic_run["nrt"])
    assert [f for f in magic_run["files"] if f.endswith(".ntff")] == ["profile_nc_0_session_0.ntff"]
    order = magic_run["calls"]
    assert order.index("nrt_begin") < order.index("nrt_stop")
    assert "synchronize" in order[order.index("nrt_begin"):order.index("nrt_stop")]   # synced before export


def test_magic_joins_every_device_execution_to_its_op_module_and_line(magic_run: dict) -> None:
    join = magic_run["join"]
    assert join["executions"] > 0 and join["joined"] == join["executions"] and join["unjoined"] == {}
    rows = magic_run["rows"]
    assert len(rows) == join["executions"]
    # every row: a PyTorch op name, and a source line in the cell
    assert all(r[0].startswith("aten::") for r in rows)
    lines = {int(str(r[2]).rsplit(":", 1)[1]) for r in rows}
    body = CELL.split("\n")[1:]
    by_line = {i + 1: text for i, text in enumerate(body)}
    assert lines <= set(by_line)                                    # lines of the cell body, nothing else
    fwd = {(r[0], r[1]) for r in rows if r[3] == "forward"}
    assert {("aten::addmm", "Sequential.0"), ("aten::relu", "Sequential.1"), ("aten::addmm", "Sequential.2")} <= fwd
    # backward device time lands on the forward's module and the line that ran the model
    bwd = [r for r in rows if r[3] == "backward"]
    assert bwd and {"Sequential.0", "Sequential.2"} <= {r[1] for r in bwd}
    model_line = next(i for i, t in by_line.items() if "model(x)" in t)
    assert all(r[2].endswith(f":{model_line}") for r in bwd if r[1].startswith("Sequential"))
    opt_rows = [r for r in rows if r[3] == "optimizer"]
    assert opt_rows and all(r[1] == "optimizer.SGD" and r[2].endswith(":" + str(
        next(i for i, t in by_line.items() if "opt.step" in t))) for r in opt_rows)
    assert all(r[4] > 0 for r in rows)
    # the fallback op never reaches the device: no execution row, and op tracking reports it
    assert "aten::nll_loss_forward" not in {r[0] for r in rows}


def test_magic_reports_silent_fallbacks_from_op_tracking(magic_run: dict) -> None:
    assert [f["op"] for f in magic_run["fallbacks"]] == ["aten::nll_loss_forward"]
    assert "device=neuron:0" in magic_run["fallbacks"][0]["reason"]
    check = {t: (sev, msg, det) for t, sev, msg, det in magic_run["check"]}
    assert check["fallbacks"][0] == "error" and "aten::nll_loss_forward" in check["fallbacks"][2][0]
    assert check["efficiency"][1].startswith("measured MFU")      # a measured run's figure is never "modeled"


def test_magic_shows_compile_cache_figures_with_the_new_shape_line(magic_run: dict) -> None:
    cc = magic_run["hardware"]["compile_cache"]
    assert cc["compilations"] == len(cc["graphs"]) > 0
    assert cc["misses"] == cc["compilations"] and cc["hits"] > 0      # later iterations hit the in-memory cache
    assert cc["compile_time_ns"] == sum(g["time_ns"] for g in cc["graphs"]) >= cc["compilations"] * 2_000_000
    assert cc["neff_bytes"] == sum(g["neff_bytes"] for g in cc["graphs"])
    # the batch of 6 in the third warm-up iteration compiled new NEFFs, attributed to the cell's lines
    new = [g for g in cc["graphs"] if g["new_shape"]]
    assert new and all(g["step"] == -1 and "6x" in (g["shapes"] or "") for g in new)
    first = [g for g in cc["graphs"] if not g["new_shape"]]
    assert first and all(g["step"] == -3 for g in first)
    assert cc["line"].startswith(f"this cell compiled {cc['compilations']} NEFFs: ") and "; new shape at " in cc["line"]
    assert any(n.startswith(cc["line"]) for n in magic_run["notes"])
    check = {t: (sev, msg) for t, sev, msg, _ in magic_run["check"]}
    assert check["compile_cache"] == ("warning", cc["line"])


def test_magic_draws_the_hbm_timeline_by_category(magic_run: dict) -> None:
    m = magic_run["memory"]
    assert m["measured"] is True and m["timeline"] is not None
    tl = m["timeline"]
    assert set(m["categories"]) <= set(HBM_GROUPS) and "hbm_tensors" in m["categories"]
    assert "hbm_profiler" in m["categories"]          # DEVICE profiling's buffers are part of HBM, shown as such
    for i, tot in enumerate(tl["total"]):
        assert tot == sum(tl[c][i] for c in m["categories"])
    assert m["hbm_peak_bytes"] == max(tl["total"])
    assert "SystemProfileHbmUsage" in " ".join(m["notes"])


def test_magic_output_and_the_stored_run_show_the_same_hardware_figures(magic_run: dict) -> None:
    assert magic_run["stored_check"] == magic_run["check"]       # %neuron_check RUN reads what the cell showed
    html = magic_run["html"]
    cc = magic_run["hardware"]["compile_cache"]
    assert cc["line"].split(";")[0] in html                      # the breakdown's compile sentence
    assert "profiler buffers" in html and "tensors" in html       # the HBM categories of the Memory tab
    assert "Small DMA transfers" in html


def test_magic_surfaces_explorer_records(magic_run: dict) -> None:
    hw = magic_run["hardware"]
    aw = hw["active_window"]
    assert 0 < aw["active_ns"] < aw["total_ns"] and aw["idle_ns"] >= 2_000_000 / 2   # per step, 2 steps
    assert hw["collectives"]["ops"][0]["operation"] == "AllReduce" and hw["throttling"]["mean_limit"] == 0.5
    assert hw["dependencies"]["gap_ns"] == (1_500 + 250) / 2
    assert any("Neuron Explorer (Performance): Small DMA" in w for w in magic_run["warnings"])
    notes = " ".join(magic_run["notes"])
    assert "device active" in notes and "hardware throttling" in notes and "collectives: 1 operations" in notes


def test_magic_writes_the_per_rank_layout_with_the_framework_mapping(magic_run: dict) -> None:
    files = magic_run["files"]
    assert {"ntrace.pb", "trace_info.pb"} <= set(files) and any(f.startswith("neff_") for f in files)
    mapping_here = [f for f in files if f.startswith("framework_mapping_")]
    mapping_root = [f for f in magic_run["root_files"] if f.startswith("framework_mapping_")]
    if magic_run["param"] == "shipped":
        assert "trace.json" in files and len(mapping_here) == 1 and not mapping_root
    else:   # the April profiler writes its CPU trace and the mapping into the output directory
        assert "pytorch_trace.json" in magic_run["root_files"] and len(mapping_root) == 1 and not mapping_here


def test_each_rank_writes_its_own_directory_and_april_options_map_to_its_api(tmp_path: Path) -> None:
    out = _run("""
        import json, warnings, torch, neuron_studio, torch_neuronx
        from neuron_studio.profiler.real_capture import capture_real, NeuronCaptureOptions
        warnings.simplefilter("ignore")
        w = torch.randn(4, 4)
        run = capture_real(lambda: (w @ w).relu(), steps=1, options=NeuronCaptureOptions(
            out_dir="prof", capture_enabled_for_nc="0,2-3", max_events_per_nc=100), name="r1")
        p = run.profile()
        print(json.dumps({"run_dir": str(run.run_dir), "notes": run.notes, "rank": p.trace.meta["rank"],
                          "api": run.api, "calls": [a for c, a in torch_neuronx._fake.CALLS if c == "NeuronProfiler"],
                          "ops": sorted(set(p.trace.ops["name"]))}))
    """, tmp_path, {"FAKE_NEURONX_API": "april", "WORLD_SIZE": "2", "RANK": "1"})
    assert out["api"] == "april" and out["rank"] == 1
    assert out["run_dir"].startswith(str(tmp_path / "prof" / "rank1" / "i-0fake_pid_"))
    assert out["calls"] == [{"pytorch_activities": ["CPU"], "record_shapes": True,
                             "neuron_output_dir": str(tmp_path / "prof" / "rank1"),
                             "event_filters": {"nc": ["0", "2-3"]}}]
    assert any("has no max_events_per_nc" in n for n in out["notes"])
    assert out["ops"] == ["aten::mm", "aten::relu"]


@pytest.mark.parametrize("sync", [True, False])
def test_every_step_ends_synchronised_so_no_step_spills_into_the_next(tmp_path: Path, sync: bool) -> None:
    """TorchNeuron executes asynchronously: without a sync at each step end, one step's device work could run in
    the next step's window. Like the emulated path, capture_real syncs after every warm-up and profiled step
    (`--no-sync` turns it off; the profiler then still stops only after a sync)."""
    out = _run(f"""
        import json, warnings, torch, neuron_studio, torch_neuronx
        from neuron_studio.profiler.real_capture import capture_real
        warnings.simplefilter("ignore")
        w = torch.randn(4, 4)
        def step():
            torch_neuronx._fake.CALLS.append(("step", None))
            return (w @ w).relu()
        capture_real(step, steps=3, warmup=3, sync={sync})
        print(json.dumps([c for c, _ in torch_neuronx._fake.CALLS if c in ("step", "synchronize", "nrt_stop")]))
    """, tmp_path, {"FAKE_NEURONX_API": "shipped"})
    steps = [i for i, c in enumerate(out) if c == "step"]
    assert len(steps) == 6
    stop = out.index("nrt_stop")
    ends = steps[1:] + [stop]
    synced = ["synchronize" in out[a + 1:b] for a, b in zip(steps, ends)]
    assert synced == ([True] * 6 if sync else [False, False, True, False, False, True])


# -- the capture's rules, without a subprocess ---------------------------------------------------------------
def test_inspect_enable_is_refused_and_session_mode_is_set_then_restored(monkeypatch) -> None:
    monkeypatch.setenv("NEURON_RT_INSPECT_ENABLE", "1")
    with pytest.raises(CaptureConfigError, match="NEURON_RT_INSPECT_ENABLE"):
        with capture_environment("eager"):
            pass
    monkeypatch.delenv("NEURON_RT_INSPECT_ENABLE")
    monkeypatch.delenv("NEURON_RT_INSPECT_DEVICE_PROFILE", raising=False)
    with capture_environment("eager") as env:
        assert os.environ["NEURON_RT_INSPECT_DEVICE_PROFILE"] == "session" and env.notes
    assert "NEURON_RT_INSPECT_DEVICE_PROFILE" not in os.environ
    with capture_environment("compile") as env:
        assert "NEURON_RT_INSPECT_DEVICE_PROFILE" not in os.environ and not env.notes
    monkeypatch.setenv("NEURON_RT_INSPECT_DEVICE_PROFILE", "model")
    with capture_environment("eager") as env:
        assert os.environ["NEURON_RT_INSPECT_DEVICE_PROFILE"] == "model" and "kept" in env.notes[0]


def test_april_host_events_come_from_its_chrome_trace(tmp_path: Path) -> None:
    from neuron_studio.profiler.real_capture import _host_from_chrome_trace

    p = tmp_path / "pytorch_trace.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1_700_000_000_000_000.5, "dur": 3.25, "tid": 7},
        {"ph": "X", "cat": "user_annotation", "name": "step", "ts": 1_700_000_000_000_000.0, "dur": 10.0, "tid": 7},
        {"ph": "X", "cat": "kernel", "name": "not host", "ts": 0, "dur": 1},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 5}]}))
    h = _host_from_chrome_trace(p)
    assert h["name"].tolist() == ["aten::mm", "step"] and h["start_ns"].tolist() == [500, 0]
    assert h["dur_ns"].tolist() == [3250, 10_000] and h["thread"].tolist() == [7, 7]
    p.write_text("{not json")
    assert _host_from_chrome_trace(p) is None and _host_from_chrome_trace(tmp_path / "missing.json") is None


def test_profiler_api_generation_is_detected_from_what_is_exported() -> None:
    class Shipped:
        def __init__(self, config): ...

    class April:
        def __init__(self, pytorch_activities=None, record_shapes=False, pytorch_trace_file=None,
                     neuron_output_dir="./output", event_filters=None): ...

    assert detect_profiler_api(SimpleNamespace(NeuronConfig=object, ProfileMode=object, NeuronProfiler=Shipped)) \
        == "shipped"
    assert detect_profiler_api(SimpleNamespace(NeuronProfiler=April)) == "april"
    with pytest.raises(UnsupportedProfilerError, match="exports neither"):
        detect_profiler_api(SimpleNamespace(NeuronProfiler=Shipped))


def test_framework_log_keeps_numerics_and_keys_ops_like_torchneuron() -> None:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref = [p.detach().clone() for p in m.parameters()]
    x = torch.randn(3, 4)
    with FrameworkLog() as log:
        log.step = 0
        m(x).sum().backward()
    logged = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(logged, m.parameters()))
    assert all(torch.equal(a, p) for a, p in zip(ref, m.parameters()))
    o = log.ops
    fwd = [i for i in range(len(o)) if o.phase[i] == "forward" and o.name[i] == "aten::addmm"]
    bwd = [i for i in range(len(o)) if o.phase[i] == "backward"]
    assert [o.module[i] for i in fwd] == ["Sequential.0", "Sequential.2"] and bwd
    here = Path(__file__).name
    assert all(o.source[i] and here in o.source[i] for i in fwd + bwd)
    assert not any(o.device[i] for i in range(len(o)) if o.name[i] in ("aten::t", "aten::view", "aten::detach"))
    assert all(o.t1_ns[i] >= o.t0_ns[i] for i in range(len(o)))


def test_compile_mode_log_keeps_torch_compile_compiling_and_finds_recompiles() -> None:
    """A dispatch mode would make Dynamo run the cell eagerly; compile mode logs Dynamo's compiles instead."""
    from neuron_studio import device
    from neuron_studio.profiler.trace import COMPILE_COLUMNS

    torch._dynamo.reset()
    compile_log = device.registry().compile_log
    start = len(compile_log)
    f = torch.compile(lambda x: (x @ x).relu().sum(), backend="neuron", dynamic=False)
    with FrameworkLog(compile_mode=True) as log:
        for i, n in enumerate((8, 8, 6)):
            log.step = i - 3
            f(torch.randn(n, n))        # the line compiles are attributed to
    compiles = pd.DataFrame(compile_log[start:], columns=list(COMPILE_COLUMNS))
    assert len(compiles) == 2            # the first call and the new shape: Dynamo compiled both
    assert list(compiles["cause"]) == ["first", "shapes"]
    o = log.ops
    here = f"{Path(__file__).name}:"
    assert [o.step[i] for i in range(len(o))] == [-3, -1] and all(here in o.source[i] for i in range(len(o)))
    assert o.name[0] == o.name[1] and all(o.t1_ns[i] > o.t0_ns[i] for i in range(len(o)))

    class Metrics:   # one NEFF compile inside each Dynamo compile window
        enabled = True

        def is_enabled(self):
            return True

        def get_counter_value(self, name):
            return 2 if name.endswith("TotalCompilations") and self.done else 0

        def get_metric_data(self, name):
            if not self.done:
                return None
            return {"samples": [{"timestamp_ns": o.t1_ns[i] - 10, "value": 5} for i in range(len(o))]}

    met = Metrics()
    met.done = False
    watch = CompileCacheWatch(met)
    watch.__enter__()
    watch._t0 = 0
    met.done = True
    watch.__exit__(None, None, None)
    cc = watch.result(log, compiles)     # each NEFF compile takes its Dynamo compile's cause
    assert [g["new_shape"] for g in cc.graphs] == [False, True] and "new shape at test_real_capture.py:" in cc.line
    assert cc.graphs[1]["reason"] == compiles["reason"][1]
    # a Dynamo recompile with unchanged shapes (grad mode) is not a new shape
    with FrameworkLog(compile_mode=True) as log:
        log.step = -1
        with torch.no_grad():
            f(torch.randn(6, 6))
    compiles = pd.DataFrame(compile_log[start:], columns=list(COMPILE_COLUMNS))
    assert list(compiles["cause"]) == ["first", "shapes", "grad_mode"]
    o = log.ops
    met.done, watch = False, CompileCacheWatch(met)
    watch.__enter__()
    watch._t0 = 0
    met.done = True
    watch.__exit__(None, None, None)
    cc = watch.result(log, compiles)
    assert [(g["new_shape"], g["cause"]) for g in cc.graphs] == [(False, "grad_mode")]
    assert "new shape" not in cc.line and "recompiled with unchanged input shapes at test_real_capture.py:" in cc.line
    # without the studio's log (another backend compiled it), the cause is not guessed
    cc = watch.result(log)
    assert [(g["new_shape"], g["cause"]) for g in cc.graphs] == [(False, "unknown")] and "new shape" not in cc.line


# -- readers over tables built from the schema ---------------------------------------------------------------
T0 = 1_790_000_000_123_456_789


def _events(seq_where: str) -> pd.DataFrame:
    """Two executions (seq 7, 8) and their runtime events; the sequence id in a column, the attributes or the rt
    event linked by flow id."""
    rows = []
    for k, sid in enumerate((7, 8)):
        s = T0 + 10_000 * k
        attrs = json.dumps({"nrt_sequence_id": sid})
        rows.append({"name": "nrt_execute", "start_ts": s - 500, "end_ts": s + 6_000, "trace_event_source": "neuron_rt",
                     "flow_id": [str(100 + k)], "extra_attributes_json": attrs if seq_where == "flow" else None,
                     "nc_idx": 0})
        rows.append({"name": "nc_exec_running", "start_ts": s, "end_ts": s + 5_000, "trace_event_source": "neuron_hw",
                     "flow_id": [str(100 + k)], "nc_idx": 0,
                     "extra_attributes_json": attrs if seq_where == "attrs" else None})
    df = pd.DataFrame(rows)
    if seq_where == "column":
        df["nrt_sequence_id"] = [-1, 7, -1, 8]
    return df


@pytest.mark.parametrize("where", ["column", "attrs", "flow"])
def test_executions_find_the_runtime_sequence_id_wherever_explorer_puts_it(where: str) -> None:
    t = ExplorerTables(directory=Path("."), tables={"SystemProfileEvents": _events(where)})
    ex = device_executions(t)
    assert ex.seq_id.tolist() == [7, 8] and (ex.end - ex.start).tolist() == [5_000, 5_000]
    assert ex.start[0] == T0                         # epoch ns kept exact


class _Log(SimpleNamespace):
    """An op-log record (`FrameworkLog.ops`) written by hand."""

    def __len__(self) -> int:
        return len(self.name)


def test_join_pairs_executions_with_ops_in_order_and_says_why_not() -> None:
    t = ExplorerTables(directory=Path("."), tables={"SystemProfileEvents": _events("attrs")})
    ex = device_executions(t)
    log = _Log(name=["aten::mm", "aten::relu", "aten::add"], thread=[1, 1, 1], seq=[5, 5, 5],
               module=["lin", "act", ""], source=["a.py:1", "a.py:2", "a.py:3"], phase=["forward"] * 3,
               device=[True, True, True], step=[0, 0, 0])
    both = FrameworkMapping({7: [(5, 1, 0), (5, 1, 0)], 8: [(5, 1, 0)]}, [])   # 7 fused two ops
    lab = label_executions(ex, both, log, ["hlo.7", "hlo.8"])
    assert lab.name.tolist() == ["aten::mm + aten::relu", "aten::add"] and lab.source.tolist() == ["a.py:1", "a.py:3"]
    lab = label_executions(ex, FrameworkMapping({7: [(5, 1, 0)]}, []), log, ["hlo.7", "hlo.8"])
    assert lab.name.tolist() == ["aten::mm", "hlo.8"] and lab.joined.tolist() == [True, False]
    assert lab.stats["unjoined"] == {"its runtime sequence id is not in the framework mapping": 1}
    # TorchNeuron's thread ids need not be the log's numbers: matched by the sequence numbers they share
    other = FrameworkMapping({7: [(5, 12, 0), (5, 12, 0)], 8: [(5, 12, 0)]}, [])
    lab = label_executions(ex, other, log, ["hlo.7", "hlo.8"])
    assert lab.joined.all() and lab.stats["thread_map"] == {"12": 1}
    lab = label_executions(ex, None, log, ["hlo.7", "hlo.8"])
    assert not lab.joined.any() and "framework_mapping" in next(iter(lab.stats["unjoined"]))


def test_framework_mapping_files_are_read_and_a_bad_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "framework_mapping_20261101_000000_001.json").write_text(json.dumps({"version": 1, "data": [
        {"nrta_seq_id": 3, "framework_op_exec_ids": [{"seq_nr": 9, "th_id": 1, "stream_id": 0}]}]}))
    m = read_framework_mapping([tmp_path])
    assert m.by_seq_id == {3: [(9, 1, 0)]}
    assert read_framework_mapping([tmp_path / "nothing"]) is None
    (tmp_path / "framework_mapping_20261101_000000_002.json").write_text('{"version": 1, "data": [{"x": 1}]}')
    with pytest.raises(TraceFormatError, match="framework_mapping_20261101_000000_002.json"):
        read_framework_mapping([tmp_path])


def test_hbm_usage_sums_series_held_between_samples_and_keeps_the_total() -> None:
    df = pd.DataFrame({"timestamp": [T0, T0 + 10, T0 + 5], "device_idx": [0, 0, 0], "hbm_idx": [0, 0, 1],
                       "tensors_bytes": [100, 300, 50], "weights_bytes": [10, 10, 0], "total_bytes": [110, 330, 50]})
    h = hbm_usage(ExplorerTables(directory=Path("."), tables={"SystemProfileHbmUsage": df}), T0)
    assert h["x_ns"] == [0, 5, 10]
    assert h["total"] == [110, 160, 380]              # HBM 1's 50 bytes held from t=5 on
    assert h["hbm_tensors"] == [100, 150, 350] and h["hbm_weights"] == [10, 10, 10]
    assert h["hbm_other"] == [0, 0, 20]               # total_bytes above the types: shown, not dropped
    assert h["peak_bytes"] == 380 and h["series"] == 2 and h["notes"]


def test_throttling_is_the_union_of_windows_with_the_time_weighted_limit() -> None:
    df = pd.DataFrame({"timestamp": [T0, T0 + 1_000], "duration": [2_000, 2_000], "k": [1, 3], "n": [2, 4],
                       "type": ["activity_0", "activity_1"]})
    th = throttling(ExplorerTables(directory=Path("."), tables={"Throttle": df}))
    assert th["time_ns"] == 3_000 and th["mean_limit"] == pytest.approx(0.625) and th["events"] == 2


def test_compile_cache_watch_counts_the_cell_and_attributes_compiles_by_time() -> None:
    class Metrics:
        def __init__(self):
            self.enabled, self.counters, self.samples = False, {}, {}

        def is_enabled(self):
            return self.enabled

        def set_enabled(self, v):
            self.enabled = v

        def get_counter_value(self, name):
            return self.counters.get(name)

        def get_metric_data(self, name):
            s = self.samples.get(name)
            return {"samples": s} if s else None

    met = Metrics()
    met.counters = {"CompilationCache.InMemoryHits": 5}
    ops = _Log(name=["aten::mm", "aten::mm"], module=["lin", "lin"], source=["c.py:3", "c.py:3"],
                          shapes=["2x2", "3x2"], step=[-2, -1], t0_ns=[0, 0])
    watch = CompileCacheWatch(met)
    with watch:
        assert met.enabled
        base = watch._t0
        ops.t0_ns = [base + 100, base + 10_000]
        met.counters.update({"CompilationCache.InMemoryHits": 9, "CompilationCache.InMemoryMisses": 2,
                             "CompilationCache.PersistentMisses": 2, "CompilationCache.TotalCompilations": 2})
        met.samples = {"CompilationCache.CompilationTime": [{"timestamp_ns": base + 5_000, "value": 4_000},
                                                            {"timestamp_ns": base + 90_000, "value": 70_000}],
                       "CompilationCache.NeffSize": [{"timestamp_ns": base + 5_000, "value": 1024},
                                                     {"timestamp_ns": base + 90_000, "value": 2048}]}
    assert not met.enabled                                # restored
    log = SimpleNamespace(ops=ops, at_time=lambda ns: int(np.searchsorted(ops.t0_ns, ns, side="right")) - 1)
    cc = watch.result(log)
    assert (cc.in_memory_hits, cc.compilations, cc.hits, cc.misses) == (4, 2, 4, 2)
    assert cc.compile_time_ns == 74_000 and cc.neff_bytes == 3072
    assert [g["shapes"] for g in cc.graphs] == ["2x2", "3x2"] and [g["new_shape"] for g in cc.graphs] == [False, True]
    assert cc.line == compile_line(cc) and cc.line.endswith("new shape at c.py:3") and "2 NEFFs" in cc.line
    assert "turned them on" in cc.notes[0]
