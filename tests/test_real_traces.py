"""torch.profiler traces read truthfully: six recorded elsewhere (shared/traces, not in the repository: those
tests skip without it, and fail in CI, see tests/shared_data.py) and the suite's own traces in the same formats
(tests/kineto_fixtures.py), which always run. Each behaviour test runs on a generated trace with the trait and
on the real trace that has it.

Every expected figure is computed from the raw JSON by tests/trace_truth.py (stdlib json, exact Decimals,
plain loops): op counts per name, steps and ops per step, rank identity, GPU activity totals, GPU time per
launching op, the temporal breakdown, per-rank step time.
"""
from __future__ import annotations

import functools
import html
from collections import Counter

import pytest

import trace_truth as truth
from kineto_fixtures import SYN_2021, SYN_NO_SHAPES, SYN_NS, SYN_RANK0, SYN_RANK1, SYNTHETIC
from neuron_studio.profiler.analysis import gpu
from neuron_studio.profiler.importers import read_trace
from neuron_studio.profiler.profile import Profile

RESNET_2021 = "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
NCCL_NO_SHAPES = "nccl_parser_config_nccl_data.json.gz"
NS_RESOLUTION = "ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
RANK0 = "trace_filter_sampled_rank-0.json.gz"
RANK1 = "trace_filter_sampled_rank-1.json.gz"
AMD = "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
SHARED = [RESNET_2021, NCCL_NO_SHAPES, NS_RESOLUTION, RANK0, RANK1, AMD]
ALL = [*SYNTHETIC, *SHARED]

@functools.cache
def raw(name: str) -> dict:
    return truth.load(name)


@functools.cache
def imported(name: str):
    return read_trace(truth.path_of(name))


@functools.cache
def profile(name: str) -> Profile:
    return Profile.from_trace(imported(name))


def _origin_ns(t) -> int:
    return int(t.meta["imported"]["origin_ns"])


# -- ops, steps, identity ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_op_counts_per_name_match_the_raw_json(name):
    t = imported(name)
    assert Counter(t.ops["name"].tolist()) == truth.op_counts(raw(name))


@pytest.mark.parametrize("name", ALL)
def test_steps_and_ops_per_step_match_the_raw_json(name):
    t = imported(name)
    wins = truth.step_windows(raw(name))
    assert t.meta["steps"] == max(1, len({w[0] for w in wins}))
    assert Counter(t.ops["step"].tolist()) == truth.ops_per_step(raw(name))
    got = [(w["step"], w["start_ns"] + _origin_ns(t), w["end_ns"] + _origin_ns(t))
           for w in t.meta["imported"]["step_windows"]]
    assert got == [(n, s, e) for n, _, s, e in wins]


@pytest.mark.parametrize("name", ALL)
def test_rank_identity_comes_from_distributed_info(name):
    t = imported(name)
    want = truth.distributed(raw(name))
    assert t.meta.get("rank") == want["rank"]
    if want["rank"] is None:                 # no distributedInfo: a single process
        assert t.meta.get("world_size", 1) in (None, 1)
    else:                                    # `{"rank": N}` alone: the rank holds, the size is unknown (None)
        assert t.meta.get("world_size") == want["world_size"]


@pytest.mark.parametrize("name", ALL)
def test_op_times_are_exact_integer_nanoseconds(name):
    """Starts and ends equal the raw decimal µs × 1000 (old code: float64 epoch µs, off by up to 190 ns)."""
    t = imported(name)
    want = sorted((r["start"], r["end"], r["name"]) for r in truth.ops(raw(name)))
    o = _origin_ns(t)
    got = sorted(zip((t.ops["start_ns"] + o).tolist(), (t.ops["end_ns"] + o).tolist(), t.ops["name"].tolist()))
    assert got == want


@pytest.mark.parametrize("name, n_ops, n_steps", [(SYN_2021, 30, 3), (RESNET_2021, 8000, 6)])
def test_2021_format_is_read(name, n_ops, n_steps):
    """Operator/Kernel/Runtime categories: ops, every step, GPU kernels (old code: 0 ops, steps == 1)."""
    t = imported(name)
    assert len(t.ops) == sum(truth.op_counts(raw(name)).values()) > n_ops
    assert t.meta["steps"] == n_steps
    prof = profile(name)
    assert prof.step_time_ns > 0
    s = prof.to_summary()
    assert s["op_table"] and s["hot_ops"]


