"""The calibration data set: published Trainium measurements the model is checked against (calibration.json).

`benchmarks/bench_calibration.py` reproduces every row on the model and, with `--write`, stores each row's modeled
value in the data set; BENCHMARKS.md holds its table. The model's stated calibration error
(`ModelConfig.calibration_error`, shown next to every "modeled" figure) is derived from those stored values, never
copied by hand, and tests/test_calibration.py recomputes the stored values, so neither can drift silently.
"""
from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["CalibrationRow", "CalibrationError", "load_calibration", "geomean_error", "CALIBRATION_PATH",
           "stated_error", "data_set_error", "stated_error_or_none", "write_modeled"]

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
    modeled: float | None = None      # the model's value (µs) as bench_calibration.py --write last stored it

    @property
    def ratio(self) -> float | None:
        """modeled / measured, or None before the benchmark stored a modeled value."""
        return self.modeled / self.value if self.modeled is not None else None

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
    modeled = raw.get("modeled")
    if modeled is not None and (isinstance(modeled, bool) or not isinstance(modeled, (int, float))
                                or not (math.isfinite(modeled) and modeled > 0)):
        raise CalibrationError(f"calibration row {rid!r}: modeled must be a positive number, got {modeled!r}")
    return CalibrationRow(id=str(rid), source=str(raw["source"]), hardware=str(raw["hardware"]),
                          chip=str(raw["chip"]), config=dict(raw["config"]), metric=str(raw["metric"]),
                          value=float(value), reproduce=str(raw["reproduce"]), in_fit=in_fit,
                          not_matched=str(raw.get("not_matched", "")), notes=notes,
                          modeled=float(modeled) if modeled is not None else None)


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


def stated_error(rows: Iterable[CalibrationRow]) -> float:
    """Geometric-mean error of the stored modeled values over the rows in the fit."""
    fit = [r for r in rows if r.in_fit]
    missing = [r.id for r in fit if r.modeled is None]
    if missing:
        raise CalibrationError(f"calibration rows {missing} have no stored modeled value: run "
                               "`python benchmarks/bench_calibration.py --write`")
    return geomean_error(r.modeled / r.value for r in fit)  # type: ignore[operator]


@functools.cache
def _error_of(path: str, mtime_ns: int) -> float:
    return stated_error(load_calibration(path))


def data_set_error(path: Path | str | None = None) -> float:
    """The calibration error the UI states: `stated_error` of the data set (read once per file version).
    Raises CalibrationError when a row in the fit has no stored modeled value."""
    p = Path(path) if path is not None else CALIBRATION_PATH
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as exc:
        raise CalibrationError(f"cannot read the calibration data set {p}: {exc}") from exc
    return _error_of(str(p), mtime)


def stated_error_or_none() -> float | None:
    """`data_set_error()`, or None while the data set has no stored modeled values (the benchmark that stores
    them builds ModelConfigs itself): the UI then states no calibration error rather than a made-up one."""
    try:
        return data_set_error()
    except CalibrationError:
        return None


def write_modeled(modeled: Mapping[str, float], path: Path | str | None = None) -> None:
    """Store each row's modeled value (µs, by row id) in the data set, atomically (temp file + rename)."""
    p = Path(path) if path is not None else CALIBRATION_PATH
    doc = json.loads(p.read_text(encoding="utf-8"))
    known = {r.get("id") for r in doc.get("rows", [])}
    unknown = sorted(set(modeled) - known)
    if unknown:
        raise CalibrationError(f"no calibration row(s) {unknown} in {p}")
    for r in doc["rows"]:
        if r.get("id") in modeled:
            r["modeled"] = round(float(modeled[r["id"]]), 3)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.chmod(tmp, p.stat().st_mode & 0o777)
        os.replace(tmp, p)
    except BaseException:
        os.unlink(tmp)
        raise
