"""Swap an NKI kernel into a model: `neuron_studio.kernels.use(model, "rmsnorm")`.

Each kernel is registered as a PyTorch custom op (`neuron_studio::<kernel>`), so it shows up in profiles
as one op (one launch) and works on neuron tensors, under autograd (the backward is the PyTorch
reference's, through `torch.func.vjp`) and under torch.compile. The forward runs the kernel: on the NKI
interpreter when the `nki` package is absent (emulator), with `nki.jit` on hardware. `use()` returns a
handle whose `.restore()` puts the original forwards back, so a user can profile before and after.
"""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .layernorm import layernorm_kernel, reference_layernorm
from .registry import GATE_NAMES, KernelEntry, get_registry
from .rmsnorm import reference_rmsnorm, rmsnorm_kernel
from .swiglu_mlp import reference_swiglu_mlp, swiglu_mlp_kernel
from .user_kernels import kernel_forward

__all__ = ["use", "SwapHandle", "SwapError", "SWAPPABLE"]


class SwapError(ValueError):
    """The kernel name is unknown, or no module in the model matches it."""


def _on_host(fn: Callable[..., torch.Tensor], *args: torch.Tensor, **kw: Any) -> torch.Tensor:
    """Run a kernel on host tensors (the custom op's CPU implementation; on the emulated `neuron` device the op
    runs as on CPU, on the same bytes, so its ops are registered for CPU only)."""
    return fn(*args, **kw)


@functools.cache
def _ops() -> dict[str, Any]:
    """Register the custom ops once per process (on first use, not at import)."""

    @torch.library.custom_op("neuron_studio::rmsnorm", mutates_args=(), device_types="cpu")
    def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        return _on_host(rmsnorm_kernel, rows, weight.contiguous(), eps=eps).reshape(x.shape)

    @rmsnorm.register_fake
    def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.empty_like(x)

    def rms_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    def rms_backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, weight = ctx.saved_tensors
        _, vjp = torch.func.vjp(lambda a, w: reference_rmsnorm(a, w, ctx.eps), x, weight)
        gx, gw = vjp(grad)
        return gx, gw, None

    rmsnorm.register_autograd(rms_backward, setup_context=rms_setup)

    @torch.library.custom_op("neuron_studio::layernorm", mutates_args=(), device_types="cpu")
    def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        return _on_host(layernorm_kernel, rows, weight.contiguous(), bias.contiguous(), eps=eps).reshape(x.shape)

    @layernorm.register_fake
    def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.empty_like(x)

    def ln_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, weight, bias, eps = inputs
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps

    def ln_backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, weight, bias = ctx.saved_tensors
        _, vjp = torch.func.vjp(lambda a, w, b: reference_layernorm(a, w, b, ctx.eps), x, weight, bias)
        return (*vjp(grad), None)

    layernorm.register_autograd(ln_backward, setup_context=ln_setup)

    @torch.library.custom_op("neuron_studio::swiglu_mlp", mutates_args=(), device_types="cpu")
    def swiglu_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        out = _on_host(swiglu_mlp_kernel, rows, w_gate.contiguous(), w_up.contiguous(), w_down.contiguous())
        return out.reshape(*x.shape[:-1], w_down.shape[-1])

    @swiglu_mlp.register_fake
    def _(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        return x.new_empty(*x.shape[:-1], w_down.shape[-1])

    def mlp_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)

    def mlp_backward(ctx: Any, grad: torch.Tensor) -> tuple:
        _, vjp = torch.func.vjp(reference_swiglu_mlp, *ctx.saved_tensors)
        return vjp(grad)

    swiglu_mlp.register_autograd(mlp_backward, setup_context=mlp_setup)

    from torch.utils.flop_counter import register_flop_formula

    @register_flop_formula(torch.ops.neuron_studio.swiglu_mlp)
    def _mlp_flops(x_shape: Any, g_shape: Any, u_shape: Any, d_shape: Any, *args: Any, **kw: Any) -> int:
        tokens = 1
        for s in x_shape[:-1]:
            tokens *= s
        return 2 * tokens * (g_shape[0] * g_shape[1] + u_shape[0] * u_shape[1] + d_shape[0] * d_shape[1])

    reg = get_registry()
    for name, target in (("rmsnorm", "rmsnorm:rmsnorm_kernel"), ("layernorm", "layernorm:layernorm_kernel"),
                         ("swiglu_mlp", "swiglu_mlp:swiglu_mlp_kernel")):
        reg.register(KernelEntry(f"{name}_kernel", "runs_as", ops=(f"neuron_studio::{name}",), target=target,
                                 note="swapped in with neuron_studio.kernels.use"))
    return {"rmsnorm": rmsnorm, "layernorm": layernorm, "swiglu_mlp": swiglu_mlp}


