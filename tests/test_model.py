"""NeuronCore performance model: closed-form checks against the specs, mode rules, and properties."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_studio.device.events import OpEvent
from neuron_studio.profiler.model import (
    ColumnsError, ConfigError, ModelConfig, classify_engine, columns_from_mapping, events_to_columns, model_run,
)
from neuron_studio.profiler.specs import chip_spec

GiB = 1 << 30
# Every efficiency 1.0 and no launch cost: closed forms are exact rooflines.
IDEAL = ModelConfig(tensor_efficiency=1.0, vector_efficiency=1.0, scalar_efficiency=1.0, gpsimd_efficiency=1.0,
                    dma_efficiency=1.0, hbm_efficiency=1.0, eager_launch_overhead_ns=0.0,
                    adaptive_launch_overhead_ns=0.0, compile_launch_overhead_ns=0.0)


def ev(seq: int, name: str = "aten::add", *, ins=((1024,), (1024,)), dt="float32", outs=None, flops=0, core=0,
       **kw) -> OpEvent:
    """An OpEvent with float `dt` tensors; outputs default to the first input's shape."""
    outs = outs if outs is not None else (ins[0],)
    return OpEvent(seq=seq, name=name, overload="default", start_ns=kw.pop("start_ns", seq * 100),
                   end_ns=kw.pop("end_ns", seq * 100 + 50), thread=0, device_index=core,
                   input_shapes=tuple(ins), input_dtypes=(dt,) * len(ins), output_shapes=tuple(outs),
                   output_dtypes=(dt,) * len(outs), flops=flops, **kw)


def mm(seq: int, M: int, K: int, N: int, dt: str = "bfloat16", flops: int | None = None, **kw) -> OpEvent:
    return ev(seq, "aten::mm", ins=((M, K), (K, N)), outs=((M, N),), dt=dt,
              flops=2 * M * N * K if flops is None else flops, **kw)


def chain(n: int, start: int = 1, **kw) -> list[OpEvent]:
    return [ev(start + i, "aten::mul", **kw) for i in range(n)]


# ---------------------------------------------------------------- rooflines

def test_big_bf16_matmul_is_compute_bound_at_tensor_engine_roofline() -> None:
    M = 8192
    r = model_run([mm(1, M, M, M)], chip="trn2", config=IDEAL)
    spec = chip_spec("trn2")
    roofline_ns = 2 * M**3 / (spec.core_tensor_bf16_flops_per_s * spec.lnc_default) * 1e9
    assert r.ops["bound"][0] == "compute" and r.ops["engine"][0] == "tensor"
    assert abs(r.ops["duration_ns"][0] / roofline_ns - 1) < 0.10
    # Default config: between the roofline and roofline / tensor_efficiency (+ one launch).
    d = model_run([mm(1, M, M, M)], chip="trn2")
    cfg = d.config
    assert roofline_ns <= d.summary.step_time_ns <= roofline_ns / cfg.tensor_efficiency + cfg.eager_launch_overhead_ns + 1
    assert d.summary.mfu == pytest.approx(2 * M**3 / (d.summary.peak_flops_per_s * d.summary.step_time_ns * 1e-9))


def test_1gib_fp32_add_is_hbm_bound_at_spec_bandwidth() -> None:
    n = GiB // 4
    r = model_run([ev(1, "aten::add", ins=((n,), (n,)))], chip="trn2", config=IDEAL)
    spec = chip_spec("trn2")
    per_core_bw = spec.hbm_bandwidth_bytes_per_s / spec.logical_cores_per_chip()
    expected_ns = 3 * GiB / per_core_bw * 1e9
    assert r.ops["bound"][0] == "memory" and r.ops["engine"][0] == "vector"
    assert r.ops["bytes_read"][0] == 2 * GiB and r.ops["bytes_written"][0] == GiB
    assert abs(r.ops["duration_ns"][0] / expected_ns - 1) < 0.10
    assert r.summary.mbu == pytest.approx(1.0)
    # hbm_efficiency is applied, not ignored
    slow = model_run([ev(1, "aten::add", ins=((n,), (n,)))], chip="trn2", config=IDEAL.replace(hbm_efficiency=0.5))
    assert slow.ops["duration_ns"][0] == pytest.approx(2 * r.ops["duration_ns"][0])


