"""Capture -> Trace -> model -> Profile on the emulated device: every analysis populated and checked."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import neuron_studio
from neuron_studio.profiler.capture import Capture, profile
from tests.models.blocks import TransformerBlock


@pytest.fixture(scope="module")
def training_profile():
    torch.manual_seed(0)
    model = TransformerBlock(64, 4).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled_head = torch.compile(torch.nn.Linear(64, 8).to("neuron"), backend="neuron", dynamic=False)
    losses = []
    with Capture(mode="adaptive", chip="trn2") as cap:
        for step in range(5):
            t = 16 if step < 3 else 24                         # a new sequence length: one recompile
            x = torch.randn(2, t, 64, device="neuron")
            h = model(x)
            loss = h.pow(2).mean() + compiled_head(h).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            ids = torch.unique((h.detach() * 4).round())        # data-dependent shape: CPU fallback
            losses.append(loss.item())                          # host sync
            last_row = h[0, -1].detach().cpu()                  # device -> host copy
            cap.step()
    return cap.profile, ids


def test_trace_metadata_and_steps(training_profile):
    prof, _ = training_profile
    meta = prof.trace.meta
    assert meta["backend"] == "emulated" and meta["chip"] == "trn2" and meta["mode"] == "adaptive"
    assert meta["figures"]["device_time"] == "modeled" and meta["figures"]["host_time"] == "measured"
    assert meta["torch_version"] == torch.__version__
    assert prof.steps == 5
    assert set(prof.trace.ops["step"]) == {0, 1, 2, 3, 4}
    assert len(prof.trace.host) > 0                                     # torch.profiler host events joined


def test_op_table_and_module_tree(training_profile):
    prof, _ = training_profile
    table = prof.op_table()
    assert table["share"].sum() == pytest.approx(1.0, abs=1e-6)
    assert (table["device_ns"].diff().dropna() <= 0).all()             # sorted by device time
    mm = table[table["key"].isin(["aten::mm", "aten::bmm", "aten::addmm"])]
    assert (mm["engine"] == "tensor").all() and (mm["flops"] > 0).all()
    top3 = prof.op_table(top=3)
    assert len(top3) == 3
    by_module = prof.op_table(by="module")
    keys = set(by_module["key"])
    assert {"TransformerBlock.attn", "TransformerBlock.mlp", "optimizer.AdamW"} <= keys
    # backward ops are attributed to the module whose forward created them
    assert {"TransformerBlock.mlp.down (backward)", "TransformerBlock.attn.qkv (backward)"} <= keys
    tree = prof.module_tree()
    attn = tree[tree["key"] == "TransformerBlock.attn"].iloc[0]
    child = tree[tree["key"] == "TransformerBlock.attn.qkv"].iloc[0]
    assert attn["per_step_device_ns"] >= child["per_step_device_ns"] and child["depth"] == attn["depth"] + 1
    assert attn["per_step_device_ns"] >= attn["per_step_self_device_ns"] > 0
    # modules named as every view names them: never a bare "(backward)" or an empty key
    assert not {"", "(backward)", " (backward)"} & set(tree["key"])
    assert "top level" in set(tree["key"]) and "top level (backward)" in set(tree["key"])
    # per step: the module table's calls and times divided by the profiled steps
    row = by_module.set_index("key").loc["TransformerBlock.attn.qkv"]
    assert child["per_step_count"] == pytest.approx(row["count"] / prof.steps)
    assert child["per_step_self_device_ns"] == pytest.approx(row["per_step_device_ns"])


def test_module_tree_reads_the_same_whatever_the_number_of_profiled_steps():
    torch.manual_seed(0)
    model = TransformerBlock(32, 2).to("neuron")
    x = torch.randn(2, 8, 32, device="neuron")

    def step():
        model(x).pow(2).mean().backward()

    one, three = (profile(step, steps=n, warmup=1, host_events=False).module_tree() for n in (1, 3))
    cols = ["key", "depth", "per_step_count", "per_step_self_device_ns", "per_step_device_ns", "per_step_flops",
            "per_step_bytes"]
    assert list(one["key"]) == list(three["key"]) and list(one["depth"]) == list(three["depth"])
    exact = ["per_step_count", "per_step_flops", "per_step_bytes"]
    assert np.allclose(one[exact].to_numpy(float), three[exact].to_numpy(float), rtol=1e-12)
    times = ["per_step_self_device_ns", "per_step_device_ns"]   # modeled ns are whole per op: a ns of rounding
    assert np.allclose(one[times].to_numpy(float), three[times].to_numpy(float), rtol=1e-3, atol=2.0)


def test_engine_utilization_and_mfu(training_profile):
    prof, _ = training_profile
    util = prof.engine_utilization(bins=50)
    assert len(util) == 50
    engines = ["tensor", "vector", "scalar", "gpsimd", "dma"]
    assert ((util[engines] >= 0) & (util[engines] <= 1)).all().all()
    assert util["tensor"].max() > 0 and util["vector"].max() > 0
    assert 0 < prof.mfu < 1 and 0 < prof.mbu < 1
    busy = prof.ops.groupby("engine")["device_ns"].sum()
    width = (util["end_ns"] - util["start_ns"]).to_numpy()
    cores = prof.ops["core"].nunique()
    integral = float((util["vector"].to_numpy() * width).sum()) * cores
    assert integral == pytest.approx(busy["vector"], rel=0.02)        # binned utilization integrates to busy time


def test_roofline(training_profile):
    prof, _ = training_profile
    roof = prof.roofline()
    roofs = prof.roofs()
    assert len(roof) > 0
    assert (roof["attained_flops_per_s"] <= roofs.peak_flops * 1.0001).all()
    np.testing.assert_allclose(roof["intensity"], roof["flops"] / roof["bytes"].clip(lower=1))
    assert roofs.ridge_intensity == pytest.approx(roofs.peak_flops / roofs.hbm_bytes_per_s)


def test_hot_path_points_to_kernels(training_profile):
    prof, _ = training_profile
    hot = prof.hot_path()
    assert hot and sum(h.share for h in hot) <= 1.0 + 1e-9
    assert all(h.bound in ("compute", "memory", "launch", "fallback", "host", "sync", "transfer", "collective",
                           "none") and h.why for h in hot)
    assert all(hot[i].device_ns >= hot[i + 1].device_ns for i in range(len(hot) - 1))
    linked = [k for h in prof.hot_path(top_share=1.0, max_ops=50) for k in h.kernels]
    kinds = {k["kind"] for k in linked}
    assert "candidate" in kinds
    assert any(k["file"] and k["file"].endswith(".py") and isinstance(k["line"], int) for k in linked)
    assert all(k["saving_ns"] >= 0 for k in linked if k["file"])
    # the optimizer's foreach ops point at the NKI Library's fused Adam (outside this repo: no modeled saving)
    adam = [k for h in prof.hot_path(top_share=1.0, max_ops=50) if h.module == "optimizer.AdamW" for k in h.kernels]
    assert adam and adam[0]["kernel"] == "fused_adam" and adam[0]["saving_ns"] is None


def test_fallbacks_syncs_recompiles_transfers(training_profile):
    prof, ids = training_profile
    fb = prof.cpu_fallbacks()
    assert "aten::_unique2" in set(fb["op"]) and (fb["count"] >= 5).any()
    sp = prof.sync_points()
    assert (sp["op"] == "aten::_local_scalar_dense").sum() == 5
    assert sp[sp["op"] == "aten::_local_scalar_dense"]["source"].str.contains("test_profile.py").all()
    assert sp["breaks_group"].any()                                      # adaptive: syncs end fusion groups
    rc = prof.recompiles()
    # the new sequence length recompiles (earlier compiles of Linear.forward in this process may add more)
    assert rc["shapes"].str.contains("2x24x64").sum() == 1
    tr = prof.transfers()
    d2h = tr[tr["direction"] == "d2h"]
    assert d2h["count"].sum() >= 10 and d2h["bytes"].sum() >= 5 * 64 * 4
    assert ids.device.type == "neuron"


def test_cost_is_modeled_and_consistent(training_profile):
    prof, _ = training_profile
    c = prof.cost()
    assert c.modeled and c.chip == "trn2"
    assert c.per_1000_steps_usd == pytest.approx(c.per_step_usd * 1000)
    assert c.per_step_usd == pytest.approx(c.step_time_ns * 1e-9 / 3600 * c.price_per_hour_usd, rel=1e-6)
    assert c.h100_per_1000_steps_usd > 0


def test_diff_of_two_profiles():
    torch.manual_seed(0)
    model = TransformerBlock(64, 4).to("neuron")
    x = torch.randn(2, 16, 64, device="neuron")
    eager = profile(lambda: model(x), steps=2, mode="eager")
    adaptive = profile(lambda: model(x), steps=2, mode="adaptive")
    d = adaptive.diff(eager)
    assert d.step_time_after_ns < d.step_time_before_ns
    assert d.step_time_change_pct < 0
    assert set(d.ops["status"]) <= {"same", "faster", "slower"}          # the same ops, fused differently
    assert "faster" in set(d.ops["status"])
    assert (d.ops[d.ops["status"] == "faster"]["delta_ns"] < 0).all()
    assert set(d.engines["engine"]) >= {"tensor", "vector"}


def test_capture_keeps_partial_run_on_error():
    model = TransformerBlock(32, 2).to("neuron")
    cap = Capture(mode="eager")
    with pytest.raises(RuntimeError, match="boom"):
        with cap:
            model(torch.randn(1, 8, 32, device="neuron"))
            raise RuntimeError("boom")
    assert cap.status == "error" and cap.trace.meta["status"] == "error"
    assert len(cap.trace.ops) > 0
    assert cap.profile.step_time_ns > 0


def test_invalid_options_raise_clear_errors():
    with pytest.raises(ValueError, match="mode must be one of eager, adaptive, compile"):
        Capture(mode="fast")
    with pytest.raises(ValueError, match="unknown chip 'trn9'"):
        Capture(chip="trn9")
    with pytest.raises(ValueError, match="steps must be >= 1"):
        neuron_studio.profile(lambda: None, steps=0)


def test_backward_ops_carry_their_forward_module_and_source_line():
    torch.manual_seed(0)
    m = TransformerBlock(32, 2).to("neuron")
    x = torch.randn(2, 8, 32, device="neuron")
    prof = profile(lambda: m(x).sum().backward(), steps=1, mode="eager")
    ops = prof.trace.ops
    bwd = ops[(ops["phase"] == "backward") & (ops["module"] == "TransformerBlock.mlp.down (backward)")]
    assert len(bwd) > 0
    # the forward line that called self.down(...) in tests/models/blocks.py
    assert bwd["source"].dropna().str.endswith("blocks.py:41").all() and bwd["source"].notna().any()
