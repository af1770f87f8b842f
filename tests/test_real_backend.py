"""The real-Trainium code paths, run against a fake `torch_neuronx` in subprocesses (the backend is chosen once
per process, so the core test process stays emulated), plus the parts that need no TorchNeuron at all."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neuron_studio.device.real import OpTracking, eager_switches
from neuron_studio.profiler import real_capture
from neuron_studio.profiler.real_capture import (
    ExplorerError, ExplorerNotFoundError, ProfileOutputError, locate_run_dir, run_explorer,
)

TESTS = Path(__file__).resolve().parent
FAKE = TESTS / "fake_torch_neuronx"


def _run(code: str, tmp_path: Path, *, backend: str = "real", path_dirs: list[Path] | None = None,
         env: dict[str, str] | None = None) -> dict:
    """Run `code` in a fresh interpreter with the fake TorchNeuron importable; it must print one JSON line last."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON", "TORCH_NEURONX", "FAKE_NEURONX"))}
    e["NEURON_STUDIO_BACKEND"] = backend
    e["NEURON_STUDIO_STORE"] = str(tmp_path / "store")
    e["PYTHONPATH"] = os.pathsep.join([str(FAKE), str(TESTS), e.get("PYTHONPATH", "")])
    e["PATH"] = os.pathsep.join([str(p) for p in (path_dirs or [])] + [str(Path(sys.executable).parent), "/usr/bin",
                                                                       "/bin"])
    e.update(env or {})
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _fake_explorer(tmp_path: Path, body: str | None = None) -> Path:
    """A `neuron-explorer` executable that writes the fixture tables into --output-file (or runs `body`)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "neuron-explorer"
    body = body or textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from make_explorer_fixtures import write_explorer_fixture
        args = sys.argv[1:]
        assert args[:1] == ["view"] and args[args.index("--output-format") + 1] == "parquet", args
        assert (__import__("pathlib").Path(args[args.index("-d") + 1]) / "ntrace.pb").exists()
        write_explorer_fixture(args[args.index("--output-file") + 1])
    """)
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(0o755)
    return bindir


# -- gating: the emulated path never loads TorchNeuron --------------------------------------------------------
def test_emulated_profile_never_imports_torch_neuronx_in_process() -> None:
    import neuron_studio

    neuron_studio.profile(lambda: None)  # noqa: B023 - a no-op profile on the emulator
    assert neuron_studio.device.backend() == "emulated"
    assert "torch_neuronx" not in sys.modules


def test_emulated_never_imports_torch_neuronx_even_when_importable(tmp_path: Path) -> None:
    out = _run("""
        import json, sys, torch
        import neuron_studio
        from make_explorer_fixtures import write_explorer_fixture
        from neuron_studio.profiler.neuron_profile import load_neuron_profile
        x = torch.ones(8, 8, device="neuron")
        prof = neuron_studio.profile(lambda: (x @ x).sum(), steps=2)
        load_neuron_profile(write_explorer_fixture("fx")).to_summary()
        print(json.dumps({"backend": neuron_studio.device.backend(), "ops": len(prof.ops),
                          "nx": "torch_neuronx" in sys.modules}))
    """, tmp_path, backend="emulated")
    assert out == {"backend": "emulated", "ops": out["ops"], "nx": False} and out["ops"] > 0


# -- the real backend against the fake ------------------------------------------------------------------------
def test_real_backend_is_selected_and_reports_itself(tmp_path: Path) -> None:
    out = _run("""
        import json, neuron_studio, torch
        i = neuron_studio.info()
        from neuron_studio.modes import mode_settings
        st = mode_settings("eager")
        print(json.dumps({"backend": i.backend, "count": i.device_count, "nx": i.torch_neuronx_version,
                          "notes": st.notes[0], "switches": st.switches}))
    """, tmp_path)
    assert out["backend"] == "real" and out["count"] == 4 and out["nx"] == "2.13.3.0+fake"
    assert out["notes"] == "real TorchNeuron: effective eager switches recorded"
    # effective values with where they came from (env or TorchNeuron's default)
    assert out["switches"]["NEURON_LAUNCH_BLOCKING"].endswith("(default)")
    assert set(out["switches"]) >= {"NEURON_LAUNCH_BLOCKING", "TORCH_NEURONX_ENABLE_CONCATENATION"}