def test_fp8_is_twice_bf16_on_trn2_not_on_trn1() -> None:
    M = 8192
    t = {(c, d): model_run([mm(1, M, M, M, dt=d)], chip=c, config=IDEAL).ops["duration_ns"][0]
         for c in ("trn1", "trn2") for d in ("bfloat16", "float8_e4m3fn")}
    assert t[("trn2", "bfloat16")] / t[("trn2", "float8_e4m3fn")] == pytest.approx(2.0, rel=0.05)
    assert t[("trn1", "bfloat16")] / t[("trn1", "float8_e4m3fn")] == pytest.approx(1.0, rel=0.05)


def test_fp32_matmul_runs_at_fp32_rate() -> None:
    M = 4096
    bf = model_run([mm(1, M, M, M)], config=IDEAL).ops["compute_ns"][0]
    f32 = model_run([mm(1, M, M, M, dt="float32")], config=IDEAL).ops["compute_ns"][0]
    s = chip_spec("trn2")
    assert f32 / bf == pytest.approx(s.core_tensor_bf16_flops_per_s / s.core_tensor_fp32_flops_per_s)


def test_memory_bound_ops_stream_at_min_of_hbm_share_and_the_cores_dma_engines() -> None:
    """A logical core streams HBM through its own DMA engines: min(chip HBM / cores, core DMA peak x LNC)."""
    n = GiB // 4
    e = [ev(1, "aten::add", ins=((n,), (n,)))]
    t2 = model_run(e, chip="trn2", config=IDEAL).ops["duration_ns"][0]
    t3 = model_run(e, chip="trn3", config=IDEAL).ops["duration_ns"][0]
    assert t2 / t3 == pytest.approx(min(4.9e12 / 4, 2 * 528e9) / min(2.9e12 / 4, 2 * 368e9))
    over = model_run(e, chip="trn2", config=IDEAL, spec_overrides={"hbm_bandwidth_bytes_per_s": 4.9e12,
                                                                   "core_dma_bandwidth_bytes_per_s": 528e9})
    assert over.ops["duration_ns"][0] == pytest.approx(t3)
    # Trn1: 820 GiB/s HBM shared by 2 cores would allow 440 GB/s; one core's 16 DMA engines move 272 GB/s
    t1 = model_run(e, chip="trn1", config=IDEAL).ops["duration_ns"][0]
    assert t1 == pytest.approx(3 * GiB / 272e9 * 1e9)


def test_matmul_flops_from_shapes_when_device_reports_zero() -> None:
    r = model_run([mm(1, 64, 128, 32, flops=0), ev(2, "aten::addmm", ins=((32,), (64, 128), (128, 32)),
                                                    outs=((64, 32),))])
    assert list(r.ops["flops"]) == [2 * 64 * 128 * 32] * 2


@pytest.mark.parametrize("name,engine", [
    ("aten::mm", "tensor"), ("aten::convolution", "tensor"), ("aten::_scaled_dot_product_flash_attention_for_cpu", "tensor"),
    ("aten::exp", "scalar"), ("aten::gelu", "scalar"), ("aten::tanh_", "scalar"), ("aten::add", "vector"),
    ("aten::sum", "vector"), ("aten::_softmax", "scalar"), ("aten::native_layer_norm", "vector"),
    ("aten::gather", "gpsimd"), ("aten::index_put_", "gpsimd"), ("aten::embedding", "gpsimd"), ("aten::topk", "gpsimd"),
    ("aten::_to_copy", "dma"), ("aten::clone", "dma"), ("aten::cat", "dma"), ("aten::copy_", "dma"),
    ("aten::view", "none"), ("aten::t", "none"), ("aten::empty_strided", "none"), ("aten::frobnicate", "vector"),
])
def test_engine_classification(name: str, engine: str) -> None:
    assert classify_engine(name) == engine


