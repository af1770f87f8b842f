"""Flash-attention forward kernel (online softmax, optional causal mask)."""
from __future__ import annotations

import math

import torch

from ._tiling import cdiv
from .nki_api import nisa, nki, nl

__all__ = ["flash_attention_kernel", "reference_flash_attention"]

_MASK_VALUE = -1.0e30  # finite "-inf": keeps exp(m_old - m_new) free of NaN


@nki.jit
def flash_attention_kernel(q, k, v, softmax_scale=None, causal=True):
    """out = softmax(q k^T * scale [+ causal mask]) v, never materialising the [S, S] score matrix.

    Layout: q, k, v [NH, S, D] (batch*heads, sequence, head_dim <= 128); causal assumes q and k cover the same
    positions (Sq == Sk). Per head, K is transposed once into SBUF as kT [D, S] (D on partitions) and V is
    kept as 128-row tiles [128, S/128, D]. For each 128-query block, scores [128q, 128k] = matmul(qT
    stationary, kT moving) land in one PSUM bank; blocks above the diagonal are skipped, the diagonal block is
    masked with affine_select; a running max / sum / fp32 accumulator implement the online softmax; P is
    transposed on the Tensor Engine to be the stationary operand of P @ V. Ragged S handled by slicing.
    """
    NH, S, D = q.shape
    Sk = k.shape[1]
    P = nl.tile_size.pmax
    BK = nl.tile_size.pmax
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    KT = cdiv(Sk, BK)
    out = nl.ndarray((NH, S, D), dtype=q.dtype, buffer=nl.shared_hbm)
    for h in nl.affine_range(NH):
        k_t = nl.ndarray((D, Sk), dtype=k.dtype, buffer=nl.sbuf)
        v_tiles = nl.ndarray((BK, KT, D), dtype=v.dtype, buffer=nl.sbuf)
        for j in nl.affine_range(KT):
            k0 = j * BK
            ks = min(BK, Sk - k0)
            k_rows = nl.ndarray((BK, D), dtype=k.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=k_rows[0:ks, :], src=k[h, k0:k0 + ks, :])
            kt_psum = nl.ndarray((D, BK), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=kt_psum[:, 0:ks], data=k_rows[0:ks, :])
            nisa.tensor_copy(dst=k_t[:, k0:k0 + ks], src=kt_psum[:, 0:ks])
            nisa.dma_copy(dst=v_tiles[0:ks, j, :], src=v[h, k0:k0 + ks, :])
        for i in nl.affine_range(cdiv(S, P)):
            q0 = i * P
            qs = min(P, S - q0)
            q_rows = nl.ndarray((P, D), dtype=q.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=q_rows[0:qs, :], src=q[h, q0:q0 + qs, :])
            qt_psum = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=qt_psum[:, 0:qs], data=q_rows[0:qs, :])
            q_t = nl.ndarray((D, P), dtype=q.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=q_t[:, 0:qs], src=qt_psum[:, 0:qs])
            m_run = nl.full((P, 1), _MASK_VALUE, dtype=nl.float32, buffer=nl.sbuf)
            l_run = nl.zeros((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            acc = nl.zeros((P, D), dtype=nl.float32, buffer=nl.sbuf)
            last = cdiv(min(Sk, q0 + qs), BK) if causal else KT
            for j in nl.sequential_range(last):
                k0 = j * BK
                ks = min(BK, Sk - k0)
                s_psum = nl.ndarray((P, BK), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(s_psum[0:qs, 0:ks], q_t[:, 0:qs], k_t[:, k0:k0 + ks], accumulate=False)
                s = nl.ndarray((P, BK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=s[0:qs, 0:ks], op=nl.copy, data=s_psum[0:qs, 0:ks], scale=scale)
                if causal and k0 + ks - 1 > q0:
                    nisa.affine_select(dst=s[0:qs, 0:ks], pattern=[[-1, ks]], offset=q0 - k0,
                                       channel_multiplier=1, on_true_tile=s[0:qs, 0:ks],
                                       on_false_value=_MASK_VALUE, cmp_op=nl.greater_equal)
                m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=m_new[0:qs, :], op=nl.max, data=s[0:qs, 0:ks], axis=1, keepdims=True)
                nisa.tensor_tensor(dst=m_new[0:qs, :], data1=m_new[0:qs, :], data2=m_run[0:qs, :],
                                   op=nl.maximum)
                neg_m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=neg_m[0:qs, :], data=m_new[0:qs, :], op0=nl.multiply, operand0=-1.0)
                p = nl.ndarray((P, BK), dtype=q.dtype, buffer=nl.sbuf)
                l_blk = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=p[0:qs, 0:ks], op=nl.exp, data=s[0:qs, 0:ks], bias=neg_m[0:qs, :],
                                reduce_op=nl.add, reduce_res=l_blk[0:qs, :])
                alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=alpha[0:qs, :], op=nl.exp, data=m_run[0:qs, :], bias=neg_m[0:qs, :])
                nisa.tensor_scalar(dst=l_run[0:qs, :], data=l_run[0:qs, :], op0=nl.multiply,
                                   operand0=alpha[0:qs, :])
                nisa.tensor_tensor(dst=l_run[0:qs, :], data1=l_run[0:qs, :], data2=l_blk[0:qs, :], op=nl.add)
                nisa.tensor_scalar(dst=acc[0:qs, :], data=acc[0:qs, :], op0=nl.multiply, operand0=alpha[0:qs, :])
                pt_psum = nl.ndarray((BK, P), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=pt_psum[0:ks, 0:qs], data=p[0:qs, 0:ks])
                p_t = nl.ndarray((BK, P), dtype=q.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=p_t[0:ks, 0:qs], src=pt_psum[0:ks, 0:qs])
                pv_psum = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(pv_psum[0:qs, :], p_t[0:ks, 0:qs], v_tiles[0:ks, j, :], accumulate=False)
                nisa.tensor_tensor(dst=acc[0:qs, :], data1=acc[0:qs, :], data2=pv_psum[0:qs, :], op=nl.add)
                nisa.tensor_copy(dst=m_run[0:qs, :], src=m_new[0:qs, :])
            inv_l = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv_l[0:qs, :], data=l_run[0:qs, :])
            o = nl.ndarray((P, D), dtype=q.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=o[0:qs, :], data=acc[0:qs, :], op0=nl.multiply, operand0=inv_l[0:qs, :])
            nisa.dma_copy(dst=out[h, q0:q0 + qs, :], src=o[0:qs, :])
    return out


def reference_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              softmax_scale: float | None = None, causal: bool = True) -> torch.Tensor:
    """fp32 SDPA over q, k, v [NH, S, D], output in q's dtype."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float().unsqueeze(0), k.float().unsqueeze(0), v.float().unsqueeze(0), is_causal=causal,
        scale=softmax_scale)
    return out.squeeze(0).to(q.dtype)
