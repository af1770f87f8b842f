"""Run an NKI kernel on the caller's tensors: `run(kernel, *args)` -> (output, trace)."""
from __future__ import annotations

from typing import Any

import torch

from .interpreter import GridLaunch, JitKernel, KernelTrace

__all__ = ["run"]


def run(kernel: Any, *args: Any, chip: str | None = None, **kwargs: Any) -> tuple[Any, KernelTrace | None]:
    """Run `kernel` (an `@nki.jit` kernel or a `kernel[grid]` launch) and return (output, trace). Output is the
    caller's kind (torch in -> torch out).

    `chip` defaults to the kernel's `platform_target`, else NEURON_PLATFORM_TARGET_OVERRIDE, else trn2. On the
    interpreter the trace holds every instruction; with the real `nki` package (hardware) the kernel
    runs on the device and the trace is None (use the profiler there).
    """
    if isinstance(kernel, (JitKernel, GridLaunch)):
        # the interpreter works on host arrays: neuron (or other device) tensors go through the host and
        # the output comes back to the first argument's device
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        host = [a.detach().cpu() if isinstance(a, torch.Tensor) and a.device.type != "cpu" else a for a in args]
        out, trace = kernel.run(*host, chip=chip, **kwargs)
        if device is not None and device.type != "cpu" and isinstance(out, torch.Tensor):
            out = out.to(device)
        return out, trace
    return kernel(*args, **kwargs), None
