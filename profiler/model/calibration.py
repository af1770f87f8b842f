"""The calibration data set: published Trainium measurements the model is checked against (calibration.json).

`benchmarks/bench_calibration.py` reproduces every row on the model and, with `--write`, stores each row's modeled
value in the data set; BENCHMARKS.md holds its table. The calibration error a modeled profile states
(`calibration_summary(chip)`, per chip: only that chip's own rows) is derived from those stored values, never
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
           "stated_error", "write_modeled", "CalibrationSummary", "calibration_summary",
           "calibration_summary_or_none"]

CALIBRATION_PATH = Path(__file__).with_name("calibration.json")
_KINDS = ("kernel", "op", "collective", "step", "dma")
_REQUIRED = ("id", "source", "hardware", "hardware_basis", "chip", "config", "metric", "unit", "value", "reproduce")
_BASES = ("stated", "inferred")


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
    hardware_basis: str = "stated"     # "stated" by the source, or "inferred" from other documents

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
                   reproduce="derived:", hardware_basis="inferred")


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
    if raw["hardware_basis"] not in _BASES:
        raise CalibrationError(f"calibration row {rid!r}: hardware_basis must be one of {_BASES}")
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
                          modeled=float(modeled) if modeled is not None else None,
                          hardware_basis=str(raw["hardware_basis"]))


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


def stated_error(rows: Iterable[CalibrationRow], chip: str | None = None) -> float:
    """Geometric-mean error of the stored modeled values over the rows in the fit (of `chip`, when given)."""
    fit = [r for r in rows if r.in_fit and (chip is None or r.chip == chip)]
    missing = [r.id for r in fit if r.modeled is None]
    if missing:
        raise CalibrationError(f"calibration rows {missing} have no stored modeled value: run "
                               "`python benchmarks/bench_calibration.py --write`")
    return geomean_error(r.modeled / r.value for r in fit)  # type: ignore[operator]


@dataclass(frozen=True)
class CalibrationSummary:
    """How far the model is from the published measurements of one chip: the figure a modeled profile states.

    `n_rows` rows of the data set in the fit for `chip` with a stored modeled value; `lo`/`hi` the smallest and
    largest modeled/measured ratio, `geomean` the geometric-mean error (exp mean |ln ratio|). A chip without a
    measured row has n_rows 0 and None for the numbers: its figures are derived from specifications only."""

    chip: str
    n_rows: int
    lo: float | None
    hi: float | None
    geomean: float | None
    text: str

    @property
    def validated(self) -> bool:
        """True when at least one published measurement of this chip checks the model."""
        return self.n_rows > 0

    def to_dict(self) -> dict[str, Any]:
        return {"chip": self.chip, "n_rows": self.n_rows, "lo": self.lo, "hi": self.hi, "geomean": self.geomean,
                "text": self.text, "validated": self.validated}


def _summary_of(chip: str, rows: Iterable[CalibrationRow]) -> CalibrationSummary:
    mine = [r for r in rows if r.in_fit and r.chip == chip]
    missing = [r.id for r in mine if r.modeled is None]
    if missing:
        raise CalibrationError(f"calibration rows {missing} have no stored modeled value: run "
                               "`python benchmarks/bench_calibration.py --write`")
    if not mine:
        return CalibrationSummary(chip, 0, None, None, None, f"{chip}: not validated against a measurement")
    ratios = [r.modeled / r.value for r in mine]  # type: ignore[operator]
    lo, hi, g = min(ratios), max(ratios), geomean_error(ratios)
    kinds = sorted({r.kind for r in mine})
    what = "published kernels" if kinds == ["kernel"] else "published measurements"
    text = f"{chip}: modeled/measured {lo:.2f}–{hi:.2f}× on {len(mine)} {what} (typical error {g:.2f}×)"
    return CalibrationSummary(chip, len(mine), lo, hi, g, text)


@functools.cache
def _summary_cached(chip: str, path: str, mtime_ns: int) -> CalibrationSummary:
    return _summary_of(chip, load_calibration(path))


def calibration_summary(chip: str, path: Path | str | None = None) -> CalibrationSummary:
    """The model's error on `chip`'s own published measurements (read once per data-set file version).

    Only rows measured on `chip` count: a Trn1 fit says nothing about a Trn2 prediction. Raises
    CalibrationError when a row in the fit has no stored modeled value (run bench_calibration.py --write)."""
    p = Path(path) if path is not None else CALIBRATION_PATH
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as exc:
        raise CalibrationError(f"cannot read the calibration data set {p}: {exc}") from exc
    return _summary_cached(str(chip), str(p), mtime)


def calibration_summary_or_none(chip: str) -> CalibrationSummary | None:
    """`calibration_summary(chip)`, or None while the data set has no stored modeled values (the benchmark that
    stores them runs the model itself): a profile then states no calibration rather than a made-up one."""
    try:
        return calibration_summary(chip)
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