def test_views_move_no_bytes_and_launch_nothing() -> None:
    r = model_run([ev(1, "aten::view", is_view=True), ev(2, "aten::t")])
    assert list(r.ops["engine"]) == ["none", "none"]
    assert r.ops["bytes_read"].sum() == 0 and r.ops["duration_ns"].sum() == 0
    assert r.summary.launches == 0 and list(r.ops["bound"]) == ["none", "none"]


# ---------------------------------------------------------------- modes

def test_chain_closed_by_a_matmul_is_one_adaptive_launch() -> None:
    """TorchNeuron concatenates the ops buffered since the last flush when a matmul-family op arrives (the region
    ends with it); the first matmul runs alone and turns buffering on (ConcatenationEngine.cpp @98154b86)."""
    e = [mm(1, 64, 64, 64)] + chain(20, start=2) + [mm(22, 64, 64, 64)]
    eager = model_run(e, mode="eager")
    adaptive = model_run(e, mode="adaptive")
    assert eager.summary.launches == 22 and len(eager.groups) == 22
    assert adaptive.summary.launches == 2 and [g.n_ops for g in adaptive.groups] == [1, 21]
    assert [g.boundary_reason for g in adaptive.groups] == ["matmul", "matmul"]
    assert adaptive.groups[1].boundary_seq == 22 and adaptive.groups[1].boundary_op == "aten::mm"
    assert adaptive.summary.step_time_ns < eager.summary.step_time_ns
    # One launch overhead for the region, then its ops back to back.
    ovh = adaptive.config.adaptive_launch_overhead_ns
    assert adaptive.ops["start_ns"][1] == pytest.approx(adaptive.ops["end_ns"][0] + ovh)
    assert np.allclose(adaptive.ops["start_ns"][2:21], adaptive.ops["end_ns"][1:20])


def test_without_a_matmul_or_boundary_ops_run_one_by_one() -> None:
    """Buffering starts disabled and is only turned on by a boundary or matmul-family op: a chain of
    elementwise ops alone is run op by op (the old model fused it into one launch)."""
    r = model_run(chain(20), mode="adaptive")
    assert r.summary.launches == 20 and {g.boundary_reason for g in r.groups} == {"direct"}


def test_in_place_op_ends_the_region_and_runs_alone() -> None:
    e = [mm(1, 64, 64, 64)] + chain(3, start=2) + [ev(5, "aten::add_", source="opt.py:9")] + chain(2, start=6) \
        + [mm(8, 64, 64, 64)]
    r = model_run(e, mode="adaptive")
    assert [g.n_ops for g in r.groups] == [1, 3, 1, 3]
    assert r.groups[1].boundary_reason == "in_place" and r.groups[1].boundary_op == "aten::add_"
    assert r.groups[1].boundary_source == "opt.py:9"
    assert r.groups[2].boundary_reason == "in_place" and r.summary.launches == 4


def test_fused_group_reads_first_inputs_and_writes_last_outputs() -> None:
    n = 1 << 20
    unary = [ev(i + 2, "aten::relu", ins=((n,),)) for i in range(5)]
    head, tail = mm(1, 64, 64, 64), ev(7, "aten::mm", ins=((n,), (1, 1)), outs=((1,),))
    r = model_run([head] + unary + [tail], mode="adaptive")
    assert len({int(g) for g in r.ops["group"][1:]}) == 1   # relu x5 + mm: one region
    assert r.ops["bytes_read"][1] == 4 * n and r.ops["bytes_read"][2:6].sum() == 0
    assert r.ops["bytes_written"][1:6].sum() == 0             # intermediates stay on chip
    none = model_run([head] + unary + [tail], mode="adaptive", config=ModelConfig(fusion_rule="none"))
    assert none.ops["bytes_read"][1:6].sum() + none.ops["bytes_written"][1:6].sum() == 5 * 2 * 4 * n


