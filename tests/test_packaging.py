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
OWN = {"neuron_studio", "neuron_studio_lab", "tests", "conftest", "kernels", "make_explorer_fixtures",
       "make_profile", "trace_truth"}
# Only on Trainium hosts (the Neuron SDK); the code imports them behind ImportError and the tests fake them.
# `neuronxcc` is the previous NKI layout, imported by kernel files in NKI's public style (kernels/samples/);
# without the SDK the interpreter serves it.
NEURON_SDK = {"torch_neuronx", "nki", "neuronxcc"}


def _requirement_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


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
    declared = {_requirement_name(r) for r in project["dependencies"]}
    declared |= {_requirement_name(r) for r in project["optional-dependencies"]["test"]}
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
