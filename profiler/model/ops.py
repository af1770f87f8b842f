"""Per-op facts that do not depend on the chip: engine, FLOPs, bytes, elements, compute dtype.

Engine classification works on unique op names (a few hundred), never per event; shape arithmetic runs
once per event while converting OpEvents to columns.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from neuron_studio.profiler.vocabulary import COLLECTIVE_PREFIX, DEVICE_ENGINES, HOST_ENGINE, NO_ENGINE

__all__ = [
    "ENGINES", "ENGINE_CODE", "DTYPE_BF16", "DTYPE_FP8", "DTYPE_FP32", "DTYPE_MXFP8", "DTYPE_CLASSES",
    "base_name", "classify_engine", "dtype_itemsize", "shape_stats", "matmul_flops", "attention_scores",
]

ENGINES: tuple[str, ...] = (*DEVICE_ENGINES, NO_ENGINE, HOST_ENGINE)
ENGINE_CODE = {e: i for i, e in enumerate(ENGINES)}

# Compute-dtype classes: which Tensor Engine peak applies. MXFP8: FP8 with microscaling (E8M0 block scales),
# which NeuronCore-v4 runs at its MX rate; plain FP8 runs at the chip's plain-FP8 rate (on Trn3 the BF16 datapath).
DTYPE_BF16, DTYPE_FP8, DTYPE_FP32, DTYPE_MXFP8 = 0, 1, 2, 3
DTYPE_CLASSES = ("bf16", "fp8", "fp32", "mxfp8")
_MX_SCALE_DTYPES = ("float8_e8m0fnu",)

_ITEMSIZE = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1, "complex32": 4, "complex64": 8, "complex128": 16, "cfloat": 8, "cdouble": 16,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1, "bool": 1,
    "uint16": 2, "uint32": 4, "uint64": 8, "qint8": 1, "quint8": 1, "qint32": 4,
}

_TENSOR = {
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "vdot", "einsum",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution_backward", "_scaled_mm", "_grouped_mm", "grouped_mm", "_int_mm",
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
    "swiglu_mlp", "flash_attention",  # neuron_studio:: kernels swapped in with kernels.use (matmul-bound)
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward",
}
_SCALAR = {
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "tanh", "sigmoid", "gelu", "silu", "mish",
    "softplus", "erf", "erfc", "erfinv", "rsqrt", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "asinh", "acosh", "atanh", "pow", "elu", "selu", "celu", "logit", "log_sigmoid_forward",
    "softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",  # exp on the Scalar Engine
    "log_sigmoid", "lgamma", "digamma", "sinc", "hardswish", "gelu_backward", "silu_backward", "mish_backward",
    "sigmoid_backward", "tanh_backward", "softplus_backward", "elu_backward", "log_sigmoid_backward",
}
_GPSIMD = {
    "gather", "scatter", "scatter_add", "scatter_reduce", "index", "index_select", "index_put", "_index_put_impl",
    "index_add", "index_copy", "index_fill", "embedding", "embedding_dense_backward", "embedding_backward",
    "sort", "topk", "argsort", "nonzero", "nonzero_static", "masked_select", "masked_scatter", "unique",
    "_unique", "_unique2", "unique_consecutive", "unique_dim", "take", "take_along_dim", "searchsorted",
    "bucketize", "multinomial", "randperm", "kthvalue", "median", "nanmedian", "mode", "histc", "bincount",
}
_DMA = {
    "copy", "_to_copy", "to", "clone", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "contiguous",
    "_copy_from", "_copy_from_and_resize", "repeat", "tile", "constant_pad_nd", "pad", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "flip", "roll", "fill", "zero", "zeros",
    "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor",
    "permute_copy", "transpose_copy", "t_copy", "view_copy", "expand_copy", "slice_copy", "select_copy",
    "narrow_copy", "split_copy", "split_with_sizes_copy", "unbind_copy", "as_strided_copy", "diagonal_copy",
    "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "_local_scalar_dense",
    "lift_fresh_copy", "alias_copy", "detach_copy", "repeat_interleave", "arange", "linspace",
}
_NONE = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "slice", "select", "narrow", "split", "split_with_sizes", "unbind",
    "chunk", "tensor_split", "detach", "alias", "lift_fresh", "lift", "empty", "empty_like", "empty_strided",
    "empty_permuted", "new_empty", "new_empty_strided", "resize", "set", "view_as", "unflatten", "flatten",
    "diagonal", "movedim", "moveaxis", "real", "imag", "view_as_real", "view_as_complex", "_conj", "conj",
    "_neg_view", "resolve_conj", "resolve_neg", "unfold", "sym_size", "sym_stride", "sym_numel", "size",
    "stride", "dim", "numel", "is_nonzero", "item", "synchronize", "_nested_tensor_size", "record_stream", "_has_compatible_shallow_copy_type",
}


def base_name(name: str) -> str:
    """'aten::add_.Tensor' -> 'add' (namespace, overload and in-place underscore stripped)."""
    n = name.split("::", 1)[-1]
    n = n.split(".", 1)[0]
    if n.endswith("_") and not n.endswith("__"):
        n = n[:-1]
    return n


def classify_engine(name: str, is_view: bool = False) -> str:
    """The NeuronCore engine an op runs on. Unknown ops default to "vector" (most aten ops are elementwise)."""
    if is_view:
        return "none"
    if name.startswith(COLLECTIVE_PREFIX):  # collectives move data over NeuronLink: the DMA engines' work
        return "dma"
    b = base_name(name)
    if b in _TENSOR or b.startswith(("conv", "_conv")) or "scaled_dot_product" in b:
        return "tensor"
    if b in _NONE:
        return "none"
    if b in _DMA:
        return "dma"
    if b in _GPSIMD:
        return "gpsimd"
    if b in _SCALAR:
        return "scalar"
    return "vector"



def collective_factor(name: str, world_size: int) -> float:
    """Bytes on the wire per byte of message for a ring collective (0 for ops that are not collectives)."""
    if not name.startswith(COLLECTIVE_PREFIX):
        return 0.0
    n = max(1, int(world_size))
    b = base_name(name)
    if n == 1:
        return 0.0
    if "allreduce" in b:
        return 2.0 * (n - 1) / n
    if "allgather" in b or "reduce_scatter" in b:
        return (n - 1) / n
    return 1.0


def ring_steps(name: str, world_size: int) -> int:
    """Steps of a ring collective over `world_size` ranks, each paying one hop latency (intranode-collective-
    comm.rst: Ring has O(N) per-hop latency): all-reduce = reduce-scatter + all-gather = 2(N-1), all-gather /
    reduce-scatter / all-to-all N-1, point-to-point 1; 0 for one rank or an op that is not a collective."""
    if not name.startswith(COLLECTIVE_PREFIX):
        return 0
    n = max(1, int(world_size))
    if n == 1:
        return 0
    b = base_name(name)
    if "allreduce" in b:
        return 2 * (n - 1)
    if "allgather" in b or "reduce_scatter" in b or "alltoall" in b:
        return n - 1
    return 1


ALLREDUCE_ALGORITHMS = ("ring", "mesh", "rdh", "kangaring")


def allreduce_algorithm(world_size: int, nbytes: float, ranks_per_chip: int, mesh_max_chunk: float | None,
                        rdh_max_chunk: float | None) -> str:
    """The intra-instance all-reduce algorithm Trn2's runtime picks (neuron-runtime/explore/intranode-collective-
    comm.rst: Mesh for small, RDH for mid-size, KangaRing for large buffers), by the buffer per rank against the
    chip's thresholds (`ChipSpec.allreduce_*_max_chunk_bytes`); "ring" for a chip without them or ranks on one
    chip (the algorithms route between chips)."""
    n = max(1, int(world_size))
    if mesh_max_chunk is None or rdh_max_chunk is None or n <= max(1, int(ranks_per_chip)):
        return "ring"
    chunk = float(nbytes) / n
    return "mesh" if chunk <= mesh_max_chunk else "rdh" if chunk <= rdh_max_chunk else "kangaring"


def allreduce_steps(algorithm: str, world_size: int, ranks_per_chip: int) -> int:
    """Hops on the latency path of an all-reduce (= reduce-scatter + all-gather) by algorithm
    (intranode-collective-comm.rst @81ce03ae): Mesh one routed hop each way (2; 'from 2 to 1' for its single-step
    variant); RDH an intra-chip stage + log2(chips) recursive steps each way; KangaRing a ring of the N/2 primary
    ranks ('per-hop latency is cut by half when compared with Ring'); Ring 2(N-1)."""
    n = max(1, int(world_size))
    if n == 1:
        return 0
    if algorithm == "mesh":
        return 2
    if algorithm == "rdh":
        chips = -(-n // max(1, int(ranks_per_chip)))
        return 2 * (1 + max(1, math.ceil(math.log2(chips))))
    if algorithm == "kangaring":
        return 2 * max(1, n // 2 - 1)
    return 2 * (n - 1)


def dtype_itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name ('bfloat16', 'torch.float32'); unknown names count as 4."""
    return _ITEMSIZE.get(dtype.rsplit(".", 1)[-1], 4)


