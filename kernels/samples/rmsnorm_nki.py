"""RMSNorm as a user would write it for NKI, in the public tutorials' style (`import neuronxcc.nki`,
`nl.load`/`nl.store` with masks, `nl.arange` indexing): a kernel file from outside the studio.

Tutorial 04 loads this file unmodified with `neuron_studio.kernels.load_kernel` (the NKI imports are served by
the interpreter when the Neuron SDK is absent) and swaps it into a model. It lives in the repository so the
tutorial runs anywhere; a file from AWS's nki-samples loads the same way.
"""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rmsnorm_kernel(x, weight, eps=1e-6):
    """y = x / sqrt(mean(x^2, last axis) + eps) * weight, for x[rows, d] and weight[d]."""
    rows, d = x.shape
    out = nl.ndarray((rows, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(d)[None, :]
    # the weight row, read once and broadcast to every partition
    w_row = nl.load(weight.reshape((1, d))[nl.arange(1)[:, None], i_f])
    w_tile = w_row.broadcast_to((nl.tile_size.pmax, d))
    for t in nl.affine_range(math.ceil(rows / nl.tile_size.pmax)):
        r = t * nl.tile_size.pmax + i_p
        in_rows = r < rows
        x_tile = nl.load(x[r, i_f], mask=in_rows)
        sum_sq = nl.sum(nl.square(x_tile, dtype=nl.float32, mask=in_rows), axis=[1], mask=in_rows)
        inv_rms = nl.rsqrt(nl.add(nl.multiply(sum_sq, 1.0 / d, mask=in_rows), eps, mask=in_rows), mask=in_rows)
        y_tile = nl.multiply(nl.multiply(x_tile, inv_rms, mask=in_rows), w_tile, dtype=x.dtype, mask=in_rows)
        nl.store(out[r, i_f], value=y_tile, mask=in_rows)
    return out
