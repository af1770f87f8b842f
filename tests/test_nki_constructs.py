"""Issue 27: NKI constructs AWS's documentation uses and its compiler accepts run on the interpreter unmodified;
documented APIs the interpreter cannot run raise NotImplementedError naming the API and the line."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from neuron_studio.kernels.interpreter import nki_imports


@pytest.fixture(autouse=True)
def nki_layouts():
    """`import neuronxcc.nki...` / `import nki...` served by the interpreter, as the studio's loaders do."""
    if any(nki_imports.real_nki_available().values()):
        pytest.skip("a real Neuron installation provides nki; these tests cover the interpreter")
    nki_imports.install()
    yield
    nki_imports.uninstall()


def test_legacy_imports_resolve_and_device_only_apis_raise_naming_themselves() -> None:
    import neuronxcc.nki as nki
    import neuronxcc.nki.compiler as ncc  # was a ModuleNotFoundError
    from neuronxcc.nki import trace  # was an ImportError

    assert ncc.skip_middle_end_transformations(len) is len  # a directive: the kernel passes through
    with pytest.raises(NotImplementedError, match=r"nki\.compiler\.sbuf\.mod_alloc is not implemented"):
        ncc.sbuf.mod_alloc(base_addr=0)

    @trace
    def traced(a):
        return a
    with pytest.raises(NotImplementedError, match=r"nki\.trace is not implemented .*test_nki_constructs\.py"):
        traced(np.zeros(1))

    def kernel(a):
        return a
    bench = nki.benchmark(warmup=1, iters=2)(kernel)
    with pytest.raises(NotImplementedError, match=r"nki\.benchmark is not implemented"):
        bench[1](np.zeros(1))  # the documented `bench_func[grid](...)` (was a TypeError)


def test_current_layout_has_compiler_and_collectives() -> None:
    import nki.compiler
    from nki.collectives import all_gather_v

    assert nki.compiler.skip_middle_end_transformations(len) is len
    with pytest.raises(NotImplementedError, match=r"nki\.collectives\.all_gather_v is not implemented"):
        all_gather_v(srcs=[], dsts=[], replica_group=None, metadata_tensor=None)
    with pytest.raises(AttributeError, match="not in the NKI API reference"):
        importlib.import_module("nki.collectives").no_such_collective  # noqa: B018


def test_dtypes_are_numpy_dtypes_and_limits_are_documented_names() -> None:
    import ml_dtypes

    import nki.language as nl

    assert np.zeros(3, dtype=nl.bfloat16).dtype == np.dtype(ml_dtypes.bfloat16)  # was "data type not understood"
    assert nl.bfloat16 == "bfloat16" and nl.float32 == np.float32 and np.dtype(nl.int32).itemsize == 4
    assert nl.fp32.min == np.finfo(np.float32).min
    assert float(nl.finfo(nl.bfloat16).max) == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert nl.finfo(nl.float16).eps == np.finfo(np.float16).eps


def _legacy_kernel_module():
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    @nki.jit(mode="trace")
    def legacy(a):
        """AWS's previous-release spellings: np.max as a reduction, mask= on nisa, nl.mod/nl.fmod, reduce_cmd
        without reduce_res."""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        mx = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        r = nisa.tensor_reduce(np.max, t, axis=(1,), keepdims=True)
        ix, iy = nl.mgrid[0:a.shape[0], 0:a.shape[1]]
        half = nisa.tensor_scalar(t, nl.multiply, 2.0, mask=(ix < 64))  # rows >= 64 stay unwritten
        nisa.activation(op=nl.exp, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        m = nl.add(nl.mod(t, 3.0), nl.fmod(t, 3.0))
        nl.store(out, m)
        nl.store(mx, r)
        nl.store(out[0:64, :], half[0:64, :])
        return out, mx
    return legacy


def test_legacy_kernel_with_documented_constructs_runs_and_computes() -> None:
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8) - 300
    out, mx = _legacy_kernel_module()(a)
    want = np.mod(a, 3.0) + np.fmod(a, 3.0)
    want[:64] = 2 * a[:64]
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(mx, a.max(axis=1, keepdims=True))


def test_masked_isa_instruction_leaves_the_rest_unwritten() -> None:
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def masked(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=u, value=-1.0)
        ix, iy = nl.mgrid[0:a.shape[0], 0:a.shape[1]]
        nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.add, mask=(iy < 2))
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=u)
        return out
    a = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(masked(a), [[2, 2, -1, -1]] * 4)


def test_nki_0_6_loops_registers_and_topk() -> None:
    import ml_dtypes

    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def loops(a, count):
        acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        one = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1.0)

        def body(i):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=one, op=nl.add)
        nl.fori_loop(0, 5, body, step=2)  # 0, 2, 4
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=count)
        reg = nisa.register_alloc()
        nisa.register_load(reg, n_sb)

        def countdown(r):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=one, op=nl.add)
            nisa.register_move(r, int(r) - 1)
            return r
        nl.while_loop(reg, countdown)  # runs `count` times
        src = nl.ndarray((16, 3), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=a)
        val = nl.ndarray((16, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16, 4), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val, idx_dst=idx, src=src, n=42)
        out = nl.ndarray((16, 9), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:4], src=val)
        nisa.dma_copy(dst=out[:, 4:8], src=idx)
        nisa.dma_copy(dst=out[:, 8:9], src=acc.broadcast_to((16, 1)))
        return out

    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 3)).astype(np.float32)
    out, trace = loops.run(a, np.array([[7]], np.int32))
    snake = a.T.reshape(-1)[:42].astype(ml_dtypes.bfloat16).astype(np.float32)  # element e: partition e%16
    order = np.argsort(snake, kind="stable")[-4:]
    np.testing.assert_array_equal(out[:, 0:4], np.broadcast_to(snake[order], (16, 4)))
    np.testing.assert_array_equal(out[:, 4:8], np.broadcast_to(order, (16, 4)))
    assert (out[:, 8] == 3 + 7).all()
    topk = next(i for i in trace if i.opcode == "topk")
    assert topk.engine == "gpsimd" and topk.elements == 16 * (4 * 42 + 4)  # 4n + K cycles per partition


def test_nki_jit_mode_trace_runs_and_device_modes_still_refuse() -> None:
    import neuronxcc.nki as nki

    @nki.jit(mode="benchmark")
    def bench(a):
        return a
    with pytest.raises(NotImplementedError, match="needs a Neuron device"):
        bench(np.zeros(1, np.float32))
    assert "neuronxcc.nki" in sys.modules
