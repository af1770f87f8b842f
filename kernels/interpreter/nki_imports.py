"""Let kernel files written for NKI import it unmodified when the real NKI is not installed.

`install()` adds a meta-path finder that answers `import neuronxcc.nki...` (the previous release's layout:
`neuronxcc.nki`, `.language`, `.isa`, `.typing`, `.compiler`) and `import nki...` (the current standalone
layout: `nki`, `nki.language`, `nki.isa`, `nki.typing`) with the interpreter. It is installed only when
asked (the studio's kernel loaders and tests call it; importing the studio does not), it never answers for a
layout whose real package is importable (a Neuron installation always wins, even when installed later: the
finder sits at the end of `sys.meta_path`, after the path finders), and it puts nothing on disk.
`uninstall()` removes it again.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Sequence

__all__ = ["install", "uninstall", "installed", "namespace", "real_nki_available", "LAYOUTS"]

# public module name -> (interpreter modules whose public names it exposes, documented-name set key, is package)
LAYOUTS: dict[str, tuple[tuple[str, ...], str, bool]] = {
    "neuronxcc": ((), "", True),
    "neuronxcc.nki": (("toplevel",), "nki", True),
    "neuronxcc.nki.language": (("language",), "language", False),
    "neuronxcc.nki.isa": (("isa_legacy",), "isa", False),
    "neuronxcc.nki.typing": (("toplevel_typing",), "", False),
    "neuronxcc.nki.compiler": (("toplevel_compiler",), "", True),
    "nki": (("toplevel",), "nki_current", True),
    "nki.language": (("language",), "language", False),
    "nki.isa": (("isa", "isa_vector_ops", "registers"), "isa", False),
    "nki.typing": (("toplevel_typing",), "", False),
    "nki.compiler": (("toplevel_compiler",), "", True),
    "nki.collectives": ((), "collectives", False),
}
_ROOTS = ("neuronxcc", "nki")


def _real_spec(root: str) -> Any:
    """The real package's spec, looked up with every finder but ours."""
    for finder in sys.meta_path:
        if isinstance(finder, _InterpreterFinder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(root, None)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            return spec
    return None


def real_nki_available() -> dict[str, bool]:
    """Which NKI layouts a real Neuron installation provides ({"neuronxcc": ..., "nki": ...})."""
    return {root: _real_spec(root) is not None for root in _ROOTS}


def namespace(public_name: str) -> types.ModuleType:
    """Build the interpreter's module for `public_name` (e.g. "nki.isa"): the public names of its source
    modules, plus a `__getattr__` turning documented-but-unimplemented APIs into NotImplementedError."""
    from . import unsupported as _u

    sources, documented, is_pkg = LAYOUTS[public_name]
    mod = types.ModuleType(public_name, f"Neuron Studio NKI interpreter: {public_name}")
    for source in sources:
        src = importlib.import_module(f"{__package__}.{source}")
        names = getattr(src, "__all__", None) or [n for n in vars(src) if not n.startswith("_")]
        if documented == "nki_current":
            names = [n for n in names if n in src.CURRENT]
        for n in names:
            mod.__dict__[n] = getattr(src, n)
        if hasattr(src, "__getattr__") and "__getattr__" not in mod.__dict__:
            mod.__dict__["__getattr__"] = src.__getattr__
    if documented and "__getattr__" not in mod.__dict__:
        doc = {"nki": _u.DOCUMENTED_NKI, "nki_current": frozenset(), "language": _u.DOCUMENTED_LANGUAGE,
               "isa": _u.DOCUMENTED_ISA, "collectives": _u.DOCUMENTED_COLLECTIVES}[documented]
        mod.__dict__["__getattr__"] = _u.module_getattr(public_name, doc)
    if is_pkg:
        mod.__path__ = []  # a package: submodules resolve through the finder
    mod.__dict__["__neuron_studio_interpreter__"] = True
    return mod


class _InterpreterFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the NKI layouts whose real package is absent."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(roots)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in LAYOUTS or fullname.split(".")[0] not in self.roots:
            return None
        if _real_spec(fullname.split(".")[0]) is not None:  # a real installation appeared: never shadow it
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=LAYOUTS[fullname][2])

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return namespace(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
        # children the parent exposes as attributes (`nki.language`, `nki.isa`) are imported with it
        for name in LAYOUTS:
            head, _, leaf = name.rpartition(".")
            if head == module.__name__ and leaf in ("language", "isa", "typing", "compiler", "collectives"):
                setattr(module, leaf, importlib.import_module(name))


def installed() -> bool:
    return any(isinstance(f, _InterpreterFinder) for f in sys.meta_path)


def install() -> dict[str, str]:
    """Serve the NKI import layouts the real SDK does not provide. Returns {layout: "real" | "interpreter"}."""
    real = real_nki_available()
    missing = [root for root in _ROOTS if not real[root]]
    if missing and not installed():
        sys.meta_path.append(_InterpreterFinder(missing))
    return {root: "real" if real[root] else "interpreter" for root in _ROOTS}


def uninstall() -> None:
    """Remove the finder and forget the interpreter modules it created."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _InterpreterFinder)]
    for name in list(sys.modules):
        if name in LAYOUTS and getattr(sys.modules[name], "__neuron_studio_interpreter__", False):
            del sys.modules[name]
