"""Op coverage: which aten ops TorchNeuron lowers and which fall back to CPU, read from coverage.json."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch

__all__ = ["OpCoverage", "op_coverage", "load_coverage"]


@dataclass(frozen=True)
class OpCoverage:
    fallback_ops: dict[str, str]          # aten name -> reason key
    reasons: dict[str, str]               # reason key -> explanation
    eager_casts: dict[str, dict[str, str]]

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
    for op, reason in data["fallback_ops"].items():
        if reason not in reasons:
            raise ValueError(f"op-coverage: {op} names unknown reason {reason!r}; known: {sorted(reasons)}")
    return OpCoverage(dict(data["fallback_ops"]), dict(reasons), dict(data["eager_casts"]))


@functools.cache
def op_coverage() -> OpCoverage:
    text = resources.files("neuron_studio.device").joinpath("coverage.json").read_text()
    return load_coverage(text)
