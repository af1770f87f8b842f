"""run.sh, the README's first command: installs once (a stamp holds a hash of what decides the install),
reinstalls only when that changes, and hands `lab` to `neuron-studio lab` (which copies the tutorials into the
workspace, adds --allow-root only as root and starts JupyterLab). Driven with a fake venv (python/pip and
neuron-studio that log their arguments) and a fake `id`, so nothing is installed or started; `neuron-studio
lab`'s own behaviour is tested below, and tests/test_lab_server.py starts the real server from run.sh."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of run.sh in a small project tree with a fake venv and a fake `id` on PATH."""
    proj = tmp_path / "proj"
    (proj / "extension" / "src").mkdir(parents=True)
    (proj / "extension" / "neuron_studio_lab").mkdir()
    (proj / "notebooks" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "run.sh", proj / "run.sh")
    (proj / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["pyarrow>=14.0.1"]\n')
    (proj / "extension" / "pyproject.toml").write_text('[project]\nname = "y"\n')
    (proj / "extension" / "package.json").write_text('{"version": "0.1.0"}\n')
    (proj / "extension" / "yarn.lock").write_text("# lock\n")
    (proj / "extension" / "src" / "index.ts").write_text("export {};\n")
    (proj / "extension" / "neuron_studio_lab" / "routes.py").write_text("x = 1\n")
    (proj / "studio.py").write_text("y = 1\n")  # the studio's own sources: an editable install
    (proj / "notebooks" / "01.ipynb").write_text('{"cells": []}')
    (proj / "notebooks" / "data" / "d.csv").write_text("a\n")
    log = tmp_path / "calls.log"
    bin_dir = proj / ".venv" / "bin"
    for tool in ("python", "neuron-studio"):
        _executable(bin_dir / tool, f'#!/usr/bin/env bash\necho "{tool} $*" >> "{log}"\n'
                                    f'if [ "{tool}" = neuron-studio ]; then '
                                    f'echo "workspace=$NEURON_STUDIO_WORKSPACE" >> "{log}"; fi\n'
                                    f'if [ -n "${{FAIL_PIP:-}}" ] && [ "$2" = pip ]; then exit 1; fi\n')
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    _executable(tmp_path / "fakebin" / "id", '#!/usr/bin/env bash\necho "${FAKE_UID:-1000}"\n')
    return proj


def _run(project: Path, *args: str, uid: int = 1000, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PATH": f"{project.parent / 'fakebin'}:{os.environ['PATH']}", "FAKE_UID": str(uid), **env}
    for var in ("NEURON_STUDIO_VENV", "NEURON_STUDIO_WORKSPACE", "NEURON_STUDIO_TORCH_INDEX"):
        full.pop(var, None) if var not in env else None
    return subprocess.run(["bash", "run.sh", *args], cwd=project, env=full, capture_output=True, text=True,
                          timeout=120)


def _calls(project: Path) -> list[str]:
    log = project.parent / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def _pip_installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("python -m pip install")]


def test_installs_once_and_again_only_when_dependencies_change(project: Path) -> None:
    first = _run(project, "lab")
    assert first.returncode == 0, first.stderr
    installs = _pip_installs(_calls(project))
    assert any("torch==2.13.0" in c for c in installs) and any('-e .[lab,test]' in c for c in installs)
    assert any(c.endswith("./extension") for c in installs)
    assert (project / ".venv" / "neuron-studio-install.sha256").is_file()

    assert _run(project, "lab").returncode == 0
    assert _pip_installs(_calls(project)) == []  # a restart installs nothing

    (project / "studio.py").write_text("y = 2\n")  # editable sources: no reinstall
    assert _run(project, "lab").returncode == 0
    assert _pip_installs(_calls(project)) == []

    for changed in ("pyproject.toml", "extension/package.json", "extension/yarn.lock", "extension/src/index.ts",
                    "extension/neuron_studio_lab/routes.py"):
        with (project / changed).open("a") as fh:
            fh.write("\n// changed\n" if changed.endswith((".ts", ".lock")) else "\n")
        assert _run(project, "lab").returncode == 0
        assert _pip_installs(_calls(project)), f"{changed} changed but nothing was reinstalled"
        assert _run(project, "lab").returncode == 0
        assert _pip_installs(_calls(project)) == []


def test_failed_install_leaves_no_stamp(project: Path) -> None:
    failed = _run(project, "lab", FAIL_PIP="1")
    assert failed.returncode != 0
    assert not (project / ".venv" / "neuron-studio-install.sha256").exists()
    _calls(project)
    assert _run(project, "lab").returncode == 0
    assert _pip_installs(_calls(project))  # retried


def test_torch_index_is_taken_from_the_user(project: Path) -> None:
    assert _run(project, "lab", NEURON_STUDIO_TORCH_INDEX="file:///somewhere/cpu").returncode == 0
    torch = [c for c in _pip_installs(_calls(project)) if "torch==" in c]
    assert torch == ["python -m pip install -q --extra-index-url file:///somewhere/cpu torch==2.13.0"]


def test_lab_hands_every_argument_to_neuron_studio_lab(project: Path) -> None:
    """`bash run.sh lab --port 8899 --no-browser`: the venv's own `neuron-studio lab` gets the arguments as
    given (no positional directory: `jupyter lab workspace` is JupyterLab's `workspace` subcommand) and the
    workspace as an absolute path, on the first start and on later ones."""
    for _ in range(2):
        result = _run(project, "lab", "--port", "8899", "--no-browser")
        assert result.returncode == 0, result.stderr
        calls = [c for c in _calls(project) if not c.startswith("python ")]
        assert calls == ["neuron-studio lab --port 8899 --no-browser", f"workspace={project / 'workspace'}"]


def test_lab_workspace_override_is_made_absolute(project: Path, tmp_path: Path) -> None:
    assert _run(project, "lab", NEURON_STUDIO_WORKSPACE="mine").returncode == 0
    assert f"workspace={project / 'mine'}" in _calls(project)
    assert _run(project, "lab", NEURON_STUDIO_WORKSPACE=str(tmp_path / "abs")).returncode == 0
    assert f"workspace={tmp_path / 'abs'}" in _calls(project)


def test_workspace_is_ignored_by_git() -> None:
    out = subprocess.run(["git", "check-ignore", "-q", "workspace/01_getting_started.ipynb"], cwd=ROOT)
    assert out.returncode == 0, "workspace/ (the tutorials' working copies) must be .gitignored"


# -- the same for `neuron-studio lab` ---------------------------------------------------------------


@pytest.mark.parametrize("uid, expected", [(0, ["--allow-root"]), (1000, [])])
def test_cli_lab_adds_allow_root_only_as_root(tmp_path: Path, uid: int, expected: list[str]) -> None:
    import sys

    from neuron_studio.cli import lab_argv

    assert lab_argv(tmp_path, ["--port", "1"], uid=uid) == [
        sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={tmp_path}", "--ip", "127.0.0.1", *expected,
        "--port", "1"]
    assert lab_argv(tmp_path, ["--allow-root"], uid=0).count("--allow-root") == 1


def test_cli_lab_takes_jupyterlab_options_without_a_separator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """`neuron-studio lab --port 8888 --no-browser` (argparse's REMAINDER refused a leading option) and the
    old `lab -- --port 8888` both reach JupyterLab, started with this environment's own Python (an
    unactivated venv has no `jupyter` on PATH)."""
    import sys

    from neuron_studio import cli

    monkeypatch.setenv("NEURON_STUDIO_WORKSPACE", str(tmp_path / "ws"))
    execs: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, argv: execs.append([path, *argv[1:]]))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))   # no jupyter on PATH
    assert cli.main(["lab", "--port", "8888", "--no-browser"]) == 0
    assert cli.main(["lab", "--", "--port", "8888", "--no-browser"]) == 0
    for argv in execs:
        assert argv[:3] == [sys.executable, "-m", "jupyterlab"]
        assert argv[-3:] == ["--port", "8888", "--no-browser"]
        assert f"--ServerApp.root_dir={tmp_path / 'ws'}" in argv
    assert len(execs) == 2


