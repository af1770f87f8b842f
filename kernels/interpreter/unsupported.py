"""Documented NKI APIs the interpreter does not implement: using one raises NotImplementedError naming the API
and the kernel line, never a silent approximation.

Names come from the NKI API reference (AWS Neuron documentation) of the previous (`neuronxcc.nki`, Neuron
2.2x) and current (standalone `nki`) releases. Referencing such a name (e.g. a module-level
`sb_mod = nki.compiler.sbuf.mod_alloc`) works; calling it, or decorating a kernel with it and calling the
kernel, raises. A name that is in neither reference is an ordinary AttributeError.
"""
from __future__ import annotations

from typing import Any, Callable

from .state import kernel_frame, kernel_line

__all__ = ["Unsupported", "unsupported", "module_getattr", "DOCUMENTED_LANGUAGE", "DOCUMENTED_ISA",
           "DOCUMENTED_NKI", "DOCUMENTED_COLLECTIVES", "NOT_ON_INTERPRETER"]

DOCUMENTED_LANGUAGE = frozenset("""
load store load_transpose2d atomic_rmw copy broadcast_to ndarray zeros zeros_like ones full rand random_seed
shared_constant shared_identity_matrix empty_like add subtract multiply divide power maximum minimum max min mean
var sum prod all abs negative sign trunc floor ceil exp log cos sin tan tanh arctan sqrt rsqrt sigmoid relu gelu
gelu_dx gelu_apprx_tanh gelu_apprx_sigmoid gelu_apprx_sigmoid_dx silu silu_dx erf erf_dx softplus mish square
softmax rms_norm dropout matmul transpose bitwise_and bitwise_or bitwise_xor invert left_shift right_shift equal
not_equal greater greater_equal less less_equal logical_and logical_or logical_xor logical_not ds arange mgrid
expand_dims where all_reduce static_range affine_range sequential_range par_dim psum sbuf hbm private_hbm
shared_hbm program_id num_programs program_ndim spmd_dim nc device_print loop_reduce tfloat32 bfloat16
float8_e4m3 float8_e5m2 float8_e4m3fn float8_e5m2_x4 float8_e4m3fn_x4 float4_e2m1fn_x4 float32 float16 int32
uint32 int16 uint16 int8 uint8 bool_ tile_size abs_max abs_min reciprocal NkiTensor static_cast
""".split())

DOCUMENTED_ISA = frozenset("""
nc_matmul nc_matmul_mx nc_transpose activation activation_reduce activate2 tensor_reduce tensor_partition_reduce
tensor_tensor tensor_tensor_scan scalar_tensor_tensor tensor_scalar tensor_scalar_reduce tensor_scalar_cumulative
tensor_copy tensor_copy_dynamic_src tensor_copy_dynamic_dst tensor_copy_predicated exponential reciprocal
quantize_mx iota dropout affine_select range_select select_reduce sequence_bounds memset bn_stats bn_aggr
local_gather nc_n_gather dma_copy dma_transpose dma_compute max8 nc_find_index8 nc_match_replace8
nc_stream_shuffle register_alloc register_load register_move register_store core_barrier sendrecv rng rand2
rand_set_state rand_get_state set_rng_seed nonzero_with_count engine reduce_cmd dge_mode oob_mode
matmul_perf_mode nc_version get_nc_version tensor_engine vector_engine scalar_engine gpsimd_engine dma_engine
unknown_engine
""".split())

DOCUMENTED_NKI = frozenset("jit benchmark baremetal simulate_kernel profile tensor language isa typing compiler "
                           "collectives simulate trace".split())

# nki.collectives (NKI 0.5/0.6, aws-neuron-sdk nki/api/nki.collectives.rst): cross-rank operations inside a kernel
DOCUMENTED_COLLECTIVES = frozenset("""
all_reduce all_gather all_gather_v reduce_scatter all_to_all all_to_all_v collective_permute
collective_permute_implicit collective_permute_implicit_reduce collective_permute_implicit_current_processing_rank_id
rank_id ReplicaGroup
""".split())

# Why an API cannot run here (shown in the error); the default is "not implemented by the interpreter".
NOT_ON_INTERPRETER = {
    "benchmark": "it measures latency on a Neuron device; use neuron_studio.kernels.kernel_time for modeled time",
    "profile": "it captures a device profile (NEFF/NTFF); use neuron_studio.kernels.kernel_time per line",
    "compiler": "compiler directives and direct allocation (nki.compiler.*) need the Neuron compiler",
    "trace": "it traces a kernel into a framework graph for the Neuron compiler; call the kernel (nki.jit) instead",
    "nc_matmul_mx": "MX (microscaling) matmul needs MXFP8/MXFP4 formats the interpreter does not model",
    "quantize_mx": "MX (microscaling) quantization needs MXFP8/MXFP4 formats the interpreter does not model",
}


class Unsupported:
    """A documented NKI API the interpreter lacks. Attribute access returns deeper placeholders
    (`nki.compiler.sbuf.mod_alloc`); calling raises NotImplementedError naming the API and the call line.
    `decorator=True` (nki.benchmark, nki.baremetal-style factories) lets `@api(...)` decorate at import time and
    raises when the decorated kernel is called."""

    def __init__(self, api: str, reason: str = "", decorator: bool = False) -> None:
        self._api = api
        self._reason = reason
        self._decorator = decorator

    def __getattr__(self, name: str) -> "Unsupported":
        if name.startswith("__"):
            raise AttributeError(name)
        return Unsupported(f"{self._api}.{name}", self._reason, self._decorator)

    def error(self, line: str) -> NotImplementedError:
        why = f": {self._reason}" if self._reason else ""
        return NotImplementedError(f"{self._api} is not implemented by the Neuron Studio NKI interpreter{why} "
                                   f"(used at {line})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        line = kernel_line(kernel_frame(2)) or "<unknown>"
        if self._decorator:
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return _raising_kernel(self, args[0], line)
            return lambda func: _raising_kernel(self, func, line)
        raise self.error(line)

    def __repr__(self) -> str:
        return f"<unsupported NKI API {self._api}>"


class _RaisingKernel:
    """A kernel decorated by a device-only API: calling it, also through a launch grid (`bench_func[grid](...)`,
    as AWS's benchmark examples do), raises NotImplementedError naming the API."""

    def __init__(self, api: Unsupported, func: Callable[..., Any], line: str) -> None:
        self._api, self._line = api, line
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__wrapped__ = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._api.error(self._line)

    def __getitem__(self, grid: Any) -> "_RaisingKernel":
        return self


def _raising_kernel(api: Unsupported, func: Callable[..., Any], line: str) -> _RaisingKernel:
    return _RaisingKernel(api, func, line)


def unsupported(module: str, name: str, decorator: bool = False) -> Unsupported:
    return Unsupported(f"{module}.{name}", NOT_ON_INTERPRETER.get(name, ""), decorator)


def module_getattr(module: str, documented: frozenset) -> Callable[[str], Any]:
    """A PEP 562 `__getattr__` for a public NKI module: documented names become `Unsupported` placeholders."""

    def __getattr__(name: str) -> Any:
        if name in documented:
            return unsupported(module, name)
        raise AttributeError(f"module {module!r} has no attribute {name!r} (not in the NKI API reference)")

    return __getattr__
