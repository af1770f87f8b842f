"""The one place kernels get NKI from: the real `nki` package when importable, else the built-in interpreter.

Set NEURON_STUDIO_NKI=interpreter to force the interpreter even where `nki` is installed. The emulated path
never imports torch_neuronx.
"""
from __future__ import annotations

import os

__all__ = ["nki", "nl", "nisa", "BACKEND"]

if os.environ.get("NEURON_STUDIO_NKI", "") != "interpreter":
    try:
        import nki  # type: ignore[import-not-found, no-redef]
        import nki.isa as nisa  # type: ignore[import-not-found, no-redef]
        import nki.language as nl  # type: ignore[import-not-found, no-redef]

        BACKEND = "nki"
    except ImportError:
        from .interpreter import isa as nisa  # type: ignore[no-redef]
        from .interpreter import language as nl  # type: ignore[no-redef]
        from .interpreter import nki  # type: ignore[no-redef]

        BACKEND = "interpreter"
else:
    from .interpreter import isa as nisa  # type: ignore[no-redef]
    from .interpreter import language as nl  # type: ignore[no-redef]
    from .interpreter import nki  # type: ignore[no-redef]

    BACKEND = "interpreter"