def test_cli_lab_serves_working_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neuron_studio import cli

    monkeypatch.setenv("NEURON_STUDIO_WORKSPACE", str(tmp_path / "ws"))
    served = cli._notebooks_dir()
    assert served == tmp_path / "ws" and served != ROOT / "notebooks"
    tutorials = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert tutorials and sorted(p.name for p in served.glob("*.ipynb")) == tutorials
    edited = served / tutorials[0]
    edited.write_text("my edits")
    (served / tutorials[1]).unlink()                 # deleted: the original comes back on the next start
    cli._notebooks_dir()
    assert edited.read_text() == "my edits"  # never overwritten
    assert (served / tutorials[1]).read_bytes() == (ROOT / "notebooks" / tutorials[1]).read_bytes()


def test_copy_missing_tutorials_copies_new_files_and_keeps_edits(tmp_path: Path) -> None:
    from neuron_studio.cli import copy_missing_tutorials

    src, work = tmp_path / "notebooks", tmp_path / "workspace"
    (src / "data").mkdir(parents=True)
    (src / "01.ipynb").write_text('{"cells": []}')
    (src / "data" / "d.csv").write_text("a\n")
    (src / ".ipynb_checkpoints").mkdir()
    (src / ".ipynb_checkpoints" / "01-checkpoint.ipynb").write_text("{}")
    assert sorted(p.relative_to(work).as_posix() for p in copy_missing_tutorials(src, work)) == [
        "01.ipynb", "data/d.csv"]
    (work / "01.ipynb").write_text("my edits and outputs")
    (src / "02.ipynb").write_text('{"cells": [2]}')             # a tutorial added later
    assert [p.name for p in copy_missing_tutorials(src, work)] == ["02.ipynb"]
    assert (work / "01.ipynb").read_text() == "my edits and outputs"
    assert (src / "01.ipynb").read_text() == '{"cells": []}'
