"""Hardware specifications as data: load `specs.json`, validate it, and hand out `ChipSpec` records.

The figures live in one JSON file with a source per figure so that a reviewer can check each number against
the documentation it came from; this module only parses, validates and applies user overrides.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = ["ChipSpec", "SpecError", "chip_spec", "available_chips", "load_specs", "SPECS_PATH"]

SPECS_PATH = Path(__file__).with_name("specs.json")

_KINDS = ("trainium", "gpu")


class SpecError(ValueError):
    """Unknown chip, malformed spec file or bad override (names the key and the valid choices)."""


@dataclass(frozen=True)
class ChipSpec:
    """One accelerator's figures. Chip-level unless the name says `core` (per PHYSICAL NeuronCore).

    `sources[field]` says where each figure came from; `notes[field]` says which value was chosen where
    sources disagree. Optional figures (SBUF/PSUM, Tensor Engine geometry) are None on GPUs.
    """

    name: str
    display_name: str
    kind: str
    neuron_cores_per_chip: int
    lnc_default: int
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float
    peak_fp32_flops_per_s: float
    core_tensor_bf16_flops_per_s: float
    core_tensor_fp8_flops_per_s: float
    core_tensor_fp32_flops_per_s: float
    tensor_engine_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float
    vector_elems_per_cycle_16bit: float
    vector_elems_per_cycle_32bit: float
    scalar_elems_per_cycle_16bit: float
    scalar_elems_per_cycle_32bit: float
    gpsimd_elems_per_cycle: float
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    dma_bandwidth_bytes_per_s: float
    neuronlink_bandwidth_bytes_per_s: float
    base_clock_hz: float
    price_per_chip_hour_usd: float
    tensor_engine_rows: int | None = None
    tensor_engine_cols: int | None = None
    sbuf_bytes_per_core: int | None = None
    sbuf_partitions: int | None = None
    psum_bytes_per_core: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    notes: Mapping[str, str] = field(default_factory=dict, compare=False)

    def logical_cores_per_chip(self, lnc: int | None = None) -> int:
        """Devices torch sees per chip: physical cores grouped `lnc` at a time (LNC=2 on Trn2/Trn3)."""
        lnc = self.lnc_default if lnc is None else lnc
        return max(1, self.neuron_cores_per_chip // lnc)


_META_FIELDS = {"name", "display_name", "kind", "sources", "notes"}
_INT_FIELDS = {
    "neuron_cores_per_chip", "lnc_default", "tensor_engine_rows", "tensor_engine_cols",
    "sbuf_bytes_per_core", "sbuf_partitions", "psum_bytes_per_core",
}
_OPTIONAL_FIELDS = {f.name for f in dataclasses.fields(ChipSpec) if f.default is None}
FIGURE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ChipSpec) if f.name not in _META_FIELDS)
_REQUIRED_FIELDS = tuple(f for f in FIGURE_FIELDS if f not in _OPTIONAL_FIELDS)


def load_specs(path: Path | str | None = None) -> dict[str, Any]:
    """Read the raw spec document (a fresh dict each call: callers may not mutate shared state)."""
    p = Path(path) if path is not None else SPECS_PATH
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"cannot read hardware specs from {p}: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("chips"), dict):
        raise SpecError(f"{p}: expected an object with a 'chips' mapping")
    return doc


def available_chips(path: Path | str | None = None) -> list[str]:
    """Names accepted by `chip_spec`, e.g. ['h100', 'trn1', 'trn2', 'trn3']."""
    return sorted(load_specs(path)["chips"])


def _check_value(chip: str, key: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{chip}.{key}: expected a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{chip}.{key}: expected a positive finite number, got {value!r}")
    if key in _INT_FIELDS:
        if float(value) != int(value):
            raise SpecError(f"{chip}.{key}: expected an integer, got {value!r}")
        return int(value)
    return float(value)


def _parse_chip(name: str, entry: Any) -> ChipSpec:
    if not isinstance(entry, dict) or not isinstance(entry.get("figures"), dict):
        raise SpecError(f"chip {name!r}: expected an object with 'figures'")
    kind = entry.get("kind")
    if kind not in _KINDS:
        raise SpecError(f"chip {name!r}: kind must be one of {_KINDS}, got {kind!r}")
    figures: dict[str, Any] = entry["figures"]
    unknown = sorted(set(figures) - set(FIGURE_FIELDS))
    if unknown:
        raise SpecError(f"chip {name!r}: unknown figure(s) {unknown}; valid: {sorted(FIGURE_FIELDS)}")
    missing = [k for k in _REQUIRED_FIELDS if k not in figures]
    if missing:
        raise SpecError(f"chip {name!r}: missing figure(s) {missing}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    notes: dict[str, str] = {}
    for key, fig in figures.items():
        if not isinstance(fig, dict) or "value" not in fig:
            raise SpecError(f"{name}.{key}: expected {{'value': ..., 'source': ...}}")
        src = fig.get("source")
        if not isinstance(src, str) or not src.strip():
            raise SpecError(f"{name}.{key}: every figure needs a non-empty 'source'")
        values[key] = _check_value(name, key, fig["value"])
        sources[key] = src
        if fig.get("note"):
            notes[key] = str(fig["note"])
    if values["lnc_default"] > values["neuron_cores_per_chip"]:
        raise SpecError(f"{name}.lnc_default exceeds neuron_cores_per_chip")
    return ChipSpec(name=name, display_name=str(entry.get("display_name", name)), kind=kind,
                    sources=sources, notes=notes, **values)


def chip_spec(name: str, overrides: Mapping[str, float] | None = None, *,
              path: Path | str | None = None) -> ChipSpec:
    """The spec of chip `name` ("trn1", "trn2", "trn3", "h100"), with any figure replaced by `overrides`.

    Overridden figures get the source "user override" so a report never passes them off as documented.
    """
    chips = load_specs(path)["chips"]
    key = name.lower().strip() if isinstance(name, str) else name
    if key not in chips:
        raise SpecError(f"unknown chip {name!r}; valid: {sorted(chips)}")
    spec = _parse_chip(key, chips[key])
    if not overrides:
        return spec
    changes: dict[str, Any] = {}
    for k, v in overrides.items():
        if k not in FIGURE_FIELDS:
            raise SpecError(f"unknown spec override {k!r}; valid: {sorted(FIGURE_FIELDS)}")
        changes[k] = _check_value(key, k, v)
    sources = dict(spec.sources)
    sources.update({k: "user override" for k in changes})
    out = dataclasses.replace(spec, sources=sources, **changes)
    if out.lnc_default > out.neuron_cores_per_chip:
        raise SpecError("override makes lnc_default exceed neuron_cores_per_chip")
    return out
