"""Swapping NKI kernels into a model (kernels.use) and the hot path -> kernel links."""
from __future__ import annotations

import pytest
import torch

from neuron_studio import kernels
from neuron_studio.profiler.capture import profile
from tests.models.blocks import TransformerBlock


@pytest.fixture()
def block():
    torch.manual_seed(0)
    return TransformerBlock(64, 4).to("neuron")


def test_swap_keeps_outputs_and_gradients(block):
    x = torch.randn(2, 24, 64, device="neuron", requires_grad=True)
    ref = block(x)
    ref.sum().backward()
    ref_grad = x.grad.cpu().clone()
    ref_w = block.norm1.weight.grad.cpu().clone()
    x.grad = None
    block.zero_grad()
    with kernels.use(block, "rmsnorm") as h1, kernels.use(block, "swiglu_mlp") as h2:
        assert h1.modules == ["norm1", "norm2"] and h2.modules == ["mlp"]
        out = block(x)
        assert out.device.type == "neuron"
        torch.testing.assert_close(out.cpu(), ref.detach().cpu(), rtol=1e-5, atol=1e-5)
        out.sum().backward()
        torch.testing.assert_close(x.grad.cpu(), ref_grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(block.norm1.weight.grad.cpu(), ref_w, rtol=1e-4, atol=1e-5)
    # restored: the original modules run again, bit for bit
    torch.testing.assert_close(block(x).detach().cpu(), ref.detach().cpu(), rtol=0, atol=0)


def test_swap_changes_the_profile_and_diff_shows_it(block):
    x = torch.randn(2, 24, 64, device="neuron")
    with torch.no_grad():
        before = profile(lambda: block(x), steps=2, mode="eager")
        with kernels.use(block, "rmsnorm"), kernels.use(block, "swiglu_mlp"):
            after = profile(lambda: block(x), steps=2, mode="eager")
    ops_after = set(after.op_table()["key"])
    assert {"neuron_studio::rmsnorm", "neuron_studio::swiglu_mlp"} <= ops_after
    assert "aten::silu" in set(before.op_table()["key"]) and "aten::silu" not in ops_after
    d = after.diff(before)
    new = set(d.ops[d.ops["status"] == "new"]["key"])
    removed = set(d.ops[d.ops["status"] == "removed"]["key"])
    assert {"neuron_studio::rmsnorm", "neuron_studio::swiglu_mlp"} <= new and "aten::silu" in removed
    assert after.launches_per_step < before.launches_per_step          # fewer, fused launches
    assert d.step_time_after_ns < d.step_time_before_ns                  # eager: launch overhead saved (modeled)
    swapped = [h for h in after.hot_path(top_share=1.0, max_ops=50) if h.op.startswith("neuron_studio::")]
    assert swapped and all(h.kernels and h.kernels[0]["kind"] == "runs_as" for h in swapped)
    assert any(h.kernels[0]["file"].endswith("swiglu_mlp.py") for h in swapped)


def test_hot_path_links_module_patterns_to_candidates(block):
    x = torch.randn(2, 24, 64, device="neuron")
    with torch.no_grad():
        prof = profile(lambda: block(x), steps=1, mode="eager")
    links = {}
    for h in prof.hot_path(top_share=1.0, max_ops=100):
        for k in h.kernels:
            links.setdefault(k["kernel"], k)
    assert "rmsnorm_kernel" in links and links["rmsnorm_kernel"]["kind"] == "candidate"
    assert links["rmsnorm_kernel"]["file"].endswith("kernels/rmsnorm.py") and links["rmsnorm_kernel"]["line"] > 0
    assert "swiglu_mlp_kernel" in links                                   # gate/up/down Linear children
    assert "scaled_dot_product_attention" in links and links["scaled_dot_product_attention"]["kind"] == "runs_as"
    assert links["rmsnorm_kernel"]["saving_ns"] > 0


def test_use_errors_name_the_problem(block):
    with pytest.raises(kernels.SwapError, match="choose one of rmsnorm, layernorm, swiglu_mlp"):
        kernels.use(block, "conv9000")
    with pytest.raises(kernels.SwapError, match="no module in Linear matches kernel 'rmsnorm'"):
        kernels.use(torch.nn.Linear(4, 4), "rmsnorm")