def test_real_backend_requested_without_a_device_is_a_clear_error(tmp_path: Path) -> None:
    out = _run("""
        import json
        try:
            import neuron_studio
            print(json.dumps({"error": None}))
        except Exception as e:
            print(json.dumps({"error": type(e).__name__, "msg": str(e)}))
    """, tmp_path, env={"FAKE_NEURONX_AVAILABLE": "0"})
    assert out["error"] == "BackendError" and "is_available() is False" in out["msg"]


def test_op_tracking_is_cleared_and_read_per_cell(tmp_path: Path) -> None:
    out = _run("""
        import json, neuron_studio, torch_neuronx
        from neuron_studio.device.real import OpTracker
        cells = []
        for ops in (["aten::mm", "aten::add"], ["aten::relu"]):
            with OpTracker() as t:
                for op in ops:
                    torch_neuronx.run_op(op)
                torch_neuronx.run_op("aten::nonzero", fallback=(len(cells) == 0))
            cells.append(t.result.to_dict())
        calls = [c for c, _ in torch_neuronx._fake.CALLS]
        print(json.dumps({"cells": cells, "calls": calls}))
    """, tmp_path)
    first, second = out["cells"]
    assert first == {"executed": {"aten::add": 1, "aten::mm": 1}, "fallback": {"aten::nonzero": 1}}
    assert second == {"executed": {"aten::nonzero": 1, "aten::relu": 1}, "fallback": {}}
    assert out["calls"] == ["clear_op_tracking", "get_executed_ops", "get_fallback_ops"] * 2


def test_capture_records_neuron_config_warns_and_explains_missing_explorer(tmp_path: Path) -> None:
    out = _run("""
        import json, warnings, neuron_studio, torch_neuronx
        from neuron_studio.profiler.real_capture import capture_real, NeuronCaptureOptions, ExplorerNotFoundError
        steps = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            run = capture_real(lambda: torch_neuronx.run_op("aten::mm"), steps=2, warmup=1, on_step=steps.append,
                               options=NeuronCaptureOptions(out_dir="prof", max_events_per_nc=5000,
                                                            capture_enabled_for_nc="0,1"))
        try:
            run.profile()
            err = None
        except ExplorerNotFoundError as e:
            err = str(e)
        calls = torch_neuronx._fake.CALLS
        print(json.dumps({
            "warnings": sorted({x.category.__name__ for x in w}), "warmup": run.warmup, "steps": steps,
            "config": [a for c, a in calls if c == "NeuronConfig"], "order": [c for c, _ in calls],
            "run_dir": str(run.run_dir), "files": sorted(p.name for p in run.run_dir.iterdir()),
            "message": run.explorer_message, "err": err,
            "switch": run.switches["TORCH_NEURONX_ENABLE_CONCATENATION"].to_dict(),
        }))
    """, tmp_path, env={"TORCH_NEURONX_ENABLE_CONCATENATION": "1"})
    assert out["warnings"] == ["HbmReservationWarning", "WarmupWarning"]
    assert out["warmup"] == 3 and out["steps"] == [1, 2]
    assert out["config"] == [{"modes": ["DEVICE", "RUNTIME"], "max_events_per_nc": 5000,
                              "capture_enabled_for_nc": "0,1", "profile_output_dir": str(tmp_path / "prof"),
                              "neff_cache_dir": None}]    # no TORCH_NEURONX_NEFF_CACHE_DIR: TorchNeuron's default
    order = out["order"]
    assert order[0] == "clear_op_tracking" and order.index("synchronize") < order.index("NeuronConfig")
    assert "synchronize" in order[order.index("NeuronConfig"):order.index("export_trace")]  # synced before leaving
    assert order[-2:] == ["get_executed_ops", "get_fallback_ops"]
    assert out["run_dir"].startswith(str(tmp_path / "prof" / "i-0fake_pid_"))
    assert {"ntrace.pb", "trace_info.pb", "trace.json", "profile_nc_0_session_0.ntff"} <= set(out["files"])
    for msg in (out["message"], out["err"]):
        assert "aws-neuronx-tools" in msg and f"neuron-explorer view -d {out['run_dir']} --output-format parquet" in msg
    assert out["switch"]["value"] == "1" and out["switch"]["source"] == "env"


