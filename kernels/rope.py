"""Rotary position embedding (RoPE) kernel, rotate-half convention (Llama / Hugging Face)."""
from __future__ import annotations

import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["rope_kernel", "reference_rope"]


@nki.jit
def rope_kernel(x, cos, sin):
    """out = x * [cos, cos] + rotate_half(x) * [sin, sin], rotate_half(x) = [-x2, x1].

    Layout: x[NH, S, D] (batch*heads, sequence, head_dim; D even); cos/sin[S, D/2] (the non-duplicated
    half of the HF tables). Sequence on partitions (128-position tiles, ragged last tile sliced), head_dim
    on the free axis; cos/sin tiles are loaded once per sequence tile and reused across heads.
    """
    NH, S, D = x.shape
    half = D // 2
    P = nl.tile_size.pmax
    out = nl.ndarray((NH, S, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for s in nl.affine_range(cdiv(S, P)):
        s0 = s * P
        ss = min(P, S - s0)
        c = nl.ndarray((P, half), dtype=cos.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=c[0:ss, :], src=cos[s0:s0 + ss, :])
        sn = nl.ndarray((P, half), dtype=sin.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=sn[0:ss, :], src=sin[s0:s0 + ss, :])
        for h in nl.affine_range(NH):
            xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=xt[0:ss, :], src=x[h, s0:s0 + ss, :])
            y = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
            tmp = nl.ndarray((P, half), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=y[0:ss, 0:half], data1=xt[0:ss, 0:half], data2=c[0:ss, :], op=nl.multiply)
            nisa.tensor_tensor(dst=tmp[0:ss, :], data1=xt[0:ss, half:D], data2=sn[0:ss, :], op=nl.multiply)
            nisa.tensor_tensor(dst=y[0:ss, 0:half], data1=y[0:ss, 0:half], data2=tmp[0:ss, :], op=nl.subtract)
            nisa.tensor_tensor(dst=y[0:ss, half:D], data1=xt[0:ss, half:D], data2=c[0:ss, :], op=nl.multiply)
            nisa.tensor_tensor(dst=tmp[0:ss, :], data1=xt[0:ss, 0:half], data2=sn[0:ss, :], op=nl.multiply)
            nisa.tensor_tensor(dst=y[0:ss, half:D], data1=y[0:ss, half:D], data2=tmp[0:ss, :], op=nl.add)
            y_out = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=y_out[0:ss, :], src=y[0:ss, :])
            nisa.dma_copy(dst=out[h, s0:s0 + ss, :], src=y_out[0:ss, :])
    return out


def reference_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF `apply_rotary_pos_emb` on x[NH, S, D] with half tables cos/sin[S, D/2]; fp32 math."""
    xf = x.float()
    c = torch.cat([cos.float(), cos.float()], dim=-1)
    s = torch.cat([sin.float(), sin.float()], dim=-1)
    x1, x2 = xf.chunk(2, dim=-1)
    return (xf * c + torch.cat([-x2, x1], dim=-1) * s).to(x.dtype)
