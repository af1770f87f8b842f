"""The real TorchNeuron backend: nothing to emulate, only to observe.

TorchNeuron registers `neuron` itself (via its `torch.backends` entry point or `import torch_neuronx`).
The studio does not record an OpEvent per op here; per cell it reads TorchNeuron's own op tracking
(trainium.md §1.3), the effective eager switches (§1.4, §1.10) and, for compiled cells, the Dynamo metrics.
Device timing comes from the Neuron profiler (`neuron_studio.profiler.real_capture`).

Nothing in this module imports `torch_neuronx` at import time: every function that needs it imports it on
call, and only the real backend calls them, so the emulated path never loads TorchNeuron.
"""
from __future__ import annotations

import collections
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

__all__ = [
    "register_real",
    "OpTracking",
    "OpTracker",
    "Switch",
    "EAGER_SWITCHES",
    "eager_switches",
    "dynamo_metrics",
    "reset_dynamo_metrics",
    "torch_neuronx_version",
]


def _nx() -> Any:
    import torch_neuronx

    return torch_neuronx


def register_real(registry: Any) -> None:
    """Import TorchNeuron (registers the `neuron` device and `torch.neuron`); nothing else to set up."""
    _nx()
    import torch

    if getattr(torch, "neuron", None) is None:  # pragma: no cover - TorchNeuron always creates it
        from neuron_studio.device.errors import BackendError

        raise BackendError("torch_neuronx imported but did not create torch.neuron; reinstall torch-neuronx")


def torch_neuronx_version() -> str | None:
    try:
        return str(getattr(_nx(), "__version__", "unknown"))
    except ImportError:
        return None


# -- op tracking ---------------------------------------------------------------------------------------
def _counts(ops: Any) -> dict[str, int]:
    """TorchNeuron returns a set of op names (April source); accept a Counter/dict or any iterable too."""
    if ops is None:
        return {}
    if isinstance(ops, Mapping):
        return {str(k): int(v) for k, v in ops.items()}
    if isinstance(ops, (str, bytes)):
        ops = [ops]
    return dict(collections.Counter(str(o) for o in ops))


@dataclass(frozen=True)
class OpTracking:
    """Which ops TorchNeuron ran on the device and which fell back to CPU during one cell.

    `executed` / `fallback`: op name -> count. TorchNeuron's API returns sets, so counts are 1 unless a
    future release reports counts; treat them as "seen" flags.
    """

    executed: dict[str, int] = field(default_factory=dict)
    fallback: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_api(cls, executed: Any, fallback: Any) -> "OpTracking":
        return cls(executed=_counts(executed), fallback=_counts(fallback))

    @property
    def fallback_ops(self) -> list[str]:
        return sorted(self.fallback)

    @property
    def executed_ops(self) -> list[str]:
        return sorted(self.executed)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "OpTracking":
        d = d or {}
        return cls(executed=_counts(d.get("executed")), fallback=_counts(d.get("fallback")))


class OpTracker:
    """`with OpTracker() as t: run_cell()` then `t.result`: clear TorchNeuron's op tracking before, read after.

    The result is set even when the cell raises (the partial cell's tracking is still useful).
    """

    def __init__(self) -> None:
        self.result: OpTracking | None = None

    def __enter__(self) -> "OpTracker":
        _nx().clear_op_tracking()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        nx = _nx()
        self.result = OpTracking.from_api(nx.get_executed_ops(), nx.get_fallback_ops())


# -- eager switches ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Switch:
    """One TorchNeuron switch as it is in effect: its value, where it came from and what it means."""

    name: str
    value: str
    source: str          # "env" (set in the environment) or "default" (unset: TorchNeuron's default applies)
    default: str
    meaning: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


# (name, default, meaning). Defaults from the April 2026 TorchNeuron source (trainium.md §1.4, §1.10); the
# public 2.33/2.14 defaults are unconfirmed (§7), so the value shown is always what the process sees.
EAGER_SWITCHES: tuple[tuple[str, str, str], ...] = (
    ("NEURON_LAUNCH_BLOCKING", "1",
     "1 = synchronous execution (each op waits for the device); 0 = async. RELEASE builds default to 1 "
     "(set with os.environ.setdefault on import), DEV builds to 0"),
    ("TORCH_NEURONX_ENABLE_CONCATENATION", "0",
     "1 = op concatenation (Adaptive Eager fusion of queued ops); off by default in the April source; "
     "torch.use_deterministic_algorithms disables it"),
    ("TORCH_NEURONX_ENABLE_PROLOGUE", "1",
     "0 disables prologue folding of view/transpose ops; also off in sync mode or without StableHLO"),
    ("NEURON_LOGICAL_NC_CONFIG", "2",
     "physical NeuronCores per logical core (Trn2/Trn3 default 2 -> 4 logical cores per Trn2 chip; Trn1: 1)"),
    # what happens to ops TorchNeuron cannot run (trainium.md §1.7, §1.8, §1.10)
    ("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "0",
     "1 = only unimplemented ops fall back to CPU; a Neuron execution error raises instead of falling back "
     "silently (RELEASE builds default to 0, DEV builds to 1)"),
    ("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1",
     "1 = a compiled graph that fails raises; 0 = it runs eagerly instead (2.33 docs default 1; April source 0)"),
)


def eager_switches(environ: Mapping[str, str] | None = None, *, chip: str = "trn2") -> dict[str, Switch]:
    """The effective eager switches (read after `import torch_neuronx`, which may set defaults itself)."""
    env = os.environ if environ is None else environ
    out: dict[str, Switch] = {}
    for name, default, meaning in EAGER_SWITCHES:
        if name == "NEURON_LOGICAL_NC_CONFIG" and chip.lower() == "trn1":
            default = "1"
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            out[name] = Switch(name, default, "default", default, meaning)
        else:
            out[name] = Switch(name, raw.strip(), "env", default, meaning)
    return out


def deterministic_mode() -> bool:
    """torch.use_deterministic_algorithms(True) disables Adaptive Eager (trainium.md §1.4)."""
    import torch

    return bool(torch.are_deterministic_algorithms_enabled())


# -- compile metrics -----------------------------------------------------------------------------------
def _plain(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_plain(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def dynamo_metrics() -> dict[str, Any]:
    """`torch_neuronx.get_dynamo_metrics()` as JSON-safe data ({} when the release has no such function)."""
    fn = getattr(_nx(), "get_dynamo_metrics", None)
    if fn is None:
        return {}
    got = fn()
    return _plain(got) if isinstance(got, Mapping) else {"value": _plain(got)}


def reset_dynamo_metrics() -> None:
    fn = getattr(_nx(), "reset_dynamo_metrics", None)
    if fn is not None:
        fn()


def summarize_tracking(tracking: OpTracking, switches: Iterable[Switch] | None = None) -> dict[str, Any]:
    """JSON-ready record of one cell on the real backend (stored in the trace metadata)."""
    return {
        "op_tracking": tracking.to_dict(),
        "switches": {s.name: s.to_dict() for s in (switches or ())},
    }
