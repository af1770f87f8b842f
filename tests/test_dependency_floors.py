"""Dependency floors exclude releases with known security fixes missing: a floor that admits a vulnerable
release lets a resolver (an old lock file, a constrained environment, a mirror) install it silently."""
from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECTS = [ROOT / "pyproject.toml", ROOT / "extension" / "pyproject.toml"]

# package -> (the first release with the fix, advisory). Only advisories that affect how the studio uses
# the package (it reads third-party Parquet, serves HTTP through Jupyter Server, parses JSON traces).
FIXED_IN = {
    "pyarrow": ("14.0.1", "CVE-2023-47248: arbitrary code execution reading untrusted Parquet/IPC"),
    "jupyterlab": ("4.2.5", "CVE-2024-43805: HTML injection (DOM clobbering) in notebook and markdown output"),
    "jupyter-server": ("2.14.1", "CVE-2024-35178: NTLM hash leak through the server; 2.7.2 fixed "
                                 "CVE-2023-39968/40170 (open redirect, cross-site inclusion)"),
    "tornado": ("6.5", "CVE-2025-47287: multipart/form-data log flood DoS; 6.4.2 fixed CVE-2024-52804"),
    "orjson": ("3.9.15", "CVE-2024-27454: unbounded recursion on deeply nested JSON"),
    "ipython": ("8.10.0", "CVE-2023-24816: command injection in set_term_title on Windows"),
    "torch": ("2.6.0", "CVE-2025-32434: code execution in torch.load(weights_only=True)"),
}


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:4])


def _name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _floor(req: str) -> str | None:
    found = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", req)
    return found.group(1) if found else None


def _requirements() -> list[tuple[str, str]]:
    """(file, requirement) for every dependency, extra and build requirement of both packages."""
    out = []
    for path in PYPROJECTS:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        project = data.get("project", {})
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs += extra
        reqs += data.get("build-system", {}).get("requires", [])
        out += [(path.relative_to(ROOT).as_posix(), r) for r in reqs]
    return out


def test_no_floor_admits_a_release_with_a_known_vulnerability() -> None:
    bad = []
    for where, req in _requirements():
        name = _name(req)
        if name not in FIXED_IN:
            continue
        fixed, advisory = FIXED_IN[name]
        floor = _floor(req)
        if floor is None or _release(floor) < _release(fixed):
            bad.append(f"{where}: {req!r} admits releases before {fixed} ({advisory})")
    assert not bad, "\n".join(bad)


def test_installed_versions_satisfy_the_floors() -> None:
    """The environment run.sh builds (and CI tests) is not below any declared floor."""
    low = []
    for where, req in _requirements():
        floor = _floor(req)
        if floor is None:
            continue
        try:
            installed = version(_name(req))
        except PackageNotFoundError:
            continue  # build-only requirements (hatchling, ...) live in pip's isolated build env
        if _release(installed) < _release(floor):
            low.append(f"{where}: {req!r} but {installed} is installed")
    assert not low, "\n".join(low)