def test_item_flushes_the_buffer_unconcatenated_and_names_op_and_source() -> None:
    """A host wait drains the queue: TorchNeuron flushes the buffer without concatenation (`Flush`), so the
    buffered ops run one by one, and ops after it run directly until the next matmul."""
    e = [mm(1, 64, 64, 64)] + chain(9, start=2) + [ev(11, "aten::_local_scalar_dense", ins=((),), outs=((),),
                                                    sync="item", transfer="d2h", source="train.py:42")] \
        + chain(3, start=12)
    r = model_run(e, mode="adaptive")
    assert all(g.n_ops == 1 for g in r.groups)
    flushed = [g for g in r.groups if 2 <= g.first_seq <= 10]
    assert len(flushed) == 9 and all(g.boundary_reason == "sync:item" for g in flushed)
    g0 = flushed[0]
    assert g0.boundary_op == "aten::_local_scalar_dense" and g0.boundary_seq == 11
    assert g0.boundary_source == "train.py:42"
    assert [g.boundary_reason for g in r.groups if g.first_seq >= 12] == ["direct"] * 3


def test_no_region_crosses_a_step_boundary() -> None:
    """Step k's ops buffered at its end run one by one at the studio's step-end sync: they never join step k+1's
    region, so per-step figures cannot depend on how many steps were profiled."""
    one = [mm(1, 64, 64, 64)] + chain(5, start=2) + [mm(7, 64, 64, 64)] + chain(3, start=8)
    ops = _frame(one + [dataclasses.replace(e, seq=e.seq + 100) for e in one])
    ops["step"] = [0] * 10 + [1] * 10
    r = model_run(ops, mode="adaptive")
    step_of = dict(zip(ops["seq"], ops["step"]))
    assert all(step_of[g.first_seq] == step_of[g.last_seq] for g in r.groups)
    assert [g.boundary_reason for g in r.groups if g.first_seq in (8, 9, 10)] == ["step_end"] * 3
    per_step = [sum(g.end_ns - g.start_ns for g in r.groups if step_of[g.first_seq] == k) for k in (0, 1)]
    assert per_step[0] == pytest.approx(per_step[1])


def test_deterministic_tag_disables_fusion() -> None:
    e = [mm(1, 64, 64, 64, tags=("deterministic",))] + chain(20, start=2, tags=("deterministic",))
    r = model_run(e, mode="adaptive")
    assert r.summary.launches == 21 and len(r.groups) == 21
    assert r.groups[0].boundary_reason == "deterministic"


def test_buffer_limit_splits() -> None:
    """The op that finds the buffer full is a boundary: the buffer is concatenated, the op runs alone."""
    e = [mm(1, 64, 64, 64)] + chain(10, start=2) + [mm(12, 64, 64, 64)]
    r = model_run(e, mode="adaptive", config=ModelConfig(adaptive_buffer_limit=4))
    assert [g.n_ops for g in r.groups] == [1, 4, 1, 4, 1, 1]
    assert r.groups[1].boundary_reason == "buffer_limit"
    assert ModelConfig.adaptive_limit_from_env({"TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT": "4",
                                                "TORCH_NEURONX_APPLY_SKIP_INTERMEDIATE": "0"}) == \
        {"adaptive_buffer_limit": 4, "adaptive_skip_intermediate": False}
    assert ModelConfig.adaptive_limit_from_env({"TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT": "-3"}) == {}


def test_compile_one_launch_per_graph_and_graph_breaks_are_eager() -> None:
    e = [ev(i + 1, "aten::mul", graph=0) for i in range(5)] + [ev(i + 6, "aten::mul", graph=1) for i in range(5)] \
        + chain(3, start=11)
    r = model_run(e, mode="compile")
    assert r.summary.launches == 2 + 3
    assert [g.n_ops for g in r.groups] == [5, 5, 1, 1, 1]
    assert r.groups[0].boundary_reason == "graph_start" and r.groups[1].boundary_reason == "graph_break"
    assert r.groups[1].boundary_seq == 11


def test_recompiles_reported_separately() -> None:
    e = [ev(1, "aten::mul", graph=0)]
    base = model_run(e, mode="compile")
    r = model_run(e, mode="compile", recompiles=[("fwd", (8, 16)), ("fwd", (8, 32)), ("fwd", (8, 64))])
    assert r.summary.recompiles == 3
    assert r.summary.compile_time_ns == 3 * r.config.compile_time_per_graph_ns
    assert r.summary.step_time_ns == base.summary.step_time_ns


