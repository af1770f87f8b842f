"""Will it fit? The step's device-memory peak against each chip's HBM per logical core, and the standard
levers (smaller batch, activation checkpointing, bf16, optimizer-state / gradient / parameter sharding,
CPU offload of optimizer state) with their modeled effect on the peak.

Every lever is modeled by replaying the captured allocations with the affected storages scaled or removed,
so a lever that moves the peak to another point of the step (e.g. from the end of the forward pass to the
optimizer step) is forecast correctly. The assumptions are stated on each lever (`Lever.assumption`);
all figures are modeled (`modeled=True`) even when the peak itself was captured exactly.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.hardware import chip_spec, trainium_chips
from neuron_studio.profiler.analysis.memory import device_rows, memory_peak
from neuron_studio.profiler.analysis.memory_autocast import autocast_total
from neuron_studio.profiler.analysis.memory_sharding import fsdp_units, gathered_bytes, zero1_rank_state

__all__ = ["ChipFit", "Lever", "MemoryForecast", "memory_forecast", "forecast_from_peak", "chip_fits", "fmt_bytes"]

_BATCH_CATEGORIES = ("activation", "input")


def fmt_bytes(n: float | None) -> str:
    """Binary units, 3 significant digits: '18.3 GiB', '512 KiB'."""
    if n is None:
        return "–"
    n = float(n)
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def _capacity(chip: str, lnc: int | None) -> tuple[int, int, int]:
    """(HBM bytes per logical core, LNC used, logical cores per chip) from the hardware accessor."""
    spec = chip_spec(chip)
    use = spec.check_lnc(lnc)
    cores = spec.logical_cores_per_chip(use)
    return int(spec.hbm_capacity_bytes) // cores, use, cores


def _profiling_reserve(chip: str) -> int | None:
    """HBM TorchNeuron's DEVICE profiling mode holds (None where the studio has no figure: Trn1, which
    TorchNeuron does not run on)."""
    v = chip_spec(chip).device_profile_hbm_reserve_bytes
    return None if v is None else int(v)


RESERVE_ASSUMPTION = ("TorchNeuron's DEVICE profiling mode reserves ~5 GB of HBM (documented for Trn2 without "
                      "saying how it is split over cores); assumed to come out of the profiled logical core's "
                      "share, the conservative reading")
RUNTIME_ASSUMPTION = ("counts the bytes of live tensors only: the Neuron runtime's own HBM use (loaded NEFFs, "
                      "scratchpad, collective buffers) is not included and lowers the real headroom")


@dataclass(frozen=True)
class ChipFit:
    chip: str
    lnc: int
    logical_cores: int
    capacity_bytes: int          # HBM per logical core
    peak_bytes: int
    headroom_bytes: int          # capacity - peak (negative: shortfall)
    fits: bool
    profiling_reserve_bytes: int | None
    fits_while_profiling: bool | None


@dataclass(frozen=True)
class Lever:
    key: str                     # batch | checkpoint | bf16 | autocast | zero1 | zero2 | fsdp | cpu_offload
    title: str                   # "checkpoint the 12 Block modules"
    peak_bytes: int              # modeled peak with the lever applied
    saving_bytes: int            # current peak - modeled peak
    fits: bool                   # on the forecast's chip and LNC
    how: str                     # what to change in the code
    assumption: str
    modules: tuple[str, ...] = ()
    factor: float | None = None  # batch scale, or shard count
    modeled: bool = True


@dataclass
class MemoryForecast:
    device: int
    chip: str
    lnc: int
    peak_bytes: int
    by_category: dict[str, int]
    capacity_bytes: int
    headroom_bytes: int
    fits: bool
    profiling_reserve_bytes: int | None
    fits_while_profiling: bool | None
    chips: list[ChipFit]
    levers: list[Lever]               # changes that lower the peak (saving_bytes > 0), largest saving first
    assumptions: list[str] = field(default_factory=list)
    scale: float = 1.0
    modeled: bool = True
    no_help: list[Lever] = field(default_factory=list)   # modeled, but they would not lower this peak

    def summary_line(self) -> str:
        """'peak 18.3 GiB of 24 GiB (trn2, LNC=2)' — and what overflows when it does not fit."""
        line = f"peak {fmt_bytes(self.peak_bytes)} of {fmt_bytes(self.capacity_bytes)} ({self.chip}, LNC={self.lnc})"
        if self.scale != 1.0:
            line += f" for every tensor x{self.scale:g} (scaled from the captured run)"
        if not self.fits:
            line += f": does not fit, short by {fmt_bytes(-self.headroom_bytes)}"
        elif self.fits_while_profiling is False:
            line += f": fits, but not with DEVICE profiling's ~{fmt_bytes(self.profiling_reserve_bytes)} reserved"
        return line

    def chips_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(c) for c in self.chips])

    def levers_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(lv) for lv in self.levers])

    def advice(self) -> str:
        """One sentence: the verdict and the lever that helps most."""
        line = self.summary_line()
        useful = [lv for lv in self.levers if lv.saving_bytes > 0]
        if not useful:
            return line
        best = max(useful, key=lambda lv: lv.saving_bytes)
        return f"{line}; {best.title} saves {fmt_bytes(best.saving_bytes)} (modeled)"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary_line"] = self.summary_line()
        return d


def chip_fits(peak_bytes: int) -> list[ChipFit]:
    out = []
    for chip in trainium_chips():
        reserve = _profiling_reserve(chip)
        for lnc in chip_spec(chip).lnc_allowed:
            cap, lnc_used, cores = _capacity(chip, lnc)
            out.append(ChipFit(chip=chip, lnc=lnc_used, logical_cores=cores, capacity_bytes=cap, peak_bytes=peak_bytes,
                               headroom_bytes=cap - peak_bytes, fits=peak_bytes <= cap,
                               profiling_reserve_bytes=reserve,
                               fits_while_profiling=None if reserve is None else peak_bytes + reserve <= cap))
    return out


class _Replay:
    """Per-row arrays of one device's replay, with every storage's attributes on its free rows too."""

    def __init__(self, rows: pd.DataFrame) -> None:
        self.rows = rows
        nb = rows["nbytes"].to_numpy(dtype=np.int64)
        self.signed = np.where(rows["kind"].to_numpy() >= 0, nb, -nb)
        self.total = np.cumsum(self.signed)
        first = rows[rows["kind"] >= 0].drop_duplicates("alloc_id", keep="first").set_index("alloc_id")
        self.attr = {c: rows["alloc_id"].map(first[c]).to_numpy(dtype=object)
                     for c in ("category", "dtype", "module", "phase", "output_of", "step", "op")}
        self.row_phase = rows["phase"].to_numpy(dtype=object)
        self.category = self.attr["category"]
        self.nbytes = nb
        self.is_alloc = rows["kind"].to_numpy() > 0
        # the forward module a backward row belongs to ("A.b (backward)" -> "A.b"), None for other rows
        self.backward_of = np.asarray([m.removesuffix(" (backward)") if isinstance(m, str) and m.endswith(" (backward)")
                                       else None for m in rows["module"].to_numpy(dtype=object)], dtype=object)

    def live(self, mask: np.ndarray) -> np.ndarray:
        """Bytes live in the storages selected by `mask` (one bool per row, by storage) after each row."""
        return np.cumsum(np.where(mask, self.signed, 0))

    def cat(self, *names: str) -> np.ndarray:
        return np.isin(self.category, list(names))


def _modules_under(module_col: np.ndarray, path: str) -> np.ndarray:
    prefix = path + "."
    return np.asarray([isinstance(m, str) and (m == path or m.startswith(prefix)) for m in module_col], dtype=bool)


def _checkpoint_groups(rows: pd.DataFrame, classes: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    """Candidate module sets: each group of sibling modules of one class (the repeated blocks), and each
    single module, with activations in the forward pass."""
    acts = rows[(rows["kind"] > 0) & (rows["category"] == "activation")]
    paths = sorted({m for m in acts["module"].dropna().tolist() if m and not m.endswith("(backward)")})
    every = set()
    for p in paths:
        parts = p.split(".")
        every.update(".".join(parts[:d]) for d in range(2, len(parts) + 1))  # never the root module
    groups: dict[tuple[str, str], list[str]] = {}
    for p in every:
        parent = p.rsplit(".", 1)[0]
        groups.setdefault((parent, classes.get(p, "")), []).append(p)
    out = []
    for (parent, cls), members in groups.items():
        if len(members) > 1 and cls:
            label = cls.split(":")[0]
            out.append((f"checkpoint the {len(members)} {label} modules under {parent}", tuple(sorted(members))))
    for p in sorted(every):
        out.append((f"checkpoint {p}", (p,)))
    return out


def _checkpoint_effect(rp: _Replay, modules: tuple[str, ...]) -> int:
    """Modeled peak with each module in `modules` run under torch.utils.checkpoint (non-reentrant): its
    saved activations (not its outputs, which the next module saves) are dropped after its forward and
    recomputed when its backward starts, so they are live again during that module's backward only."""
    acts = rp.cat("activation")
    removed = np.zeros(len(rp.total), dtype=bool)
    extra = np.zeros(len(rp.total), dtype=np.int64)
    steps = rp.attr["step"]
    for m in modules:
        outputs = np.asarray([isinstance(o, str) and m in o.split(";") for o in rp.attr["output_of"]], dtype=bool)
        mask = acts & _modules_under(rp.attr["module"], m) & ~outputs
        removed |= mask
        allocs = rp.is_alloc & mask
        if allocs.any():   # the most one step allocates in the module: recomputed during its backward
            recompute = int(pd.Series(rp.nbytes[allocs]).groupby(steps[allocs]).sum().max())
            extra += np.where(_modules_under(rp.backward_of, m), recompute, 0)
    new = rp.total - rp.live(removed) + extra
    return int(new.max())


