"""Scaled-dot-product attention on the emulated device: what its events carry.

On `neuron` SDPA takes CPU's path (the device's ops are CPU kernels): CPU's flash kernel
(`_scaled_dot_product_flash_attention_for_cpu`, one op, and its backward) exactly when CPU would use it, the
math decomposition otherwise. So results are bit-identical to CPU, and the profile shows one attention op
where TorchNeuron runs its built-in NKI SDPA kernel. Here: the tags the cost model needs ("causal",
"dropout": they are not shapes) and FLOP formulas for CPU's flash ops (torch counts them for CUDA's only).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["ATTENTION_RECORD_EXTRA", "register_attention_flops"]

aten = torch.ops.aten


def _attention_tags(dropout_at: int, causal_at: int) -> Callable[..., dict]:
    """Record hook: tag an attention event "causal" / "dropout"."""

    def fields(func: Any, uargs: Any, kw: Any, out: Any) -> dict:
        args = list(uargs)
        causal = bool(kw.get("is_causal", args[causal_at] if len(args) > causal_at else False))
        dropout = kw.get("dropout_p", args[dropout_at] if len(args) > dropout_at else 0.0)
        tags = (("causal",) if causal else ()) + (("dropout",) if isinstance(dropout, float) and dropout > 0 else ())
        return {"tags": tags}

    return fields


# (dropout_p, is_causal) positions in each attention op's schema
ATTENTION_RECORD_EXTRA: dict[Any, Callable[..., dict]] = {
    aten._scaled_dot_product_fused_attention_overrideable.default: _attention_tags(4, 5),
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: _attention_tags(12, 13),
    aten._scaled_dot_product_flash_attention_for_cpu.default: _attention_tags(3, 4),
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _attention_tags(6, 7),
    aten._scaled_dot_product_attention_math.default: _attention_tags(4, 5),
}


def register_attention_flops() -> None:
    """FLOP formulas for CPU's flash-attention ops and the overrideable ones (torch has CUDA's only)."""
    from torch.utils import flop_counter as fc

    if aten._scaled_dot_product_flash_attention_for_cpu in fc.flop_registry:
        return

    @fc.register_flop_formula([aten._scaled_dot_product_flash_attention_for_cpu,
                               aten._scaled_dot_product_fused_attention_overrideable])
    def _fwd(query_shape, key_shape, value_shape, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return fc.sdpa_flop_count(query_shape, key_shape, value_shape)

    @fc.register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)
    def _cpu_bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    @fc.register_flop_formula(aten._scaled_dot_product_fused_attention_overrideable_backward)
    def _bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