def test_fallback_is_host_cpu_model_plus_copies_and_breaks_groups() -> None:
    n = 1 << 18   # 1 MiB fp32
    fb = ev(6, "aten::_sparse_mm", ins=((n,),), start_ns=1_000, end_ns=51_000, fallback="sparse", source="m.py:7")
    e = chain(5) + [fb] + chain(5, start=7)
    r = model_run(e, mode="eager")
    cfg = r.config
    copy_ns = (4 * n) / cfg.host_link_bytes_per_s * 1e9 + cfg.host_transfer_latency_ns
    host_ns = cfg.host_op_overhead_ns + (8 * n) / cfg.host_cpu_bytes_per_s * 1e9  # reads 1 MiB, writes 1 MiB
    assert r.ops["bound"][5] == "fallback" and r.ops["engine"][5] == "host"
    assert r.ops["duration_ns"][5] == pytest.approx(host_ns + 2 * copy_ns)
    assert not r.ops["launch"][5]
    assert r.groups[4].boundary_reason == "fallback" and r.groups[4].boundary_source == "m.py:7"
    # adaptive: the fallback copies its inputs to the host, a host wait: buffered ops run one by one
    a = model_run([mm(0, 64, 64, 64)] + e, mode="adaptive")
    assert [g.boundary_reason for g in a.groups[1:6]] == ["fallback"] * 5 and a.groups[1].boundary_source == "m.py:7"
    assert r.summary.fallback_ops == 1 and r.summary.host_fallback_ns == pytest.approx(r.ops["duration_ns"][5])


def test_cores_run_in_parallel_each_in_order() -> None:
    e = [ev(1, core=0), ev(2, core=1), ev(3, core=0), ev(4, core=1)]
    r = model_run(e)
    one = model_run([ev(1)]).ops["duration_ns"][0] + r.config.eager_launch_overhead_ns
    assert r.summary.step_time_ns == pytest.approx(2 * one)
    assert r.ops["start_ns"][2] == pytest.approx(r.ops["end_ns"][0] + r.config.eager_launch_overhead_ns)
    assert r.summary.cores_used == 2 and r.summary.chips_used == 1
    assert list(r.ops["group"]) == [0, 1, 2, 3]


def test_h100_and_cost() -> None:
    M = 8192
    r = model_run([mm(1, M, M, M)], config=IDEAL.replace(h100_launch_overhead_ns=0.0))
    s = r.summary
    assert s.h100_step_time_ns == pytest.approx(2 * M**3 / 989e12 * 1e9)
    assert s.cost_per_step_usd == pytest.approx(2.235 * s.step_time_ns / 3.6e12)
    assert s.h100_cost_per_step_usd == pytest.approx(5.970 * s.h100_step_time_ns / 3.6e12)
    assert s.cost_per_1000_steps_usd == pytest.approx(1000 * s.cost_per_step_usd)
    assert s.modeled is True and r.modeled is True


# ---------------------------------------------------------------- inputs

def _frame(events: list[OpEvent]) -> pd.DataFrame:
    return pd.DataFrame([{f: getattr(e, f) for f in e.__dataclass_fields__} for e in events])


def test_dataframe_input_matches_events() -> None:
    e = chain(3) + [mm(4, 64, 64, 64), ev(5, "aten::item", sync="item", source="x.py:1")]
    a = model_run(e, mode="adaptive")
    b = model_run(_frame(e), mode="adaptive")
    for k in ("start_ns", "end_ns", "bytes_read", "bytes_written", "flops"):
        np.testing.assert_allclose(a.ops[k], b.ops[k])
    assert list(a.ops["engine"]) == list(b.ops["engine"])
    assert [g.boundary_seq for g in a.groups] == [g.boundary_seq for g in b.groups]


