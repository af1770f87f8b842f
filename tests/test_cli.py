"""`neuron-studio` CLI: run (an unmodified script), report, runs, Ctrl-C, and the activation hook."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neuron_studio.cli import job_ranks, main
from neuron_studio.store import RunStore

RUN_TIMEOUT_S = 120

PLAIN = textwrap.dedent("""
    import torch
    from torch import nn

    dev = torch.device("neuron")  # this script never imports neuron_studio
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(5):
        loss = model(torch.randn(8, 16).to(dev)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("script finished")
""")

FOREVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import torch

    dev = torch.device("neuron")
    w = torch.randn(16, 16, device=dev, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.01)
    i = 0
    while True:
        (w @ w).sum().backward()
        opt.step()
        opt.zero_grad()
        i += 1
        if i == 3:
            Path(sys.argv[1]).write_text("ready")
        time.sleep(0.05)
""")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "neuron_studio.cli", *args]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    d = tmp_path_factory.mktemp("cli")
    (d / "train.py").write_text(PLAIN)
    r = subprocess.run(_cli("run", "--steps", "2", "--warmup", "1", "--store", str(d / "store"), "--name", "plain",
                            "--", sys.executable, "train.py"),
                       cwd=d, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return d, r


def test_run_profiles_an_unmodified_script(plain_run) -> None:  # noqa: ANN001
    d, r = plain_run
    assert r.returncode == 0, r.stderr[-3000:]
    assert "script finished" in r.stdout  # the script ran to its end after recording stopped
    assert re.search(r"Neuron profile run \d+ plain: eager on trn2", r.stdout)
    assert "HTML report:" in r.stdout
    assert re.search(r"step \d/3", r.stderr)  # progress from the child
    st = RunStore(d / "store")
    rec = st.list_runs()[0]
    assert (rec.name, rec.status, rec.ranks) == ("plain", "ok", 1)
    assert rec.step_time_ns and rec.step_time_ns > 0 and rec.summary["steps"] == 2
    assert {"ops", "host", "meta", "device_ops"} <= set(st.list_tables(rec.id))
    ops = st.load_table(rec.id, "ops").to_pandas()
    assert set(ops["step"]) == {1, 2}  # the warm-up step is dropped, recording stopped after 1 + 2 steps
    report = Path(r.stdout.split("HTML report:")[1].split()[0])
    assert report.is_file()


def test_a_script_runs_advice_is_cli_syntax(plain_run) -> None:  # noqa: ANN001
    """A script run's advice repeats the `neuron-studio run` command (never `%%neuron`), in the printed summary, the
    stored summary and the HTML report; its Diff tab says how to compare, not "this cell"."""
    d, r = plain_run
    assert r.returncode == 0, r.stderr[-3000:]
    rec = RunStore(d / "store").list_runs()[0]
    s = rec.summary
    assert s["origin"] == "script"
    rows = [w for w in s["what_if"]["rows"] if w["kind"] in ("mode", "chip")]
    assert rows
    for w in rows:
        assert w["run"].startswith(f"neuron-studio run --mode {w['mode']} --chip {w['chip']} --steps 2 --warmup 1 -- ")
        assert w["run"].endswith(f"{sys.executable} train.py") and w["cell"] is None
    assert "%%neuron" not in r.stdout
    report = Path(r.stdout.split("HTML report:")[1].split()[0]).read_text()
    assert "%%neuron" not in report and "no earlier run of this cell" not in report
    assert "a script run is not compared automatically" in report


def _assert_self_contained(text: str) -> None:
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*['\"]?https?:", text, re.I)
    assert not re.search(r"(src|href)\s*=\s*['\"]?https?://", text, re.I)


def test_report_of_a_run_is_self_contained(plain_run, tmp_path: Path) -> None:  # noqa: ANN001
    d, _ = plain_run
    out = tmp_path / "r.html"
    assert main(["report", "plain", "--store", str(d / "store"), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    _assert_self_contained(text)
    rec = RunStore(d / "store").get_run("plain")
    assert f"Neuron profile · run {rec.id}" in text and "step time (modeled)" in text and "aten::" in text


def test_report_of_a_trace_file(tmp_path: Path) -> None:
    import torch

    import neuron_studio
    from neuron_studio.profiler.export import to_chrome_trace

    w = torch.randn(8, 8, device="neuron")
    prof = neuron_studio.profile(lambda: (w @ w).relu(), steps=1)
    path = tmp_path / "t.json"
    to_chrome_trace(prof, path)
    out = tmp_path / "t.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    _assert_self_contained(text)
    assert "aten::mm" in text


def test_runs_lists_the_store(plain_run, capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    d, _ = plain_run
    assert main(["runs", "--store", str(d / "store")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "name", "mode", "chip", "status", "ranks", "step", "time", "MFU"]
    assert any(line.split()[1:6] == ["plain", "eager", "trn2", "ok", "1"] for line in out[1:])


def test_report_unknown_run_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    RunStore(tmp_path / "s")
    assert main(["report", "nope", "--store", str(tmp_path / "s")]) == 1
    assert "not found" in capsys.readouterr().err


def test_ctrl_c_keeps_the_capture(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(FOREVER)
    ready = tmp_path / "ready"
    proc = subprocess.Popen(_cli("run", "--store", str(tmp_path / "store"), "--quiet", "--", sys.executable,
                                 "loop.py", str(ready)),
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the script never got going"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    rec = RunStore(tmp_path / "store").list_runs()[0]
    assert rec.status == "interrupted"
    ops = RunStore(tmp_path / "store").load_table(rec.id, "ops").to_pandas()
    assert (ops["name"] == "aten::mm").sum() >= 3
    assert "status=interrupted" in out


def test_job_ranks() -> None:
    assert job_ranks(["python", "train.py", "--nproc-per-node", "8"]) == (False, 1)
    assert job_ranks(["torchrun", "--nproc-per-node", "4", "train.py"]) == (True, 4)
    assert job_ranks(["torchrun", "--nnodes=2", "--nproc_per_node=2", "t.py"]) == (True, 4)
    assert job_ranks([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                      "t.py"]) == (True, 2)
    assert job_ranks(["torchrun", "t.py", "--nproc-per-node", "4"]) == (True, 1)  # the script's own flag


def test_sitecustomize_chains_the_existing_one(tmp_path: Path) -> None:
    from neuron_studio.cli import _activate_dir

    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED = True\n")
    env = _env()
    env.pop("NEURON_STUDIO_ACTIVATE", None)
    env["PYTHONPATH"] = os.pathsep.join([_activate_dir(), str(other)])
    r = subprocess.run([sys.executable, "-c", "import sys; print(CHAINED, 'neuron_studio' in sys.modules)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", "False"], r.stderr  # chained, and nothing activated without the variable


def test_run_needs_a_command(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "--"]) == 2
    assert "give the command" in capsys.readouterr().err


def test_a_run_without_a_name_is_named_after_its_script_and_reported_by_default(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`neuron-studio run -- python train.py` is listed as `train.py`; `neuron-studio report` with no target
    writes the latest run's report (it failed with "the following arguments are required: target")."""
    (tmp_path / "train.py").write_text(PLAIN)
    store = tmp_path / "store"
    r = subprocess.run(_cli("run", "--steps", "1", "--store", str(store), "--quiet", "--", "python", "-u",
                            "train.py"), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = RunStore(store).list_runs()[0]
    assert rec.name == "train.py"
    out = tmp_path / "latest.html"
    assert main(["report", "--store", str(store), "-o", str(out)]) == 0
    assert f"reporting the latest run, {rec.id} (train.py)" in capsys.readouterr().err
    assert f"run {rec.id}" in out.read_text(encoding="utf-8")


def test_report_with_no_target_and_no_runs_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    RunStore(tmp_path / "s")
    assert main(["report", "--store", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err
    assert "no runs in" in err and "neuron-studio run" in err


@pytest.mark.parametrize("cmd, name", [
    (["python", "train.py", "--lr", "3"], "train.py"),
    (["python", "-u", "-W", "ignore", "scripts/train.py"], "train.py"),
    (["python", "-m", "my_pkg.train", "--x"], "my_pkg.train"),
    (["torchrun", "--nproc-per-node", "2", "--nnodes=1", "train_ddp.py", "--epochs", "1"], "train_ddp.py"),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "fsdp.py"], "fsdp.py"),
    (["./run_job"], "run_job"),
])
def test_script_name(cmd: list[str], name: str) -> None:
    from neuron_studio.cli import script_name

    assert script_name(cmd) == name
