"""Hardware specifications as data: load `specs.json`, validate it, and hand out `ChipSpec` records.

This is the ONE place hardware figures and tile limits come from: the op model, the kernel cost model, the NKI
interpreter's limits and the device targets all read them here (tests/test_single_source.py fails if a chip
figure is defined anywhere else). The figures live in one JSON file with a source per figure so that a reviewer
can check each number against the documentation it came from; this module only parses, validates and applies
user overrides. It imports only the standard library so that every layer (device, profiler, kernels) may use it.

Core convention (stated once; `ChipSpec.core` implements it, every model calls it):
- Figures named `core_*` / `*_per_core`, the engine widths (`*_elems_per_cycle*`) and clocks are per PHYSICAL
  NeuronCore; every other figure (peaks, HBM, DMA, NeuronLink, price) is per chip.
- A logical core (the device torch sees) groups LNC physical cores (LNC=2 by default on Trn2/Trn3): its
  compute rates are LNC x the physical-core rates, and the chip's HBM and DMA bandwidth are shared evenly by the
  chip's logical cores: chip figure / (physical cores / LNC).
- An NKI kernel in the interpreter runs on one physical NeuronCore, i.e. the LNC=1 view of the same rule.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["ChipSpec", "CoreFigures", "SpecError", "chip_spec", "available_chips", "trainium_chips", "load_specs",
           "gpu_price_for", "SPECS_PATH", "FIGURE_FIELDS"]

SPECS_PATH = Path(__file__).with_name("specs.json")

_KINDS = ("trainium", "gpu")


class SpecError(ValueError):
    """Unknown chip, malformed spec file or bad override (names the key and the valid choices)."""


@dataclass(frozen=True)
class CoreFigures:
    """Rates of one core after LNC grouping (see the core convention in the module docstring). Per second."""

    lnc: int
    cores_per_chip: int                   # cores of this size on one chip (physical cores / lnc)
    tensor_bf16_flops: float
    tensor_fp8_flops: float
    tensor_fp32_flops: float
    vector_elems_32bit: float
    vector_elems_16bit: float             # 16-bit or narrower elements
    scalar_elems_32bit: float
    scalar_elems_16bit: float
    gpsimd_elems: float
    hbm_bytes: float                      # this core's even share of the chip's HBM bandwidth
    dma_bytes: float                      # this core's even share of the chip's DMA bandwidth
    tensor_mxfp8_flops: float = 0.0       # microscaled FP8 (the plain-FP8 rate where the chip has no MX mode)
    stream_bytes: float = 0.0             # what one core can stream HBM<->SBUF: min(HBM share, its DMA engines)


@dataclass(frozen=True)
class ChipSpec:
    """One accelerator's figures. Chip-level unless the name says `core` (per PHYSICAL NeuronCore).

    `sources[field]` says where each figure came from; `notes[field]` says which value was chosen where
    sources disagree. Optional figures (SBUF/PSUM, Tensor Engine geometry) are None on GPUs.
    """

    name: str
    display_name: str
    short_name: str
    kind: str
    neuron_cores_per_chip: int
    lnc_default: int
    lnc_allowed: tuple[int, ...]
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
    psum_banks: int | None = None
    gemm_stationary_fmax: int | None = None
    gemm_moving_fmax: int | None = None
    core_tensor_mxfp8_flops_per_s: float | None = None
    core_dma_bandwidth_bytes_per_s: float | None = None
    dma_fixed_latency_ns: float | None = None
    chips_per_instance: int | None = None             # chips whose ranks share one instance (NeuronLink)
    dma_engines_per_core: int | None = None           # a transfer spreads over the engines of its partitions
    dma_descriptor_overhead_ns: float | None = None   # per contiguous run (descriptor) an engine moves
    dge_instruction_ns: float | None = None           # descriptor generation per DMA instruction (None: static DMA)
    dma_transpose_hbm_percent: float | None = None   # percent of the DMA rate an HBM->SBUF transpose reaches
    dma_transpose_sbuf_percent: float | None = None  # ... an SBUF->SBUF transpose
    tensor_mm_init_cycles: float | None = None
    vector_static_overhead_cycles: float | None = None
    scalar_static_overhead_cycles: float | None = None
    collective_latency_ns: float | None = None
    collective_hop_latency_ns: float | None = None    # per ring step of an intra-instance collective
    allreduce_mesh_max_chunk_bytes: float | None = None  # intra-instance all-reduce: Mesh up to this B/N (None: Ring)
    allreduce_rdh_max_chunk_bytes: float | None = None   # ... RDH up to this B/N, KangaRing above
    allreduce_latency_ns: float | None = None  # fixed part of an intra-instance all-reduce (None: collective_latency_ns)
    collective_bus_bandwidth_bytes_per_s: float | None = None
    internode_collective_latency_ns: float | None = None
    internode_bus_bandwidth_bytes_per_s: float | None = None
    device_profile_hbm_reserve_bytes: float | None = None  # HBM TorchNeuron's DEVICE profiling mode holds
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    notes: Mapping[str, str] = field(default_factory=dict, compare=False)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict, compare=False)
    """Plausible (low, high) of figures that are assumed or derived rather than published (figure key "range")."""

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickle/deepcopy with plain dicts (the read-only mapping views themselves cannot be pickled)."""
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        state["sources"], state["notes"], state["ranges"] = dict(self.sources), dict(self.notes), dict(self.ranges)
        return (_rebuild_spec, (state,))

    def logical_cores_per_chip(self, lnc: int | None = None) -> int:
        """Devices torch sees per chip: physical cores grouped `lnc` at a time (LNC=2 on Trn2/Trn3)."""
        lnc = self.lnc_default if lnc is None else lnc
        return max(1, self.neuron_cores_per_chip // lnc)

    def logical_cores_per_instance(self, lnc: int | None = None) -> int | None:
        """Ranks one instance holds (logical cores per chip x chips per instance); None when not specified."""
        return None if not self.chips_per_instance else self.chips_per_instance * self.logical_cores_per_chip(lnc)

    def check_lnc(self, lnc: int | None = None) -> int:
        """`lnc` (None = the chip default) if the chip allows that grouping; SpecError naming the valid ones."""
        use = self.lnc_default if lnc is None else lnc
        if use not in self.lnc_allowed:
            raise SpecError(f"LNC={use!r} is not valid on {self.name}; valid: {self.lnc_allowed}")
        return use

    def core(self, lnc: int | None = None) -> CoreFigures:
        """Rates of one core of `lnc` physical NeuronCores (None = the chip default): THE core convention.

        Compute rates are lnc x the per-physical-core figures; HBM and DMA bandwidth are the chip figure shared
        evenly by the chip's cores of that size. `lnc=1` is one physical core (what an NKI kernel runs on).
        """
        lnc = self.check_lnc(lnc)
        per_chip = self.logical_cores_per_chip(lnc)
        return CoreFigures(
            lnc=lnc,
            cores_per_chip=per_chip,
            tensor_bf16_flops=self.core_tensor_bf16_flops_per_s * lnc,
            tensor_fp8_flops=self.core_tensor_fp8_flops_per_s * lnc,
            tensor_fp32_flops=self.core_tensor_fp32_flops_per_s * lnc,
            vector_elems_32bit=self.vector_elems_per_cycle_32bit * self.vector_clock_hz * lnc,
            vector_elems_16bit=self.vector_elems_per_cycle_16bit * self.vector_clock_hz * lnc,
            scalar_elems_32bit=self.scalar_elems_per_cycle_32bit * self.scalar_clock_hz * lnc,
            scalar_elems_16bit=self.scalar_elems_per_cycle_16bit * self.scalar_clock_hz * lnc,
            gpsimd_elems=self.gpsimd_elems_per_cycle * self.gpsimd_clock_hz * lnc,
            hbm_bytes=self.hbm_bandwidth_bytes_per_s / per_chip,
            dma_bytes=self.dma_bandwidth_bytes_per_s / per_chip,
            tensor_mxfp8_flops=(self.core_tensor_mxfp8_flops_per_s or self.core_tensor_fp8_flops_per_s) * lnc,
            stream_bytes=min(self.hbm_bandwidth_bytes_per_s / per_chip,
                             self.core_dma_bandwidth_bytes_per_s * lnc if self.core_dma_bandwidth_bytes_per_s
                             else self.dma_bandwidth_bytes_per_s / per_chip),
        )

    # Tile limits derived from the per-core sizes (nki.language.tile_size); None on GPUs.
    @property
    def partition_max(self) -> int | None:
        """Partitions of SBUF/PSUM = the largest partition dimension of a tile (`nl.tile_size.pmax`)."""
        return self.sbuf_partitions

    @property
    def sbuf_bytes_per_partition(self) -> int | None:
        """Usable SBUF bytes per partition (192 KiB Trn1, 224 KiB Trn2, 256 KiB Trn3 [derived])."""
        if self.sbuf_bytes_per_core is None or not self.sbuf_partitions:
            return None
        return self.sbuf_bytes_per_core // self.sbuf_partitions

    @property
    def psum_bank_bytes_per_partition(self) -> int | None:
        """Bytes of one PSUM bank in one partition (2 KiB = 512 FP32)."""
        if self.psum_bytes_per_core is None or not self.sbuf_partitions or not self.psum_banks:
            return None
        return self.psum_bytes_per_core // self.sbuf_partitions // self.psum_banks

    @property
    def psum_bank_fmax(self) -> int | None:
        """FP32 elements per PSUM bank per partition (`nl.tile_size.psum_fmax`, 512)."""
        b = self.psum_bank_bytes_per_partition
        return None if b is None else b // 4


def _rebuild_spec(state: dict[str, Any]) -> ChipSpec:
    state = dict(state, sources=MappingProxyType(dict(state["sources"])), notes=MappingProxyType(dict(state["notes"])),
                 ranges=MappingProxyType(dict(state.get("ranges", {}))))
    return ChipSpec(**state)


_META_FIELDS = {"name", "display_name", "short_name", "kind", "sources", "notes", "ranges"}
_INT_FIELDS = {
    "neuron_cores_per_chip", "lnc_default", "tensor_engine_rows", "tensor_engine_cols",
    "sbuf_bytes_per_core", "sbuf_partitions", "psum_bytes_per_core", "psum_banks", "gemm_stationary_fmax",
    "gemm_moving_fmax", "dma_engines_per_core", "chips_per_instance",
}
_LIST_FIELDS = {"lnc_allowed"}
# What the NKI interpreter and the kernel model need: required on every Trainium chip.
_TRAINIUM_FIELDS = ("tensor_engine_rows", "tensor_engine_cols", "sbuf_bytes_per_core", "sbuf_partitions",
                    "psum_bytes_per_core", "psum_banks", "gemm_stationary_fmax", "gemm_moving_fmax",
                    "core_tensor_mxfp8_flops_per_s", "core_dma_bandwidth_bytes_per_s", "dma_fixed_latency_ns",
                    "dma_engines_per_core", "dma_descriptor_overhead_ns", "tensor_mm_init_cycles", "vector_static_overhead_cycles",
                    "scalar_static_overhead_cycles", "collective_latency_ns", "collective_bus_bandwidth_bytes_per_s",
                    "internode_collective_latency_ns", "internode_bus_bandwidth_bytes_per_s")
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


def trainium_chips() -> tuple[str, ...]:
    """The Trainium chips in the spec file (what the device can stand for and the interpreter can model)."""
    return tuple(name for name, spec in _shipped_specs().items() if spec.kind == "trainium")


def _check_list(chip: str, key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(f"{chip}.{key}: expected a non-empty list of integers, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{chip}.{key}: expected positive integers, got {v!r}")
        out.append(v)
    return tuple(out)


def _check_value(chip: str, key: str, value: Any) -> Any:
    if key in _LIST_FIELDS:
        return _check_list(chip, key, value)
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
    ranges: dict[str, tuple[float, float]] = {}
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
        if "range" in fig:
            lo_hi = fig["range"]
            if (not isinstance(lo_hi, (list, tuple)) or len(lo_hi) != 2
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in lo_hi)
                    or not (0 < lo_hi[0] <= values[key] <= lo_hi[1])):
                raise SpecError(f"{name}.{key}: 'range' must be [low, high] around the value, got {lo_hi!r}")
            ranges[key] = (float(lo_hi[0]), float(lo_hi[1]))
    if kind == "trainium":
        lacking = [k for k in _TRAINIUM_FIELDS if k not in values]
        if lacking:
            raise SpecError(f"chip {name!r}: a Trainium chip needs figure(s) {lacking}")
    spec = ChipSpec(name=name, display_name=str(entry.get("display_name", name)),
                    short_name=str(entry.get("short_name", name)), kind=kind,
                    sources=MappingProxyType(sources), notes=MappingProxyType(notes),
                    ranges=MappingProxyType(ranges), **values)
    _check_consistent(spec)
    return spec


def _check_consistent(spec: ChipSpec) -> None:
    """Relations between figures that a typo in the file (or an override) must not break."""
    if spec.lnc_default > spec.neuron_cores_per_chip:
        raise SpecError(f"{spec.name}.lnc_default exceeds neuron_cores_per_chip")
    if spec.lnc_default not in spec.lnc_allowed:
        raise SpecError(f"{spec.name}.lnc_default={spec.lnc_default} is not in lnc_allowed={spec.lnc_allowed}")
    bad = [v for v in spec.lnc_allowed if v > spec.neuron_cores_per_chip or spec.neuron_cores_per_chip % v]
    if bad:
        raise SpecError(f"{spec.name}.lnc_allowed {bad} do not divide neuron_cores_per_chip="
                        f"{spec.neuron_cores_per_chip}")
    if spec.sbuf_partitions and spec.sbuf_bytes_per_core and spec.sbuf_bytes_per_core % spec.sbuf_partitions:
        raise SpecError(f"{spec.name}.sbuf_bytes_per_core is not a whole number of bytes per partition")
    if spec.psum_bytes_per_core and spec.sbuf_partitions and spec.psum_banks \
            and spec.psum_bytes_per_core % (spec.sbuf_partitions * spec.psum_banks):
        raise SpecError(f"{spec.name}.psum_bytes_per_core is not a whole number of bytes per bank per partition")


@functools.lru_cache(maxsize=1)
def _shipped_specs() -> Mapping[str, ChipSpec]:
    """The shipped file, parsed once (records are frozen and their mappings read-only, so sharing is safe)."""
    chips = load_specs()["chips"]
    return MappingProxyType({name: _parse_chip(name, chips[name]) for name in sorted(chips)})


def chip_spec(name: str, overrides: Mapping[str, float] | None = None, *,
              path: Path | str | None = None) -> ChipSpec:
    """The spec of chip `name` ("trn1", "trn2", "trn3", "h100"), with any figure replaced by `overrides`.

    Overridden figures get the source "user override" so a report never passes them off as documented.
    """
    key = name.lower().strip() if isinstance(name, str) else name
    if path is None:
        shipped = _shipped_specs()
        if key not in shipped:
            raise SpecError(f"unknown chip {name!r}; valid: {sorted(shipped)}")
        spec = shipped[key]
    else:
        chips = load_specs(path)["chips"]
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
    ranges = {k: v for k, v in spec.ranges.items() if k not in changes}  # an override is the user's value
    out = dataclasses.replace(spec, sources=MappingProxyType(sources), ranges=MappingProxyType(ranges), **changes)
    try:
        _check_consistent(out)
    except SpecError as exc:
        raise SpecError(f"override {sorted(changes)} is inconsistent: {exc}") from exc
    return out


def gpu_price_for(device_name: str | None, *, path: Path | str | None = None) -> tuple[float | None, str]:
    """(USD per GPU-hour, its source) for a recorded GPU name ("NVIDIA A100-SXM4-40GB"), from the spec file's
    `gpu_prices` table; (None, why) when the device is unknown or has no listed price."""
    if not device_name:
        return None, "the trace names no GPU (no deviceProperties)"
    for entry in load_specs(path).get("gpu_prices", {}).get("prices", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("match"), str):
            raise SpecError("gpu_prices.prices entries need a 'match' string")
        if entry["match"].lower() not in device_name.lower():
            continue
        if entry.get("chip"):
            spec = chip_spec(entry["chip"], path=path)
            return spec.price_per_chip_hour_usd, spec.sources.get("price_per_chip_hour_usd", entry["chip"])
        price = _check_value(f"gpu_prices[{entry['match']}]", "usd_per_gpu_hour", entry.get("usd_per_gpu_hour"))
        src = entry.get("source")
        if not isinstance(src, str) or not src.strip():
            raise SpecError(f"gpu_prices[{entry['match']}]: every price needs a non-empty 'source'")
        return float(price), src
    return None, f"no price listed for {device_name!r} in the spec file's gpu_prices"
