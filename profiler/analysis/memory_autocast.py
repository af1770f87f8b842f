"""What `torch.autocast(dtype=torch.bfloat16)` around the forward pass would do to a float32 step's memory,
replayed over its memory record. The memory forecast's autocast lever is built on it (memory_forecast.py).

Autocast changes the dtype op by op, not the model: parameters, gradients and optimizer state stay float32.
The rules applied to each float32 activation or temporary, by the op that allocated it:

- matmul-class ops (mm, addmm, bmm, matmul, linear, convolutions, scaled-dot-product attention) run in
  bfloat16 (autocast's lower-precision list), forward and backward: their outputs take half the bytes;
- activation functions (GELU, SiLU, ReLU, ...) and softmax / log-softmax follow their input, which in a
  transformer is a matmul's output: half the bytes, and their backward too;
- normalisation layers (layer norm, RMS norm, group norm) compute in float32, but what backward keeps of their
  output is the bfloat16 copy the next matmul casts it to: half the bytes (their float32 input, the residual
  stream, is unchanged: a float32 value plus a bfloat16 one is float32);
- a matmul-class op casts the float32 weights it reads to bfloat16 copies, which autocast caches for the
  forward pass and backward keeps: half the bytes of the weights of each module that runs one, from that
  module's forward until its backward ends, in each step (autocast clears its cast cache when the autocast
  block exits and the backward frees what it saved, so the copies are made again every step);
- nll_loss (cross-entropy) runs in float32: it keeps a float32 copy of the bfloat16 log-probabilities until
  its backward.

Everything else (residual adds, losses' outputs, integer storages) is unchanged. These follow autocast's op
lists; a model whose softmax or activation reads a float32 value (not a matmul's output) saves less than
modeled.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

__all__ = ["autocast_total"]

_HALF_OPS = re.compile(
    r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|conv\w*|_convolution\w*|convolution\w*|_scaled_dot_product\w*"
    r"|gelu|silu|relu|tanh|sigmoid|hardswish|mish|elu|leaky_relu|gelu_backward|silu_backward|threshold_backward"
    r"|_softmax|_log_softmax|_softmax_backward_data|_log_softmax_backward_data"
    r"|native_layer_norm|_fused_rms_norm|native_group_norm)$")
_MATMUL_OPS = re.compile(r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|conv\w*|_convolution\w*|convolution\w*)$")
_BACKWARD = " (backward)"


def autocast_total(rows: pd.DataFrame, total: np.ndarray, signed: np.ndarray, category: np.ndarray,
                   dtype: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Bytes live after each row of one device's record with the forward pass under bf16 autocast. `total`
    is the captured bytes live after each row, `signed` each row's +/- bytes; `category`, `dtype` and `op`
    are each row's storage's category, dtype and allocating op."""
    n = len(rows)
    fp32 = np.asarray([d == "float32" for d in dtype], dtype=bool)
    dynamic = np.isin(category, ["activation", "temporary"])
    halves = dynamic & fp32 & np.asarray([isinstance(o, str) and bool(_HALF_OPS.match(o)) for o in op], dtype=bool)
    new = total - 0.5 * np.cumsum(np.where(halves, signed, 0))
    extra = np.zeros(n + 1, dtype=np.float64)

    def add(a: int, b: int, v: float) -> None:  # rows a..b inclusive
        if b >= a and v:
            extra[a] += v
            extra[b + 1] -= v

    kind = rows["kind"].to_numpy()
    phase = rows["phase"].to_numpy(dtype=object)
    module = rows["module"].to_numpy(dtype=object)
    row_op = rows["op"].to_numpy(dtype=object)
    nbytes = rows["nbytes"].to_numpy(dtype=np.int64)
    step = rows["step"].to_numpy() if "step" in rows else np.zeros(n, dtype=np.int64)
    # bf16 copies of the weights matmul-class ops read: the parameters of each module that runs one
    first = (kind >= 0) & ~rows["alloc_id"].duplicated().to_numpy()
    params = [(str(name).rsplit(".", 1)[0], int(b)) for name, b, is_p in
              zip(rows["name"].to_numpy(dtype=object), nbytes, first & (category == "parameter") & fp32)
              if is_p and isinstance(name, str)]
    runs_matmul = {m for m, p, o, k in zip(module, phase, row_op, kind)
                   if k > 0 and p == "forward" and isinstance(m, str) and isinstance(o, str) and _MATMUL_OPS.match(o)}
    for m in runs_matmul:
        weight = sum(b for owner, b in params if owner == m)
        in_fwd = (kind != 0) & (phase == "forward") & (module == m)
        in_bwd = module == m + _BACKWARD
        for s in (np.unique(step[in_fwd]) if weight else ()):   # held per step: from its forward to its backward
            fwd, bwd = np.flatnonzero(in_fwd & (step == s)), np.flatnonzero(in_bwd & (step == s))
            add(int(fwd[0]), int(bwd[-1]) if len(bwd) and bwd[-1] > fwd[0] else int(fwd[-1]), 0.5 * weight)
    # nll_loss's float32 copy of the log-probabilities, until nll_loss_backward
    nll_bwd = np.flatnonzero(row_op == "aten::nll_loss_backward")
    for i in np.flatnonzero((kind > 0) & (phase == "forward") & (row_op == "aten::_log_softmax") & fp32[:n]):
        later = nll_bwd[nll_bwd > i]
        if len(later):
            add(int(i), int(later[0]), float(nbytes[i]))
    return new + np.cumsum(extra)[:n]
