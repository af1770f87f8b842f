"""Tiled matmul kernel: out[M, N] = a[M, K] @ b[K, N]."""
from __future__ import annotations

import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["matmul_kernel", "reference_matmul"]


@nki.jit
def matmul_kernel(a, b):
    """out[M, N] = a[M, K] @ b[K, N], fp32 accumulation in PSUM, output in a's dtype.

    Layout: a and b row-major in HBM. Each 128-row block of `a` is DMA'd into SBUF and transposed on the
    Tensor Engine into K-on-partition tiles (the stationary operand, [K<=128, M<=128]); `b` tiles [K<=128,
    N<=512] stream as the moving operand; one PSUM bank [128, 512] fp32 accumulates over K. Any M, K, N
    (ragged last tiles are sliced). SBUF holds one a-block (K elements/partition twice) plus one b tile.
    """
    M, K = a.shape
    _, N = b.shape
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    KT = cdiv(K, TK)
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(cdiv(M, TM)):
        m0 = m * TM
        ms = min(TM, M - m0)
        a_rows = nl.ndarray((TM, K), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_rows[0:ms, :], src=a[m0:m0 + ms, :])
        a_t = nl.ndarray((TK, KT, TM), dtype=a.dtype, buffer=nl.sbuf)
        for kt in nl.affine_range(KT):
            k0 = kt * TK
            ks = min(TK, K - k0)
            t_psum = nl.ndarray((TK, TM), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=t_psum[0:ks, 0:ms], data=a_rows[0:ms, k0:k0 + ks])
            nisa.tensor_copy(dst=a_t[0:ks, kt, 0:ms], src=t_psum[0:ks, 0:ms])
        for n in nl.affine_range(cdiv(N, TN)):
            n0 = n * TN
            ns = min(TN, N - n0)
            acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for kt in nl.affine_range(KT):
                k0 = kt * TK
                ks = min(TK, K - k0)
                b_tile = nl.ndarray((TK, TN), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b_tile[0:ks, 0:ns], src=b[k0:k0 + ks, n0:n0 + ns])
                nisa.nc_matmul(acc[0:ms, 0:ns], a_t[0:ks, kt, 0:ms], b_tile[0:ks, 0:ns])
            res = nl.ndarray((TM, TN), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res[0:ms, 0:ns], src=acc[0:ms, 0:ns])
            nisa.dma_copy(dst=out[m0:m0 + ms, n0:n0 + ns], src=res[0:ms, 0:ns])
    return out


def reference_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32-accumulated reference, cast to a's dtype (what the kernel computes)."""
    return (a.float() @ b.float()).to(a.dtype)