@pytest.mark.parametrize("names, accumulating", [((SYN_RANK0, SYN_NO_SHAPES), SYN_RANK0),
                                                 ((AMD, NCCL_NO_SHAPES, RANK0), AMD)])
def test_wrapper_nodes_are_not_ops(names, accumulating):
    """torch::autograd::AccumulateGrad & co. contain aten ops; the aten ops are the ops."""
    for name in names:
        names = set(imported(name).ops["name"])
        assert not any(n.startswith(("torch::", "autograd::")) for n in names), name
    assert truth.op_counts(raw(accumulating))["aten::add_"] == Counter(imported(accumulating).ops["name"])[
        "aten::add_"] > 0


@pytest.mark.parametrize("name, min_other", [(SYN_RANK0, 15), (RANK0, 100)])
def test_backward_thread_ops_get_their_step(name, min_other):
    """Ops on the autograd thread belong to the ProfilerStep whose window holds them (old code: step 0)."""
    t = imported(name)
    main_tid = t.ops.loc[t.ops["name"] == t.ops["name"].iloc[0], "thread"].iloc[0]
    threads = set(t.ops["thread"])
    assert len(threads) >= 2
    other = t.ops[t.ops["thread"] != main_tid]
    assert len(other) > min_other and (other["step"] > 0).all()


# -- GPU activity ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_gpu_activity_totals_match_the_raw_json(name):
    t = imported(name)
    act = gpu.gpu_activity(t.host, t.ops)
    want = truth.kernel_totals(raw(name))
    for kind, cat in (("kernel", "kernel"), ("memcpy", "gpu_memcpy"), ("memset", "gpu_memset")):
        sel = act[act["category"] == cat]
        assert (len(sel), int(sel["dur_ns"].sum())) == want[kind], kind


@pytest.mark.parametrize("name", ALL)
def test_gpu_time_per_launching_op_matches_the_raw_json(name):
    t = imported(name)
    act = gpu.gpu_activity(t.host, t.ops)
    per, orphan = truth.gpu_ns_per_op_name(raw(name))
    linked = act[act["op_seq"] >= 0]
    assert dict(linked.groupby("op")["dur_ns"].sum()) == dict(per)
    assert int(act.loc[act["op_seq"] < 0, "dur_ns"].sum()) == orphan


@pytest.mark.parametrize("name", ALL)
def test_temporal_breakdown_matches_the_raw_json(name):
    t = imported(name)
    tb = gpu.temporal_breakdown(gpu.gpu_activity(t.host, t.ops))
    want = truth.temporal_breakdown(raw(name))
    assert (tb.span_ns, tb.compute_ns, tb.communication_ns, tb.memory_ns, tb.idle_ns) == (
        want["span"], want["compute"], want["communication"], want["memory"], want["idle"])
    assert tb.compute_ns + tb.communication_ns + tb.memory_ns + tb.idle_ns == tb.span_ns


@pytest.mark.parametrize("name, process, no_shapes, old_format", [
    (SYN_RANK0, "pyper:trainer:0:0", SYN_NO_SHAPES, SYN_2021),
    (RANK0, "pyper:trainer:0:0", NCCL_NO_SHAPES, RESNET_2021)])
def test_kernel_args_thread_names_devices_and_memory_are_kept(name, process, no_shapes, old_format):
    t = imported(name)
    k = t.host[t.host["category"] == "kernel"]
    ev = next(e for e in raw(name)["traceEvents"] if e.get("cat") == "kernel")
    row = k[(k["start_ns"] + _origin_ns(t)) == truth.ns(ev["ts"])].iloc[0]
    assert row["correlation"] == ev["args"]["correlation"] and row["stream"] == ev["args"]["stream"]
    assert row["external_id"] == ev["args"]["External id"] and row["device"] == ev["args"]["device"]
    assert row["grid"] == ",".join(map(str, ev["args"]["grid"])) and row["pid"] == ev["pid"]
    imp = t.meta["imported"]
    pid = next(str(e["pid"]) for e in raw(name)["traceEvents"] if e.get("name") == "process_name")
    assert imp["process_names"][pid] == process
    t2 = imported(no_shapes)
    assert t2.meta["imported"]["devices"][0]["name"] == raw(no_shapes)["deviceProperties"][0]["name"]
    assert t2.meta["imported"]["flows"]["ac2g"] == sum(1 for e in raw(no_shapes)["traceEvents"]
                                                      if e.get("ph") == "s" and e.get("cat") == "ac2g")
    mem = imported(old_format).meta["imported"]["memory"]
    n_mem = sum(1 for e in raw(old_format)["traceEvents"] if e.get("name") == "[memory]")
    assert sum(m["events"] for m in mem) == n_mem > 0


