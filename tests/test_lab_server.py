"""`bash run.sh lab`, the README's first command, starts the real JupyterLab: no fake `jupyter`.

A temporary copy of the repository (its files as they are in this checkout) is started with this test's own
virtual environment (`NEURON_STUDIO_VENV`), so nothing is installed; the test waits until `/api/status`
answers with the token the server logged, checks that the `neuron-studio-lab` extension is listed and that
the tutorials are served from the workspace copies, then stops the server. It starts a second time (the
workspace exists then), and, when the suite runs as root, once more as an unprivileged user (JupyterLab refuses
root without `--allow-root`; run.sh must add it only for root). Last wave `run.sh lab` failed on every fresh
clone while a test against a fake `jupyter` passed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
START_TIMEOUT_S = 180
EXTENSION = "neuron-studio-lab"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _deps_hash(repo: Path) -> str:
    out = subprocess.run(["bash", "-c", "source ./run.sh && deps_hash"], cwd=repo, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def repo_copy() -> Path:
    """The checkout's files (git's list, today's contents) in a directory any user can read."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running inside a virtual environment: run the suite with `bash run.sh test`")
    stamp = VENV / "neuron-studio-install.sha256"
    if not stamp.is_file() or stamp.read_text().strip() != _deps_hash(ROOT):
        pytest.skip(f"the venv {VENV} was not installed from this checkout's current files (run.sh would "
                    "reinstall into it): run the suite with `bash run.sh test`, which installs first")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    base = Path(tempfile.mkdtemp(prefix="ns-lab-"))
    repo = base / "repo"
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    for d in [base, *(p for p in base.rglob("*") if p.is_dir())]:
        d.chmod(0o777)   # the unprivileged start writes workspace/ and its runtime files here
    assert _deps_hash(repo) == stamp.read_text().strip(), "the copy must need no install"
    yield repo
    shutil.rmtree(base, ignore_errors=True)


def _get(url: str, token: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _start(repo: Path, *, as_user: str | None = None) -> tuple[subprocess.Popen, int, Path]:
    port = _free_port()
    home = Path(tempfile.mkdtemp(prefix="home-", dir=repo.parent))
    home.chmod(0o777)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NEURON_STUDIO"))}
    env.update(HOME=str(home), NEURON_STUDIO_VENV=str(VENV), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTER_PLATFORM_DIRS="1", PYTHONDONTWRITEBYTECODE="1")
    cmd = ["bash", "run.sh", "lab", "--port", str(port), "--no-browser"]
    if as_user is not None:
        cmd = ["runuser", "-u", as_user, "--", *cmd]
    log = home / "server.log"
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, port, log


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_for_token(proc: subprocess.Popen, port: int, log: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if proc.poll() is not None:
            pytest.fail(f"`bash run.sh lab` exited with status {proc.returncode} before serving:\n{text[-4000:]}")
        m = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=([0-9a-f]+)", text)
        if m:
            status, _ = _get(f"http://127.0.0.1:{port}/api/status", m.group(1))
            if status == 200:
                return m.group(1)
        time.sleep(0.5)
    pytest.fail(f"no answer from /api/status within {START_TIMEOUT_S} s:\n{log.read_text(errors='replace')[-4000:]}")


def _check_serving(repo: Path, *, as_user: str | None = None) -> str:
    proc, port, log = _start(repo, as_user=as_user)
    try:
        token = _wait_for_token(proc, port, log)
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/api/contents", None)[0] == 403, "the contents API answered without the token"
        status, body = _get(f"{base}/lab/api/extensions", token)
        assert status == 200, body[:500]
        listed = {e["name"]: e for e in json.loads(body)}
        assert EXTENSION in listed, f"{EXTENSION} not among JupyterLab's extensions: {sorted(listed)}"
        assert listed[EXTENSION]["enabled"] and listed[EXTENSION]["installed"]
        status, body = _get(f"{base}/api/contents", token)
        assert status == 200, body[:500]
        served = {c["name"] for c in json.loads(body)["content"]}
        tutorials = {p.name for p in (repo / "notebooks").glob("*.ipynb")}
        assert tutorials and tutorials <= served, f"tutorials not served: {sorted(tutorials - served)}"
        first = sorted(tutorials)[0]
        status, body = _get(f"{base}/api/contents/{first}?content=1", token)
        assert status == 200 and json.loads(body)["type"] == "notebook"
        assert (repo / "workspace" / first).is_file(), "the tutorials must be served from workspace/ copies"
        status, page = _get(f"{base}/lab", token)
        assert status == 200 and b"jupyter-config-data" in page
        return log.read_text(errors="replace")
    finally:
        _stop(proc)


def test_run_sh_lab_serves_the_tutorials_with_the_extension(repo_copy: Path) -> None:
    _check_serving(repo_copy)                      # first start: the workspace is created
    edited = repo_copy / "workspace" / "01_getting_started.ipynb"
    edited.write_text(edited.read_text().replace('"cells"', '"cells"', 1) + "\n")
    mine = edited.read_text()
    _check_serving(repo_copy)                      # a later start: the workspace is there, kept as it is
    assert edited.read_text() == mine


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("runuser"),
                    reason="starting as an unprivileged user needs root and runuser (the suite itself is the "
                           "unprivileged start when it does not run as root)")
def test_run_sh_lab_starts_for_an_unprivileged_user(repo_copy: Path) -> None:
    """As `nobody`, run.sh must not pass --allow-root (JupyterLab stops with 'unrecognized arguments')."""
    probe = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c",
                            "import jupyterlab, neuron_studio.cli"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run this environment's Python ({os.path.realpath(sys.executable)}, e.g. "
                    f"under root's private home): {' '.join(probe.stderr.split())[-200:]}")
    log = _check_serving(repo_copy, as_user="nobody")
    assert "allow-root" not in log