def test_derived_columns_and_missing_columns() -> None:
    c = events_to_columns(chain(4))
    data = {"seq": c.seq, "name": c.names[c.name_code], "start_ns": c.start_ns, "end_ns": c.end_ns,
            "device_index": c.core, "in_bytes": c.in_bytes, "out_bytes": c.out_bytes, "elems": c.elems,
            "itemsize": c.itemsize, "dtype_class": c.dtype_class}
    np.testing.assert_allclose(model_run(data).ops["end_ns"], model_run(c).ops["end_ns"])
    with pytest.raises(ColumnsError, match="device_index"):
        columns_from_mapping({k: v for k, v in data.items() if k != "device_index"})


def test_bad_mode_and_config() -> None:
    with pytest.raises(ConfigError, match="mode"):
        model_run(chain(1), mode="turbo")
    with pytest.raises(ConfigError, match="hbm_efficiency"):
        ModelConfig(hbm_efficiency=1.5)
    with pytest.raises(ConfigError, match="valid"):
        ModelConfig().replace(launch_ns=1)


def test_empty_run_is_finite() -> None:
    s = model_run([]).summary
    assert s.step_time_ns == 0 and s.mfu == 0 and s.launches == 0


# ---------------------------------------------------------------- properties

_NAMES = ["aten::add", "aten::exp", "aten::sum", "aten::gather", "aten::clone", "aten::view", "aten::mm"]


@st.composite
def runs(draw):
    n = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        name = draw(st.sampled_from(_NAMES))
        dt = draw(st.sampled_from(["float32", "bfloat16", "float8_e4m3fn"]))
        core = draw(st.integers(0, 3))
        kw = {}
        if draw(st.integers(0, 9)) == 0:
            kw["sync"] = "item"
        if draw(st.integers(0, 12)) == 0:
            kw["fallback"] = "unsupported"
        if draw(st.integers(0, 12)) == 0:
            kw["tags"] = ("deterministic",)
        kw["graph"] = draw(st.sampled_from([-1, 0, 1]))
        if name == "aten::mm":
            m, k, nn = (draw(st.integers(1, 2048)) for _ in range(3))
            out.append(mm(i + 1, m, k, nn, dt=dt, core=core, **kw))
        else:
            size = draw(st.integers(0, 1 << 22))
            out.append(ev(i + 1, name, ins=((size,),), dt=dt, core=core, is_view=name == "aten::view", **kw))
    return out


@settings(max_examples=60, deadline=None)
@given(runs(), st.sampled_from(["eager", "adaptive", "compile"]), st.sampled_from(["trn1", "trn2", "trn3"]))
def test_properties(events, mode, chip) -> None:
    r = model_run(events, mode=mode, chip=chip)
    o = r.ops
    real = o["engine"] != "none"
    assert (o["duration_ns"] >= 0).all()
    moves = real & ((o["bytes_read"] + o["bytes_written"] + o["flops"]) > 0)
    assert (o["duration_ns"][moves] > 0).all()
    assert ((o["duration_ns"] + o["launch_overhead_ns"])[o["launch"]] > 0).all()
    assert (o["end_ns"] >= o["start_ns"]).all()
    for u in r.summary.engine_utilization.values():
        assert 0.0 <= u <= 1.0 + 1e-9
    for k, v in r.summary.to_dict().items():
        if isinstance(v, float):
            assert math.isfinite(v), k
    assert r.summary.step_time_ns >= o["end_ns"].max()
    assert sum(g.n_ops for g in r.groups) == len(events)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_NAMES[:-2]), st.integers(1, 1 << 24), st.integers(1, 1 << 24),
       st.sampled_from(["float32", "bfloat16"]), st.sampled_from(["trn1", "trn2", "trn3"]))
def test_more_bytes_never_faster(name, a, b, dt, chip) -> None:
    small, big = sorted((a, b))
    t = [model_run([ev(1, name, ins=((s,),), dt=dt)], chip=chip).summary.step_time_ns for s in (small, big)]
    assert t[1] >= t[0]


