"""Row-wise softmax kernel."""
from __future__ import annotations

import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["softmax_kernel", "reference_softmax"]


@nki.jit
def softmax_kernel(x):
    """softmax(x[N, D]) along the last axis, numerically stable (max subtracted).

    Layout: rows on partitions (128-row tiles, ragged last tile sliced), D on the free axis (a row must fit in
    SBUF). exp(x - max) and its row sum are one fused Scalar Engine activation (bias = -max, reduce_res).
    """
    N, D = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(cdiv(N, P)):
        r0 = i * P
        rs = min(P, N - r0)
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile[0:rs, :], src=x[r0:r0 + rs, :])
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[0:rs, :], op=nl.max, data=x_tile[0:rs, :], axis=1, negate=True,
                           keepdims=True)
        e = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e[0:rs, :], op=nl.exp, data=x_tile[0:rs, :], bias=neg_max[0:rs, :],
                        reduce_op=nl.add, reduce_res=row_sum[0:rs, :])
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv[0:rs, :], data=row_sum[0:rs, :])
        y = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:rs, :], data=e[0:rs, :], op0=nl.multiply, operand0=inv[0:rs, :])
        nisa.dma_copy(dst=out[r0:r0 + rs, :], src=y[0:rs, :])
    return out


def reference_softmax(x: torch.Tensor) -> torch.Tensor:
    """fp32 softmax over the last axis, output in x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