def memory_forecast(mem: pd.DataFrame, *, chip: str = "trn2", lnc: int | None = None, device: int | None = None,
                    module_classes: dict[str, str] | None = None, shards: int | None = None,
                    scale: float = 1.0, peak: pd.DataFrame | None = None) -> MemoryForecast:
    """The forecast for `chip` at `lnc` (default: the chip's default LNC) plus every chip/LNC in one table.

    `shards`: cores to shard optimizer state, gradients and parameters over (default: the logical cores of
    one chip at that LNC). `scale` multiplies every byte (a what-if for a proportionally larger model).
    `peak`: `memory_peak(mem, device=device)` of the unscaled record when the caller has it.
    """
    if not scale > 0:
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    if scale != 1.0:
        mem = mem.assign(nbytes=(mem["nbytes"].astype("float64") * scale).round().astype("int64"))
    rows = device_rows(mem, device)
    peak = memory_peak(mem, device=device) if peak is None or scale != 1.0 else peak
    peak_bytes = int(peak.attrs["peak_bytes"])
    cap, lnc_used, cores = _capacity(chip, lnc)
    reserve = _profiling_reserve(chip)
    rp = _Replay(rows)
    n_shards = int(shards or cores)
    levers: list[Lever] = []

    def add(key: str, title: str, new_peak: float, how: str, assumption: str, **kw: Any) -> None:
        new_peak = int(round(new_peak))
        levers.append(Lever(key=key, title=title, peak_bytes=new_peak, saving_bytes=peak_bytes - new_peak,
                            fits=new_peak <= cap, how=how, assumption=assumption, **kw))

    # batch size: activations, inputs and forward/backward temporaries scale with it; the rest does not
    phase = rp.attr["phase"]
    dyn_mask = rp.cat(*_BATCH_CATEGORIES) | (rp.cat("temporary") & np.isin(phase, ["forward", "backward"]))
    dyn = rp.live(dyn_mask)
    static = rp.total - dyn
    batch_assumption = ("activations, input batches and temporaries of the forward and backward passes scale "
                        "linearly with the batch; parameters, gradients, optimizer state and optimizer-step "
                        "temporaries do not")
    add("batch", "halve the batch", (static + 0.5 * dyn).max(),
        "feed half as many samples per step (keep the global batch with 2 gradient-accumulation steps)",
        batch_assumption, factor=0.5)
    if peak_bytes > cap:
        pos = dyn > 0
        r = float(np.min((cap - static[pos]) / dyn[pos])) if pos.any() else float("inf")
        if 0 < r < 1 and static.max() <= cap:
            add("batch", f"batch × {r:.2f} (largest that fits)", (static + r * dyn).max(),
                f"at most {r:.0%} of the current batch per step fits {chip} at LNC={lnc_used}",
                batch_assumption, factor=round(r, 4))
    # activation checkpointing: the best candidate set
    best = None
    for title, mods in _checkpoint_groups(rows, module_classes or {}):
        new = _checkpoint_effect(rp, mods)
        if best is None or new < best[1]:
            best = (title, new, mods)
    if best is not None and best[1] < peak_bytes:
        add("checkpoint", best[0], best[1],
            "wrap each module's call in torch.utils.checkpoint.checkpoint(module, x, use_reentrant=False)",
            "activations saved inside a checkpointed module are dropped (its outputs stay: the next module "
            "saves them) and recomputed during its backward pass, one module at a time",
            modules=best[2])
    # bf16 weights, gradients, optimizer state and activations
    fp32 = np.asarray([d == "float32" for d in rp.attr["dtype"]], dtype=bool)
    add("bf16", "bf16 everywhere (model.to(torch.bfloat16))", (rp.total - 0.5 * rp.live(fp32)).max(),
        "model.to(torch.bfloat16) and bf16 inputs (optimizer state follows the parameters' dtype)",
        "every float32 storage becomes bfloat16 (half the bytes); integer and bool storages are unchanged")
    if fp32.any():
        add("autocast", "autocast the forward pass to bf16 (torch.autocast)",
            autocast_total(rows, rp.total, rp.signed, rp.category, rp.attr["dtype"], rp.attr["op"]).max(),
            "with torch.autocast('neuron', dtype=torch.bfloat16): run the forward pass and the loss "
            "(backward and the optimizer step outside)",
            "parameters, gradients and optimizer state stay float32; activations and temporaries of matmul-class "
            "ops, activation functions, softmax and normalisation outputs become bfloat16; bf16 copies of the "
            "weights matmuls read are made in each step's forward and kept until that step's backward ends (autocast "
            "clears its cast cache when the block exits); nll_loss keeps a float32 copy of its "
            "input; the residual stream stays float32 (profiler/analysis/memory_autocast.py)")
    # sharding over N cores
    keep = 1.0 - 1.0 / n_shards
    opt = rp.live(rp.cat("optimizer_state"))
    grad = rp.live(rp.cat("gradient"))
    param = rp.live(rp.cat("parameter"))
    shard_assumption = (f"even shards over {n_shards} logical cores (one {chip} chip at LNC={lnc_used}); "
                        "communication buffers are not counted")
    if opt.max() > 0:
        owned, unmatched = zero1_rank_state(rows, rp.category, n_shards)
        zero1 = rp.total - opt + rp.live(owned) + rp.live(unmatched) / n_shards
        add("zero1", f"shard optimizer state over {n_shards} cores (ZeRO-1)", zero1.max(),
            "torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=...) in a "
            f"{n_shards}-process job (neuron-studio run -- torchrun --nproc-per-node {n_shards} ...)",
            f"ZeroRedundancyOptimizer's partition over {n_shards} logical cores (one {chip} chip at "
            f"LNC={lnc_used}): each parameter's state on one core, largest parameters first to the least loaded "
            "core; the figure is the core holding the most; communication buffers are not counted",
            factor=float(n_shards))
    units = fsdp_units(rows, module_classes or {})
    wrap = _wrap_text(units, module_classes or {})
    unit_assumption = (f"FSDP units: {wrap}; " if units else "FSDP unit: the whole model (no repeated block); ")
    sharded = rp.total - keep * (opt + grad + param)
    if opt.max() > 0 or grad.max() > 0:
        zero2 = sharded + gathered_bytes(rows, rp.category, units, shards=n_shards, reshard_after_forward=False)
        add("zero2", f"shard optimizer state and gradients over {n_shards} cores (ZeRO-2: FSDP2 without "
            "resharding after forward)", zero2.max(),
            f"fully_shard(m, reshard_after_forward=False) on {wrap}, then fully_shard(model, "
            "reshard_after_forward=False) (torch's ZeRO-2 / FSDP1 SHARD_GRAD_OP)",
            shard_assumption + "; " + unit_assumption + "each unit's parameters are gathered (full size, next to "
            "their shard) from its forward until its backward ends; gradients are full size until their unit's "
            "backward ends, then 1/N; FSDP2's all-gather/reduce-scatter staging copies and backward prefetch are "
            "not modeled", modules=units, factor=float(n_shards))
    if param.max() > 0:
        fsdp = sharded + gathered_bytes(rows, rp.category, units, shards=n_shards, reshard_after_forward=True)
        add("fsdp", f"shard parameters, gradients and optimizer state over {n_shards} cores (FSDP2 / ZeRO-3)",
            fsdp.max(), f"fully_shard(m) on {wrap}, then fully_shard(model)",
            shard_assumption + "; " + unit_assumption + "a unit's parameters are gathered for its forward and "
            "again for its backward; the model's own (root) unit is not resharded after forward, so its "
            "parameters stay gathered from the start of the forward pass to the end of the backward pass; "
            "gradients are full size until their unit's backward ends, then 1/N; FSDP2's all-gather/"
            "reduce-scatter staging copies and backward prefetch are not modeled", modules=units,
            factor=float(n_shards))
    if opt.max() > 0:
        add("cpu_offload", "keep optimizer state on the host (CPU offload)", (rp.total - opt).max(),
            "run the optimizer step on host copies (DeepSpeed ZeRO-Offload, or a CPU AdamW over .cpu() "
            "gradients, copying the parameters back)",
            "optimizer state leaves device memory entirely; gradients and parameters cross the host link "
            "every step (that time is not modeled here)")
    fits = peak_bytes <= cap
    return MemoryForecast(
        device=int(rows["device"].iloc[0]), chip=chip, lnc=lnc_used, peak_bytes=peak_bytes,
        by_category=dict(peak.attrs["by_category"]), capacity_bytes=cap, headroom_bytes=cap - peak_bytes, fits=fits,
        profiling_reserve_bytes=reserve,
        fits_while_profiling=None if reserve is None else peak_bytes + reserve <= cap,
        chips=chip_fits(peak_bytes),
        levers=sorted((lv for lv in levers if lv.saving_bytes > 0), key=lambda lv: -lv.saving_bytes),
        no_help=[lv for lv in levers if lv.saving_bytes <= 0],
        assumptions=[RUNTIME_ASSUMPTION, RESERVE_ASSUMPTION] + (
            [f"every captured byte multiplied by {scale:g}: a what-if for a proportionally larger model, "
             "not a run of it"] if scale != 1.0 else []),
        scale=float(scale),
    )


