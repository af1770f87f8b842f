"""Studio-written ports of the loop nests AWS measured in its NKI tutorials (calibration rows `kernel:*`).

Each kernel follows the published kernel's tiling, loop order and instruction mix (which tiles are loaded by
which DMA, which engine does which pass) so that the interpreter's instruction trace, timed by
`kernels.kernel_time`, can be compared with the published latency. The code is our own; the published
kernels are in aws-neuron/aws-neuron-sdk (general/nki/examples, Neuron 2.20) and aws-neuron/nki-samples.

Inputs follow the tutorials: matmuls take lhsT [K, M] (already transposed) and rhs [K, N] in bf16;
LayerNorm takes x [rows, cols] fp32 with gamma/beta [cols].
"""
from __future__ import annotations

import numpy as np

from neuron_studio.kernels.interpreter import isa as _isa
from neuron_studio.kernels.nki_api import nisa, nki, nl

__all__ = ["MATMUL_KERNELS", "LAYERNORM_KERNELS", "TRN2_MATMUL_KERNELS", "DMA_KERNELS", "matmul_tiled",
           "matmul_hoist_load", "matmul_block_free", "matmul_fully_optimized", "layernorm_v1", "layernorm_v2",
           "trn2_matmul_v2_tiled", "trn2_matmul_v3_hoisted", "trn2_matmul_v4_block_free", "trn2_matmul_v5_block_all",
           "trn2_dma_exp"]

TM, TK, TN = 128, 128, 512  # stationary free, contraction (partitions), moving free
# PSUM accumulators start with an overwriting matmul (accumulate=False), as the hardware's first matmul of an
# accumulation group does, rather than a memset on the Vector Engine.


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Per output tile (m, n): for each k load one lhsT tile and one rhs tile, accumulate in PSUM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a, b, accumulate=k > 0)
            res = nl.ndarray((TM, TN), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


@nki.jit
def matmul_hoist_load(lhsT, rhs):
    """lhsT's K column of tiles is loaded once per m; rhs's K column once per (m, n)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a_tiles = []
        for k in nl.affine_range(KT):
            a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            a_tiles.append(a)
        for n in nl.affine_range(N // TN):
            b_tiles = []
            for k in nl.affine_range(KT):
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                b_tiles.append(b)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                nisa.nc_matmul(acc, a_tiles[k], b_tiles[k], accumulate=k > 0)
            res = nl.ndarray((TM, TN), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
            del b_tiles
        del a_tiles
    return out


@nki.jit
def matmul_block_free(lhsT, rhs, tiles_m=2, tiles_n=2):
    """Free dimensions blocked: `tiles_m` lhsT columns and `tiles_n` rhs columns live in SBUF together."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (TM * tiles_m)):
        a_blk = []
        for bm in nl.affine_range(tiles_m):
            col = []
            m0 = (mb * tiles_m + bm) * TM
            for k in nl.affine_range(KT):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m0:m0 + TM])
                col.append(a)
            a_blk.append(col)
        for nb in nl.affine_range(N // (TN * tiles_n)):
            b_blk = []
            for bn in nl.affine_range(tiles_n):
                col = []
                n0 = (nb * tiles_n + bn) * TN
                for k in nl.affine_range(KT):
                    b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n0:n0 + TN])
                    col.append(b)
                b_blk.append(col)
            for bm in nl.affine_range(tiles_m):
                for bn in nl.affine_range(tiles_n):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(KT):
                        nisa.nc_matmul(acc, a_blk[bm][k], b_blk[bn][k], accumulate=k > 0)
                    res = nl.ndarray((TM, TN), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res, src=acc)
                    m0, n0 = (mb * tiles_m + bm) * TM, (nb * tiles_n + bn) * TN
                    nisa.dma_copy(dst=out[m0:m0 + TM, n0:n0 + TN], src=res)
            del b_blk
        del a_blk
    return out


