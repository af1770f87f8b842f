"""Hardware figures and tile limits: the one source every layer reads (stdlib only, imports nothing else here).

`chip_spec("trn2")` returns a typed `ChipSpec` loaded from `specs.json` (every figure with its source);
`ChipSpec.core(lnc)` applies the one physical-vs-logical core convention described in `specs.py`.
"""
from __future__ import annotations

from neuron_studio.hardware.specs import (
    FIGURE_FIELDS, SPECS_PATH, ChipSpec, CoreFigures, SpecError, available_chips, chip_spec, load_specs,
    trainium_chips,
)

__all__ = ["ChipSpec", "CoreFigures", "SpecError", "chip_spec", "available_chips", "trainium_chips", "load_specs",
           "SPECS_PATH", "FIGURE_FIELDS"]