def forecast_from_peak(peak_bytes: int, *, chip: str = "trn2", lnc: int | None = None,
                       source: str = "measured peak") -> MemoryForecast:
    """The fit verdict from a peak alone (real Trainium: TorchNeuron's measured `max_memory_allocated()`).
    Without a per-allocation record there is no category breakdown and no lever."""
    cap, lnc_used, _ = _capacity(chip, lnc)
    reserve = _profiling_reserve(chip)
    return MemoryForecast(
        device=0, chip=chip, lnc=lnc_used, peak_bytes=int(peak_bytes), by_category={}, capacity_bytes=cap,
        headroom_bytes=cap - int(peak_bytes), fits=peak_bytes <= cap, profiling_reserve_bytes=reserve,
        fits_while_profiling=None if reserve is None else peak_bytes + reserve <= cap, chips=chip_fits(int(peak_bytes)),
        levers=[], assumptions=[RUNTIME_ASSUMPTION, RESERVE_ASSUMPTION,
                                f"{source}: no per-allocation record, so no categories or levers; profile the same "
                                "step on the emulator (NEURON_STUDIO_BACKEND=emulated) for those"],
        modeled=False)


def _wrap_text(units: tuple[str, ...], classes: dict[str, str]) -> str:
    """'each of the 4 PreNormBlock modules under GPT.blocks' (what the FSDP levers wrap before the model)."""
    if not units:
        return "no submodule"
    label = classes.get(units[0], "").split(":")[0] or "repeated"
    return f"each of the {len(units)} {label} modules under {units[0].rsplit('.', 1)[0]}"
