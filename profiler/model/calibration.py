"""The calibration data set: published Trainium measurements the model is checked against (calibration.json).

`benchmarks/bench_calibration.py` reproduces every row on the model; BENCHMARKS.md holds its table. The model's
stated calibration error (`ModelConfig.calibration_error`) is that benchmark's geometric-mean error.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["CalibrationRow", "CalibrationError", "load_calibration", "geomean_error", "CALIBRATION_PATH"]

CALIBRATION_PATH = Path(__file__).with_name("calibration.json")
_KINDS = ("kernel", "op", "collective", "step")
_REQUIRED = ("id", "source", "hardware", "chip", "config", "metric", "unit", "value", "reproduce")


class CalibrationError(ValueError):
    """A calibration row is malformed (names the row and the field)."""


@dataclass(frozen=True)
class CalibrationRow:
    """One published measurement: where it comes from, what ran, the value (µs) and how to reproduce it."""

    id: str
    source: str
    hardware: str
    chip: str
    config: Mapping[str, Any]
    metric: str
    value: float
    reproduce: str
    in_fit: bool = True
    not_matched: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """"kernel" | "op" | "collective" | "step"."""
        return self.reproduce.split(":", 1)[0]

    @classmethod
    def synthetic(cls, chip: str, config: Mapping[str, Any]) -> "CalibrationRow":
        """A row with no published value, for reproducers that model a derived part of a published row."""
        return cls(id="derived", source="derived", hardware="", chip=chip, config=config, metric="", value=1.0,
                   reproduce="derived:")


def _row(raw: Mapping[str, Any]) -> CalibrationRow:
    rid = raw.get("id", "?")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise CalibrationError(f"calibration row {rid!r} is missing {missing}")
    if raw["unit"] != "us":
        raise CalibrationError(f"calibration row {rid!r}: unit must be 'us', got {raw['unit']!r}")
    value = raw["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise CalibrationError(f"calibration row {rid!r}: value must be a positive number, got {value!r}")
    kind = str(raw["reproduce"]).split(":", 1)[0]
    if kind not in _KINDS:
        raise CalibrationError(f"calibration row {rid!r}: reproduce must start with one of {_KINDS}")
    in_fit = bool(raw.get("in_fit", True))
    if not in_fit and not raw.get("not_matched"):
        raise CalibrationError(f"calibration row {rid!r} is out of the fit but says not why ('not_matched')")
    notes = {k: str(raw[k]) for k in ("note", "derivation") if k in raw}
    return CalibrationRow(id=str(rid), source=str(raw["source"]), hardware=str(raw["hardware"]),
                          chip=str(raw["chip"]), config=dict(raw["config"]), metric=str(raw["metric"]),
                          value=float(value), reproduce=str(raw["reproduce"]), in_fit=in_fit,
                          not_matched=str(raw.get("not_matched", "")), notes=notes)


def load_calibration(path: Path | str | None = None) -> list[CalibrationRow]:
    """All rows of the calibration data set, validated."""
    p = Path(path) if path is not None else CALIBRATION_PATH
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"cannot read the calibration data set {p}: {exc}") from exc
    rows = [_row(r) for r in doc.get("rows", [])]
    ids = [r.id for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CalibrationError(f"duplicate calibration row id(s) {dup}")
    return rows


def geomean_error(ratios: Iterable[float]) -> float:
    """exp(mean |ln(modeled / measured)|): 1.0 is perfect; 1.25 means off by 25% on a typical row."""
    logs = [abs(math.log(r)) for r in ratios if r > 0]
    if not logs:
        raise ValueError("geomean_error needs at least one positive ratio")
    return math.exp(sum(logs) / len(logs))
