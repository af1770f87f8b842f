"""A step with two host-sync places, shared by the sync-point tests (tests/ and extension/ui-tests/)."""
from __future__ import annotations

from typing import Any

import torch

#: The places the step makes the host wait, in step order, and how often per step: (op, reason, count).
PLACES = [("aten::_local_scalar_dense", "item", 20), ("aten::_print", "print", 1)]


def two_sync_places(steps: int, **options: Any) -> Any:
    """A profile of a step that calls `.item()` 20 times at one line and prints a device tensor once at the next
    (its `print` output goes to stdout), profiled `steps` times after one warm-up step."""
    import neuron_studio  # noqa: F401 - registers the neuron device
    from neuron_studio.profiler.capture import profile

    torch.manual_seed(0)
    x = torch.randn(64, device="neuron")

    def step() -> None:
        for i in range(20):
            x[i].item()
        print(x[:2])

    return profile(step, steps=steps, warmup=1, mode="eager", host_events=False, **options)
