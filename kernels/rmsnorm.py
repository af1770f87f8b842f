"""RMSNorm kernel: y = x / sqrt(mean(x^2) + eps) * gamma, row-wise."""
from __future__ import annotations

import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["rmsnorm_kernel", "reference_rmsnorm"]


@nki.jit
def rmsnorm_kernel(x, gamma, eps=1e-6):
    """Normalise each row of x[N, D] by its RMS and scale by gamma[D].

    Layout: rows on partitions (128-row tiles, ragged last tile sliced), D on the free axis (one row must fit
    in SBUF: ~3*D*4 bytes per partition). gamma is read once into every partition with a stride-0 (broadcast)
    DMA. Sum of squares is fused into the Scalar Engine activation (reduce_res); statistics in fp32.
    """
    N, D = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    g_tile = nl.ndarray((P, D), dtype=gamma.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g_tile, src=gamma.reshape((1, D)).broadcast_to((P, D)))
    for i in nl.affine_range(cdiv(N, P)):
        r0 = i * P
        rs = min(P, N - r0)
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile[0:rs, :], src=x[r0:r0 + rs, :])
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[0:rs, :], op=nl.square, data=x_tile[0:rs, :], reduce_op=nl.add,
                        reduce_res=ss[0:rs, :])
        rinv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rinv[0:rs, :], data=ss[0:rs, :], op0=nl.multiply, operand0=1.0 / D,
                           op1=nl.add, operand1=eps)
        nisa.activation(dst=rinv[0:rs, :], op=nl.rsqrt, data=rinv[0:rs, :])
        y = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:rs, :], data=x_tile[0:rs, :], op0=nl.multiply, operand0=rinv[0:rs, :])
        y_out = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y_out[0:rs, :], data1=y[0:rs, :], data2=g_tile[0:rs, :], op=nl.multiply)
        nisa.dma_copy(dst=out[r0:r0 + rs, :], src=y_out[0:rs, :])
    return out


def reference_rmsnorm(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """fp32 statistics, output in x's dtype (LlamaRMSNorm-style)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * gamma.float()).to(x.dtype)
