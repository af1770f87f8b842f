"""Kernels vs their PyTorch references (ragged shapes, fp32 and bf16), cost-model scaling, registry."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch

try:
    from neuron_studio import kernels as K
except Exception:  # package not importable yet (parent package under construction): use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import kernels as K  # type: ignore[no-redef]

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
DTYPES = [torch.float32, torch.bfloat16]


def _check(kernel, reference, args, dtype, **kwargs):
    out, trace = K.run(kernel, *args, **kwargs)
    ref = reference(*args, **kwargs)
    assert out.dtype == ref.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), **TOL[dtype])
    assert len(trace) > 0
    return trace


def _r(*shape, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(200, 300, 130), (128, 128, 512), (1, 7, 5), (130, 260, 600)])
def test_matmul(m, k, n, dtype):
    a, b = _r(m, k, dtype=dtype), _r(k, n, dtype=dtype, seed=1)
    tol = dict(rtol=2e-2, atol=5e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-3)
    out, _ = K.run(K.matmul_kernel, a, b)
    torch.testing.assert_close(out.float(), K.reference_matmul(a, b).float(), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,d", [(130, 100), (128, 64), (3, 700), (257, 33)])
def test_rmsnorm(rows, d, dtype):
    _check(K.rmsnorm_kernel, K.reference_rmsnorm, (_r(rows, d, dtype=dtype), _r(d, dtype=dtype, seed=2)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,d", [(130, 100), (64, 256), (300, 17)])
def test_layernorm(rows, d, dtype):
    args = (_r(rows, d, dtype=dtype), _r(d, dtype=dtype, seed=2), _r(d, dtype=dtype, seed=3))
    _check(K.layernorm_kernel, K.reference_layernorm, args, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,d", [(130, 100), (5, 1000), (256, 512)])
def test_softmax(rows, d, dtype):
    _check(K.softmax_kernel, K.reference_softmax, (_r(rows, d, dtype=dtype, scale=4.0),), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h,f", [(150, 200, 300), (128, 128, 256), (7, 520, 130)])
def test_swiglu_mlp(t, h, f, dtype):
    args = (_r(t, h, dtype=dtype, scale=0.5), _r(h, f, dtype=dtype, scale=0.1, seed=1),
            _r(h, f, dtype=dtype, scale=0.1, seed=2), _r(f, h, dtype=dtype, scale=0.1, seed=3))
    _check(K.swiglu_mlp_kernel, K.reference_swiglu_mlp, args, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nh,s,d", [(3, 200, 64), (1, 128, 128), (2, 5, 16)])
def test_rope(nh, s, d, dtype):
    pos = torch.arange(s, dtype=torch.float32)[:, None]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos * inv[None, :]
    args = (_r(nh, s, d, dtype=dtype), ang.cos().to(dtype), ang.sin().to(dtype))
    _check(K.rope_kernel, K.reference_rope, args, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nh,s,d,causal", [(2, 200, 64, True), (1, 256, 128, True), (1, 77, 32, False),
                                           (1, 300, 64, False)])
def test_flash_attention(nh, s, d, causal, dtype):
    q, k, v = (_r(nh, s, d, dtype=dtype, seed=i) for i in range(3))
    _check(K.flash_attention_kernel, K.reference_flash_attention, (q, k, v), dtype, causal=causal)


def test_flash_attention_skips_blocks_above_diagonal():
    q = k = v = _r(1, 512, 64, dtype=torch.bfloat16)
    _, causal = K.run(K.flash_attention_kernel, q, k, v, causal=True)
    _, full = K.run(K.flash_attention_kernel, q, k, v, causal=False)
    # 4 query blocks: 10 of 16 score blocks are computed causally
    assert causal.count("nc_matmul") * 16 == full.count("nc_matmul") * 10
    assert causal.count("affine_select") == 4


# -- cost model --------------------------------------------------------------------------------------------
def _matmul_ns(m, k=512, n=512, dtype=torch.bfloat16, chip="trn2"):
    _, trace = K.run(K.matmul_kernel, _r(m, k, dtype=dtype), _r(k, n, dtype=dtype), chip=chip)
    return K.kernel_time(trace)


def test_matmul_time_scales_with_m():
    # the work scales with M; what is paid once per call (launch preamble, the first load's descriptor generation
    # and DMA latency, the last store's) cancels in the differences
    t1, t2, t4 = (_matmul_ns(m).total_ns for m in (256, 512, 1024))
    assert t1 < t2 < t4 and 1.8 < (t4 - t2) / (t2 - t1) < 2.2


def test_time_is_monotone_in_size_for_every_kernel():
    sizes = [64, 200, 512]
    times = [K.kernel_time(K.run(K.rmsnorm_kernel, _r(s, 256, dtype=torch.float32),
                                 _r(256, dtype=torch.float32))[1]).total_ns for s in sizes]
    assert times == sorted(times) and times[0] < times[-1]
    times = [K.kernel_time(K.run(K.flash_attention_kernel, *(_r(1, s, 64, dtype=torch.bfloat16) for _ in range(3))
                                 )[1]).total_ns for s in sizes]
    assert times == sorted(times) and times[0] < times[-1]


def test_fp32_matmul_is_slower_than_bf16_and_timing_fields():
    bf, fp = _matmul_ns(512, dtype=torch.bfloat16), _matmul_ns(512, dtype=torch.float32)
    assert fp.per_engine_ns["tensor"] > 3 * bf.per_engine_ns["tensor"]
    # engines overlap: the schedule is at least the busiest engine plus the launch preamble
    assert bf.total_ns >= max(bf.per_engine_ns.values()) + bf.launch_overhead_ns > 0
    assert bf.bound_engine in bf.per_engine_ns
    assert abs(sum(line.ns for line in bf.per_line) - sum(bf.per_engine_ns.values())) < 1e-6 * bf.total_ns
    top = bf.per_line[0]
    assert top.file.endswith("matmul.py") and top.instructions > 0


def test_faster_chip_is_not_slower():
    assert _matmul_ns(512, chip="trn3").total_ns <= _matmul_ns(512, chip="trn2").total_ns


def test_modeled_time_is_above_roofline():
    m = k = n = 512
    timing = _matmul_ns(m, k, n)
    roof = K.roofline_ns(2 * m * n * k, 2 * (m * k + k * n + m * n), "trn2", "bfloat16")
    assert timing.total_ns >= roof


# -- registry ----------------------------------------------------------------------------------------------
def _def_line(kernel) -> int:
    func = kernel.func
    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, t in enumerate(lines) if t.lstrip().startswith("def "))


def test_registry_sdpa_runs_as_torchneuron_kernel_then_candidate():
    matches = K.lookup("aten::_scaled_dot_product_flash_attention")
    assert [m.kind for m in matches] == ["runs_as", "candidate"]
    assert matches[0].file == "torch_neuronx/python_ops/nki_kernels/scaled_dot_product_attention.py"
    assert matches[0].line is None
    fa = matches[1]
    assert fa.kernel == "flash_attention_kernel" and fa.file.endswith("flash_attention.py")
    assert fa.line == _def_line(K.flash_attention_kernel)


def test_registry_backward_and_builtin_kernels():
    bwd = K.lookup("aten::_scaled_dot_product_efficient_attention_backward")
    assert [m.kernel for m in bwd] == ["scaled_dot_product_attention_backward"]
    for op, name in [("aten::_grouped_mm", "grouped_mm"), ("aten::gather", "gather"),
                     ("aten::scatter_add_", "scatter_add")]:
        (m,) = K.lookup(op)
        assert m.kind == "runs_as" and m.file.endswith(f"nki_kernels/{name}.py")


@pytest.mark.parametrize("op,module_class,kernel", [
    ("aten::native_layer_norm", None, "layernorm_kernel"),
    ("aten::mm", None, "matmul_kernel"),
    ("aten::addmm", None, "matmul_kernel"),
    ("aten::_softmax", None, "softmax_kernel"),
    ("aten::mul", "LlamaRMSNorm", "rmsnorm_kernel"),
    ("aten::mul", "RMSNorm", "rmsnorm_kernel"),
    ("aten::silu", "LlamaMLP", "swiglu_mlp_kernel"),
    ("aten::cat", "LlamaRotaryEmbedding", "rope_kernel"),
])
def test_registry_candidates(op, module_class, kernel):
    matches = K.lookup(op, module_path="model.layers.0.x", module_class=module_class)
    assert [m.kernel for m in matches] == [kernel]
    (m,) = matches
    assert m.kind == "candidate" and m.line == _def_line(getattr(K, kernel))


def test_registry_location_is_found_once_per_kernel_object(monkeypatch):
    from neuron_studio.kernels import matmul as mm_module
    from neuron_studio.kernels import registry as reg

    registry = reg.KernelRegistry()
    calls = []
    real = reg.kernel_source
    monkeypatch.setattr(reg, "kernel_source", lambda k: calls.append(k) or real(k))
    first = registry.location("matmul:matmul_kernel")
    assert first == (str(Path(inspect.getsourcefile(K.matmul_kernel.func)).resolve()), _def_line(K.matmul_kernel))
    assert registry.location("matmul:matmul_kernel") == first and len(calls) == 1   # not inspected again

    def replacement():  # a reloaded module: another object, found again
        pass

    monkeypatch.setattr(mm_module, "matmul_kernel", replacement)
    assert registry.location("matmul:matmul_kernel") == real(replacement) != first and len(calls) == 2
    assert registry.location("matmul:no_such_kernel") == (None, None)


def test_registry_unknown_op_and_structural_mlp():
    assert K.lookup("aten::cumsum") == []

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = torch.nn.Linear(4, 8)
            self.up_proj = torch.nn.Linear(4, 8)
            self.down_proj = torch.nn.Linear(8, 4)

    (m,) = K.lookup_module(Block(), "model.layers.0.mlp")
    assert m.kernel == "swiglu_mlp_kernel" and m.kind == "candidate"
    assert K.lookup_module(torch.nn.Linear(2, 2)) == []