# -- analyses say what is missing ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [SYN_NO_SHAPES, NCCL_NO_SHAPES])
def test_no_shapes_warns_and_ranks_by_measured_gpu_time(name):
    """Recorded without record_shapes: a visible warning naming it, and a hot path from measured GPU time
    (old code: ~all ops modeled at 0 ns, c10d::allreduce_ ranked at 71-100%)."""
    prof = profile(name)
    s = prof.to_summary()
    assert any("record_shapes=True" in w for w in s["warnings"])
    assert s["hot_basis"] == "measured GPU time"
    per, _ = truth.gpu_ns_per_op_name(raw(name))
    total = sum(per.values())
    top = s["hot_ops"][0]
    name, ns_ = per.most_common(1)[0]
    assert top["op"] == name
    assert top["share"] == pytest.approx(ns_ / total, rel=1e-9)


@pytest.mark.parametrize("name", [SYN_NS, AMD])
def test_imported_traces_are_labelled_as_imported_not_emulated(name):
    from neuron_studio.ui.bundle import mime_bundle

    s = profile(name).to_summary()
    assert s["backend"] == "imported"
    b = mime_bundle(s)
    assert "emulated device" not in b["text/html"] and "run None" not in b["text/html"]
    assert "run None" not in b["text/plain"]
    assert name in b["text/html"]


# -- ranks ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("r0, r1, world", [(SYN_RANK0, SYN_RANK1, 4), (RANK0, RANK1, 128)])
def test_ranks_follow_distributed_info_and_are_time_aligned(r0, r1, world):
    from neuron_studio.profiler.analysis.ranks import analyze_ranks

    t0, t1 = imported(r0), imported(r1)
    for order in ((t0, t1), (t1, t0)):
        ra = analyze_ranks(list(order))
        table = ra.ranks.set_index("rank")
        assert sorted(table.index) == [0, 1]
        for rank, name in ((0, r0), (1, r1)):
            assert table.loc[rank, "step_time_ns"] == pytest.approx(truth.mean_step_ns(raw(name)), abs=0.5)
        # aligned on the wall clock: each rank's first op starts where its raw epoch ts says
        firsts = table["first_op_ns"]
        ops0 = {r: min(o["start"] for o in truth.ops(raw(n))) for r, n in ((0, r0), (1, r1))}
        assert firsts[1] - firsts[0] == ops0[1] - ops0[0]
        assert ra.alignment.method == "wall clock" and list(table["rank_source"]) == ["distributedInfo"] * 2
    assert any(f"2 of {world} ranks" in n for n in ra.notes)


# -- the same job on Trainium ------------------------------------------------------------------------------------

def _spec_doc() -> dict:
    import json

    from neuron_studio.hardware.specs import SPECS_PATH

    return json.loads(SPECS_PATH.read_text())


@pytest.mark.parametrize("name, n_steps", [(SYN_2021, 3), (RESNET_2021, 6)])
def test_gpu_vs_trainium_per_op_per_step_and_cost(name, n_steps):
    """V100 trace with shapes: measured GPU time per op and per step from the raw JSON, the model's estimate
    next to it, and cost per 1,000 steps on both (prices from the spec file)."""
    prof = profile(name)
    v = prof.gpu_vs_trainium()
    d = raw(name)
    steps = len(truth.step_windows(d))
    assert v.steps == steps == n_steps
    assert v.gpu_step_ns == pytest.approx(truth.mean_step_ns(d), abs=0.5)
    per, _ = truth.gpu_ns_per_op_name(d)
    got = dict(zip(v.ops["op"], v.ops["gpu_ns_per_step"]))
    assert {k: got[k] * steps for k in per} == pytest.approx({k: float(x) for k, x in per.items()})
    assert v.ops["trainium_ns_per_step"].notna().all()           # every op recorded its shapes
    assert v.ops["trainium_ns_per_step"].sum() == pytest.approx(prof.ops["device_ns"].sum() / steps)
    assert v.trainium_step_ns == pytest.approx(prof.step_time_ns)
    doc = _spec_doc()
    v100 = next(p for p in doc["gpu_prices"]["prices"] if p["match"] == "V100")["usd_per_gpu_hour"]
    chip = doc["chips"][v.chip]["figures"]["price_per_chip_hour_usd"]["value"]
    assert v.gpu_per_1000_steps_usd == pytest.approx(truth.mean_step_ns(d) * 1000 / 3.6e12 * v100)
    assert v.trainium_per_1000_steps_usd == pytest.approx(prof.step_time_ns * 1000 / 3.6e12 * chip)


