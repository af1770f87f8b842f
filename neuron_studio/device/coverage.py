"""Op coverage: which aten ops TorchNeuron lowers and which fall back to CPU, read from coverage.json."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import torch

__all__ = ["OpCoverage", "op_coverage", "load_coverage"]


@dataclass(frozen=True)
class OpCoverage:
    fallback_ops: dict[str, str]          # aten name -> reason key
    reasons: dict[str, str]               # reason key -> explanation
    eager_casts: dict[str, dict[str, str]]
    provenance: dict[str, str] = field(default_factory=dict)     # aten name -> provenance key (fallbacks and device ops)
    sources: dict[str, str] = field(default_factory=dict)        # provenance key -> what the evidence is
    device_ops: dict[str, dict[str, str]] = field(default_factory=dict)  # device ops with host work, per the evidence
    round_trip_casts: dict[str, Any] = field(default_factory=dict)  # 64-bit casts that go through the host
    memory_format_errors: dict[str, Any] = field(default_factory=dict)  # memory formats TorchNeuron rejects

    def evidence(self, name: str) -> str:
        """Where the coverage claim about `name` comes from ("" for ops the file says nothing about)."""
        key = self.provenance.get(name, "")
        return self.sources.get(key, key)

    def fallback_reason(self, name: str, args: Any = ()) -> str | None:
        """Reason key if this op would run on CPU under TorchNeuron, else None."""
        reason = self.fallback_ops.get(name)
        if reason is not None:
            return reason
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.layout != torch.strided:
                    return "sparse_layout"
                if a.is_nested:
                    return "nested_tensor"
        return None

    def round_trip_cast(self, name: str, in_dtypes: tuple[str, ...], out_dtypes: tuple[str, ...]) -> str | None:
        """Reason key if this op is an on-device cast to or from a 64-bit type (a host round trip with a sync)."""
        rt = self.round_trip_casts
        if not rt or name not in rt["ops"] or not in_dtypes or not out_dtypes:
            return None
        src, dst = in_dtypes[-1] if name == "aten::copy_" else in_dtypes[0], out_dtypes[0]
        if src == dst or not ({src, dst} & set(rt["dtypes"])):
            return None
        return rt["reason"]

    def memory_format_error(self, memory_format: str) -> str | None:
        """TorchNeuron's error message for a memory format it rejects ("channels_last"), else None."""
        mf = self.memory_format_errors
        return mf["message"] if mf and memory_format in mf["memory_formats"] else None

    def cast_tags(self, dtypes: tuple[str, ...]) -> tuple[str, ...]:
        tags = []
        for dt in dtypes:
            c = self.eager_casts.get(dt)
            if c is not None and c["tag"] not in tags:
                tags.append(c["tag"])
        return tuple(tags)

    def explain(self, reason: str) -> str:
        return self.reasons.get(reason, reason)


def load_coverage(text: str) -> OpCoverage:
    data = json.loads(text)
    if data.get("version") != 1:
        raise ValueError(f"unsupported op-coverage file version {data.get('version')!r}; expected 1")
    reasons = data["reasons"]
    sources = dict(data.get("provenance", {}))
    fallbacks: dict[str, str] = {}
    provenance: dict[str, str] = {}
    for op, entry in data["fallback_ops"].items():
        reason = entry.get("reason") if isinstance(entry, dict) else entry
        if reason not in reasons:
            raise ValueError(f"op-coverage: {op} names unknown reason {reason!r}; known: {sorted(reasons)}")
        fallbacks[op] = reason
        if isinstance(entry, dict):
            prov = entry.get("provenance")
            if sources and prov not in sources:
                raise ValueError(f"op-coverage: {op} names unknown provenance {prov!r}; known: {sorted(sources)}")
            provenance[op] = str(prov)
    device_ops = {op: dict(v) for op, v in data.get("device_ops", {}).items()}
    for op, v in device_ops.items():
        if sources and v.get("provenance") not in sources:
            raise ValueError(f"op-coverage: {op} names unknown provenance {v.get('provenance')!r}")
        provenance.setdefault(op, str(v.get("provenance", "")))
    round_trip = dict(data.get("host_round_trip_casts", {}))
    if round_trip and round_trip.get("reason") not in reasons:
        raise ValueError(f"op-coverage: host_round_trip_casts names unknown reason {round_trip.get('reason')!r}")
    formats = dict(data.get("memory_format_errors", {}))
    for what, entry in (("host_round_trip_casts", round_trip), ("memory_format_errors", formats)):
        if entry and sources and entry.get("provenance") not in sources:
            raise ValueError(f"op-coverage: {what} names unknown provenance {entry.get('provenance')!r}")
    return OpCoverage(fallbacks, dict(reasons), dict(data["eager_casts"]), provenance, sources, device_ops,
                      round_trip, formats)


@functools.cache
def op_coverage() -> OpCoverage:
    text = resources.files("neuron_studio.device").joinpath("coverage.json").read_text()
    return load_coverage(text)
