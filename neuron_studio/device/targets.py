"""The chips the device can stand for, and how their NeuronCores are grouped into logical cores.

Topology only (core counts, LNC, HBM capacity), read from the one hardware accessor (`neuron_studio.hardware`,
which follows the physical-vs-logical core convention stated there). Sources are in its specs.json.
"""
from __future__ import annotations

from dataclasses import dataclass

from neuron_studio.hardware import SpecError, chip_spec, trainium_chips

__all__ = ["Target", "TARGETS", "target_for", "UnknownChipError"]


class UnknownChipError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    chip: str
    chip_name: str
    physical_cores: int
    lnc: int
    hbm_bytes: int

    @property
    def logical_cores(self) -> int:
        return self.physical_cores // self.lnc

    @property
    def hbm_bytes_per_logical_core(self) -> int:
        return self.hbm_bytes // self.logical_cores


TARGETS: tuple[str, ...] = trainium_chips()


def target_for(chip: str | None, lnc: int | None = None) -> Target:
    key = (chip or "trn2").strip().lower()
    if key not in TARGETS:
        raise UnknownChipError(f"unknown chip {chip!r}; choose one of {', '.join(TARGETS)}")
    spec = chip_spec(key)
    try:
        use = spec.check_lnc(lnc)
    except SpecError as exc:
        raise UnknownChipError(str(exc)) from exc
    return Target(chip=key, chip_name=spec.short_name, physical_cores=spec.neuron_cores_per_chip, lnc=use,
                  hbm_bytes=int(spec.hbm_capacity_bytes))