def _is_float(dtype: str) -> bool:
    d = dtype.rsplit(".", 1)[-1]
    return d.startswith(("float", "bfloat", "half", "double", "complex"))


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def matmul_flops(base: str, input_shapes: Sequence[Sequence[int]], output_shapes: Sequence[Sequence[int]]) -> int:
    """FLOPs of a Tensor-Engine op from shapes, following torch.utils.flop_counter's rules (2·M·N·K for
    matmuls, bias ignored; 2·numel(out)·numel(weight[1:]) for convolutions; QKᵀ + AV for SDPA).
    Used only when the device reported 0 FLOPs."""
    ins = [tuple(s) for s in input_shapes]
    outs = [tuple(s) for s in output_shapes]
    if not ins:
        return 0
    try:
        if base in ("mm", "matmul", "bmm", "mv", "dot", "vdot", "_int_mm", "_scaled_mm", "_grouped_mm", "grouped_mm"):
            k = ins[0][-1] if ins[0] else 1
            return 2 * _numel(outs[0]) * k if outs else 0
        if base in ("addmm", "baddbmm", "addbmm", "addmv"):
            a = ins[1] if len(ins) > 1 else ins[0]
            k = a[-1] if a else 1
            return 2 * _numel(outs[0]) * k if outs else 0
        if base == "linear":
            k = ins[0][-1] if ins[0] else 1
            return 2 * _numel(outs[0]) * k if outs else 0
        if "scaled_dot_product" in base and "backward" not in base and len(ins) >= 3:
            q, k_, v = ins[0], ins[1], ins[2]
            batch = _numel(q[:-2])
            L, E, S, Ev = q[-2], q[-1], k_[-2], v[-1]
            return 2 * batch * L * S * E + 2 * batch * L * S * Ev
        if base.startswith(("conv", "_conv")) and len(ins) >= 2 and outs:
            w = ins[1]
            return 2 * _numel(outs[0]) * _numel(w[1:])
        if outs and ins[0]:
            return 2 * _numel(outs[0]) * ins[0][-1]
    except (IndexError, TypeError):
        return 0
    return 0


