"""`pip install -e ".[test]"` alone is enough to run the Python suites: every third-party module the tests
and the package import (lazily too) comes from a declared dependency or the `test` extra."""
from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["tests", "extension/tests", "neuron_studio", "profiler", "kernels"]
# Import names that are this repository's own code, or stand-ins the tests put on sys.path.
OWN = {"neuron_studio", "neuron_studio_lab", "tests", "conftest", "kernels", "make_explorer_fixtures", "shared_data",
       "kineto_fixtures",
       "make_profile", "trace_truth"}
# Only on Trainium hosts (the Neuron SDK); the code imports them behind ImportError and the tests fake them.
# `neuronxcc` is the previous NKI layout, imported by kernel files in NKI's public style (kernels/samples/);
# without the SDK the interpreter serves it.
NEURON_SDK = {"torch_neuronx", "nki", "neuronxcc"}


def _requirement_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _declared(reqs: list[str]) -> set[str]:
    """Distribution names the requirements install: each one, plus what its requested extras add
    (`dask[distributed]` brings `distributed`), read from the installed distribution's metadata."""
    from importlib.metadata import PackageNotFoundError, requires

    names = set()
    for req in reqs:
        name = _requirement_name(req)
        names.add(name)
        m = re.match(r"[^\[]*\[([^\]]+)\]", req)
        for extra in (m.group(1).split(",") if m else []):
            try:
                deps = requires(name) or []
            except PackageNotFoundError:
                continue
            for dep in deps:
                if re.search(rf"extra\s*==\s*['\"]{re.escape(extra.strip())}['\"]", dep):
                    names.add(_requirement_name(dep))
    return names


def _imported_top_level_names() -> dict[str, str]:
    """Top-level module name -> first file:line importing it, over SCANNED (module level and in functions)."""
    found: dict[str, str] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_test_extra_covers_every_third_party_import() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = _declared(project["dependencies"]) | _declared(project["optional-dependencies"]["test"])
    dists = packages_distributions()
    missing = []
    for name, where in sorted(_imported_top_level_names().items()):
        if name in sys.stdlib_module_names or name in OWN | NEURON_SDK or name == "__future__":
            continue
        providers = {d.lower().replace("_", "-") for d in dists.get(name, [])}
        if not providers & declared:
            missing.append(f"{name} (imported at {where}; installed by {sorted(providers) or 'nothing'})")
    assert not missing, "not in the dependencies or the `test` extra:\n" + "\n".join(missing)


def test_test_extra_includes_the_lab_extra() -> None:
    """The suite renders figures and explorers, so everything `lab` brings is needed to test it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    lab = {_requirement_name(r) for r in extras["lab"]}
    test = {_requirement_name(r) for r in extras["test"]}
    assert lab <= test, f"in `lab` but not in `test`: {sorted(lab - test)}"


def test_wheel_builds_quietly_and_ships_every_data_file(tmp_path: Path) -> None:
    """`pip install` printed screens of setuptools warnings (the licence as a TOML table, data directories
    missing from `packages`); a regular (non-editable) wheel carries every template, sample kernel and data
    file the package reads at run time."""
    import subprocess
    import zipfile

    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    noise = [line for line in (r.stdout + r.stderr).splitlines()
             if re.search(r"Warning|deprecated|absent from the `packages`", line)]
    assert not noise, "the build warns:\n" + "\n".join(noise)
    wheel = next(tmp_path.glob("neuron_studio-*.whl"))
    shipped = set(zipfile.ZipFile(wheel).namelist())
    roots = {"neuron_studio": "neuron_studio", "profiler": "neuron_studio/profiler", "kernels": "neuron_studio/kernels"}
    tracked = subprocess.run(["git", "ls-files", *roots], cwd=ROOT, capture_output=True, text=True)
    files = (tracked.stdout.splitlines() if tracked.returncode == 0 else   # a checkout: its tracked files
             [p.relative_to(ROOT).as_posix() for src in roots for p in (ROOT / src).rglob("*")
              if p.is_file() and "__pycache__" not in p.parts])
    wanted = [f"{roots[f.split('/', 1)[0]]}/{f.split('/', 1)[1]}" for f in files]
    missing = sorted(w for w in wanted if w not in shipped)
    assert not missing, f"not in the wheel: {missing}"