def test_collectives_are_charged_per_rank_with_ring_factors_and_published_latency():
    """An all-reduce of B bytes over n ranks puts 2(n-1)/n x B on each rank's link at the chip's per-rank bus
    bandwidth, plus the fixed latency and one hop latency per ring step (2(n-1) for an all-reduce); across
    instances the inter-node figures apply."""
    import dataclasses

    nbytes = 64 * 2**20
    coll = dataclasses.replace(ev(1, "c10d::allreduce_", ins=((nbytes // 4,),), outs=((nbytes // 4,),)),
                               transfer_bytes=nbytes, tags=("collective",))
    from neuron_studio.profiler.model.ops import allreduce_algorithm, allreduce_steps

    spec = chip_spec("trn2")
    bw, lat = spec.collective_bus_bandwidth_bytes_per_s, spec.allreduce_latency_ns
    per_chip = spec.core(None).cores_per_chip
    for world, factor in ((2, 1.0), (4, 1.5), (8, 1.75)):
        run = model_run([coll], chip="trn2", mode="eager", world_size=world)
        dur = float(run.ops["duration_ns"][0])
        assert run.ops["engine"][0] == "dma" and run.ops["bound"][0] == "memory"
        algo = allreduce_algorithm(world, nbytes, per_chip, spec.allreduce_mesh_max_chunk_bytes,
                                   spec.allreduce_rdh_max_chunk_bytes)
        assert algo == ("ring" if world <= per_chip else "kangaring")   # 64 MiB: 8 MiB per rank
        hops = allreduce_steps(algo, world, per_chip) * spec.collective_hop_latency_ns
        assert dur == pytest.approx(nbytes * factor / bw * 1e9 + lat + hops, rel=1e-9)
    single = model_run([coll], chip="trn2", mode="eager", world_size=1)
    assert float(single.ops["duration_ns"][0]) == pytest.approx(spec.collective_latency_ns)  # one rank: no traffic
    two_nodes = model_run([coll], chip="trn2", mode="eager", world_size=16, local_world_size=8)
    inter = nbytes * 2 * 15 / 16 / spec.internode_bus_bandwidth_bytes_per_s * 1e9 + spec.internode_collective_latency_ns
    assert float(two_nodes.ops["duration_ns"][0]) == pytest.approx(inter, rel=1e-9)
    assert float(two_nodes.ops["duration_ns"][0]) > float(model_run([coll], chip="trn2", world_size=16)
                                                          .ops["duration_ns"][0])
    trn3 = model_run([coll], chip="trn3", mode="eager", world_size=8)
    assert float(trn3.ops["duration_ns"][0]) < dur              # NeuronLink-v4 is faster


def test_string_columns_read_missing_values_as_absent_whatever_their_spelling():
    """The model's optional string columns (fallback, sync, transfer, source) come as object arrays in which
    pandas spells a missing value None, NaN or pd.NA; only real strings count (an empty fallback reason is no
    fallback), and a host round trip is read from the fallback reason or the sync column."""
    from neuron_studio.profiler.model.ops import string_rows
    from neuron_studio.profiler.op_kinds import K_DEVICE, K_HOST_FALLBACK, K_HOST_ROUND_TRIP, K_SYNC, classify_ops

    col = np.array([None, float("nan"), pd.NA, "", "cpu_fallback", 3, "host_round_trip"], dtype=object)
    assert string_rows(col).tolist() == [False, False, False, True, True, False, True]
    assert string_rows(np.array([], dtype=object)).tolist() == []
    names = ["aten::add"] * len(col)
    kinds = classify_ops(names, no_engine=[False] * len(col), fallback=col)
    assert kinds.tolist() == [K_DEVICE, K_DEVICE, K_DEVICE, K_DEVICE, K_HOST_FALLBACK, K_DEVICE, K_HOST_ROUND_TRIP]
    sync = np.array([None, "host_round_trip", float("nan"), "stream", pd.NA], dtype=object)
    kinds = classify_ops(["aten::add"] * 5, no_engine=[False] * 5, sync=sync)
    assert kinds.tolist() == [K_DEVICE, K_HOST_ROUND_TRIP, K_DEVICE, K_SYNC, K_DEVICE]
