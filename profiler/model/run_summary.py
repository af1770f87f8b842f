"""Per-run figures: step time, engine utilization, MFU/MBU, arithmetic intensity, H100 comparison, cost.

Every ratio guards a zero denominator (empty runs give 0.0, never NaN).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from neuron_studio.profiler.model.ops import ENGINES

__all__ = ["RunSummary", "engine_figures", "cost_per_step", "ratio"]

_REPORTED_ENGINES = tuple(e for e in ENGINES if e != "none")


def ratio(num: float, den: float) -> float:
    """num/den, or 0.0 when the denominator is not positive (empty or zero-time runs)."""
    return float(num) / float(den) if den > 0 else 0.0


def engine_figures(engine: np.ndarray, duration_ns: np.ndarray, step_ns: float,
                   cores: int) -> tuple[dict[str, float], dict[str, float]]:
    """Busy time per engine (summed over cores) and utilization = busy / (step time × cores)."""
    busy = np.bincount(engine.astype(np.int64), weights=duration_ns, minlength=len(ENGINES)) if len(engine) \
        else np.zeros(len(ENGINES))
    busy_d = {e: float(busy[i]) for i, e in enumerate(ENGINES) if e != "none"}
    util = {e: min(1.0, ratio(v, step_ns * cores)) for e, v in busy_d.items()}
    return busy_d, util


def cost_per_step(step_ns: float, price_per_chip_hour: float, chips: int) -> float:
    """USD for one step: price per chip-hour × chips × step hours."""
    return price_per_chip_hour * chips * step_ns / 3.6e12


@dataclass(frozen=True)
class RunSummary:
    """Modeled figures of one run on one chip (all times ns, all modeled: never measured)."""

    chip: str
    mode: str
    n_ops: int
    step_time_ns: float
    launches: int
    groups: int
    cores_used: int
    chips_used: int
    lnc: int
    engine_busy_ns: dict[str, float]
    engine_utilization: dict[str, float]
    mfu: float
    mbu: float
    arithmetic_intensity: float
    total_flops: float
    total_bytes: float
    peak_flops_per_s: float           # BF16 Tensor Engine peak of the cores used (MFU denominator)
    hbm_bytes_per_s: float            # HBM bandwidth of the cores used (MBU denominator)
    fallback_ops: int
    host_fallback_ns: float           # modeled host time + copies of CPU-fallback ops
    recompiles: int
    compile_time_ns: float            # recompiles × compile_time_per_graph_ns; not part of step time
    h100_step_time_ns: float
    h100_gpus: int
    price_per_chip_hour_usd: float
    h100_price_per_chip_hour_usd: float
    cost_per_step_usd: float
    cost_per_1000_steps_usd: float
    h100_cost_per_step_usd: float
    h100_cost_per_1000_steps_usd: float
    price_sources: dict[str, str] = field(default_factory=dict)
    assumptions: dict[str, str] = field(default_factory=dict)
    modeled: bool = True
    step_time_low_ns: float = 0.0     # step time with every unmeasured assumption at its low plausible value
    step_time_high_ns: float = 0.0    # ... and at its high plausible value
    range_drivers: dict[str, str] = field(default_factory=dict)   # assumption -> its range and share of the spread
    busiest_core_launches: int = 0    # launches on the core with the most, over the whole run (every step)
    calibration_error: float | None = None  # geometric-mean error of the model over this chip's published measurements
    calibration: dict[str, object] = field(default_factory=dict)  # CalibrationSummary.to_dict() of this chip

    def to_dict(self) -> dict[str, object]:
        """Plain dict (JSON-friendly) for stores and renderers."""
        from dataclasses import asdict

        return asdict(self)
