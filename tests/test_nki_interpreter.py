"""NKI interpreter: tile rules with kernel source lines, traces, dtype handling, array kinds."""
from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

try:
    from neuron_studio import kernels as K
    from neuron_studio.kernels.interpreter import isa as nisa
    from neuron_studio.kernels.interpreter import language as nl
    from neuron_studio.kernels.interpreter import nki
except Exception:  # package not importable yet (parent package under construction): use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import kernels as K  # type: ignore[no-redef]
    from kernels.interpreter import isa as nisa  # type: ignore[no-redef]
    from kernels.interpreter import language as nl  # type: ignore[no-redef]
    from kernels.interpreter import nki  # type: ignore[no-redef]


def _line_of(func, marker: str) -> str:
    """'test_nki_interpreter.py:N' for the line of `func` carrying `marker`."""
    lines, start = inspect.getsourcelines(func)
    for i, text in enumerate(lines):
        if marker in text:
            return f"{Path(__file__).name}:{start + i}"
    raise AssertionError(marker)


def _raises(kernel, rule: str, marker: str, *args, **kwargs) -> K.NkiRuleError:
    with pytest.raises(K.NkiRuleError) as info:
        kernel(*args, **kwargs)
    err = info.value
    assert err.rule == rule
    assert err.kernel_line == _line_of(kernel.func, marker)
    assert rule in str(err) and err.kernel_line in str(err)
    return err


# -- rule kernels ------------------------------------------------------------------------------------------
@nki.jit
def too_many_partitions(a):
    big_tile = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)  # <- partition
    return a


@nki.jit
def psum_overflow(a):
    wide_acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)  # <- psum
    return a


@nki.jit
def moving_too_wide(a):
    lhs = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    rhs = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, lhs, rhs[:, 0:1024])  # <- moving
    return a


@nki.jit
def stationary_too_wide(a):
    lhs = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    rhs = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, lhs, rhs)  # <- stationary
    return a


@nki.jit
def operand_in_hbm(a, b):
    acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b)  # <- hbm
    return a


@nki.jit
def sbuf_hog(a, chunks):
    keep = []
    for i in nl.affine_range(chunks):
        keep.append(nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf))  # <- sbuf
    return a


@nki.jit
def sbuf_loop_reuse(a, iters):
    for i in nl.affine_range(iters):
        scratch = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)  # 64 KiB/partition, freed per iter
        nisa.memset(scratch, 0.0)
    return a


@nki.jit
def dma_to_psum(a):
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=acc, src=a)  # <- dma
    return a


@nki.jit
def vector_on_hbm(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=a)  # <- engine
    return a


@nki.jit
def out_of_bounds(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, 0:64])
    nisa.dma_copy(dst=t[0:128, 0:64], src=a[100:228, 0:64])  # <- oob
    return a


def test_partition_dim_over_128_names_tensor_and_line():
    err = _raises(too_many_partitions, "partition_dim", "# <- partition", np.zeros((4, 4), np.float32))
    assert "big_tile" in err.tensor and "256" in str(err)


def test_psum_bank_overflow():
    err = _raises(psum_overflow, "psum_bank", "# <- psum", np.zeros((4, 4), np.float32))
    assert "wide_acc" in err.tensor and "512" in str(err)


def test_matmul_moving_over_512():
    err = _raises(moving_too_wide, "matmul_moving_fmax", "# <- moving", np.zeros((4, 4), np.float32))
    assert err.tensor.startswith("rhs[")


def test_matmul_stationary_over_128():
    err = _raises(stationary_too_wide, "matmul_stationary_fmax", "# <- stationary", np.zeros((4, 4), np.float32))
    assert err.tensor.startswith("lhs")


def test_matmul_operand_in_hbm_names_argument():
    a = np.zeros((128, 128), np.float32)
    b = np.zeros((128, 256), np.float32)
    err = _raises(operand_in_hbm, "matmul_operand_buffer", "# <- hbm", a, b)
    assert err.tensor.startswith("a ") and "hbm" in err.tensor


