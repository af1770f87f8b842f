"""Scaled-dot-product attention as ONE device op, as TorchNeuron runs it (its built-in NKI SDPA kernel).

PyTorch lets a PrivateUse1 backend take SDPA whole through the "overrideable" fused-attention ops. The
emulator picks that path exactly when CPU would use its flash kernel, and runs CPU's flash kernel, so
results stay bit-identical to CPU while the profile shows one attention op (and its backward) instead of
a decomposition into bmm/softmax.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.nn.attention import SDPBackend

__all__ = ["SPECIAL_OPS", "ATTENTION_RECORD_EXTRA", "register_attention_flops"]

aten = torch.ops.aten
_FLASH = int(SDPBackend.FLASH_ATTENTION)
_OVERRIDEABLE = int(SDPBackend.OVERRIDEABLE)


def _choice(*args: Any, **kwargs: Any) -> int:
    cpu = aten._fused_sdp_choice.default(*args, **kwargs)
    return _OVERRIDEABLE if cpu == _FLASH else cpu


def _forward(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,  # noqa: ANN001
             scale=None):  # noqa: ANN001, ANN202
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(
        query, key, value, dropout_p, is_causal, attn_mask=attn_bias, scale=scale)
    empty = query.new_empty(0)
    return (out, lse, empty, empty.clone(), query.shape[-2], key.shape[-2], empty.clone(), empty.clone(),
            empty.clone())


def _backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,  # noqa: ANN001
              max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):  # noqa: ANN001, ANN202
    bias = attn_bias if attn_bias is not None and attn_bias.numel() else None
    gq, gk, gv = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask=bias, scale=scale)
    gb = torch.zeros_like(bias) if (bias is not None and grad_input_mask[3]) else query.new_empty(0)
    return gq, gk, gv, gb


SPECIAL_OPS: dict[Any, Callable[..., Any]] = {
    aten._fused_sdp_choice.default: _choice,
    aten._scaled_dot_product_fused_attention_overrideable.default: _forward,
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: _backward,
}


def _attention_tags(dropout_at: int, causal_at: int) -> Callable[..., dict]:
    """Record hook: tag an attention event "causal" / "dropout" (the cost model needs both; they are not shapes)."""

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
    """FLOP formulas for the overrideable attention ops (torch counts them for flash/efficient only)."""
    from torch.utils import flop_counter as fc

    if aten._scaled_dot_product_fused_attention_overrideable in fc.flop_registry:
        return

    @fc.register_flop_formula(aten._scaled_dot_product_fused_attention_overrideable)
    def _fwd(query_shape, key_shape, value_shape, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return fc.sdpa_flop_count(query_shape, key_shape, value_shape)

    @fc.register_flop_formula(aten._scaled_dot_product_fused_attention_overrideable_backward)
    def _bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


class _FusedAttention(torch.autograd.Function):
    """Forward/backward through the overrideable fused-attention ops (recorded as two device ops)."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale):  # noqa: ANN001, ANN205
        with torch._C._AutoDispatchBelowAutograd():
            res = aten._scaled_dot_product_fused_attention_overrideable.default(
                query, key, value, attn_mask, 0.0, is_causal, False, scale=scale)
        out, lse = res[0], res[1]
        ctx.save_for_backward(query, key, value, attn_mask if attn_mask is not None else query.new_empty(0), out, lse)
        ctx.is_causal = is_causal
        ctx.scale = scale
        ctx.has_mask = attn_mask is not None
        return out

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        query, key, value, mask, out, lse = ctx.saved_tensors
        empty = query.new_empty(0)
        with torch._C._AutoDispatchBelowAutograd():
            gq, gk, gv, _ = aten._scaled_dot_product_fused_attention_overrideable_backward.default(
                grad_out.contiguous(), query, key, value, mask, [True, True, True, False], out, lse, empty, empty,
                query.shape[-2], key.shape[-2], 0.0, ctx.is_causal, empty, empty, scale=ctx.scale)
        return gq, gk, gv, None, None, None


def _cpu_would_use_flash(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> bool:  # noqa: ANN001
    def meta(t):  # noqa: ANN001, ANN202
        return None if t is None else torch.empty(t.shape, dtype=t.dtype)

    if torch.is_grad_enabled() and attn_mask is not None and attn_mask.requires_grad:
        return False
    choice = aten._fused_sdp_choice.default(meta(query), meta(key), meta(value), meta(attn_mask), dropout_p,
                                            is_causal, scale=scale, enable_gqa=enable_gqa)
    return choice == _FLASH


def sdpa_kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,  # noqa: ANN001
                enable_gqa=False):  # noqa: ANN001, ANN201
    """AutogradPrivateUse1 kernel for aten::scaled_dot_product_attention."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:  # as torch does before choosing a kernel
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(attn_mask.logical_not(),
                                                                              float("-inf"))
    if _cpu_would_use_flash(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        return _FusedAttention.apply(query, key, value, attn_mask, is_causal, scale)
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]
