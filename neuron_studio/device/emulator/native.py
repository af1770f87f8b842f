"""Loads the emulated device's C++ extension (`_C`), naming the cause and the fix when it cannot.

The extension is compiled when the package is installed (setup.py); importing it never compiles anything.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from neuron_studio.device.errors import BackendError

__all__ = ["load_native", "INTERFACE"]

# The bindings this Python expects (csrc/Module.cpp sets the same number; 2: op events drained as columns).
INTERFACE = 2

_FIX = (
    "Build it with the package: `pip install --no-build-isolation -e .` from the neuron-studio checkout (or "
    "`bash run.sh test` / `bash run.sh lab`), with torch {torch} installed in the same environment and a C++17 "
    "compiler (g++ or clang; on macOS the Xcode command line tools: `xcode-select --install`)."
)


def load_native() -> ModuleType:
    """The `neuron_studio.device.emulator._C` extension module."""
    import torch

    try:
        native = importlib.import_module("neuron_studio.device.emulator._C")
    except ModuleNotFoundError as e:
        if e.name != "neuron_studio.device.emulator._C":
            raise
        raise BackendError(
            "neuron: the emulated device's C++ extension (neuron_studio.device.emulator._C) is not built in this "
            "installation. " + _FIX.format(torch=torch.__version__)
        ) from None
    except ImportError as e:
        raise BackendError(
            f"neuron: the emulated device's C++ extension failed to load ({e}). It was probably built against a "
            f"different torch than the installed {torch.__version__} (the extension must be rebuilt whenever torch "
            "changes). " + _FIX.format(torch=torch.__version__)
        ) from None
    built = getattr(native, "INTERFACE", 1)
    if built != INTERFACE:
        raise BackendError(
            f"neuron: the emulated device's C++ extension was built from other sources than this checkout's Python "
            f"(its interface {built}, expected {INTERFACE}): rebuild it. " + _FIX.format(torch=torch.__version__)
        )
    return native
