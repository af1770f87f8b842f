"""Re-export of the hardware accessor for existing `neuron_studio.profiler.specs` imports.

The figures and their accessor live in `neuron_studio.hardware` so that device, profiler and kernels all read the
same file without the device layer importing the profiler.
"""
from __future__ import annotations

from neuron_studio.hardware.specs import (
    FIGURE_FIELDS, SPECS_PATH, ChipSpec, CoreFigures, SpecError, available_chips, chip_spec, load_specs,
    trainium_chips,
)

__all__ = ["ChipSpec", "CoreFigures", "SpecError", "chip_spec", "available_chips", "trainium_chips", "load_specs",
           "SPECS_PATH", "FIGURE_FIELDS"]
