"""`torch.distributed` on the emulated `neuron` device: gloo underneath, one process per NeuronCore.

How it works. Collectives reach the device as `c10d::*` dispatcher ops (`c10d::allreduce_`,
`c10d::_allgather_base_`, ...). The device's C++ kernel runs them as on CPU: on CPU aliases of the neuron
tensors' bytes, with the process group's CPU backend (gloo), so in-place collectives update the neuron tensors.
`install()` maps the `neuron` device type to gloo, so `init_process_group(backend="gloo")`, `pg._get_backend(
torch.device("neuron"))` and FSDP2's device checks work; a group made for the accelerator only
(`init_process_group()` with no backend) lends its gloo backend to CPU the first time a collective runs.

Recording. Each collective is one OpEvent named after the op ("c10d::allreduce_") on the rank that ran it.
`collective_fields` gives the extra fields the event should carry: `transfer_bytes` (the message size,
NCCL-tests' "size": the reduced tensor for all-reduce, the gathered output for all-gather, the input for
reduce-scatter), the tag "collective" and tags "group=<name>", "world=<n>", "rank=<r>".
"""
from __future__ import annotations

import os
import threading
from typing import Any

import torch

__all__ = ["install", "is_collective", "collective_fields", "COLLECTIVE_TAG", "message_bytes", "rank_info"]

COLLECTIVE_TAG = "collective"
_INSTALLED = False
_LOCK = threading.Lock()

# Which argument holds the message whose size the collective reports (see module docs).
_SIZE_ARG: dict[str, int] = {
    "allreduce_": 0, "allreduce_coalesced_": 0, "broadcast_": 0, "reduce_": 0,
    "allgather_": 0, "_allgather_base_": 0, "allgather_coalesced_": 0, "allgather_into_tensor_coalesced_": 0,
    "gather_": 0,
    "reduce_scatter_": 1, "_reduce_scatter_base_": 1, "reduce_scatter_tensor_coalesced_": 1,
    "alltoall_": 1, "alltoall_base_": 1, "scatter_": 1,
    "send": 0, "recv_": 0, "recv_any_source_": 0,
}


def is_collective(name: str) -> bool:
    """True for op names recorded for collectives ("c10d::allreduce_")."""
    return name.startswith("c10d::")


def _tensors(a: Any) -> list[torch.Tensor]:
    if isinstance(a, torch.Tensor):
        return [a]
    if isinstance(a, (list, tuple)):
        out: list[torch.Tensor] = []
        for x in a:
            out.extend(_tensors(x))
        return out
    return []


def message_bytes(op: str, args: tuple) -> int:
    """Bytes of the collective's message (0 for barriers and unknown ops)."""
    base = op.split("::", 1)[-1].split(".", 1)[0]
    i = _SIZE_ARG.get(base)
    if i is None or i >= len(args):
        return 0
    return int(sum(t.numel() * t.element_size() for t in _tensors(args[i])))


def _group_of(args: tuple) -> Any:
    for a in args:
        if isinstance(a, torch.ScriptObject) or type(a).__name__ == "ProcessGroup":
            try:
                return torch.distributed.ProcessGroup.unbox(a) if isinstance(a, torch.ScriptObject) else a
            except Exception:  # noqa: BLE001 - a group we cannot unbox is reported as unknown
                return None
    return None


def collective_fields(func: Any, uargs: tuple, kwargs: dict, out: Any) -> dict[str, Any]:
    """Extra OpEvent fields for a collective: transfer_bytes and tags (collective, group, world, rank)."""
    name = func._schema.name
    pg = _group_of(tuple(uargs))
    tags = [COLLECTIVE_TAG]
    if pg is not None:
        try:
            tags.append(f"group={pg.group_name}")
        except Exception:  # noqa: BLE001 - unnamed groups
            pass
        try:
            tags.append(f"world={pg.size()}")
            tags.append(f"rank={pg.rank()}")
        except Exception:  # noqa: BLE001
            pass
    return {"transfer_bytes": message_bytes(name, tuple(uargs)), "tags": tuple(tags)}


def _c10d_ops() -> list[Any]:
    ops = []
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("c10d::"):
            continue
        base, _, overload = qualified[len("c10d::"):].partition(".")
        packet = getattr(torch.ops.c10d, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is not None:
            ops.append(op)
    return ops


# -- streams and events: the emulator runs every op synchronously, so they only have to exist ------------
class Stream:
    """An emulated device stream (FSDP2 creates several). Ops run synchronously: waits are no-ops."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("neuron", 0) if device is None else torch.device(device)
        self.priority = priority

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def wait_event(self, event: "Event") -> None:
        pass

    def record_event(self, event: "Event | None" = None) -> "Event":
        return (event or Event()).record(self)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.device == self.device and other.priority == self.priority

    def __hash__(self) -> int:
        return hash((self.device, self.priority))


class Event:
    """An emulated device event: recorded work is always complete."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._t: float | None = None

    def record(self, stream: Stream | None = None) -> "Event":
        import time

        self._t = time.perf_counter()
        return self

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "Event") -> float:
        return ((end._t or 0.0) - (self._t or 0.0)) * 1000.0


def current_stream(device: Any = None) -> Stream:
    return Stream(device)


def default_stream(device: Any = None) -> Stream:
    return Stream(device)


class _StreamContext:
    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream

    def __enter__(self) -> Stream | None:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        pass


def stream(s: Stream | None) -> _StreamContext:
    return _StreamContext(s)


def _map_backend() -> None:
    from torch.distributed import Backend

    Backend.default_device_backend_map.setdefault("neuron", "gloo")
    caps = Backend.backend_capability.get("gloo")
    if caps is not None and "neuron" not in caps:
        Backend.backend_capability["gloo"] = list(caps) + ["neuron"]


def install() -> bool:
    """Make collectives on neuron tensors run on gloo and be recorded (idempotent). False if torch has no
    distributed support built in."""
    global _INSTALLED
    with _LOCK:
        if _INSTALLED:
            return True
        if not torch.distributed.is_available():
            return False
        import importlib

        importlib.import_module("torch.distributed")  # registers the c10d ops with the dispatcher

        from neuron_studio.device.emulator.op_events import RECORD_EXTRA

        for op in _c10d_ops():
            RECORD_EXTRA.setdefault(op, collective_fields)
        _map_backend()
        _INSTALLED = True
        return True


def rank_info() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) of this process from torchrun's environment (0, 0, 1 without it)."""
    def env(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    return env("RANK", 0), env("LOCAL_RANK", 0), env("WORLD_SIZE", 1)