def test_sbuf_overflow_depends_on_chip_and_is_a_spill_charged_as_hbm_traffic():
    from neuron_studio.kernels.interpreter.memory import NkiSpillWarning

    a = np.zeros((4, 4), np.float32)
    # 64 KiB/partition each: 3 fit in trn1's 192 KiB, a 4th does not; trn3 (256 KiB) takes 4.
    _, fits = sbuf_hog.run(a, 3, chip="trn1")
    assert fits.spill_bytes == 0
    with pytest.warns(NkiSpillWarning, match=r"SBUF working set 262144 B/partition exceeds the trn1 capacity.*"
                      + re.escape(_line_of(sbuf_hog.func, "# <- sbuf"))):
        _, spilled = sbuf_hog.run(a, 4, chip="trn1")
    assert spilled.spill_bytes == 2 * 65536 * 128  # the 4th tile's bytes leave SBUF and come back
    assert K.kernel_time(spilled, "trn1").per_engine_ns["dma"] > K.kernel_time(fits, "trn1").per_engine_ns["dma"]
    _, trace = sbuf_hog.run(a, 4, chip="trn3")
    assert trace.peak_sbuf_bytes_per_partition == 4 * 65536 and trace.spill_bytes == 0


def test_sbuf_freed_when_tile_dies():
    _, trace = sbuf_loop_reuse.run(np.zeros((4, 4), np.float32), 10, chip="trn1")
    assert trace.peak_sbuf_bytes_per_partition <= 2 * 65536  # old tile dies when the name is rebound


def test_dma_only_between_hbm_and_sbuf():
    _raises(dma_to_psum, "dma_buffers", "# <- dma", np.zeros((128, 64), np.float32))


def test_compute_engine_rejects_hbm_operand():
    _raises(vector_on_hbm, "engine_operand_buffer", "# <- engine", np.zeros((128, 64), np.float32))


def test_out_of_bounds_slice_is_an_error_not_a_clip():
    _raises(out_of_bounds, "out_of_bounds", "# <- oob", np.zeros((200, 64), np.float32))


def test_nl_outside_kernel_is_a_typed_error():
    with pytest.raises(K.NkiUsageError):
        nl.ndarray((4, 4), nl.float32)


# -- semantics ---------------------------------------------------------------------------------------------
@nki.jit
def matmul_once(lhs_t, rhs):
    lt = nl.load(lhs_t)
    rt = nl.load(rhs)
    acc = nl.zeros((lhs_t.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, lt, rt)
    nisa.nc_matmul(acc, lt, rt)
    res = nl.ndarray(acc.shape, dtype=lhs_t.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray(res.shape, dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    nl.store(out, res)
    return out


def test_nc_matmul_is_stationary_transposed_times_moving_and_accumulates():
    rng = np.random.default_rng(0)
    st, mv = rng.standard_normal((64, 32), np.float32), rng.standard_normal((64, 100), np.float32)
    out, trace = matmul_once.run(st, mv)
    np.testing.assert_allclose(out, 2 * st.T @ mv, rtol=1e-5, atol=1e-4)
    assert isinstance(out, np.ndarray)
    mm = [i for i in trace if i.opcode == "nc_matmul"]
    assert len(mm) == 2 and all(i.engine == "tensor" and i.flops == 2 * 64 * 32 * 100 for i in mm)
    assert {i.engine for i in trace} >= {"tensor", "vector", "dma"}
    assert all(i.file.endswith("test_nki_interpreter.py") and i.line > 0 for i in trace)
    dma = [i for i in trace if i.engine == "dma"]
    assert sum(i.bytes for i in dma) == (64 * 32 + 64 * 100 + 32 * 100) * 4
    cols = trace.columns()
    assert len(cols["opcode"]) == len(trace)


def test_torch_in_torch_out_and_bf16_rounding():
    st = torch.randn(16, 8, dtype=torch.bfloat16)
    mv = torch.randn(16, 24, dtype=torch.bfloat16)
    out = matmul_once(st, mv)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    expect = (2 * st.float().T @ mv.float()).to(torch.bfloat16)
    assert torch.equal(out, expect)  # same fp32 accumulate, same RNE rounding


def test_bf16_rounding_matches_torch():
    from importlib import import_module

    dtypes = import_module(K.__name__ + ".interpreter.dtypes")
    x = np.concatenate([np.random.default_rng(1).standard_normal(10000).astype(np.float32) * 1e3,
                        np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, 3.4e38], np.float32)])
    ours = dtypes.round_to(x, "bfloat16")
    theirs = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_shim_uses_interpreter_without_torch_neuronx():
    assert K.BACKEND in ("interpreter", "nki")
    if K.BACKEND == "interpreter":
        assert "torch_neuronx" not in sys.modules
