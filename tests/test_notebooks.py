"""The tutorial notebooks run top to bottom, headless, on the emulated device, and show what they claim.

Each notebook is copied into a temporary directory (its working directory, so the run store lands there and the
repository stays clean) and executed with nbclient on the `python3` kernel. nbclient's kernel manager starts
`python -m ipykernel_launcher` with this interpreter (jupyter_client replaces a bare `python` with
sys.executable), i.e. the venv running the tests. Each notebook ends with a cell printing
`NS_RESULT {json}`; the assertions below read it.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
MARKER = "NS_RESULT "


def _execute(name: str, workdir: Path) -> tuple[dict, float]:
    shutil.copy(NOTEBOOKS / name, workdir / name)
    nb = nbformat.read(workdir / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(workdir)}})
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError on the first failing cell
    elapsed = time.perf_counter() - t0
    results = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":  # allow-errors is off, but be explicit
                pytest.fail(f"{name}: {out.get('ename')}: {out.get('evalue')}")
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                results += [line[len(MARKER):] for line in out["text"].splitlines() if line.startswith(MARKER)]
    assert len(results) == 1, f"{name}: expected one {MARKER.strip()} line, got {len(results)}"
    return json.loads(results[0]), elapsed


@pytest.fixture
def run_notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_STUDIO_BACKEND", "emulated")  # the kernel inherits the environment
    monkeypatch.delenv("NEURON_STUDIO_STORE", raising=False)  # run store: the notebook's directory
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)

    def run(name: str) -> dict:
        result, elapsed = _execute(name, tmp_path)
        print(f"{name}: {elapsed:.1f}s under nbclient")
        assert elapsed < 300, f"{name} took {elapsed:.0f}s; tutorials must stay quick"
        assert (tmp_path / ".neuron_studio").is_dir(), "the run store should be next to the notebook"
        return result

    return run


def test_the_six_tutorials_exist():
    assert NAMES == ["01_getting_started.ipynb", "02_profile_a_transformer.ipynb",
                     "03_eager_adaptive_compile.ipynb", "04_hot_path_to_nki.ipynb", "05_porting_checklist.ipynb",
                     "06_will_it_fit.ipynb"]


@pytest.mark.slow
def test_01_getting_started(run_notebook):
    r = run_notebook("01_getting_started.ipynb")
    assert r["backend_modeled"] is True
    assert r["step_time_us"] > 0 and 0 < r["mfu"] < 1
    assert r["launches_per_step"] >= 1
    assert r["loss_finite"]
    # where the step goes adds up to the step; launch overhead dominates and the studio says what to do
    assert r["breakdown_sum_us"] == pytest.approx(r["step_time_us"], rel=1e-9)
    rec = r["recommendations"][0]
    assert "launch overhead" in rec and "compile" in rec     # the advisor's best: compile (TorchNeuron's rules)
    # compile is predicted best (an approximate row); the adaptive row is re-modeled from exactly the recorded
    # ops by TorchNeuron's concatenation rules, so running it agrees with its prediction
    assert r["predicted_best"] == "compile on trn2" and r["checked_mode"] == "adaptive"
    assert r["checked_us"] == pytest.approx(r["predicted_us"], rel=0.05)
    assert r["checked_us"] < r["step_time_us"]


@pytest.mark.slow
def test_02_profile_a_transformer(run_notebook):
    r = run_notebook("02_profile_a_transformer.ipynb")
    assert r["steps"] == 3
    assert r["step_time_ms"] > 0
    # the block is sized so that all three kinds of bound show up
    for bound in ("compute", "memory", "launch"):
        assert r["bound_share"].get(bound, 0) > 0.05, r["bound_share"]
    assert r["roofline_points"] > 0
    assert "aten::mm" in r["hot_path_ops"]
    assert r["breakdown_sum_ms"] == pytest.approx(r["step_time_ms"], rel=1e-9)
    # AdamW's in-place updates each run alone in adaptive eager (TorchNeuron's rule): compile is predicted best
    assert r["predicted_best"] == "compile on trn2" and r["checked_mode"] == "adaptive"
    assert r["checked_ms"] == pytest.approx(r["predicted_ms"], rel=0.05)
    assert r["checked_ms"] < r["step_time_ms"]


@pytest.mark.slow
def test_03_eager_adaptive_compile(run_notebook):
    r = run_notebook("03_eager_adaptive_compile.ipynb")
    lps = r["launches_per_step"]
    assert lps["adaptive"] < lps["eager"] and lps["compile"] < lps["eager"]
    # the sync-point fix (accumulate on device, one .item()) reduces modeled launches
    assert r["sync_launches_after"] < r["sync_launches_before"]
    assert r["sync_points_after"] < r["sync_points_before"]
    # six sequence lengths: five recompiles; buckets of 32 tokens: two shapes, one recompile
    assert r["recompiles_before"] == 5
    assert r["recompiles_after"] < r["recompiles_before"]
    assert r["recompiles_after"] == 1
    assert r["padding_exact"]


@pytest.mark.slow
def test_04_hot_path_to_nki(run_notebook):
    r = run_notebook("04_hot_path_to_nki.ipynb")
    assert r["kernel"] == "swiglu_mlp_kernel" and r["kind"] == "candidate"
    assert r["file"].endswith("swiglu_mlp.py") and isinstance(r["line"], int) and r["line"] > 0
    # the hot path offers the kernel because the kernel model says it saves time per call, less than it replaces
    assert 0 < r["saving_per_call_us"] < r["replaces_per_call_us"]
    assert r["kernel_time"] == "kernel model"
    # the kernel on the interpreter, and the model with the kernel swapped in, match PyTorch
    assert r["kernel_vs_reference_max_err"] < 1e-4
    assert r["kernel_vs_module_max_err"] < 1e-4
    assert r["swapped_model_max_err"] < 1e-4
    assert r["launches_after"] < r["launches_before"]
    assert r["restored"]
    # a kernel file in NKI's public style, loaded unmodified, swapped in, and linked from the hot path
    assert r["user_kernel_vs_module_max_err"] < 1e-4 and r["user_swapped_model_max_err"] < 1e-4
    assert r["user_kernel_modeled_ns"] > 0
    assert r["user_hot_op"] == "neuron_studio::nki_rmsnorm_kernel"
    assert r["user_link_file"] == r["user_kernel_file"] and r["user_link_file"].endswith("rmsnorm_nki.py")
    assert r["user_link_line"] == 15  # the `def rmsnorm_kernel` line of the kernel file


@pytest.mark.slow
def test_05_porting_checklist(run_notebook):
    r = run_notebook("05_porting_checklist.ipynb")
    # the porting check lists the fallbacks before the fix and not after; `nonzero` is a device op with a host
    # size read (device/coverage.json provenance), so it shows under dynamic shapes, not as a fallback
    assert "aten::_unique2" in r["fallbacks_before"] and "aten::nonzero" not in r["fallbacks_before"]
    assert r["check_before"]["fallbacks"] == "error"
    assert r["fallbacks_after"] == []
    assert r["check_after"]["fallbacks"] == "ok"
    assert r["check_before"]["dynamic_shapes"] != "ok" and r["check_after"]["dynamic_shapes"] == "ok"
    assert r["check_before"]["dtypes"] != "ok" and r["check_after"]["dtypes"] == "ok"
    assert r["same_results"]
    for key in ("cost_per_1000_trn2", "cost_per_1000_h100"):
        assert r[key]["before"] > 0 and r[key]["after"] > 0


@pytest.mark.slow
def test_06_will_it_fit(run_notebook):
    r = run_notebook("06_will_it_fit.ipynb")
    assert r["peak_bytes"] == r["allocator_peak"]            # the profile's peak is the allocator's own
    assert r["scale"] == 40**2
    assert r["fits_before"] is False and r["fits_after"] is True and r["fits_after_while_profiling"] is True
    assert r["top_lever"] == "checkpoint"
    assert 3.8 < r["scaling_ratio_2x"] <= 4.0                # every tensor ~k**2: the scaling the forecast uses
    measured, modeled = r["checkpoint_measured_saving"], r["checkpoint_modeled_saving"]
    assert measured > 0 and abs(modeled - measured) <= 0.10 * measured
