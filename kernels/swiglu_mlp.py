"""Fused SiLU-gated MLP kernel: out = down(silu(x @ Wg) * (x @ Wu))."""
from __future__ import annotations

import numpy as np
import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["swiglu_mlp_kernel", "reference_swiglu_mlp"]


@nki.jit
def swiglu_mlp_kernel(x, w_gate, w_up, w_down):
    """out[T, H] = (silu(x @ w_gate) * (x @ w_up)) @ w_down, one pass per 128-token block.

    Layout: x[T, H]; weights in [in, out] layout (w_gate, w_up [H, F]; w_down [F, H]), i.e. the transpose of
    nn.Linear.weight. The weights are loaded in row slabs ([128, F] of w_gate/w_up, [128, H] of w_down: one DMA
    per 128 rows, not one per 128 x 128 tile) and, when they fit in half of SBUF, once for all token blocks;
    otherwise each token block loads them again. Each token block is transposed on the Tensor Engine to
    H-on-partition tiles; gate/up are computed transposed ([F-tile, tokens], weight tile stationary) so the gated
    activation is already the stationary operand (F on partitions) of the down projection. The activation is
    kept in x's dtype in SBUF (F elements/partition), never in HBM. Ragged T, H, F handled by slicing.
    """
    T, H = x.shape
    F = w_gate.shape[1]
    P = nl.tile_size.pmax
    TT = nl.tile_size.gemm_stationary_fmax
    TN = nl.tile_size.gemm_moving_fmax
    HT = cdiv(H, P)
    FT = cdiv(F, P)
    out = nl.ndarray((T, H), dtype=x.dtype, buffer=nl.shared_hbm)

    def load_weights():
        wg = nl.ndarray((P, HT, F), dtype=w_gate.dtype, buffer=nl.sbuf)
        wu = nl.ndarray((P, HT, F), dtype=w_up.dtype, buffer=nl.sbuf)
        for ht in nl.affine_range(HT):
            h0 = ht * P
            hs = min(P, H - h0)
            nisa.dma_copy(dst=wg[0:hs, ht, :], src=w_gate[h0:h0 + hs, :])
            nisa.dma_copy(dst=wu[0:hs, ht, :], src=w_up[h0:h0 + hs, :])
        wd = nl.ndarray((P, FT, H), dtype=w_down.dtype, buffer=nl.sbuf)
        for ft in nl.affine_range(FT):
            f0 = ft * P
            fs = min(P, F - f0)
            nisa.dma_copy(dst=wd[0:fs, ft, :], src=w_down[f0:f0 + fs, :])
        return wg, wu, wd

    weight_bytes = (2 * HT * F + FT * H) * np.dtype(w_gate.dtype).itemsize  # per partition
    resident = weight_bytes <= nl.tile_size.total_available_sbuf_size // 2
    if resident:
        wg, wu, wd = load_weights()
    for t in nl.affine_range(cdiv(T, TT)):
        if not resident:
            wg, wu, wd = load_weights()
        t0 = t * TT
        ts = min(TT, T - t0)
        x_rows = nl.ndarray((TT, H), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_rows[0:ts, :], src=x[t0:t0 + ts, :])
        x_t = nl.ndarray((P, HT, TT), dtype=x.dtype, buffer=nl.sbuf)
        for ht in nl.affine_range(HT):
            h0 = ht * P
            hs = min(P, H - h0)
            t_psum = nl.ndarray((P, TT), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=t_psum[0:hs, 0:ts], data=x_rows[0:ts, h0:h0 + hs])
            nisa.tensor_copy(dst=x_t[0:hs, ht, 0:ts], src=t_psum[0:hs, 0:ts])
        act_t = nl.ndarray((P, FT, TT), dtype=x.dtype, buffer=nl.sbuf)
        for ft in nl.affine_range(FT):
            f0 = ft * P
            fs = min(P, F - f0)
            g_psum = nl.zeros((P, TT), dtype=nl.float32, buffer=nl.psum)
            u_psum = nl.zeros((P, TT), dtype=nl.float32, buffer=nl.psum)
            for ht in nl.affine_range(HT):
                hs = min(P, H - ht * P)
                nisa.nc_matmul(g_psum[0:fs, 0:ts], wg[0:hs, ht, f0:f0 + fs], x_t[0:hs, ht, 0:ts])
                nisa.nc_matmul(u_psum[0:fs, 0:ts], wu[0:hs, ht, f0:f0 + fs], x_t[0:hs, ht, 0:ts])
            gate = nl.ndarray((P, TT), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=gate[0:fs, 0:ts], op=nl.silu, data=g_psum[0:fs, 0:ts])
            nisa.tensor_tensor(dst=act_t[0:fs, ft, 0:ts], data1=gate[0:fs, 0:ts], data2=u_psum[0:fs, 0:ts],
                               op=nl.multiply)
        for n in nl.affine_range(cdiv(H, TN)):
            n0 = n * TN
            ns = min(TN, H - n0)
            acc = nl.zeros((TT, TN), dtype=nl.float32, buffer=nl.psum)
            for ft in nl.affine_range(FT):
                fs = min(P, F - ft * P)
                nisa.nc_matmul(acc[0:ts, 0:ns], act_t[0:fs, ft, 0:ts], wd[0:fs, ft, n0:n0 + ns])
            res = nl.ndarray((TT, TN), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res[0:ts, 0:ns], src=acc[0:ts, 0:ns])
            nisa.dma_copy(dst=out[t0:t0 + ts, n0:n0 + ns], src=res[0:ts, 0:ns])
    return out


def reference_swiglu_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                         w_down: torch.Tensor) -> torch.Tensor:
    """fp32 matmuls; the gated activation is rounded to x's dtype, as the kernel keeps it in SBUF."""
    xf = x.float()
    h = (torch.nn.functional.silu(xf @ w_gate.float()) * (xf @ w_up.float())).to(x.dtype).float()
    return (h @ w_down.float()).to(x.dtype)
