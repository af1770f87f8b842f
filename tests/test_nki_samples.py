"""Conformance: every kernel in AWS's nki-samples runs unmodified on the interpreter and matches its reference,
or is rejected with the clear error listed in `nki_samples_conformance.json`.

The samples are read from the shared copy (`nki-samples/` under `$NEURON_STUDIO_SHARED`, else a
`shared/nki-samples` directory next to the checkout; tests/shared_data.py); they are never copied into the
repository. Without them the module skips, saying what is missing (in CI, where they must be, it fails). Kernel files are imported as their tutorials do (`import neuronxcc.nki as nki` / `import nki`)
through the interpreter's import finder. Inputs are random (seeded) at the tutorials' shapes; references are
the tutorials' numpy / PyTorch references (re-stated here where the sample keeps them in a script that needs
torch_xla or jax). Tolerances are the tutorials' own.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shared_data
from neuron_studio.kernels import kernel_time
from neuron_studio.kernels.interpreter import nki_imports

DATA = json.loads((Path(__file__).with_name("nki_samples_conformance.json")).read_text())
REPO = Path(__file__).resolve().parents[1]


SAMPLES = shared_data.require("nki-samples", module_level=True)


@pytest.fixture(scope="module")
def load():
    """Import a sample file unmodified (its directory on sys.path for sibling imports), NKI served by the
    interpreter; modules the samples import are removed again afterwards."""
    status = nki_imports.install()
    assert status == {"neuronxcc": "interpreter", "nki": "interpreter"}, status
    before = set(sys.modules)
    cache: dict[str, Any] = {}

    def _load(rel: str) -> Any:
        if rel not in cache:
            path = SAMPLES / rel
            sys.path.insert(0, str(path.parent))
            try:
                spec = importlib.util.spec_from_file_location(f"nki_sample_{path.stem}", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
            finally:
                sys.path.remove(str(path.parent))
            cache[rel] = mod
        return cache[rel]

    yield _load
    for name in set(sys.modules) - before:
        if not name.startswith(("neuron_studio", "torch", "numpy")):
            del sys.modules[name]
    nki_imports.uninstall()


# -- inputs and references, per case ---------------------------------------------------------------------
def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _tensor_add(mod, kernel, shape=(256, 1024)):
    a, b = (_rng().random(shape).astype(np.float16) for _ in range(2))
    return kernel(a, b), a + b, dict(atol=1e-4, rtol=1e-2)


def _attention_ref(q, k, v):
    qk = q.T.astype(np.float64) @ k
    e = np.exp(qk - qk.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v.T


def _mamba_ref(delta, u, A, B, C):
    """mamba_torch.py's mamba_layer (associative scan over the sequence), in numpy."""
    d_a = np.exp(delta[:, :, None, :] * A[None, :, :, None])
    d_bu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    out = np.empty_like(d_a)
    prev = 0.0
    for i in range(d_a.shape[-1]):
        prev = d_a[..., i] * prev + d_bu[..., i]
        out[..., i] = prev
    return (C[:, None, :, :] * out).sum(axis=-2)


def _case_tensor_add(mod, name):
    return _tensor_add(mod, getattr(mod, name))


def _case_tensor_add_nc2(mod, name):
    return _tensor_add(mod, getattr(mod, name), (512, 2048))


def _case_tensor_add_single(mod, name):
    return _tensor_add(mod, getattr(mod, name), (128, 512))


def _case_transpose2d(mod, name):
    p, x, y = 5, 3, 4
    a = np.arange(p * x * y, dtype=np.int8).reshape((p, x * y))
    return getattr(mod, name)(a, (x, y)), np.transpose(a.reshape(p, x, y), (0, 2, 1)).reshape(p, x * y), dict(atol=0, rtol=0)


def _case_avgpool(mod, name):
    x = np.arange(2 * 6 * 6, dtype=np.float16).reshape(2, 6, 6)
    return getattr(mod, name)(x, 2), mod.np_average_pool_2D(x, 2), dict(atol=0, rtol=0)


def _case_matmul_basic(mod, name):
    g = torch.Generator().manual_seed(0)
    lhs, rhs = torch.rand((64, 128), dtype=torch.bfloat16, generator=g), torch.rand((128, 512), dtype=torch.bfloat16, generator=g)
    return getattr(mod, name)(lhs.T, rhs), torch.matmul(lhs, rhs), dict(atol=1e-4, rtol=1e-2)


def _case_matmul_large(mod, name):
    g = torch.Generator().manual_seed(0)
    lhs = torch.rand((4096, 1024), dtype=torch.bfloat16, generator=g)
    rhs = torch.rand((1024, 2048), dtype=torch.bfloat16, generator=g)
    # the tutorial's torch.matmul, accumulated in fp32 (torch's CPU bf16 GEMM takes minutes at this size)
    return getattr(mod, name)(lhs.T, rhs), lhs.float() @ rhs.float(), dict(atol=1e-4, rtol=1e-2)


def _case_mamba(mod, name):
    r = _rng()
    batch, seq, ch, st = 1, 2048, 256, 16  # mamba_nki_kernels.py defaults
    delta = r.uniform(0.01, 0.1, (batch, ch, seq)).astype(np.float32)
    u = r.standard_normal((batch, ch, seq)).astype(np.float32)
    a = -r.uniform(0.5, 1.5, (ch, st)).astype(np.float32)
    b, c = (r.standard_normal((batch, st, seq)).astype(np.float32) for _ in range(2))
    return getattr(mod, name)(delta, u, a, b, c), _mamba_ref(delta, u, a, b, c), dict(atol=1e-4, rtol=1e-4)


