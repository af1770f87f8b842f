"""The import graph follows the pipeline (device -> capture -> model -> analyze -> render) and has no cycle.

Built from source with `ast`, counting imports inside functions too (a lazy import is still a dependency),
so a cycle or a layer violation fails here before it becomes a tangle. The rules are the ones in STYLE.md:
`device` imports nothing from profiler/kernels/ui; `profiler` nothing from ui/session/magics/runner/store;
`kernels` nothing from ui.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "neuron_studio"

# Source directory -> dotted package it installs as (pyproject's [tool.setuptools] package-dir).
PACKAGE_DIRS = {
    "neuron_studio": "neuron_studio",
    "profiler": "neuron_studio.profiler",
    "kernels": "neuron_studio.kernels",
}

# (importer prefix, forbidden imported prefixes): the pipeline's one direction of imports.
FORBIDDEN = [
    ("neuron_studio.device", ("neuron_studio.profiler", "neuron_studio.kernels", "neuron_studio.ui")),
    (
        "neuron_studio.profiler",
        (
            "neuron_studio.ui",
            "neuron_studio.session",
            "neuron_studio.magics",
            "neuron_studio.runner",
            "neuron_studio.store",
        ),
    ),
    ("neuron_studio.kernels", ("neuron_studio.ui",)),
]


@dataclass(frozen=True)
class ImportEdge:
    """One import statement: `importer` imports `imported`, at `path:line`."""

    importer: str
    imported: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}  ({self.path}:{self.line})"


def discover_modules(root: Path, package_dirs: dict[str, str]) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file under the package directories."""
    modules: dict[str, Path] = {}
    for directory, dotted in package_dirs.items():
        base = root / directory
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if any(part.startswith(".") or part == "__pycache__" for part in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([dotted, *parts])] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{name}" if name else package


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lives in (`a.b.func` -> `a.b`)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def build_import_graph(root: Path, package_dirs: dict[str, str]) -> list[ImportEdge]:
    """Every import between the package's own modules, module-level and inside functions."""
    modules = discover_modules(root, package_dirs)
    edges: list[ImportEdge] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = str(path.relative_to(root))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    _resolve_relative(module, _is_package(path), node.level, node.module)
                    if node.level
                    else (node.module or "")
                )
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    # `from pkg import submodule` depends on the submodule, not on pkg/__init__.
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                owner = _owning_module(target, modules)
                if owner is not None and owner != module:
                    edges.append(ImportEdge(module, owner, rel, node.lineno))
    return edges


def import_components(edges: list[ImportEdge]) -> list[list[str]]:
    """Strongly connected components with more than one module (each holds at least one cycle)."""
    return _components(edges)[1]


