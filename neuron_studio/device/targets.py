"""The chips the device can stand for, and how their NeuronCores are grouped into logical cores.

Topology only (core counts, LNC, HBM capacity); timing figures live in the profiler's specs.json.
Sources: trainium.md §1.2 (Trn2 default LNC=2: 8 physical -> 4 logical) and §6 (cores, HBM per chip).
"""
from __future__ import annotations

from dataclasses import dataclass

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


# chip -> (name, physical NeuronCores per chip, default LNC, allowed LNC, HBM bytes per chip)
_CHIPS = {
    "trn1": ("Trainium", 2, 1, (1,), 32 * 2**30),
    "trn2": ("Trainium2", 8, 2, (1, 2), 96 * 2**30),
    "trn3": ("Trainium3", 8, 2, (1, 2), 144 * 2**30),
}
TARGETS = tuple(_CHIPS)


def target_for(chip: str | None, lnc: int | None = None) -> Target:
    key = (chip or "trn2").strip().lower()
    if key not in _CHIPS:
        raise UnknownChipError(f"unknown chip {chip!r}; choose one of {', '.join(TARGETS)}")
    name, cores, default_lnc, allowed, hbm = _CHIPS[key]
    use = default_lnc if lnc is None else lnc
    if use not in allowed:
        raise UnknownChipError(f"LNC={use} is not valid on {key}; valid: {allowed}")
    return Target(chip=key, chip_name=name, physical_cores=cores, lnc=use, hbm_bytes=hbm)