def shape_stats(
    name: str,
    engine: str,
    input_shapes: Sequence[Sequence[int]],
    input_dtypes: Sequence[str],
    output_shapes: Sequence[Sequence[int]],
    output_dtypes: Sequence[str],
    flops: int,
) -> tuple[float, float, float, int, int, float]:
    """(bytes_in, bytes_out, elements, itemsize, dtype_class, flops) of one op.

    Views/metadata move 0 bytes. `elements` is max(largest input, total output): the element count a
    non-Tensor engine streams through (elementwise ops: the output; reductions: the input).
    """
    in_b = 0
    in_max = 0
    float_sizes: list[int] = []
    for i, shp in enumerate(input_shapes):
        dt = input_dtypes[i] if i < len(input_dtypes) else "float32"
        n = _numel(shp)
        sz = dtype_itemsize(dt)
        in_b += n * sz
        if n > in_max:
            in_max = n
        if _is_float(dt):
            float_sizes.append(sz)
    out_b = 0
    out_n = 0
    out_size = 0
    for i, shp in enumerate(output_shapes):
        dt = output_dtypes[i] if i < len(output_dtypes) else "float32"
        n = _numel(shp)
        sz = dtype_itemsize(dt)
        out_b += n * sz
        out_n += n
        out_size = max(out_size, sz)
    itemsize = out_size or (max(float_sizes) if float_sizes else 4)
    mx = any(d.rsplit(".", 1)[-1] in _MX_SCALE_DTYPES for d in input_dtypes)
    if mx:
        dclass = DTYPE_MXFP8
    elif float_sizes and max(float_sizes) >= 4:
        dclass = DTYPE_FP32
    elif float_sizes and max(float_sizes) == 1:
        dclass = DTYPE_FP8
    else:
        dclass = DTYPE_BF16
    if engine == "none":
        return 0.0, 0.0, 0.0, itemsize, dclass, float(flops)
    base = base_name(name)
    if engine == "tensor" and not flops:
        flops = matmul_flops(base, input_shapes, output_shapes)
    if engine == "tensor" and "scaled_dot_product" in base:
        # Attention: `elements` = what it streams through the Scalar Engine (one exp per score, in the forward
        # and in the backward's recomputation).
        return float(in_b), float(out_b), float(attention_scores(base, input_shapes)), itemsize, dclass, float(flops)
    return float(in_b), float(out_b), float(max(in_max, out_n)), itemsize, dclass, float(flops)


def attention_scores(base: str, input_shapes: Sequence[Sequence[int]]) -> int:
    """Score elements (batch x heads x Lq x Lk) of a scaled-dot-product-attention op, else 0."""
    if "scaled_dot_product" not in base or len(input_shapes) < 3:
        return 0
    q, k = (input_shapes[1], input_shapes[2]) if "backward" in base and len(input_shapes) >= 4 else \
        (input_shapes[0], input_shapes[1])
    if len(q) < 2 or len(k) < 2:
        return 0
    return _numel(q[:-1]) * int(k[-2])


def string_rows(a: Any) -> np.ndarray:
    """Which elements of an object column are `str` (pandas' missing values, None and NaN, are not). Missing
    values are found by pandas' C loop, so only the present ones are looked at one by one (a trace's optional
    string columns are mostly missing: one Python test per op row cost ~0.1 s per 200k ops)."""
    import pandas as pd

    arr = np.asarray(a, dtype=object)
    out = np.zeros(len(arr), dtype=bool)
    cand = np.flatnonzero(~pd.isna(arr)) if len(arr) else np.zeros(0, dtype=np.int64)
    if len(cand):
        out[cand] = np.fromiter((isinstance(x, str) for x in arr[cand].tolist()), dtype=bool,
                                count=len(cand))
    return out
