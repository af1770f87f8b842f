"""LayerNorm kernel: y = (x - mean) / sqrt(var + eps) * gamma + beta, row-wise."""
from __future__ import annotations

import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["layernorm_kernel", "reference_layernorm"]


@nki.jit
def layernorm_kernel(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis of x[N, D] with affine gamma[D], beta[D].

    Layout: rows on partitions (128-row tiles, ragged last tile sliced), D on the free axis (a row must fit in
    SBUF). gamma/beta are broadcast to all partitions with stride-0 DMAs. Mean on the Vector Engine
    (tensor_reduce), variance as a fused square+sum on the Scalar Engine; fp32 statistics.
    """
    N, D = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g_tile = nl.ndarray((P, D), dtype=gamma.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g_tile, src=gamma.reshape((1, D)).broadcast_to((P, D)))
    b_tile = nl.ndarray((P, D), dtype=beta.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b_tile, src=beta.reshape((1, D)).broadcast_to((P, D)))
    for i in nl.affine_range(cdiv(N, P)):
        r0 = i * P
        rs = min(P, N - r0)
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile[0:rs, :], src=x[r0:r0 + rs, :])
        neg_mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_mean[0:rs, :], op=nl.add, data=x_tile[0:rs, :], axis=1, negate=True,
                           keepdims=True)
        nisa.tensor_scalar(dst=neg_mean[0:rs, :], data=neg_mean[0:rs, :], op0=nl.multiply, operand0=1.0 / D)
        xc = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xc[0:rs, :], data=x_tile[0:rs, :], op0=nl.add, operand0=neg_mean[0:rs, :])
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        var = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[0:rs, :], op=nl.square, data=xc[0:rs, :], reduce_op=nl.add,
                        reduce_res=var[0:rs, :])
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:rs, :], data=var[0:rs, :], op0=nl.multiply, operand0=1.0 / D,
                           op1=nl.add, operand1=eps)
        nisa.activation(dst=rstd[0:rs, :], op=nl.rsqrt, data=rstd[0:rs, :])
        nisa.tensor_scalar(dst=xc[0:rs, :], data=xc[0:rs, :], op0=nl.multiply, operand0=rstd[0:rs, :])
        nisa.tensor_tensor(dst=xc[0:rs, :], data1=xc[0:rs, :], data2=g_tile[0:rs, :], op=nl.multiply)
        y_out = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y_out[0:rs, :], data1=xc[0:rs, :], data2=b_tile[0:rs, :], op=nl.add)
        nisa.dma_copy(dst=out[r0:r0 + rs, :], src=y_out[0:rs, :])
    return out


def reference_layernorm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                        eps: float = 1e-5) -> torch.Tensor:
    """fp32 statistics, output in x's dtype."""
    y = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), gamma.float(), beta.float(), eps)
    return y.to(x.dtype)