@nki.jit
def matmul_fully_optimized(lhsT, rhs, tiles_m=16, tiles_n=2, tiles_k=8):
    """All three dimensions blocked; rhs loaded [128, BLOCK_N] and lhsT [128, BLOCK_M] per DMA; PSUM partial
    sums accumulated into SBUF result tiles on the Vector Engine; results packed [128, BLOCK_N] per store."""
    K, M = lhsT.shape
    _, N = rhs.shape
    BM, BN, BK = TM * tiles_m, TN * tiles_n, TK * tiles_k
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // BN):
        sums = [[[nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.sbuf) for _ in range(tiles_n)]
                 for _ in range(tiles_m)] for _ in range(M // BM)]
        for kb in nl.sequential_range(K // BK):
            b_rows = []
            for bk in range(tiles_k):
                b = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                k0 = (kb * tiles_k + bk) * TK
                nisa.dma_copy(dst=b, src=rhs[k0:k0 + TK, nb * BN:(nb + 1) * BN])
                b_rows.append(b)
            for mb in nl.affine_range(M // BM):
                a_rows = []
                for bk in nl.affine_range(tiles_k):
                    a = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    k0 = (kb * tiles_k + bk) * TK
                    nisa.dma_copy(dst=a, src=lhsT[k0:k0 + TK, mb * BM:(mb + 1) * BM])
                    a_rows.append(a)
                for bn in nl.affine_range(tiles_n):
                    for bm in nl.affine_range(tiles_m):
                        acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(tiles_k):
                            nisa.nc_matmul(acc, a_rows[bk][:, bm * TM:(bm + 1) * TM],
                                           b_rows[bk][:, bn * TN:(bn + 1) * TN], accumulate=bk > 0)
                        s = sums[mb][bm][bn]
                        nisa.tensor_tensor(dst=s, data1=s, data2=acc, op=nl.add)
                del a_rows
            del b_rows
        for mb in nl.affine_range(M // BM):
            for bm in nl.affine_range(tiles_m):
                packed = nl.ndarray((TM, BN), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(tiles_n):
                    nisa.tensor_copy(dst=packed[:, bn * TN:(bn + 1) * TN], src=sums[mb][bm][bn])
                m0 = (mb * tiles_m + bm) * TM
                nisa.dma_copy(dst=out[m0:m0 + TM, nb * BN:(nb + 1) * BN], src=packed)
        del sums
    return out


def _broadcast_row(vec, rows: int, cols: int):
    """gamma/beta [cols] -> an SBUF tile [rows, cols] (one stride-0 DMA, as the tutorial's broadcast_to)."""
    t = nl.ndarray((rows, cols), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=vec.reshape((1, cols)).broadcast_to((rows, cols)))
    return t


@nki.jit
def layernorm_v1(x, gamma, beta, eps=1e-5):
    """nki.language only: mean (VectorE), mean of squares (ScalarE square + VectorE mean), shift and scale as two
    passes, gamma and beta as two two-input passes; per 128-row tile."""
    rows, cols = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g = _broadcast_row(gamma, P, cols)
    b = _broadcast_row(beta, P, cols)
    for i in nl.affine_range(rows // P):
        t = nl.load(x[i * P:(i + 1) * P, :])
        mean = nl.mean(t, axis=1, keepdims=True)
        sq = nl.square(t)
        var = nl.mean(sq, axis=1, keepdims=True)
        del sq
        var = nl.subtract(var, nl.multiply(mean, mean))
        rstd = nl.rsqrt(nl.add(var, eps))
        xc = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xc, data=t, op0=nl.subtract, operand0=mean)
        nisa.tensor_scalar(dst=xc, data=xc, op0=nl.multiply, operand0=rstd)
        del t
        nisa.tensor_tensor(dst=xc, data1=xc, data2=g, op=nl.multiply)  # in place: SBUF holds 6 rows of 32 KiB
        nisa.tensor_tensor(dst=xc, data1=xc, data2=b, op=nl.add)
        nl.store(out[i * P:(i + 1) * P, :], xc)
    return out


BN_STATS_FMAX = 512  # nl.tile_size.bn_stats_fmax in the NKI API reference


def _bn_stats_and_aggr(mean, var, data) -> None:
    """Stand-in for nisa.bn_stats (one VectorE pass over the tile, in 512-element chunks) + nisa.bn_aggr.

    The interpreter does not implement the bn_* instructions yet (issue 19); this helper computes the same
    result and records the same VectorE work: one instruction per 512-column chunk streaming the chunk, and one
    small aggregation instruction.
    """
    p, cols = data.shape
    x = data.data.astype(np.float32)
    for j in range(0, cols, BN_STATS_FMAX):
        chunk = data[:, j:min(cols, j + BN_STATS_FMAX)]
        _isa.record("vector", "bn_stats", (mean, chunk), data.dtype, chunk.data.size, 2 * chunk.data.size)
    mean.write(x.mean(axis=1, keepdims=True))
    var.write(x.var(axis=1, keepdims=True))
    _isa.record("vector", "bn_aggr", (var, mean), "float32", p * 6 * (cols // BN_STATS_FMAX), 0)


@nki.jit
def layernorm_v2(x, gamma, beta, eps=1e-5):
    """bn_stats/bn_aggr for mean and variance, rsqrt on ScalarE, one tensor_scalar (subtract, multiply) for the
    shift and scale, gamma and beta as two two-input VectorE passes; per 128-row tile."""
    rows, cols = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g = _broadcast_row(gamma, P, cols)
    b = _broadcast_row(beta, P, cols)
    for i in nl.affine_range(rows // P):
        t = nl.load(x[i * P:(i + 1) * P, :])
        mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        var = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        _bn_stats_and_aggr(mean, var, t)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=var, bias=eps)
        xc = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xc, data=t, op0=nl.subtract, operand0=mean, op1=nl.multiply, operand1=rstd)
        del t
        nisa.tensor_tensor(dst=xc, data1=xc, data2=g, op=nl.multiply)  # in place: SBUF holds 6 rows of 32 KiB
        nisa.tensor_tensor(dst=xc, data1=xc, data2=b, op=nl.add)
        nl.store(out[i * P:(i + 1) * P, :], xc)
    return out


MATMUL_KERNELS = {"matmul_tiled": matmul_tiled, "matmul_hoist_load": matmul_hoist_load,
                  "matmul_block_free": matmul_block_free, "matmul_fully_optimized": matmul_fully_optimized}
LAYERNORM_KERNELS = {"layernorm_v1": layernorm_v1, "layernorm_v2": layernorm_v2}


# -- Trn2: AWS's kernel-optimization tutorial (aws-neuron/aws-neuron-sdk @81ce03ae,
# nki/guides/tutorials/kernel-optimization.rst). Ports of the four published matmul kernels, as AWS wrote them:
# the same loop nests, the same lists of tiles, the same dtypes (fp32 inputs; v2/v3/v5 write fp32 results into an
# HBM tensor of lhsT's dtype), the same instructions in the same order. Written by the studio from the
# tutorial's listings (its sample code is MIT-0; the studio keeps its own copy).
@nki.jit
def trn2_matmul_v2_tiled(lhsT, rhs):
    """Tutorial "Writing the kernel": per output tile (m, n), for each k load one lhsT and one rhs tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray(shape=(M, N), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            result_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray(shape=(TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray(shape=(TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=result_tile, stationary=lhsT_tile, moving=rhs_tile)
            result_tmp = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result_tmp, src=result_tile)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=result_tmp)
    return result


@nki.jit
def trn2_matmul_v3_hoisted(lhsT, rhs):
    """Tutorial "Analyzing the kernel": lhsT's column of K tiles loaded once per m, rhs's once per (m, n)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray(shape=(M, N), dtype=nl.float32, buffer=nl.hbm)
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    for m in nl.affine_range(M // TILE_M):
        lhsT_tiles = []
        for k in nl.affine_range(K // TILE_K):
            lhsT_tile = nl.ndarray(shape=(TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
            lhsT_tiles.append(lhsT_tile)
        for n in nl.affine_range(N // TILE_N):
            rhs_tiles = []
            for k in nl.affine_range(K // TILE_K):
                rhs_tile = nl.ndarray(shape=(TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                rhs_tiles.append(rhs_tile)
            result_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(dst=result_tile, stationary=lhsT_tiles[k], moving=rhs_tiles[k])
            result_tmp = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result_tmp, src=result_tile)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=result_tmp)
    return result


@nki.jit
def trn2_matmul_v4_block_free(lhsT, rhs):
    """Tutorial "Overlapping data and compute through blocking": M and N blocked 2 tiles each; the K columns of
    the block's tiles live in SBUF together (more than SBUF holds at this shape: the compiler spills)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    TILES_IN_BLOCK_M, TILES_IN_BLOCK_N = 2, 2
    BLOCK_M, BLOCK_N = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N
    result = nl.ndarray(shape=(M, N), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // BLOCK_M):
        lhsT_tiles = []
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            lhsT_tiles_internal = []
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray(shape=(TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                m0 = (m * TILES_IN_BLOCK_M + bm) * TILE_M
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m0:m0 + TILE_M])
                lhsT_tiles_internal.append(lhsT_tile)
            lhsT_tiles.append(lhsT_tiles_internal)
        for n in nl.affine_range(N // BLOCK_N):
            rhs_tiles = []
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                rhs_tiles_internal = []
                for k in nl.affine_range(K // TILE_K):
                    rhs_tile = nl.ndarray(shape=(TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                    n0 = (n * TILES_IN_BLOCK_N + bn) * TILE_N
                    nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n0:n0 + TILE_N])
                    rhs_tiles_internal.append(rhs_tile)
                rhs_tiles.append(rhs_tiles_internal)
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    result_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        nisa.nc_matmul(dst=result_tile, stationary=lhsT_tiles[bm][k], moving=rhs_tiles[bn][k])
                    result_tmp = nl.ndarray(shape=result_tile.shape, dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=result_tmp, src=result_tile)
                    m0, n0 = (m * TILES_IN_BLOCK_M + bm) * TILE_M, (n * TILES_IN_BLOCK_N + bn) * TILE_N
                    nisa.dma_copy(dst=result[m0:m0 + TILE_M, n0:n0 + TILE_N], src=result_tmp)
    return result


@nki.jit
def trn2_matmul_v5_block_all(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Tutorial "Optimizing DMA through blocking the contraction dimension": M, N, K blocked; partial sums
    accumulated into SBUF result tiles with tensor_tensor; results packed [TILE_M, BLOCK_N] per store."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    result = nl.ndarray(shape=(M, N), dtype=nl.float32, buffer=nl.hbm)
    NUM_BLOCK_M, NUM_BLOCK_N, NUM_BLOCK_K = M // BLOCK_M, N // BLOCK_N, K // BLOCK_K
    for n in nl.affine_range(NUM_BLOCK_N):
        result_tmps = []
        for m_idx in range(NUM_BLOCK_M):
            block_m = []
            for bm_idx in range(TILES_IN_BLOCK_M):
                block_n = []
                for bn_idx in range(TILES_IN_BLOCK_N):
                    tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.memset(dst=tile, value=0.0)
                    block_n.append(tile)
                block_m.append(block_n)
            result_tmps.append(block_m)
        for k in nl.sequential_range(NUM_BLOCK_K):
            rhs_tiles = []
            for bk_r in range(TILES_IN_BLOCK_K):
                rhs_tile = nl.ndarray(shape=(TILE_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
                k0 = (TILES_IN_BLOCK_K * k + bk_r) * TILE_K
                nisa.dma_copy(dst=rhs_tile[0:TILE_K, 0:BLOCK_N], src=rhs[k0:k0 + TILE_K, BLOCK_N * n:BLOCK_N * (n + 1)])
                rhs_tiles.append(rhs_tile)
            for m in nl.affine_range(NUM_BLOCK_M):
                lhsT_tiles = []
                for bk_l in nl.affine_range(TILES_IN_BLOCK_K):
                    lhsT_tile = nl.ndarray(shape=(TILE_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                    k0 = (TILES_IN_BLOCK_K * k + bk_l) * TILE_K
                    nisa.dma_copy(dst=lhsT_tile[0:TILE_K, 0:BLOCK_M],
                                  src=lhsT[k0:k0 + TILE_K, BLOCK_M * m:BLOCK_M * (m + 1)])
                    lhsT_tiles.append(lhsT_tile)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        result_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=result_tile,
                                           stationary=lhsT_tiles[bk][0:TILE_K, bm * TILE_M:(bm + 1) * TILE_M],
                                           moving=rhs_tiles[bk][0:TILE_K, bn * TILE_N:(bn + 1) * TILE_N])
                        nisa.tensor_tensor(dst=result_tmps[m][bm][bn], data1=result_tmps[m][bm][bn],
                                           data2=result_tile, op=nl.add)
        for m in nl.affine_range(NUM_BLOCK_M):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                result_packed = nl.ndarray(shape=(TILE_M, BLOCK_N), dtype=nl.float32, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    nisa.tensor_copy(dst=result_packed[0:TILE_M, bn * TILE_N:(bn + 1) * TILE_N],
                                     src=result_tmps[m][bm][bn][0:TILE_M, 0:TILE_N])
                m0 = (TILES_IN_BLOCK_M * m + bm) * TILE_M
                nisa.dma_copy(dst=result[m0:m0 + TILE_M, BLOCK_N * n:BLOCK_N * (n + 1)],
                              src=result_packed[0:TILE_M, 0:BLOCK_N])
    return result


# -- Trn2: AWS's DMA overview (nki/get-started/about/nki-dma-overview.rst @81ce03ae), examples 1 and 2: one
# HBM->SBUF load, an exp on the Scalar Engine, one store; the published figure is the load's DMA engine time.
@nki.jit
def trn2_dma_exp(in_tensor):
    """Both examples' kernel (tensor_exp_kernel_isa): in_tensor [4, 4096] (example 1) or [128, 128] (2), bf16."""
    out_tensor = nl.ndarray(in_tensor.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    sbuf_tensor = nl.ndarray(in_tensor.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    out_tile = nl.ndarray(in_tensor.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    p, f = in_tensor.shape
    nisa.dma_copy(src=in_tensor[0:p, 0:f], dst=sbuf_tensor)
    nisa.activation(dst=out_tile, op=nl.exp, data=sbuf_tensor)
    nisa.dma_copy(src=out_tile, dst=out_tensor[0:p, 0:f])
    return out_tensor


TRN2_MATMUL_KERNELS = {"trn2_matmul_v2_tiled": trn2_matmul_v2_tiled, "trn2_matmul_v3_hoisted": trn2_matmul_v3_hoisted,
                       "trn2_matmul_v4_block_free": trn2_matmul_v4_block_free,
                       "trn2_matmul_v5_block_all": trn2_matmul_v5_block_all}
DMA_KERNELS = {"trn2_dma_exp": trn2_dma_exp}