def find_cycles(edges: list[ImportEdge]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), as a module path."""
    graph, components = _components(edges)
    return [_cycle_path(graph, set(component)) for component in components]


def _components(edges: list[ImportEdge]) -> tuple[dict[str, set[str]], list[list[str]]]:
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def strongconnect(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return graph, components


def _cycle_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle inside one strongly connected component: start -> ... -> start."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [start]
                    while node != start:
                        path.append(node)
                        node = parents[node]
                    return [start, *reversed(path[1:]), start]
                if child not in parents:
                    parents[child] = node
                    nxt.append(child)
        frontier = nxt
    return sorted(component)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def forbidden_edges(edges: list[ImportEdge]) -> list[ImportEdge]:
    """Edges that run against the pipeline (FORBIDDEN)."""
    return [
        edge
        for edge in edges
        for importer, banned in FORBIDDEN
        if _within(edge.importer, importer) and any(_within(edge.imported, b) for b in banned)
    ]


def _format_cycles(cycles: list[list[str]], edges: list[ImportEdge]) -> str:
    where = {(e.importer, e.imported): f"{e.path}:{e.line}" for e in edges}
    lines = []
    for cycle in cycles:
        hops = [f"{a} -> {b} ({where[(a, b)]})" for a, b in zip(cycle, cycle[1:])]
        lines.append("cycle:\n    " + "\n    ".join(hops))
    return "\n".join(lines)


def test_package_has_no_import_cycle() -> None:
    edges = build_import_graph(ROOT, PACKAGE_DIRS)
    assert len(edges) > 50, "the graph builder found too few imports to be reading the package"
    cycles = find_cycles(edges)
    members = "\n".join("modules in one cycle: " + ", ".join(c) for c in import_components(edges))
    assert not cycles, "import cycles (lazy imports count):\n" + _format_cycles(cycles, edges) + "\n" + members


def test_imports_follow_the_pipeline() -> None:
    edges = build_import_graph(ROOT, PACKAGE_DIRS)
    bad = forbidden_edges(edges)
    assert not bad, "imports against the pipeline:\n" + "\n".join(str(e) for e in bad)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_graph_builder_catches_a_synthetic_cycle_and_forbidden_edge(tmp_path: Path) -> None:
    """The checks above would pass vacuously if the builder missed imports; prove it sees them."""
    _write(
        tmp_path,
        {
            "neuron_studio/__init__.py": "from neuron_studio import device\n",
            "neuron_studio/device/__init__.py": "",
            "neuron_studio/device/a.py": "def f():\n    from . import b\n",
            "neuron_studio/device/b.py": "import neuron_studio.device.c as c\n",
            "neuron_studio/device/c.py": "from .a import f\n",
            "neuron_studio/ui/__init__.py": "",
            "neuron_studio/ui/html.py": "X = 1\n",
            "profiler/__init__.py": "",
            "profiler/profile.py": "def show():\n    from neuron_studio.ui.html import X\n",
            "kernels/__init__.py": "",
            "kernels/k.py": "from neuron_studio.profiler import profile\nimport neuron_studio\n",
        },
    )
    edges = build_import_graph(tmp_path, PACKAGE_DIRS)
    pairs = {(e.importer, e.imported) for e in edges}
    # `from neuron_studio.profiler import profile` resolves to the submodule; `import neuron_studio` to the root.
    assert ("neuron_studio.kernels.k", "neuron_studio.profiler.profile") in pairs
    assert ("neuron_studio.kernels.k", "neuron_studio") in pairs
    # `from neuron_studio import device` in the root is an edge to the subpackage, not a self-edge.
    assert ("neuron_studio", "neuron_studio.device") in pairs
    cycles = find_cycles(edges)
    assert cycles == [
        ["neuron_studio.device.a", "neuron_studio.device.b", "neuron_studio.device.c", "neuron_studio.device.a"]
    ]
    assert "device/a.py:2" in _format_cycles(cycles, edges)
    bad = forbidden_edges(edges)
    assert [(e.importer, e.imported, e.path, e.line) for e in bad] == [
        ("neuron_studio.profiler.profile", "neuron_studio.ui.html", "profiler/profile.py", 2)
    ]


def test_import_neuron_studio_loads_no_kernel_or_display_module() -> None:
    """`import neuron_studio` registers the device; kernels, the interpreter and the ui load on demand."""
    code = (
        "import json, sys\n"
        "import neuron_studio\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('neuron_studio'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, timeout=300
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "neuron_studio.device" in loaded, loaded
    heavy = [m for m in loaded if _within(m, "neuron_studio.kernels") or _within(m, "neuron_studio.ui")]
    assert heavy == [], f"`import neuron_studio` loaded {heavy}"


def test_emulator_finds_source_dirs_without_importing_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames in the profiler and kernels are not user code; their directories are found, never imported.

    Checked for this install (editable: `neuron_studio.profiler` maps to profiler/, kernels to kernels/)
    and for a wheel's layout (subpackages nested under the package directory).
    """
    from neuron_studio.device.emulator.registration import _package_dirs, _skip_dirs

    skip = _skip_dirs()
    for sub in ("neuron_studio", "profiler", "kernels"):
        assert str(ROOT / sub) + "/" in skip, (sub, skip)
    wheel = tmp_path / "wheelpkg"
    _write(tmp_path, {
        "wheelpkg/__init__.py": "",
        "wheelpkg/profiler/__init__.py": "raise RuntimeError('the profiler must not be imported')\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _package_dirs("wheelpkg", ("profiler", "kernels")) == [str(wheel), str(wheel / "profiler")]
    assert "wheelpkg.profiler" not in sys.modules


def test_profile_display_without_a_display_layer_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiler renders only through what the display layer registered; with none, it says so."""
    from neuron_studio.profiler import display
    from neuron_studio.profiler.profile import Profile

    monkeypatch.setattr(display._REGISTRY, "loader", None)
    monkeypatch.setattr(display._REGISTRY, "loaded", None)
    prof = Profile.__new__(Profile)  # the display methods ask for the layer before touching the profile
    prof.run_id = 7
    for call, name in ((prof.explore, "explore()"), (prof.timeline_figure, "timeline_figure()"),
                       (prof._repr_mimebundle_, "_repr_mimebundle_()")):
        with pytest.raises(display.DisplayLayerMissing, match=re.escape(f"Profile.{name} needs a display layer")):
            call()
    assert repr(prof) == "<Profile run 7: no display layer registered (import neuron_studio to render)>"


def test_import_neuron_studio_registers_the_notebook_display() -> None:
    from neuron_studio.profiler.display import display_layer
    from neuron_studio.ui.bundle import mime_bundle
    from neuron_studio.ui.text import render_text

    layer = display_layer("test")
    assert layer.mime_bundle is mime_bundle and layer.text is render_text


if __name__ == "__main__":  # pragma: no cover - a quick listing while refactoring
    graph_edges = build_import_graph(ROOT, PACKAGE_DIRS)
    print(_format_cycles(find_cycles(graph_edges), graph_edges))
    print("\n".join(str(e) for e in forbidden_edges(graph_edges)))
    sys.exit(pytest.main([__file__, "-q"]))