@pytest.mark.parametrize("name", [SYN_RANK0, RANK0])
def test_port_issues_name_the_ops_without_a_neuron_lowering(name):
    import json

    from neuron_studio.device.coverage import op_coverage

    v = profile(name).gpu_vs_trainium()
    cov = op_coverage().fallback_ops
    names = set(truth.op_counts(raw(name)))
    lowered = ("aten", "prims", "c10d", "_c10d_functional", "c10d_functional")
    want = {n for n in names if n in cov or n.split("::")[0] not in lowered}
    assert {i["op"] for i in v.port_issues} == want and any(n.startswith("fbgemm::") for n in want)
    assert json.dumps(v.to_summary())                             # JSON-safe for the MIME payload


@pytest.mark.parametrize("name", [SYN_NO_SHAPES, NCCL_NO_SHAPES])
def test_no_shapes_means_no_trainium_estimate_and_no_modeled_headline(name):
    prof = profile(name)
    v = prof.gpu_vs_trainium()
    assert v.trainium_step_ns is None and v.ops["trainium_ns_per_step"].isna().all()
    assert any("record_shapes=True" in n for n in v.notes)
    s = prof.to_summary()
    assert s["step_time_ns"] is None and s["mfu"] is None and s["cost"]["per_1000_steps_usd"] is None
    assert s["host_time_ns"] > 0                                   # measured figures stay


@pytest.mark.parametrize("name, old_format, backward_op", [
    (SYN_2021, SYN_2021, "aten::threshold_backward"), (AMD, RESNET_2021, "aten::cudnn_convolution_backward")])
def test_gpu_vs_trainium_renders_in_html_text_and_report(tmp_path, name, old_format, backward_op):
    from neuron_studio.cli import main
    from neuron_studio.ui.bundle import mime_bundle

    s = profile(name).to_summary()
    b = mime_bundle(s)
    html_ = b["text/html"]
    assert "GPU → Trainium" in html_ and "GPU (measured)" in html_ and "What the port would hit" not in html_
    templated = next(k["name"] for k in s["gpu"]["kernels"] if "<" in k["name"])
    assert html.escape(templated)[:80] in html_ and templated[:80] not in html_      # escaped, never markup
    assert "same job on trn2 (modeled)" in b["text/plain"]
    out = tmp_path / "r.html"
    assert main(["report", str(truth.path_of(old_format)), "-o", str(out)]) == 0
    page = out.read_text()
    assert "GPU → Trainium" in page and backward_op in page and "run None" not in page


@pytest.mark.parametrize("r0, r1", [(SYN_RANK0, SYN_RANK1), (RANK0, RANK1)])
def test_import_stores_ranks_for_the_panel(tmp_path, capsys, r0, r1):
    from neuron_studio.cli import load_rank_profiles, main
    from neuron_studio.store import RunStore

    store = tmp_path / "store"
    rank1, rank0 = str(truth.path_of(r1)), str(truth.path_of(r0))
    assert main(["import", rank1, rank0, "--store", str(store)]) == 0
    assert "stored as run" in capsys.readouterr().out
    rs = RunStore(store, create=False)
    rec = rs.list_runs()[0]
    assert rec.ranks == 2 and rec.backend == "imported"
    profiles = load_rank_profiles(rs, rec)
    assert [p.trace.meta["rank"] for _, p in sorted(profiles.items())] == [0, 1]   # ordered by distributedInfo
    summary = rec.summary
    assert summary["gpu"]["vs_trainium"]["chip"] == "trn2"
    table = {r["rank"]: r for r in summary["ranks_analysis"]["ranks"]}
    for rank, name in ((0, r0), (1, r1)):
        assert table[rank]["step_time_ns"] == pytest.approx(truth.mean_step_ns(raw(name)), abs=0.5)
        tb = truth.temporal_breakdown(raw(name))
        assert table[rank]["gpu_idle_share"] == pytest.approx(tb["idle"] / tb["span"])
    assert main(["import", rank0, rank0, "--store", str(store)]) == 2          # the same rank twice
