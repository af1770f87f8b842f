"""A user's own NKI kernels (e.g. from AWS's nki-samples): load a kernel file unmodified, swap a kernel into a
model as one custom op, and link the hot path to the kernel's file and line.

`load_kernel(path, name)` imports a kernel file written for NKI (`import neuronxcc.nki as nki` or `import nki`)
with the interpreter serving those imports when the real SDK is absent. `kernel_forward` (used by
`neuron_studio.kernels.use(model, kernel, include=...)`) registers the kernel as a PyTorch custom op
`neuron_studio::nki_<name>` and a registry entry, so profiles of the model point at the user's file and line.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch

from .execute import run
from .interpreter import GridLaunch, JitKernel, nki_imports
from .registry import KernelEntry, get_registry, kernel_source

__all__ = ["load_kernel", "kernel_forward", "kernel_source"]


def load_kernel(path: str | os.PathLike, name: str) -> Any:
    """Import the kernel file at `path` unmodified and return its attribute `name` (an `@nki.jit` kernel).

    The file's directory is on `sys.path` while it imports (for its sibling imports, as its tutorial runs it).
    Raises FileNotFoundError / AttributeError naming the file and the missing kernel.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise FileNotFoundError(f"no kernel file at {file}")
    nki_imports.install()
    module_name = f"neuron_studio_user_kernel_{abs(hash(str(file))):x}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(file.parent))
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        finally:
            sys.path.remove(str(file.parent))
        sys.modules[module_name] = module
    module = sys.modules[module_name]
    if not hasattr(module, name):
        kernels = sorted(n for n, v in vars(module).items() if isinstance(v, JitKernel))
        raise AttributeError(f"{file.name} has no kernel {name!r}; its @nki.jit kernels: {', '.join(kernels)}")
    return getattr(module, name)


def _op_name(kernel: Any) -> str:
    func = getattr(kernel, "func", kernel)
    base = "".join(c if c.isalnum() else "_" for c in getattr(func, "__name__", "kernel")).strip("_")
    return f"nki_{base}"


def _register_op(kernel: Any, fake: Callable[..., torch.Tensor] | None) -> Any:
    """One custom op per kernel: `neuron_studio::nki_<name>(Tensor[] args) -> Tensor` (runs the kernel)."""
    name = _op_name(kernel)
    qualified = f"neuron_studio::{name}"
    existing = getattr(getattr(torch.ops, "neuron_studio", None), name, None)
    if existing is not None and getattr(existing, "_neuron_studio_kernel", None) is kernel:
        return existing

    @torch.library.custom_op(qualified, mutates_args=(), device_types="cpu")
    def op(args: list[torch.Tensor]) -> torch.Tensor:
        out, _ = run(kernel, *args)
        return out.clone() if any(out is a for a in args) else out

    @op.register_fake
    def _(args: list[torch.Tensor]) -> torch.Tensor:
        return fake(*args) if fake is not None else torch.empty_like(args[0])

    packet = getattr(torch.ops.neuron_studio, name)
    packet._neuron_studio_kernel = kernel
    return packet


def kernel_forward(kernel: Any, args: Callable[[torch.nn.Module, torch.Tensor], tuple] | None = None,
                   fake: Callable[..., torch.Tensor] | None = None,
                   output: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                   ) -> Callable[[torch.nn.Module], Callable]:
    """For `neuron_studio.kernels.use(model, kernel, include=...)`: a factory of module forwards that run the
    user's kernel as one custom op (`neuron_studio::nki_<name>`), registered so the hot path links to the
    kernel's file and line.

    `args(module, x)` builds the kernel's arguments from the module and its input (default: `(x,)`); the
    kernel's output, passed through `output(y, x)` (e.g. a reshape back to x's shape), replaces the module's
    output. `fake(*args)` gives the kernel output's shape/dtype for tracing (default: like the first
    argument). The swapped forward is for inference: backward through it raises (the kernel has no gradient
    formula).
    """
    if not isinstance(kernel, (JitKernel, GridLaunch)):
        raise TypeError(f"expected an @nki.jit kernel (or kernel[grid]), got {type(kernel).__name__}; load one "
                        "with neuron_studio.kernels.load_kernel(path, name)")
    op = _register_op(kernel, fake)
    file, line = kernel_source(kernel)
    name = _op_name(kernel)
    registry = get_registry()
    if not any(e.ops == (f"neuron_studio::{name}",) and e.file == file for e in registry.entries):
        registry.register(KernelEntry(getattr(kernel.func, "__name__", name), "runs_as",
                                      ops=(f"neuron_studio::{name}",), file=file, line=line,
                                      note="your kernel, swapped in with neuron_studio.kernels.use"))
    make_args = args or (lambda module, x: (x,))
    finish = output or (lambda y, x: y)
    return lambda module: (lambda x: finish(op(list(make_args(module, x))), x))