def _is_rmsnorm(m: torch.nn.Module) -> bool:
    return type(m).__name__.endswith("RMSNorm") or isinstance(m, getattr(torch.nn, "RMSNorm", ()))


def _rms_forward(module: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    eps = getattr(module, "eps", None) or getattr(module, "variance_epsilon", None) or 1e-6
    op = _ops()["rmsnorm"]
    return lambda x: op(x, module.weight, float(eps))


def _ln_forward(module: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    op = _ops()["layernorm"]
    return lambda x: op(x, module.weight, module.bias, float(module.eps))


def _gated_names(m: torch.nn.Module) -> tuple[str, str, str] | None:
    kids = {n: c for n, c in m.named_children() if isinstance(c, torch.nn.Linear)}
    for names in GATE_NAMES:
        if all(n in kids and kids[n].bias is None for n in names):
            return names
    return None


def _mlp_forward(module: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    g, u, d = _gated_names(module)  # type: ignore[misc]
    op = _ops()["swiglu_mlp"]
    lin = {n: getattr(module, n) for n in (g, u, d)}
    # nn.Linear stores [out, in]; the kernel wants [in, out]
    return lambda x: op(x, lin[g].weight.t(), lin[u].weight.t(), lin[d].weight.t())


SWAPPABLE: dict[str, tuple[Callable[[torch.nn.Module], bool], Callable[[torch.nn.Module], Callable]]] = {
    "rmsnorm": (_is_rmsnorm, _rms_forward),
    "layernorm": (lambda m: isinstance(m, torch.nn.LayerNorm) and m.elementwise_affine and m.bias is not None,
                  _ln_forward),
    "swiglu_mlp": (lambda m: _gated_names(m) is not None, _mlp_forward),
}


@dataclass
class SwapHandle:
    kernel: str
    modules: list[str] = field(default_factory=list)
    _saved: list[tuple[torch.nn.Module, Any]] = field(default_factory=list, repr=False)

    def restore(self) -> None:
        """Put the original forwards back."""
        for module, original in self._saved:
            if original is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = original
        self._saved.clear()

    def __enter__(self) -> "SwapHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def use(model: torch.nn.Module, kernel: Any, *, include: Callable[[str, torch.nn.Module], bool] | None = None,
        args: Callable[[torch.nn.Module, torch.Tensor], tuple] | None = None,
        fake: Callable[..., torch.Tensor] | None = None,
        output: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> SwapHandle:
    """Replace every matching submodule's forward with an NKI kernel.

    `kernel` is a built-in kernel's name (rmsnorm, layernorm, swiglu_mlp: matched structurally, `include`
    narrows it) or your own `@nki.jit` kernel (e.g. `load_kernel("nki-samples/.../kernels.py", "name")`),
    which needs `include(path, module)` to pick the modules and optionally `args(module, x)`, `fake(*args)`
    and `output(y, x)` (see `user_kernels.kernel_forward`).
    """
    if not isinstance(kernel, str):
        if include is None:
            raise SwapError("a user kernel needs include=lambda path, module: ... to choose the modules it replaces")
        try:
            make = kernel_forward(kernel, args, fake, output)
        except TypeError as exc:
            raise SwapError(str(exc)) from exc
        match: Callable[[torch.nn.Module], bool] = lambda m: True  # noqa: E731 - include decides
        key = getattr(getattr(kernel, "func", kernel), "__name__", "kernel")
    else:
        key = kernel.removesuffix("_kernel")
        if key not in SWAPPABLE:
            raise SwapError(f"no swappable kernel {kernel!r}; choose one of {', '.join(SWAPPABLE)}")
        match, make = SWAPPABLE[key]
    handle = SwapHandle(kernel=key)
    for path, module in model.named_modules():
        if not match(module) or (include is not None and not include(path, module)):
            continue
        current = module.__dict__.get("forward")
        swapped = getattr(getattr(current, "__func__", None), "_neuron_swap", None)
        if swapped is not None and swapped[0] == key:
            # already this kernel (a cell that swaps in its body runs use() every step): left as it is; this
            # handle's restore() still puts the forward from before the first swap back
            handle._saved.append((module, swapped[1]))
            handle.modules.append(path or type(module).__name__)
            continue

        def forward(self: torch.nn.Module, x: torch.Tensor, _f: Callable[..., Any] = make(module)) -> Any:
            return _f(x)

        forward._neuron_swap = (key, current)  # type: ignore[attr-defined]
        handle._saved.append((module, current))
        module.forward = types.MethodType(forward, module)
        handle.modules.append(path or type(module).__name__)
    if not handle.modules:
        raise SwapError(f"no module in {type(model).__name__} matches kernel {key!r}")
    return handle