def test_capture_to_measured_profile_with_explorer_on_path(tmp_path: Path) -> None:
    out = _run("""
        import json, warnings, neuron_studio, torch_neuronx
        from neuron_studio.profiler.real_capture import capture_real, NeuronCaptureOptions
        def cell():
            torch_neuronx.run_op("aten::mm")
            torch_neuronx.run_op("aten::unique", fallback=True)
            torch_neuronx._fake.compiled()
        warnings.simplefilter("ignore")
        run = capture_real(cell, steps=1, mode="compile", options=NeuronCaptureOptions(out_dir="prof"), name="c")
        p = run.profile()
        s = p.to_summary()
        print(json.dumps({"backend": s["backend"], "modeled": s["modeled"], "mfu": s["mfu"], "name": s["name"],
                          "hot": s["hot_ops"][0]["kernel"], "fallbacks": s["fallbacks"],
                          "dynamo": p.trace.meta["dynamo_metrics"], "parquet": str(run.parquet_dir),
                          "capture_dir": p.trace.meta["capture_dir"], "mode": p.trace.mode,
                          "host_label": p.trace.meta["figures"]["host_time"], "host_events": len(p.trace.host),
                          "not_captured": p.trace.meta["not_captured"], "host_ns": s["host_time_ns"]}))
    """, tmp_path, path_dirs=[_fake_explorer(tmp_path)])
    # host time is measured exactly when torch.profiler recorded host events, and then not listed as missing
    assert (out["host_label"] == "measured") == (out["host_events"] > 0) == ("host time" not in out["not_captured"])
    assert (out["host_ns"] is None) == (out["host_events"] == 0)
    assert out["backend"] == "real" and out["modeled"] is False and out["mfu"] == pytest.approx(0.125)
    assert out["hot"]["file"].endswith("rmsnorm.py") and out["hot"]["line"] == 42
    assert [f["op"] for f in out["fallbacks"]] == ["aten::unique"]
    assert out["dynamo"] == {"graphs_compiled": 4, "neff_cache_hits": 0}  # 3 warm-up + 1 profiled call
    assert out["parquet"].endswith("/explorer") and out["parquet"].startswith(out["capture_dir"])
    assert out["mode"] == "compile" and out["name"] == "c"


def test_missing_profiler_output_names_the_expected_layout(tmp_path: Path) -> None:
    out = _run("""
        import json, warnings, neuron_studio, torch_neuronx
        from neuron_studio.profiler.real_capture import capture_real, NeuronCaptureOptions, ProfileOutputError
        warnings.simplefilter("ignore")
        try:
            capture_real(lambda: None, options=NeuronCaptureOptions(out_dir="prof"))
        except ProfileOutputError as e:
            print(json.dumps({"err": str(e)}))
    """, tmp_path, env={"FAKE_NEURONX_NO_OUTPUT": "1"})
    assert "no run directory for pid" in out["err"] and "<instance-id>_pid_" in out["err"]