def _attention(mod, name, seq):
    r = _rng()
    q, k, v = (((r.random((128, seq)) - 0.5) * 2).astype(np.float32) for _ in range(3))
    return getattr(mod, name)(q, k, v), _attention_ref(q, k, v), dict(atol=1e-2, rtol=0)


def _case_attention_128(mod, name):
    return _attention(mod, name, 128)


def _case_attention_4096(mod, name):
    return _attention(mod, name, 4096)


def _case_maxpool(mod, name):
    x = torch.from_numpy(_rng().random((448, 448), dtype=np.float32))
    ref = F.max_pool2d(x.reshape(1, 1, 448, 448), kernel_size=3, stride=1)[0, 0]
    return getattr(mod, name)(x.numpy(), 3), ref, dict(atol=1e-5, rtol=1.3e-6)


def _case_contrib_matmul(mod, name):
    r = _rng()
    a = r.random((1024, 4096)).astype(np.float16)
    b = r.random((1024, 2048)).astype(np.float16)
    out = mod.nki.baremetal()(getattr(mod, name))(a, b)  # as the sample's check_correct() calls it
    return out, a.T.astype(np.float32) @ b.astype(np.float32), dict(atol=1e-4, rtol=1e-2)


def _case_bilinear(mod, name):
    x = _rng().random((2, 64, 128, 128), dtype=np.float32)
    ref = F.interpolate(torch.from_numpy(x), scale_factor=2, mode="bilinear")
    return getattr(mod, name)(x), ref, dict(atol=1e-4, rtol=1e-2)


def _mx_args(name: str, nl: Any) -> tuple:
    u8 = lambda *s: np.zeros(s, np.uint8)  # noqa: E731
    if name == "kernel_offline_quantized_mx_matmul":
        return u8(128, 128), u8(32, 4), u8(128, 512), u8(32, 4), nl.float8_e5m2_x4
    if name == "kernel_on_device_quantize_matmul_mx":
        return u8(128, 128), u8(32, 4), np.zeros((512, 512), np.float32), nl.float8_e5m2_x4, nl.float8_e5m2_x4
    return np.zeros((512, 128), np.float32), np.zeros((512, 512), np.float32), nl.float8_e5m2_x4


CASES: dict[str, Callable[[Any, str], tuple]] = {
    name[len("_case_"):]: fn for name, fn in globals().items() if name.startswith("_case_")
}
MATCH = [e for e in DATA["entries"] if e["status"] == "match"]
REJECTED = [e for e in DATA["entries"] if e["status"] == "rejected"]


def _id(e: dict) -> str:
    return f"{Path(e['file']).stem}::{e.get('kernel') or 'module'}"


@pytest.mark.parametrize("entry", [pytest.param(e, id=_id(e), marks=[pytest.mark.slow] if e.get("slow") else [])
                                   for e in MATCH])
def test_sample_kernel_matches_reference(entry, load):
    mod = load(entry["file"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # option/spill warnings are asserted in test_nki_language
        out, ref, tol = CASES[entry["case"]](mod, entry["kernel"])
    out = out.float().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float64)
    ref = ref.float().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref, np.float64)
    assert out.shape == ref.shape
    assert np.isfinite(out).all(), "uninitialised (poisoned) values in the kernel output"
    np.testing.assert_allclose(out, ref, **tol)


@pytest.mark.parametrize("entry", [pytest.param(e, id=_id(e)) for e in REJECTED])
def test_sample_is_rejected_with_its_listed_reason(entry, load):
    err_type = {"NotImplementedError": NotImplementedError, "ModuleNotFoundError": ModuleNotFoundError,
                "TypeError": TypeError, "ValueError": ValueError}[entry["error"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(err_type) as info:
            mod = load(entry["file"])
            if entry.get("kernel"):
                kernel = getattr(mod, entry["kernel"])
                nl = sys.modules.get("nki.language") or sys.modules["neuronxcc.nki.language"]
                args = _mx_args(entry["kernel"], nl) if "mx" in entry["file"] else \
                    tuple(np.ones(s, np.float32) for s in entry.get("arg_shapes", []))
                kernel(*args)
    assert entry["match"] in str(info.value), str(info.value)
    if err_type is NotImplementedError:  # names the API and the line that used it
        assert "(used at " in str(info.value) and ".py:" in str(info.value)


@pytest.mark.parametrize("entry", [pytest.param(e, id=_id(e)) for e in DATA["entries"]
                                   if e["status"] == "self_check"])
def test_sample_driver_runs_its_own_check(entry, load):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load(entry["file"])  # the driver asserts its kernel's output against its numpy reference on import


def test_every_sample_file_is_listed():
    listed = {e["file"] for e in DATA["entries"]} | set(DATA["not_kernels"])
    files = {str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.py")}
    assert files == listed, f"unlisted: {sorted(files - listed)}; missing: {sorted(listed - files)}"


def test_sample_kernels_are_timed_by_the_cost_model(load):
    """A public kernel goes through kernel_time like the studio's own: per engine and per line of its file."""
    mod = load("src/nki_samples/tutorials/tensor_addition/tensor_addition_nki_kernels.py")
    a = np.ones((256, 1024), np.float16)
    out, trace = mod.nki_tensor_add_kernel_[2, 2].run(a, a)
    timing = kernel_time(trace)
    assert timing.total_ns > 0 and timing.per_engine_ns["dma"] > 0
    assert {Path(lt.file).name for lt in timing.per_line} == {"tensor_addition_nki_kernels.py"}
    assert trace.count(opcode="dma_copy") == 3 * 4  # two loads and a store per instance, 2x2 instances
