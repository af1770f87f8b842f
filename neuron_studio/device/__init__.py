"""The `neuron` device: real TorchNeuron when present, the built-in emulator everywhere else.

`backend()` decides once per process. `register()` (run by `import neuron_studio`) makes the device
usable; it is the only function here with side effects on torch.
"""
from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass, field

from neuron_studio.device.errors import BackendError, UnsupportedMemoryFormatError
from neuron_studio.device.events import EventBus, OpBatch, OpEvent, Subscription
from neuron_studio.device.targets import TARGETS, Target, target_for

__all__ = [
    "BackendError",
    "UnsupportedMemoryFormatError",
    "DeviceInfo",
    "OpEvent",
    "OpBatch",
    "Subscription",
    "backend",
    "register",
    "info",
    "subscribe",
    "set_target",
    "target",
    "registry",
]

ENV_BACKEND = "NEURON_STUDIO_BACKEND"
ENV_CHIP = "NEURON_STUDIO_CHIP"
ENV_LNC = "NEURON_LOGICAL_NC_CONFIG"


@dataclass
class _Registry:
    """Per-process device state: the one place (with the run store) that holds global mutable state."""

    backend: str
    target: Target
    device_count: int
    bus: EventBus = field(default_factory=EventBus)
    memory: object = None  # the emulator's MemoryTracker (None on the real backend)
    compile_log: list = field(default_factory=list)  # one dict per graph compile (compile mode)
    registered: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_REGISTRY: _Registry | None = None
_REGISTRY_LOCK = threading.Lock()


def _real_available() -> tuple[bool, str]:
    try:
        import torch_neuronx  # noqa: F401
    except ImportError as e:
        return False, f"`import torch_neuronx` failed ({e})"
    import torch

    mod = getattr(torch, "neuron", None)
    if mod is None or not mod.is_available():
        return False, "torch_neuronx imported but torch.neuron.is_available() is False (no Neuron device visible)"
    return True, ""


def _select_backend() -> str:
    choice = os.environ.get(ENV_BACKEND, "auto").strip().lower() or "auto"
    if choice not in ("auto", "real", "emulated"):
        raise BackendError(f"{ENV_BACKEND}={choice!r} is not one of auto, real, emulated")
    if choice == "emulated":
        return "emulated"
    ok, why = _real_available()
    if choice == "real" and not ok:
        raise BackendError(
            f"{ENV_BACKEND}=real but the real TorchNeuron backend is not usable: {why}. "
            "Install the `torch-neuronx` 2.13/2.14 package on a Trn2/Trn3 instance with the Neuron driver, "
            f"or unset {ENV_BACKEND} (or set it to 'emulated') to use the built-in emulator."
        )
    return "real" if ok else "emulated"


def registry() -> _Registry:
    """The process's device registry, created on first use (never at import)."""
    global _REGISTRY
    with _REGISTRY_LOCK:
        if _REGISTRY is None:
            which = _select_backend()
            tgt = target_for(os.environ.get(ENV_CHIP, "trn2"), _lnc_from_env())
            if which == "real":
                import torch

                count = torch.neuron.device_count()
            else:
                count = tgt.logical_cores
            _REGISTRY = _Registry(backend=which, target=tgt, device_count=count)
        return _REGISTRY


def _lnc_from_env() -> int | None:
    raw = os.environ.get(ENV_LNC)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise BackendError(f"{ENV_LNC}={raw!r} is not an integer (use 1 or 2)") from None


def backend() -> str:
    """'real' or 'emulated' — decided once per process."""
    return registry().backend


def register() -> _Registry:
    """Make the `neuron` device usable in this process (idempotent)."""
    reg = registry()
    with reg.lock:
        if reg.registered:
            return reg
        if reg.backend == "emulated":
            from neuron_studio.device.emulator.registration import register_emulator

            register_emulator(reg)
        else:
            from neuron_studio.device.real import register_real

            register_real(reg)
        reg.registered = True
    return reg


def subscribe(capacity: int = 1_000_000, with_source: bool = False) -> Subscription:
    """Receive the events of every op the device runs from now on (until `.close()`): `drain()` returns them as
    OpEvent objects, `drain_columns()` as an OpBatch (columns, what the profiler reads)."""
    return register().bus.subscribe(capacity=capacity, with_source=with_source)


def target() -> Target:
    return registry().target


def set_target(chip: str | None = None, lnc: int | None = None) -> Target:
    """Choose the chip the emulator models (trn1/trn2/trn3). Device count stays as registered."""
    reg = registry()
    reg.target = target_for(chip or reg.target.chip, lnc)
    return reg.target


@dataclass(frozen=True)
class DeviceInfo:
    backend: str
    chip: str
    chip_name: str
    lnc: int
    logical_cores: int
    physical_cores_per_chip: int
    device_count: int
    hbm_bytes_per_logical_core: int
    torch_version: str
    torch_neuronx_version: str | None

    def to_dict(self) -> dict:
        return asdict(self)

    def _repr_pretty_(self, p, cycle) -> None:  # noqa: ANN001
        p.text(self.describe())

    def describe(self) -> str:
        mode = "emulated on CPU, timing modeled" if self.backend == "emulated" else "real TorchNeuron, timing measured"
        return (
            f"neuron device: {self.backend} ({mode})\n"
            f"  target chip:    {self.chip_name} ({self.chip}), LNC={self.lnc} -> {self.logical_cores} logical "
            f"NeuronCores per chip ({self.physical_cores_per_chip} physical)\n"
            f"  devices:        neuron:0 .. neuron:{self.device_count - 1}\n"
            f"  HBM per core:   {self.hbm_bytes_per_logical_core / 2**30:.0f} GiB\n"
            f"  torch:          {self.torch_version}"
            + (f"\n  torch-neuronx:  {self.torch_neuronx_version}" if self.torch_neuronx_version else "")
        )


def info(chip: str | None = None) -> DeviceInfo:
    """What the `neuron` device is here: backend, target chip, logical NeuronCores, torch version."""
    import torch

    reg = register()
    tgt = target_for(chip, None) if chip else reg.target
    nx = None
    if reg.backend == "real":
        import torch_neuronx

        nx = getattr(torch_neuronx, "__version__", "unknown")
    return DeviceInfo(
        backend=reg.backend,
        chip=tgt.chip,
        chip_name=tgt.chip_name,
        lnc=tgt.lnc,
        logical_cores=tgt.logical_cores,
        physical_cores_per_chip=tgt.physical_cores,
        device_count=reg.device_count,
        hbm_bytes_per_logical_core=tgt.hbm_bytes_per_logical_core,
        torch_version=torch.__version__,
        torch_neuronx_version=nx,
    )


_ = TARGETS  # re-exported for callers that list the choices
