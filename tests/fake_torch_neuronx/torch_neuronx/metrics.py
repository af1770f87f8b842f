"""Fake torch_neuronx.metrics: the April source's API (`torch_neuronx/metrics.py`) over the fake's counters."""
from __future__ import annotations

from typing import Any

from torch_neuronx import _fake


def is_enabled() -> bool:
    return _fake.METRICS_ENABLED[0]


def set_enabled(enabled: bool) -> None:
    _fake.CALLS.append(("metrics.set_enabled", bool(enabled)))
    _fake.METRICS_ENABLED[0] = bool(enabled)


def get_counter_names() -> list[str]:
    return [k for k, v in _fake.COUNTERS.items() if v]


def get_counter_value(name: str) -> int | None:
    return _fake.COUNTERS.get(name)


def get_metric_names() -> list[str]:
    return [k for k, v in _fake.SAMPLES.items() if v]


def get_metric_data(name: str) -> dict[str, Any] | None:
    s = _fake.SAMPLES.get(name)
    if not s:
        return None
    acc = sum(x["value"] for x in s)
    return {"accumulator": acc, "total_samples": len(s), "repr": f"{acc}", "samples": [dict(x) for x in s]}


def report() -> str:
    return "\n".join(f"Counter: {k}\n  Value: {v}" for k, v in _fake.COUNTERS.items())


def clear_counters() -> None:
    _fake.COUNTERS.clear()


def clear_metrics() -> None:
    _fake.SAMPLES.clear()


def clear_all() -> None:
    clear_counters()
    clear_metrics()
