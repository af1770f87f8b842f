"""Builds the `neuron` device's native extension; everything else about the package is in pyproject.toml.

The extension (neuron_studio/device/emulator/csrc/) is compiled against the torch installed in the build
environment, so build without pip's build isolation: `pip install --no-build-isolation -e .` (run.sh does).
"""
from __future__ import annotations

import shutil
import sys
import warnings

from setuptools import setup

_SOURCES = [
    "neuron_studio/device/emulator/csrc/NeuronRuntime.cpp",
    "neuron_studio/device/emulator/csrc/NeuronKernels.cpp",
    "neuron_studio/device/emulator/csrc/Module.cpp",
]


def _extension_build() -> tuple[list, dict]:
    try:
        with warnings.catch_warnings():
            # torch warns when numpy is missing; the build reads no numpy (numpy is installed with the package)
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as e:
        sys.exit(
            "neuron-studio: building the neuron device's C++ extension needs torch (>=2.13,<2.15) in the build "
            f"environment, and `import torch` failed ({e}). Install torch first (`pip install torch==2.13.0`), "
            "then build without build isolation: `pip install --no-build-isolation -e .` (or `bash run.sh test`)."
        )
    ext = CppExtension(
        "neuron_studio.device.emulator._C",
        _SOURCES,
        extra_compile_args=["-O2", "-g0", "-fvisibility=hidden"],
    )
    # ninja compiles the sources in parallel when it is installed; without it torch's serial build is used (no warning)
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None)}


ext_modules, cmdclass = _extension_build()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
