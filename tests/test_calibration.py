"""Issue 16: the model against published measurements, and the invariants any modeled figure must keep.

The calibration benchmark itself (benchmarks/bench_calibration.py) takes minutes; these tests check the data
set, the model's documented mechanisms (each one a defect the calibration exposed) and the invariants.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_studio.device.events import OpEvent
from neuron_studio.hardware import chip_spec
from neuron_studio.kernels import kernel_time
from neuron_studio.kernels.interpreter import isa as nisa
from neuron_studio.kernels.interpreter.errors import NkiRuleError
from neuron_studio.kernels.interpreter import language as nl
from neuron_studio.kernels.interpreter.jit import JitKernel
from neuron_studio.profiler.model import ModelConfig, model_run
from neuron_studio.profiler.model.calibration import (
    CALIBRATION_PATH, CalibrationError, calibration_summary, geomean_error, load_calibration, stated_error,
    write_modeled,
)


def ev(seq: int, name: str = "aten::add", ins=((1024,),), outs=None, dt: str = "float32", **kw) -> OpEvent:
    outs = ins[:1] if outs is None else outs
    fields = dict(seq=seq, name=name, overload="default", start_ns=seq * 1000, end_ns=seq * 1000 + 500, thread=0,
                  device_index=0, input_shapes=tuple(ins), input_dtypes=(dt,) * len(ins),
                  output_shapes=tuple(outs), output_dtypes=(dt,) * len(outs))
    fields.update(kw)
    return OpEvent(**fields)


# -- the data set ------------------------------------------------------------------------------------------
def test_calibration_rows_name_their_source_and_cover_the_published_figures() -> None:
    rows = {r.id: r for r in load_calibration()}
    for rid, value in (("nki_matmul_tiled", 51800), ("nki_matmul_hoist_load", 42960),
                       ("nki_matmul_block_free", 22070), ("nki_matmul_fully_optimized", 6970),
                       ("nki_layernorm_v1", 2311), ("nki_layernorm_v2", 1969), ("nccom_allreduce_2r_1KiB", 58),
                       ("nccom_allreduce_2r_64MiB", 1214), ("nccom_allreduce_2r_1GiB", 18930),
                       ("nccom_allreduce_64r2n_1GiB", 41806), ("bert_large_ph1_step", 133800)):
        assert rows[rid].value == value
    for r in rows.values():  # owner/repo:path @commit, the hardware and whether the source states it
        assert re.match(r"[\w-]+/[\w.-]+:\S+ @[0-9a-f]{7,}", r.source), r.source
        assert r.hardware and r.chip in ("trn1", "trn2", "trn3") and r.hardware_basis in ("stated", "inferred")
        assert r.in_fit or r.not_matched


def test_calibration_loader_rejects_rows_without_a_reason_to_be_left_out(tmp_path) -> None:
    doc = json.loads(CALIBRATION_PATH.read_text())
    doc["rows"][0]["in_fit"] = False
    doc["rows"][0].pop("not_matched", None)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(CalibrationError, match="out of the fit but says not why"):
        load_calibration(p)
    assert geomean_error([2.0, 0.5]) == pytest.approx(2.0)
    assert geomean_error([1.0]) == 1.0


# -- the stated calibration error: derived from the data set, the data set checked against the model ---------
def test_each_chips_calibration_is_derived_from_its_own_stored_modeled_values() -> None:
    rows = load_calibration()
    assert all(r.modeled is not None for r in rows), "run python benchmarks/bench_calibration.py --write"
    for chip in sorted({r.chip for r in rows if r.in_fit}):
        fit = [r for r in rows if r.in_fit and r.chip == chip]
        ratios = [r.modeled / r.value for r in fit]
        cal = calibration_summary(chip)
        assert cal.n_rows == len(fit) > 0 and cal.validated
        assert cal.geomean == pytest.approx(geomean_error(ratios)) == pytest.approx(stated_error(rows, chip))
        assert (cal.lo, cal.hi) == (min(ratios), max(ratios))
        assert cal.text.startswith(f"{chip}: modeled/measured {cal.lo:.2f}–{cal.hi:.2f}× on {len(fit)} published")
        assert cal.geomean <= 1.25 and all(1 / 1.5 <= r <= 1.5 for r in ratios)
    assert "trn3" not in {r.chip for r in rows if r.in_fit}  # Trn3 figures are spec-derived until measured
    trn3 = calibration_summary("trn3")
    assert not trn3.validated and trn3.n_rows == 0 and trn3.lo is None and trn3.geomean is None
    assert trn3.text == "trn3: not validated against a measurement" and "±" not in trn3.text


def test_a_changed_or_missing_stored_value_changes_or_blocks_the_chips_calibration(tmp_path) -> None:
    p = tmp_path / "c.json"
    p.write_text(CALIBRATION_PATH.read_text())
    rows = load_calibration(p)
    first = next(r for r in rows if r.in_fit)
    before = calibration_summary(first.chip, p)
    other = next(c for c in ("trn1", "trn2", "trn3") if c != first.chip)
    other_before = calibration_summary(other, p)
    write_modeled({first.id: first.value * 3}, p)
    after = calibration_summary(first.chip, p)
    assert after.geomean > before.geomean and after.hi == pytest.approx(3.0)
    assert calibration_summary(other, p) == other_before  # one chip's rows never move another chip's statement
    assert load_calibration(p)[rows.index(first)].modeled == pytest.approx(first.value * 3)
    with pytest.raises(CalibrationError, match="no calibration row"):
        write_modeled({"no-such-row": 1.0}, p)
    doc = json.loads(p.read_text())
    doc["rows"][rows.index(first)].pop("modeled")
    p.write_text(json.dumps(doc))
    with pytest.raises(CalibrationError, match="no stored modeled value.*--write"):
        stated_error(load_calibration(p))
    with pytest.raises(CalibrationError, match="no stored modeled value.*--write"):
        calibration_summary(first.chip, p)


@pytest.fixture(scope="module")
def bench_calibration():
    """benchmarks/bench_calibration.py as a module: its reproducers are what the stored values came from."""
    import importlib
    import os
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    os.environ.setdefault("NEURON_STUDIO_NKI", "interpreter")
    sys.path.insert(0, str(bench))
    try:
        yield importlib.import_module("bench_calibration")
    finally:
        sys.path.remove(str(bench))


_ROWS = load_calibration()
# The matmul tutorial kernels run minutes each on the interpreter: recomputed in the slow suite only.
_SLOW_ROWS = {r.id for r in _ROWS if r.reproduce.startswith(("kernel:matmul", "kernel:trn2_matmul"))
              or r.id == "cs149_vector_add_tiled_row_chunk_1"}


@pytest.mark.parametrize("row_id", [pytest.param(r.id, marks=pytest.mark.slow) if r.id in _SLOW_ROWS else r.id
                                    for r in _ROWS])
def test_the_stored_modeled_value_is_what_the_model_gives_today(row_id: str, bench_calibration) -> None:
    """Fails when a model change moves a calibration row without re-running the benchmark (--write)."""
    row = next(r for r in _ROWS if r.id == row_id)
    assert row.modeled is not None
    try:
        modeled = bench_calibration.reproduce(row)
    except bench_calibration.cs149.Cs149Unavailable as exc:  # its kernels are not shipped (no licence)
        pytest.skip(str(exc))
    assert modeled == pytest.approx(row.modeled, rel=1e-6, abs=2e-3)


# -- kernel model ------------------------------------------------------------------------------------------
@JitKernel
def _add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=out, src=x)
    return out


def _copy_kernel_for(tile_cols: int):
    @JitKernel
    def copy(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for j in range(a.shape[1] // tile_cols):
            t = nl.ndarray((128, tile_cols), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[:, j * tile_cols:(j + 1) * tile_cols])
            nisa.dma_copy(dst=out[:, j * tile_cols:(j + 1) * tile_cols], src=t)
        return out
    return copy


def test_small_kernel_pays_launch_and_dependent_dma_latencies() -> None:
    """load -> add -> store is a chain: two DMA latencies plus the launch preamble (old model: 1.2 µs)."""
    a = np.ones((128, 512), np.float32)
    _, trace = _add_kernel.run(a, a, chip="trn1")
    t = kernel_time(trace, "trn1")
    spec = chip_spec("trn1")
    assert t.total_ns >= 2 * spec.dma_fixed_latency_ns + ModelConfig().kernel_launch_overhead_ns
    assert t.launch_overhead_ns == ModelConfig().kernel_launch_overhead_ns


def test_dma_engines_move_descriptors_at_the_per_engine_rate() -> None:
    """The same 2 MiB moved as 128 x 256 B row descriptors is slower than as 128 x 4 KiB: every descriptor an
    engine moves costs `dma_descriptor_overhead_ns` on top of its bytes at core DMA bandwidth / 16."""
    a = np.ones((128, 4096), np.float32)
    spec = chip_spec("trn1")
    rate = spec.core_dma_bandwidth_bytes_per_s / 16 / 1e9
    o = spec.dma_descriptor_overhead_ns
    for cols in (64, 1024):
        _, trace = _copy_kernel_for(cols).run(a, chip="trn1")
        assert {i.descriptors for i in trace if i.engine == "dma"} == {128}  # strided rows: one per partition
        n_copies = 2 * a.shape[1] // cols
        want = n_copies * (128 * cols * 4 / 16 / rate + 8 * o)  # 8 partitions, 8 descriptors per engine
        assert kernel_time(trace, "trn1").per_engine_ns["dma"] == pytest.approx(want, rel=1e-9)


@JitKernel
def _four_partition_loads(a):
    """Two [4, 4096] bf16 loads on partitions 0-3 and 8-11: one DMA engine each (nki-dma-overview.rst)."""
    t = nl.ndarray((16, 4096), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:4, :], src=a[0:4, :])
    nisa.dma_copy(dst=t[8:12, :], src=a[4:8, :])
    return a


def test_a_transfer_uses_the_dma_engines_of_its_partitions() -> None:
    from neuron_studio.kernels.cost import dma_shape

    spec = chip_spec("trn2")
    one = dma_shape(32768, (0, 4), 1, spec)
    assert (one.first, one.engines) == (0, 1)
    assert one.engine_ns == pytest.approx(32768 / 23 + spec.dma_descriptor_overhead_ns, rel=0.01)  # ~1416 ns
    full = dma_shape(32768, (0, 128), 16, spec)
    assert full.engines == 16 and full.engine_ns == pytest.approx(one.engine_ns / 16, rel=0.2)
    _, trace = _four_partition_loads.run(np.ones((8, 4096), np.float32).astype(np.float16), chip="trn2")
    assert [i.partitions for i in trace] == [(0, 4), (8, 4)]
    both = kernel_time(trace, "trn2").total_ns
    alone = kernel_time(dataclasses.replace(trace, instructions=trace.instructions[:1]), "trn2").total_ns
    # different engines: the second transfer waits only for the descriptor generator, not for the first's bytes
    assert both == pytest.approx(alone + spec.dge_instruction_ns, rel=1e-9)


def test_each_dma_instruction_pays_descriptor_generation_on_trn2_not_on_trn1() -> None:
    """trainium2_arch.rst: each DGE-based DMA instruction takes ~600 ns on NeuronCore-v3; NC-v2 has no DGE."""
    a = np.ones((128, 4096), np.float32)
    _, trace = _copy_kernel_for(64).run(a, chip="trn2")
    n = sum(1 for i in trace if i.engine == "dma")
    assert kernel_time(trace, "trn2").total_ns >= n * chip_spec("trn2").dge_instruction_ns
    assert chip_spec("trn1").dge_instruction_ns is None


@JitKernel
def _k_tiles_in_one_tensor(lhsT, rhs):
    """AWS's style: the k-tiles of lhsT are slices of one SBUF tensor."""
    K, M = lhsT.shape
    out = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = nl.ndarray((K // 128, nl.par_dim(128), M), dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_t = nl.ndarray((K // 128, nl.par_dim(128), rhs.shape[1]), dtype=rhs.dtype, buffer=nl.sbuf)
    acc = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in range(K // 128):
        nisa.dma_copy(dst=tiles[k], src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=rhs_t[k], src=rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, tiles[k], rhs_t[k], accumulate=k > 0)
    res = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@JitKernel
def _k_tiles_one_tensor_each(lhsT, rhs):
    """The same instructions with one SBUF tensor per tile."""
    K, M = lhsT.shape
    out = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in range(K // 128):
        a = nl.ndarray((128, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, rhs.shape[1]), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, a, b, accumulate=k > 0)
    res = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_dependencies_follow_the_accessed_slice_not_the_tensor(chip: str) -> None:
    """Loading k-tile k+1 into a slice of the tensor that holds k-tile k does not wait for tile k's readers."""
    g = np.random.default_rng(0)
    lhsT, rhs = g.standard_normal((1024, 128), np.float32), g.standard_normal((1024, 512), np.float32)
    out_a, slices = _k_tiles_in_one_tensor.run(lhsT, rhs, chip=chip)
    out_b, tiles = _k_tiles_one_tensor_each.run(lhsT, rhs, chip=chip)
    np.testing.assert_allclose(out_a, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(out_a, out_b)
    assert kernel_time(slices, chip).total_ns == pytest.approx(kernel_time(tiles, chip).total_ns, rel=1e-9)
    spans = [i.write_spans[0] for i in slices if i.engine == "dma" and i.write_spans[0].buffer == 
             slices[0].write_spans[0].buffer]
    assert len(spans) == 8 and not any(x.overlaps(y) for j, x in enumerate(spans) for y in spans[j + 1:])
    assert spans[0].overlaps(spans[0])


def test_vector_two_input_ops_cost_two_passes_and_every_instruction_a_static_overhead() -> None:
    from neuron_studio.kernels import cost
    spec = chip_spec("trn1")
    one = cost.instruction_ns("vector", "float32", 128 * 4096, 0, 0, 0, spec, opcode="tensor_scalar")
    two = cost.instruction_ns("vector", "float32", 128 * 4096, 0, 0, 0, spec, opcode="tensor_tensor.add")
    static = spec.vector_static_overhead_cycles / (spec.vector_clock_hz / 1e9)
    assert two - static == pytest.approx(2 * (one - static))
    tiny = cost.instruction_ns("scalar", "float32", 128, 0, 0, 0, spec)
    assert tiny == pytest.approx(189, rel=0.01)   # ~189 ns per dependent one-element ScalarE instruction


# -- op model: attention, FP8, collectives -------------------------------------------------------------------
def _sdpa(causal: bool, seq: int = 2048) -> OpEvent:
    q = (4, 16, seq, 64)
    return ev(1, "aten::_scaled_dot_product_fused_attention_overrideable", ins=(q, q, q), outs=(q,),
              dt="bfloat16", tags=("causal",) if causal else ())


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
def test_causal_attention_is_cheaper_than_full_attention(chip: str) -> None:
    full = model_run([_sdpa(False)], chip=chip).ops["duration_ns"][0]
    causal = model_run([_sdpa(True)], chip=chip).ops["duration_ns"][0]
    assert causal < 0.6 * full


def test_attention_exp_runs_on_the_scalar_engine() -> None:
    """With head dim 64 the Scalar Engine's exp over the scores, not the matmuls, bounds attention on Trn1."""
    spec = chip_spec("trn1")
    d = model_run([_sdpa(False)], chip="trn1", config=ModelConfig(tensor_efficiency=1, scalar_efficiency=1))
    scores = 4 * 16 * 2048 * 2048
    assert d.ops["compute_ns"][0] == pytest.approx(scores / (spec.scalar_elems_per_cycle_16bit
                                                            * spec.scalar_clock_hz) * 1e9)


def test_captured_causal_attention_is_tagged_and_cheaper() -> None:
    import neuron_studio  # noqa: F401
    from neuron_studio.profiler.capture import profile

    q = torch.randn(1, 2, 256, 32, device="neuron")
    steps = {}
    for causal in (False, True):
        prof = profile(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=causal),
                       chip="trn2", host_events=False)
        att = prof.trace.ops[prof.trace.ops["name"].str.contains("scaled_dot_product")]
        assert len(att) == 1
        steps[causal] = model_run(prof.trace.ops, chip="trn2").ops["compute_ns"][
            int(np.flatnonzero(prof.trace.ops["name"].str.contains("scaled_dot_product").to_numpy())[0])]
    assert steps[True] < steps[False]


def test_trn3_plain_fp8_runs_on_the_bf16_datapath_and_mxfp8_at_four_times() -> None:
    m = 4096
    cfg = ModelConfig(tensor_efficiency=1.0)
    mm = lambda dt, scale=None: OpEvent(  # noqa: E731
        seq=1, name="aten::_scaled_mm", overload="default", start_ns=0, end_ns=1, thread=0, device_index=0,
        input_shapes=((m, m), (m, m)) + (((m, m // 32),) * 2 if scale else ()),
        input_dtypes=(dt, dt) + ((scale, scale) if scale else ()), output_shapes=((m, m),),
        output_dtypes=("bfloat16",), flops=2 * m ** 3)
    bf = model_run([ev(1, "aten::mm", ins=((m, m), (m, m)), outs=((m, m),), dt="bfloat16")], chip="trn3",
                   config=cfg).ops["compute_ns"][0]
    fp8 = model_run([mm("float8_e4m3fn")], chip="trn3", config=cfg).ops["compute_ns"][0]
    mx = model_run([mm("float8_e4m3fn", "float8_e8m0fnu")], chip="trn3", config=cfg).ops["compute_ns"][0]
    assert fp8 == pytest.approx(bf)
    spec = chip_spec("trn3")
    assert mx == pytest.approx(bf * spec.core_tensor_bf16_flops_per_s / spec.core_tensor_mxfp8_flops_per_s)
    assert spec.core_tensor_mxfp8_flops_per_s == pytest.approx(4 * spec.core_tensor_bf16_flops_per_s, rel=0.01)
    fp8_trn2 = model_run([mm("float8_e4m3fn")], chip="trn2", config=cfg).ops["compute_ns"][0]
    bf_trn2 = model_run([ev(1, "aten::mm", ins=((m, m), (m, m)), outs=((m, m),), dt="bfloat16")], chip="trn2",
                        config=cfg).ops["compute_ns"][0]
    assert fp8_trn2 == pytest.approx(bf_trn2 / 2)   # Trn2's double-row FP8


def _allreduce(nbytes: int) -> OpEvent:
    return ev(1, "c10d::allreduce_", ins=((nbytes // 4,),), transfer_bytes=nbytes, tags=("collective",))


def test_collectives_match_nccom_test_on_trn1() -> None:
    for ranks, local, nbytes, published_us in ((2, 2, 1 << 30, 18930), (2, 2, 1 << 26, 1214),
                                                (2, 2, 1024, 58), (64, 32, 1 << 30, 41806), (64, 32, 1 << 26, 3963)):
        run = model_run([_allreduce(nbytes)], chip="trn1", world_size=ranks, local_world_size=local)
        assert 1 / 1.25 < run.ops["duration_ns"][0] / 1e3 / published_us < 1.25


def test_profile_inside_a_distributed_job_knows_the_world_size(monkeypatch) -> None:
    from neuron_studio.profiler import capture

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert capture._job_size() == {"world_size": 8, "local_world_size": 4}
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert capture._job_size() == {"world_size": 2}


# -- invariants --------------------------------------------------------------------------------------------
_DTYPES = ["float32", "bfloat16", "float8_e4m3fn"]
_OPS = ["aten::mm", "aten::add", "aten::exp", "c10d::allreduce_", "aten::_softmax", "aten::gather"]


@st.composite
def _job(draw):
    n = draw(st.integers(1, 12))
    events = []
    for i in range(n):
        name = draw(st.sampled_from(_OPS))
        dt = draw(st.sampled_from(_DTYPES))
        m = draw(st.sampled_from([16, 128, 1024, 4096]))
        if name == "aten::mm":
            events.append(ev(i + 1, name, ins=((m, m), (m, m)), outs=((m, m),), dt=dt))
        elif name.startswith("c10d::"):
            events.append(dataclasses.replace(_allreduce(m * m * 4), seq=i + 1))
        else:
            events.append(ev(i + 1, name, ins=((m, m),), dt=dt))
    return events


@settings(max_examples=60, deadline=None)
@given(_job(), st.sampled_from(["trn1", "trn2", "trn3"]), st.sampled_from(["eager", "adaptive", "compile"]),
       st.sampled_from([1, 2, 64]))
def test_mfu_and_mbu_never_exceed_one(events, chip, mode, world) -> None:
    s = model_run(events, chip=chip, mode=mode, world_size=world, local_world_size=32).summary
    assert 0.0 <= s.mfu <= 1.0 + 1e-9
    assert 0.0 <= s.mbu <= 1.0 + 1e-9


def test_fp8_mfu_is_against_the_fp8_peak() -> None:
    m = 8192
    mm = ev(1, "aten::mm", ins=((m, m), (m, m)), outs=((m, m),), dt="float8_e4m3fn")
    s = model_run([mm], chip="trn2", config=ModelConfig(tensor_efficiency=1.0)).summary
    assert s.mfu <= 1.0 and s.mfu > 0.9


@settings(max_examples=40, deadline=None)
@given(_job(), st.sampled_from(["trn1", "trn2", "trn3"]))
def test_compiled_never_slower_than_adaptive_never_slower_than_eager(events, chip) -> None:
    eager = model_run(events, chip=chip, mode="eager").summary.step_time_ns
    adaptive = model_run(events, chip=chip, mode="adaptive").summary.step_time_ns
    graph = [dataclasses.replace(e, graph=0) for e in events]
    compiled = model_run(graph, chip=chip, mode="compile").summary.step_time_ns
    assert compiled <= adaptive * (1 + 1e-9) and adaptive <= eager * (1 + 1e-9)


def test_modeled_step_does_not_depend_on_machine_load() -> None:
    """The same program recorded on an idle and on a loaded machine (host times x50) models the same step,
    CPU fallbacks included."""
    base = [ev(1, "aten::mm", ins=((512, 512), (512, 512)), outs=((512, 512),)),
            ev(2, "aten::bernoulli_", ins=((1 << 20,),), fallback="rng"),
            ev(3, "aten::native_dropout", ins=((1 << 20,),)),
            ev(4, "aten::_unique2", ins=((4096,),), fallback="data_dependent_shape")]
    loaded = [dataclasses.replace(e, start_ns=e.start_ns * 50, end_ns=e.start_ns * 50 + 50 * (e.end_ns - e.start_ns))
              for e in base]
    for mode in ("eager", "adaptive", "compile"):
        a = model_run(base, chip="trn2", mode=mode).summary.step_time_ns
        b = model_run(loaded, chip="trn2", mode=mode).summary.step_time_ns
        assert a == b


def test_dropout_is_a_device_op_with_a_host_drawn_mask() -> None:
    n = 1 << 22
    drop = model_run([ev(1, "aten::native_dropout", ins=((n,),))], chip="trn2")
    cfg = drop.config
    assert drop.ops["engine"][0] == "vector" and drop.summary.fallback_ops == 0
    mask_ns = n / cfg.host_rng_elems_per_s * 1e9 + n / cfg.host_link_bytes_per_s * 1e9
    plain = model_run([ev(1, "aten::mul", ins=((n,),))], chip="trn2").ops["duration_ns"][0]
    assert drop.ops["duration_ns"][0] >= plain + mask_ns
    assert not math.isnan(drop.summary.step_time_ns)


# -- what the user sees --------------------------------------------------------------------------------------
def test_the_step_ranges_drivers_state_launches_per_step_whatever_the_number_of_profiled_steps() -> None:
    """The launch cost's driver names the busiest core's launches per step: the model counts them over the whole
    run, and a 3-step profile said 3x what a 1-step profile of the same step said."""
    import neuron_studio  # noqa: F401
    from neuron_studio.profiler.capture import profile
    from neuron_studio.profiler.profile_summary import profile_summary

    w = torch.randn(64, 64, device="neuron")
    step = lambda: (w @ w).relu().sum()  # noqa: E731
    one, three = (profile_summary(profile(step, steps=n, host_events=False)) for n in (1, 3))
    assert one["range_drivers"] == three["range_drivers"]
    text = one["range_drivers"]["launch_overhead_ns"]
    assert text.endswith("per step on the busiest core")
    assert f"{round(one['launches'])} launch" in text     # one core here: the busiest core has every launch


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_summary_shows_the_step_range_its_drivers_and_the_chips_own_calibration(chip: str) -> None:
    import neuron_studio  # noqa: F401
    from neuron_studio.profiler.capture import profile
    from neuron_studio.profiler.profile_summary import profile_summary
    from neuron_studio.ui.html import render_html
    from neuron_studio.ui.text import render_text

    w = torch.randn(64, 64, device="neuron")
    prof = profile(lambda: (w @ w).relu().sum(), chip=chip, mode="eager", host_events=False)
    s = profile_summary(prof)
    lo, hi = s["step_time_range_ns"]
    assert lo < s["step_time_ns"] < hi
    assert "launch_overhead_ns" in s["range_drivers"]
    cal = calibration_summary(chip)
    assert s["calibration"]["text"] == cal.text and s["calibration"]["chip"] == chip
    assert s["calibration_error"] == cal.geomean
    html = render_html(s)
    assert "step time (modeled)" in html and "launch cost per NEFF execution" in html
    assert cal.text in html and cal.text in render_text(s)
    if chip == "trn3":
        assert "not validated against a measurement" in html and "±" not in html


def test_kernel_saving_uses_the_kernel_model_not_the_roofline() -> None:
    import pandas as pd

    from neuron_studio.kernels.efficiency import kernel_call_ns
    from neuron_studio.profiler.analysis.hot_path import HotOp, attach_savings

    ops = pd.DataFrame({"op": ["aten::mm"], "module": [""], "flops": [2 * 4096.0 ** 3], "bytes": [3 * 2 * 4096.0 ** 2],
                        "device_ns": [1e7], "seq": [1]})
    roofs = type("R", (), {"peak_flops": 79e12, "hbm_bytes_per_s": 725e9})()

    def hot() -> list:
        return [HotOp(op="aten::mm", module="", source=None, count=1, device_ns=10_000_000, share=1.0,
                      bound="compute", why="", engine="tensor",
                      kernels=[{"kernel": "matmul_kernel", "kind": "candidate", "pattern": "aten::mm",
                                "file": "matmul.py"}])]
    by_roof, by_model = hot(), hot()
    attach_savings(by_roof, ops, roofs)
    attach_savings(by_model, ops, roofs, kernel_ns=lambda k, f, b, i: kernel_call_ns(k, "trn2", f, b, i))
    roof_saving = by_roof[0].kernels[0]["saving_ns"]
    model_saving = by_model[0].kernels[0]["saving_ns"]
    assert by_model[0].kernels[0]["kernel_time"] == "kernel model"
    assert model_saving < roof_saving
    assert model_saving == pytest.approx(1e7 - kernel_call_ns("matmul_kernel", "trn2", 2 * 4096.0 ** 3,
                                                              3 * 2 * 4096.0 ** 2, 2))


@pytest.mark.parametrize("itemsize", [2, 4])
def test_a_kernels_scaled_time_matches_the_kernel_model_at_a_call_it_was_not_read_at(itemsize) -> None:
    """The hot path's kernel time (two reference calls read as fixed + slope x roofline, launch excluded) tracks
    the kernel model run at another size and dtype; a factor taken at one small call (preamble included) did not:
    it put tutorial 04's 512-token fp32 MLP at 11x its roofline, above the five ops it replaces."""
    import torch

    from neuron_studio import kernels as K
    from neuron_studio.kernels.cost import roofline_ns
    from neuron_studio.kernels.efficiency import kernel_call_ns, kernel_scaling

    t, d, h = 384, 384, 768                      # neither reference call (128x256x512, 256x512x1024)
    dt = {2: torch.bfloat16, 4: torch.float32}[itemsize]
    g = torch.Generator().manual_seed(1)
    args = [(torch.randn(*s, generator=g) * 0.1).to(dt) for s in ((t, d), (d, h), (d, h), (h, d))]
    _, trace = K.run(K.swiglu_mlp_kernel, *args, chip="trn2")
    timing = K.kernel_time(trace, "trn2")
    direct = timing.total_ns - timing.launch_overhead_ns
    flops, nbytes = 2.0 * 3 * t * d * h, float(itemsize * (2 * t * d + 3 * d * h))
    scaled = kernel_call_ns("swiglu_mlp_kernel", "trn2", flops, nbytes, itemsize)
    assert scaled == pytest.approx(direct, rel=0.25)
    sc = kernel_scaling("swiglu_mlp_kernel", "trn2", itemsize)
    assert sc.fixed_ns < timing.launch_overhead_ns and sc.slope >= 1.0
    assert scaled >= roofline_ns(flops, nbytes, "trn2", sc.dtype)


# -- collectives: ring steps, ranks per instance ---------------------------------------------------------------
def _allgather(ranks: int, nbytes: int, chip: str = "trn2", **kw) -> float:
    e = ev(1, "c10d::allgather_", ins=((nbytes // 4,),), transfer_bytes=nbytes)
    return float(model_run([e], chip=chip, world_size=ranks, **kw).ops["duration_ns"][0])


def test_an_intra_instance_collective_pays_one_hop_latency_per_ring_step() -> None:
    """intranode-collective-comm.rst: Ring's latency is O(N) hops of ~1-2 µs; N-1 steps for an all-gather."""
    spec = chip_spec("trn2")
    small = {n: _allgather(n, 1024, local_world_size=n) for n in (8, 64)}
    for n, t in small.items():
        link = (n - 1) / n * 1024 / spec.collective_bus_bandwidth_bytes_per_s * 1e9
        assert t == pytest.approx(spec.collective_latency_ns + (n - 1) * spec.collective_hop_latency_ns + link)
    assert small[64] / small[8] > 5  # published: 101 µs vs 10 µs (nccom-test.rst)


def test_ranks_default_to_what_one_instance_holds() -> None:
    """64 trn1 ranks are two trn1.32xlarge (32 NeuronCores each), never one 64-rank trn1 instance."""
    assert chip_spec("trn1").logical_cores_per_instance() == 32
    assert chip_spec("trn2").logical_cores_per_instance() == 64  # 16 chips x 4 logical cores at LNC=2
    e = ev(1, "c10d::allreduce_", ins=((1 << 20,),), transfer_bytes=4 << 20)
    default = model_run([e], chip="trn1", world_size=64).ops["duration_ns"][0]
    two = model_run([e], chip="trn1", world_size=64, local_world_size=32).ops["duration_ns"][0]
    one = model_run([e], chip="trn1", world_size=64, local_world_size=64).ops["duration_ns"][0]
    assert default == two != one
    assert model_run([e], chip="trn2", world_size=64).ops["duration_ns"][0] == \
        model_run([e], chip="trn2", world_size=64, local_world_size=64).ops["duration_ns"][0]


def test_trn2_has_published_rows_of_its_own_and_trn3_is_spec_derived_with_ranges() -> None:
    rows = [r for r in load_calibration() if r.chip == "trn2" and r.in_fit]
    kinds = {r.kind for r in rows}
    assert {"kernel", "dma", "collective"} <= kinds and len(rows) >= 15
    assert all(r.hardware_basis in ("stated", "inferred") for r in rows)
    assert any(r.hardware_basis == "inferred" for r in rows if r.kind == "collective")
    trn3 = chip_spec("trn3")
    for fig in ("dge_instruction_ns", "dma_descriptor_overhead_ns", "collective_hop_latency_ns"):
        lo, hi = trn3.ranges[fig]
        assert lo <= getattr(trn3, fig) <= hi and "[assumed]" in trn3.sources[fig]


@JitKernel
def _transposes(a):
    """[128, 128] bf16: HBM->SBUF DMA transpose, SBUF->SBUF DMA transpose, and a plain copy of the same bytes."""
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=a)
    u = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=u, src=t)
    c = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=a)
    out = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:128], src=t)
    nisa.dma_copy(dst=out[:, 128:256], src=u)
    return out


def test_dma_transposes_run_at_the_documented_fraction_of_the_dma_rate() -> None:
    """trainium2_arch.rst: DMA transpose up to 90% of DMA throughput from HBM, 50% SBUF->SBUF."""
    from neuron_studio.kernels.cost import dma_shape

    a = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
    out, trace = _transposes.run(a, chip="trn2")
    np.testing.assert_array_equal(out[:, :128], a.T)
    np.testing.assert_array_equal(out[:, 128:], a)
    spec = chip_spec("trn2")
    hbm_t, sbuf_t, copy = (dma_shape(i.bytes, i.partitions, i.descriptors, spec, i.opcode) for i in trace[:3])
    o = spec.dma_descriptor_overhead_ns
    assert [i.opcode for i in trace[:3]] == ["dma_transpose.hbm", "dma_transpose.sbuf", "dma_copy"]
    assert (hbm_t.engine_ns - o) == pytest.approx((copy.engine_ns - o) / 0.9)
    assert sbuf_t.engine_ns - 8 * o == pytest.approx((copy.engine_ns - o) / 0.5)  # 8 SBUF row runs per engine
    with pytest.raises(NkiRuleError, match="Trainium2"):
        _transposes.run(a, chip="trn1")


# -- kernel time ranges on a chip without a measurement -------------------------------------------------------
def _swiglu_trace(chip: str):
    import torch

    from neuron_studio import kernels as K

    g = torch.Generator().manual_seed(2)
    args = [(torch.randn(*s, generator=g) * 0.1).to(torch.bfloat16) for s in ((256, 256), (256, 512), (256, 512),
                                                                              (512, 256))]
    return K.run(K.swiglu_mlp_kernel, *args, chip=chip)[1]


def test_a_trn3_kernel_time_is_a_range_over_its_assumed_figures_and_says_not_validated() -> None:
    from neuron_studio import kernels as K
    from neuron_studio.kernels.cost import RANGED_FIGURES

    spec = chip_spec("trn3")
    t = K.kernel_time(_swiglu_trace("trn3"))
    assert not t.validated and "not validated against a measurement" in t.calibration
    assert set(t.assumptions) == {k for k in RANGED_FIGURES if k in spec.ranges}
    assert t.assumptions["dge_instruction_ns"] == (spec.dge_instruction_ns, *spec.ranges["dge_instruction_ns"])
    lo, hi = t.range_ns
    assert lo < t.total_ns < hi
    # each end is the model at the matching end of every assumed figure (slow: more overhead, slower transposes)
    slow = {k: (spec.ranges[k][1] if sign > 0 else spec.ranges[k][0]) for k, sign in RANGED_FIGURES.items()
            if k in spec.ranges}
    fast = {k: (spec.ranges[k][0] if sign > 0 else spec.ranges[k][1]) for k, sign in RANGED_FIGURES.items()
            if k in spec.ranges}
    trace = _swiglu_trace("trn3")
    assert K.kernel_time(trace, chip_spec("trn3", overrides=slow)).total_ns == pytest.approx(hi)
    assert K.kernel_time(trace, chip_spec("trn3", overrides=fast)).total_ns == pytest.approx(lo)
    text = t.describe()
    assert "not validated" in text and "dge_instruction_ns 300–900" in text and f"{hi / 1e3:.1f} µs" in text


def test_a_validated_chip_states_its_calibration_and_gives_a_range_only_on_request() -> None:
    from neuron_studio import kernels as K

    trace = _swiglu_trace("trn2")
    t = K.kernel_time(trace)
    assert t.validated and t.range_ns is None and t.calibration == calibration_summary("trn2").text
    r = K.kernel_time(trace, ranges=True)
    assert r.total_ns == t.total_ns and "dma_descriptor_overhead_ns" in r.assumptions
    assert r.range_ns[0] <= r.total_ns <= r.range_ns[1]


# -- all-reduce algorithms (Trn2) ------------------------------------------------------------------------------
def test_the_all_reduce_algorithm_follows_the_published_switch_points() -> None:
    """The 16-rank --show-algorithm example (nccom-test.rst @81ce03ae) names the algorithm the runtime used at each
    size; the model's per-rank thresholds (specs.json, from intranode-collective-comm.rst's sweet ranges) pick the
    same one at every size."""
    from neuron_studio.profiler.model.ops import allreduce_algorithm

    spec = chip_spec("trn2")
    rows = [r for r in load_calibration() if r.id.startswith("nccom_trn2_allreduce_16r_") and "algorithm" in r.config]
    assert len(rows) == 6
    for r in rows:
        got = allreduce_algorithm(r.config["ranks"], r.config["bytes"], spec.core(None).cores_per_chip,
                                  spec.allreduce_mesh_max_chunk_bytes, spec.allreduce_rdh_max_chunk_bytes)
        assert got == r.config["algorithm"], r.id


def test_all_reduce_hops_by_algorithm_and_where_each_applies() -> None:
    """Mesh O(1), RDH O(log chips), KangaRing a ring of N/2 primaries, Ring 2(N-1) (intranode-collective-comm.rst);
    ranks on one chip and chips without switch points (trn1, trn3) stay on Ring."""
    from neuron_studio.profiler.model.ops import allreduce_algorithm, allreduce_steps

    assert [allreduce_steps(a, 64, 4) for a in ("mesh", "rdh", "kangaring", "ring")] == [2, 10, 62, 126]
    assert allreduce_algorithm(4, 1024, 4, 16384, 917504) == "ring"
    assert allreduce_algorithm(64, 64 * 2**20, 4, None, None) == "ring"
    spec = chip_spec("trn2")
    for ranks, nbytes, algo in ((16, 1024, "mesh"), (64, 4 * 2**20, "rdh"), (64, 256 * 2**20, "kangaring")):
        e = ev(1, "c10d::allreduce_", ins=((nbytes // 4,),), transfer_bytes=nbytes)
        got = float(model_run([e], chip="trn2", world_size=ranks, local_world_size=ranks).ops["duration_ns"][0])
        link = 2 * (ranks - 1) / ranks * nbytes / spec.collective_bus_bandwidth_bytes_per_s * 1e9
        want = spec.allreduce_latency_ns + allreduce_steps(algo, ranks, 4) * spec.collective_hop_latency_ns + link
        assert got == pytest.approx(want, rel=1e-9), algo


# -- copies the kernel leaves to the compiler -------------------------------------------------------------------
def _evictions(engine_arg):
    """16 Tensor Engine transposes of a [128, 128] tile, each evicted PSUM -> SBUF by a copy (engine as given)."""
    def kernel(x):
        out = nl.ndarray((128, 16 * 128), dtype=x.dtype, buffer=nl.shared_hbm)
        src = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        res = nl.ndarray((128, 16 * 128), dtype=x.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(16):
            ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=ps, data=src)
            if engine_arg is None:
                nisa.tensor_copy(dst=res[:, i * 128:(i + 1) * 128], src=ps)
            else:
                nisa.tensor_copy(dst=res[:, i * 128:(i + 1) * 128], src=ps, engine=engine_arg)
        nisa.dma_copy(dst=out, src=res)
        return out
    return JitKernel(kernel)


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_a_copy_without_an_engine_goes_where_the_compiler_would_put_it(chip) -> None:
    """nisa.tensor_copy's default engine.unknown: the compiler picks by engine workload among Vector, Scalar
    (NeuronCore-v3+) and GpSimd (no PSUM access); a copy that names its engine stays there."""
    x = torch.randn(128, 128).to(torch.bfloat16)
    _, auto = _evictions(None).run(x, chip=chip)
    _, pinned = _evictions(nisa.engine.vector).run(x, chip=chip)
    t_auto, t_pinned = kernel_time(auto, chip), kernel_time(pinned, chip)
    assert t_pinned.per_engine_ns["scalar"] == 0 and t_pinned.per_engine_ns["gpsimd"] == 0
    assert t_auto.per_engine_ns["gpsimd"] == 0                      # PSUM source: never GpSimd
    if chip == "trn1":                                              # NC-v2: no Scalar Engine tensor_copy
        assert t_auto.total_ns == pytest.approx(t_pinned.total_ns) and t_auto.per_engine_ns["scalar"] == 0
    else:
        assert t_auto.per_engine_ns["scalar"] > 0 and t_auto.total_ns < t_pinned.total_ns
