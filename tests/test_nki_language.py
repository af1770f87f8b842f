"""The NKI language as documented: SPMD grids, poisoned uninitialised memory, liveness-based SBUF/PSUM accounting,
masks and affine indexing, the previous release's return-style `nisa`, jit options, unsupported APIs naming
themselves and the kernel line, and the import layouts (`neuronxcc.nki`, `nki`) never shadowing a real SDK."""
from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from neuron_studio import kernels as K
from neuron_studio.kernels.interpreter import isa as nisa
from neuron_studio.kernels.interpreter import isa_legacy as nisa_v1
from neuron_studio.kernels.interpreter import language as nl
from neuron_studio.kernels.interpreter import nki, nki_imports
from neuron_studio.kernels.interpreter.jit import NkiOptionWarning
from neuron_studio.kernels.interpreter.memory import NkiSpillWarning

REPO = Path(__file__).resolve().parents[1]


def _line(func, marker: str) -> str:
    lines, start = inspect.getsourcelines(func)
    return f"{Path(__file__).name}:{start + next(i for i, t in enumerate(lines) if marker in t)}"


# -- SPMD launch grids (issue 14.7) ------------------------------------------------------------------------
@nki.jit
def add_rows(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    j = nl.arange(a.shape[1])[None, :]
    nl.store(out[i, j], value=nl.load(a[i, j]) + nl.load(b[i, j]))
    return out


@nki.jit
def grid_ids(a):
    out = nl.ndarray((nl.num_programs(0), nl.num_programs(1), 4), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(t[:, 0:1], nl.program_id(0))
    nisa.memset(t[:, 1:2], nl.program_id(1))
    nisa.memset(t[:, 2:3], nl.num_programs())
    nisa.memset(t[:, 3:4], nl.program_ndim())
    nl.store(out[nl.program_id(0), nl.program_id(1):nl.program_id(1) + 1, :], value=t)
    return out


def test_launch_grid_runs_every_instance():
    a, b = np.random.default_rng(0).random((2, 256, 64), dtype=np.float32)
    np.testing.assert_array_equal(add_rows[2](a, b), a + b)  # old interpreter: rows 128-255 stayed zero
    out, trace = add_rows[2].run(a, b)
    assert trace.count(opcode="dma_copy") == 6


def test_program_id_and_num_programs_on_a_2d_grid():
    ids = grid_ids[3, 2](np.zeros(1, np.float32))
    for p0 in range(3):
        for p1 in range(2):
            assert list(ids[p0, p1]) == [p0, p1, 6, 2]


def test_spmd_dim_over_two_cores_doubles_the_axis():
    a, b = np.ones((512, 64), np.float32), np.full((512, 64), 2, np.float32)
    np.testing.assert_array_equal(add_rows[nl.spmd_dim(2, nl.nc(2))](a, b), a + b)


def test_a_grid_instance_reading_beyond_the_input_is_an_error():
    with pytest.raises(K.NkiRuleError) as info:
        add_rows[3](np.zeros((256, 8), np.float32), np.zeros((256, 8), np.float32))
    assert info.value.rule == "out_of_bounds"


# -- uninitialised memory (issue 14.8) ---------------------------------------------------------------------
@nki.jit
def half_written(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)  # <- out
    nl.store(out[0:64, :], value=nl.load(a[0:64, :]))
    return out


@nki.jit
def reads_garbage(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nl.store(out, value=nl.add(t, 1.0))  # t was never written
    return out


def test_output_element_never_written_is_an_error():
    with pytest.raises(K.NkiRuleError) as info:
        half_written(np.ones((128, 16), np.float32))
    assert info.value.rule == "uninitialized_output"
    assert info.value.kernel_line == _line(half_written.func, "# <- out")
    assert "1024 of 2048" in str(info.value) and info.value.tensor.startswith("out")


def test_uninitialised_tiles_read_as_nan_and_int_sentinel():
    out = reads_garbage(np.ones((128, 16), np.float32))
    assert np.isnan(out).all()  # old interpreter: 1.0 everywhere (zero-filled)
    out = reads_garbage(np.ones((128, 16), np.int32))
    assert (out == np.int32(np.float32(0x5A5A5A5A) + np.float32(1))).all()  # the sentinel, +1 in fp32


# -- SBUF/PSUM liveness (issue 14.9) -----------------------------------------------------------------------
@nki.jit
def big_tile_per_iteration(a, iters):
    for i in nl.affine_range(iters):
        scratch = nl.ndarray((128, 30 * 1024), dtype=nl.float32, buffer=nl.sbuf)  # 120 KiB/partition
        nisa.memset(scratch, float(i))
    return a


@nki.jit
def two_big_tiles_live(a):
    x = nl.ndarray((128, 30 * 1024), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(x, 1.0)
    y = nl.ndarray((128, 30 * 1024), dtype=nl.float32, buffer=nl.sbuf)  # <- second
    nisa.memset(y, 2.0)
    nisa.tensor_tensor(dst=y, data1=x, data2=y, op=nl.add)
    return a


def test_tile_recreated_in_a_loop_reuses_its_space():
    _, trace = big_tile_per_iteration.run(np.zeros(1, np.float32), 4, chip="trn1")  # old: "exceeds 196608"
    assert trace.peak_sbuf_bytes_per_partition == 120 * 1024


def test_tiles_live_at_once_spill_naming_the_second_line():
    with pytest.warns(NkiSpillWarning, match="SBUF working set .*" + _line(two_big_tiles_live.func, "# <- second")):
        _, trace = two_big_tiles_live.run(np.zeros(1, np.float32), chip="trn1")
    assert trace.spill_bytes == 2 * (2 * 120 * 1024 - 196608) * 128


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_layernorm_fp32_d8192_runs_on_trn1_and_trn2(chip):
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(256, 8192, generator=g), torch.randn(8192, generator=g), torch.randn(8192, generator=g)
    out, trace = K.run(K.layernorm_kernel, x, w, b, chip=chip)
    torch.testing.assert_close(out, K.reference_layernorm(x, w, b), rtol=1e-4, atol=1e-4)
    assert trace.peak_sbuf_bytes_per_partition <= {"trn1": 196608, "trn2": 229376}[chip]


@nki.jit
def block_psum_overflow(a):
    acc = nl.ndarray((16, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)  # 16 banks of blocks
    for i in nl.affine_range(16):
        nisa.memset(acc[i], float(i))
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=acc[15])
    for i in nl.affine_range(15):
        nisa.tensor_tensor(dst=s, data1=s, data2=acc[i], op=nl.add)
    nl.store(out, value=s)
    return out


def test_block_tensor_over_psum_is_a_visible_spill_warning():
    with pytest.warns(NkiSpillWarning, match="PSUM working set .* exceeds the trn2 capacity of 16384"):
        out = block_psum_overflow(np.zeros(1, np.float32))
    assert (out == sum(range(16))).all()


# -- indexing and masks ------------------------------------------------------------------------------------
@nki.jit
def masked_copy(a):
    n, f = a.shape
    out = nl.ndarray((n, f), dtype=a.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((n + 127) // 128):
        i_p, i_f = nl.mgrid[0:128, 0:f]
        rows = t * 128 + i_p
        tile = nl.load(a[rows, i_f], mask=(rows < n))
        nl.store(out[rows, i_f], value=nl.multiply(tile, 2.0, mask=(rows < n)), mask=(rows < n))
    return out


@nki.jit
def unmasked_ragged(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    nl.store(out[i_p, i_f], value=nl.load(a[i_p, i_f]))  # <- unmasked
    return out


def test_masked_ragged_tiles():
    a = np.random.default_rng(1).random((200, 24), dtype=np.float32)
    np.testing.assert_allclose(masked_copy(a), 2 * a)


def test_index_beyond_tensor_without_mask_names_the_line():
    with pytest.raises(K.NkiRuleError) as info:
        unmasked_ragged(np.ones((100, 8), np.float32))
    assert info.value.rule == "out_of_bounds" and info.value.kernel_line == _line(unmasked_ragged.func, "<- unmasked")


@nki.jit
def language_ops(x, y):
    out = nl.ndarray((x.shape[1], x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    xs, ys = nl.load(x), nl.load(y)
    prod = nl.matmul(xs, ys, transpose_x=True)               # x.T @ y on the Tensor Engine
    centered = nl.subtract(prod, nl.max(prod, axis=1))       # [P] broadcasts along the free axis
    soft = nl.exp(centered) / nl.sum(nl.exp(centered), axis=1, keepdims=True)
    nl.store(out, value=nl.transpose(nl.where(soft > 0.5, soft, 0.0)))
    return out


def test_language_matmul_reductions_broadcasting_where_transpose():
    r = np.random.default_rng(2)
    x, y = r.standard_normal((64, 32), np.float32), r.standard_normal((64, 32), np.float32)
    qk = x.T.astype(np.float64) @ y
    e = np.exp(qk - qk.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(language_ops(x, y), np.where(s > 0.5, s, 0.0).T, rtol=1e-5, atol=1e-6)


@nki.jit
def psum_accumulation_group(a, b):
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)  # uninitialised
    ta, tb = nl.load(a), nl.load(b)
    nisa.nc_matmul(acc, ta, tb)   # opens the accumulation group (overwrites)
    nisa.nc_matmul(acc, ta, tb)   # accumulates
    out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=acc)
    nl.store(out, value=s)
    return out


def test_matmul_into_uninitialised_psum_opens_an_accumulation_group():
    r = np.random.default_rng(3)
    a, b = r.standard_normal((128, 64), np.float32), r.standard_normal((128, 256), np.float32)
    np.testing.assert_allclose(psum_accumulation_group(a, b), 2 * a.T @ b, rtol=1e-5, atol=1e-4)


@nki.jit
def legacy_style(x):
    t = nl.load(x)
    ps = nisa_v1.nc_transpose(t)                                     # Tensor Engine -> PSUM
    tt = nisa_v1.tensor_copy(ps)
    scan = nisa_v1.tensor_tensor_scan(tt, tt, initial=0.0, op0=np.multiply, op1=np.add)
    red = nisa_v1.tensor_reduce(op=nl.add, data=scan, axis=1, keepdims=True)
    iota = nisa_v1.iota(nl.arange(tt.shape[0])[:, None] + 0 * nl.arange(1)[None, :], dtype=nl.float32)
    out = nl.ndarray(red.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(red, iota))
    return out


def test_previous_release_isa_returns_result_tiles():
    x = np.random.default_rng(4).uniform(0.1, 0.5, (16, 8)).astype(np.float32)
    xt = x.T
    scan = np.zeros_like(xt)
    prev = np.zeros(xt.shape[0], np.float32)
    for i in range(xt.shape[1]):
        prev = xt[:, i] * prev + xt[:, i]
        scan[:, i] = prev
    expected = scan.sum(axis=1, keepdims=True) + np.arange(xt.shape[0])[:, None]
    np.testing.assert_allclose(legacy_style(x), expected, rtol=1e-5)


@nki.jit
def with_dropout(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.dropout(nl.load(x), 0.5))
    return out


def test_dropout_is_seeded_and_drops_about_the_rate():
    x = np.ones((128, 256), np.float32)
    a, b = with_dropout(x), with_dropout(x)
    np.testing.assert_array_equal(a, b)          # reproducible per call
    assert set(np.unique(a)) == {0.0, 1.0} and 0.45 < (a == 0).mean() < 0.55


# -- jit options and entry points --------------------------------------------------------------------------
def _copy_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def test_platform_target_selects_the_chip_and_mode_benchmark_is_rejected():
    _, trace = nki.jit(platform_target="trn1")(_copy_kernel).run(np.ones((4, 4), np.float32))
    assert trace.chip == "trn1"
    with pytest.raises(NotImplementedError, match="mode='benchmark'"):
        nki.jit(mode="benchmark")(_copy_kernel)(np.ones((4, 4), np.float32))


def test_compiler_options_are_reported_not_dropped():
    k = nki.jit(additional_compile_opt="--foo")(_copy_kernel)
    with pytest.warns(NkiOptionWarning, match="additional_compile_opt"):
        k(np.ones((4, 4), np.float32))
    assert k.options == {"additional_compile_opt": "--foo"}


def test_simulate_kernel_and_torch_in_torch_out():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(_copy_kernel), a), a)
    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    out = nki.jit(_copy_kernel)(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and torch.equal(out, t)


# -- unsupported APIs name themselves and the kernel line --------------------------------------------------
@nki.jit
def uses_atomic_rmw(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.atomic_rmw(out, value=nl.load(a), op=nl.add)  # <- unsupported
    return out


def test_documented_but_unimplemented_api_raises_naming_api_and_line():
    with pytest.raises(NotImplementedError) as info:
        uses_atomic_rmw(np.ones((4, 4), np.float32))
    assert "nki.language.atomic_rmw" in str(info.value)
    assert _line(uses_atomic_rmw.func, "# <- unsupported") in str(info.value)
    with pytest.raises(AttributeError, match="not in the NKI API reference"):
        nl.no_such_api  # noqa: B018


# -- import layouts ----------------------------------------------------------------------------------------
def _python(code: str, extra_path: str = "") -> str:
    env_path = f"{extra_path}:{REPO}" if extra_path else str(REPO)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, timeout=240)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_kernel_files_import_both_layouts_after_install_only():
    out = _python("""
        import sys
        import neuron_studio
        before = [type(f).__name__ for f in sys.meta_path]
        try:
            import neuronxcc
            found = True
        except ImportError:
            found = False
        from neuron_studio.kernels.interpreter import nki_imports
        status = nki_imports.install()
        import neuronxcc.nki as nki, neuronxcc.nki.language as nl, neuronxcc.nki.isa as nisa
        import nki as nki2, nki.isa as nisa2
        print(found, "_InterpreterFinder" in before, status, nki.simulate_kernel.__module__,
              nisa.nc_matmul.__module__, nisa2.nc_matmul.__module__, hasattr(nki2, "baremetal"))
    """)
    assert out == ("False False {'neuronxcc': 'interpreter', 'nki': 'interpreter'} "
                   "neuron_studio.kernels.interpreter.jit neuron_studio.kernels.interpreter.isa_legacy "
                   "neuron_studio.kernels.interpreter.isa False")


def test_a_real_neuron_installation_is_never_shadowed(tmp_path):
    real = tmp_path / "neuronxcc" / "nki"
    real.mkdir(parents=True)
    (tmp_path / "neuronxcc" / "__init__.py").write_text("")
    (real / "__init__.py").write_text("REAL = True\n")
    out = _python("""
        from neuron_studio.kernels.interpreter import nki_imports
        status = nki_imports.install()
        import neuronxcc.nki as nki
        import nki as standalone
        print(status["neuronxcc"], getattr(nki, "REAL", False), standalone.jit.__module__)
    """, extra_path=str(tmp_path))
    assert out == "real True neuron_studio.kernels.interpreter.jit"


def test_collect_traces_sees_launches_made_by_host_code():
    def host_caller(a, b):  # like the tutorials' nki_tensor_add: host code choosing the grid
        return add_rows[a.shape[0] // 128](a, b)

    a = np.ones((384, 8), np.float32)
    with K.collect_traces() as traces:
        out = host_caller(a, a)
    assert len(traces) == 1 and traces[0].count(opcode="dma_copy") == 3 * 3
    np.testing.assert_array_equal(out, 2 * a)


@nki.jit
def more_activations(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.add(nl.softplus(t), nl.sign(nl.sin(t))))
    return out


def test_documented_activations_compute_their_functions():
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_allclose(more_activations(x), np.log1p(np.exp(x)) + np.sign(np.sin(x)), rtol=1e-5, atol=1e-6)


@nki.jit
def diverging_outputs(a):
    if nl.program_id(0) == 0:
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    else:
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)  # another allocation site
    nl.store(out, value=nl.load(a))
    return out


def test_instances_allocating_different_shared_tensors_is_an_error_not_an_alias():
    with pytest.raises(K.NkiUsageError, match="must allocate the same shared tensors"):
        diverging_outputs[2](np.ones((4, 4), np.float32))


@nki.jit
def _row_normalise(x):
    """Each row divided by its own sum, the way AWS's SD attention kernel scales its softmax: a free-axis
    reduction without keepdims ([P]) broadcast to the tile's shape."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(x.shape[0])[:, None]
    jf = nl.arange(x.shape[1])[None, :]
    t = nl.load(x[ip, jf])
    total = nisa_v1.tensor_reduce(np.add, data=t, axis=(1,))
    scale = nl.ndarray((nl.par_dim(x.shape[0]), x.shape[1]), dtype=x.dtype)
    scale[ip, jf] = nl.copy((1.0 / total).broadcast_to((x.shape[0], x.shape[1])), dtype=x.dtype)
    nl.store(out[ip, jf], value=t * scale)
    return out


def test_a_partition_tile_broadcasts_along_the_free_axis():
    x = torch.rand(128, 128, generator=torch.Generator().manual_seed(3)) + 0.5   # square: both readings fit
    out, _ = K.run(_row_normalise, x)
    torch.testing.assert_close(out, x / x.sum(1, keepdim=True), rtol=1e-5, atol=1e-6)