# -- pieces that need no TorchNeuron --------------------------------------------------------------------------
def test_eager_switch_defaults_and_environment() -> None:
    sw = eager_switches({})
    assert {k: (s.value, s.source) for k, s in sw.items()} == {
        "NEURON_LAUNCH_BLOCKING": ("1", "default"), "TORCH_NEURONX_ENABLE_CONCATENATION": ("0", "default"),
        "TORCH_NEURONX_ENABLE_PROLOGUE": ("1", "default"), "NEURON_LOGICAL_NC_CONFIG": ("2", "default"),
        "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": ("0", "default"),
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": ("1", "default")}
    sw = eager_switches({"NEURON_LAUNCH_BLOCKING": " 0 ", "NEURON_LOGICAL_NC_CONFIG": ""}, chip="trn1")
    assert (sw["NEURON_LAUNCH_BLOCKING"].value, sw["NEURON_LAUNCH_BLOCKING"].source) == ("0", "env")
    assert (sw["NEURON_LOGICAL_NC_CONFIG"].value, sw["NEURON_LOGICAL_NC_CONFIG"].source) == ("1", "default")


def test_op_tracking_accepts_sets_counters_and_round_trips() -> None:
    t = OpTracking.from_api({"aten::mm"}, ["aten::nonzero", "aten::nonzero"])
    assert t.fallback == {"aten::nonzero": 2} and t.executed_ops == ["aten::mm"]
    assert OpTracking.from_dict(t.to_dict()) == t and OpTracking.from_api(None, "aten::x").fallback == {"aten::x": 1}


def _layout(tmp_path: Path, pid: int, files: list[str], stamp: str = "20261101_000000") -> Path:
    d = tmp_path / "out" / f"i-0abc_pid_{pid}" / stamp
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_bytes(b"x")
    return d


def test_locate_run_dir_picks_the_newest_for_this_pid(tmp_path: Path) -> None:
    files = ["profile_nc_0_session_0.ntff", "neff_1_vnc_0.neff", "ntrace.pb", "trace_info.pb", "trace.json"]
    old = _layout(tmp_path, 42, files, "20261101_000000")
    new = _layout(tmp_path, 42, files, "20261101_000100")
    os.utime(old, (1_000_000, 1_000_000))
    _layout(tmp_path, 7, files)
    assert locate_run_dir(tmp_path / "out", pid=42) == new


def test_locate_run_dir_errors_name_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(ProfileOutputError, match=r"does not exist; expected .*<instance-id>_pid_9/<timestamp>/"):
        locate_run_dir(tmp_path / "out", pid=9)
    _layout(tmp_path, 9, ["ntrace.pb", "trace_info.pb"])
    with pytest.raises(ProfileOutputError, match=r"lacks \*\.ntff, \*\.neff .*holds: \['ntrace.pb', 'trace_info.pb'\]"):
        locate_run_dir(tmp_path / "out", pid=9)
    assert locate_run_dir(tmp_path / "out", pid=9, modes=("RUNTIME",)).name == "20261101_000000"
    with pytest.raises(ProfileOutputError, match="no run directory for pid 10"):
        locate_run_dir(tmp_path / "out", pid=10)


def test_run_explorer_missing_failing_and_timing_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ExplorerNotFoundError, match=r"aws-neuronx-tools.*neuron-explorer view -d RUN "
                                                    r"--output-format parquet"):
        run_explorer("RUN")
    failing = _fake_explorer(tmp_path, "import sys\nsys.stderr.write('bad NTFF: uuid mismatch')\nsys.exit(3)")
    with pytest.raises(ExplorerError, match=r"exited with 3\. stderr: bad NTFF: uuid mismatch"):
        run_explorer(tmp_path, executable=str(failing / "neuron-explorer"))
    slow = _fake_explorer(tmp_path, "import time\ntime.sleep(30)")
    with pytest.raises(ExplorerError, match="timed out after 1 s"):
        run_explorer(tmp_path, executable=str(slow / "neuron-explorer"), timeout_s=1.0)


def test_capture_options_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown ProfileMode"):
        real_capture.NeuronCaptureOptions(modes=("DEVICE", "GPU"))
    with pytest.raises(ValueError, match="max_events_per_nc"):
        real_capture.NeuronCaptureOptions(max_events_per_nc=0)


def test_real_capture_records_the_measured_peak_and_forecasts_from_it(tmp_path: Path) -> None:
    out = _run("""
        import json, warnings, neuron_studio, torch_neuronx
        from neuron_studio.profiler.real_capture import capture_real, NeuronCaptureOptions
        from neuron_studio.profiler.analysis.memory import NoMemoryDataError
        fake = torch_neuronx._fake
        fake.allocate(2**30)                       # weights, before the capture
        fake.allocate(40 * 2**30); fake.allocate(-40 * 2**30)   # a warm-up-only spike: not in the profiled peak
        def cell():
            torch_neuronx.run_op("aten::mm")
            fake.allocate(29 * 2**30)
            fake.allocate(-29 * 2**30)
        warnings.simplefilter("ignore")
        run = capture_real(cell, steps=2, options=NeuronCaptureOptions(out_dir="prof"))
        p = run.profile()
        fc = p.memory_forecast("trn2", 2)
        try:
            p.memory_timeline()
            err = None
        except NoMemoryDataError as e:
            err = str(e)
        s = p.to_summary()
        print(json.dumps({"measured": run.meta()["memory_measured"], "line": fc.summary_line(),
                          "levers": len(fc.levers), "modeled": fc.modeled,
                          "chips": {f"{c.chip}/{c.lnc}": c.fits for c in fc.chips}, "err": err,
                          "block": s["memory"]["forecast"]["summary_line"], "measured_flag": s["memory"]["measured"]}))
    """, tmp_path, path_dirs=[_fake_explorer(tmp_path)])
    m = out["measured"]
    assert m["peak_bytes"] == 30 * 2**30 and m["allocated_start_bytes"] == 2**30 and m["allocated_end_bytes"] == 2**30
    assert out["line"] == "peak 30 GiB of 24 GiB (trn2, LNC=2): does not fit, short by 6 GiB" == out["block"]
    assert out["levers"] == 0 and out["modeled"] is False and out["measured_flag"] is True
    assert out["chips"] == {"trn1/1": False, "trn2/1": False, "trn2/2": False, "trn3/1": False, "trn3/2": True}
    assert "emulator" in out["err"]
