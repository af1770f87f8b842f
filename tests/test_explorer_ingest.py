"""Neuron Explorer output (Parquet tables, legacy JSON) -> a measured Profile on which every analysis works."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from make_explorer_fixtures import (
    EXPECTED, NKI_FILE, SYNC_NS, T0, write_explorer_fixture, write_neuron_profile_json, write_system_profile_json,
)
from neuron_studio.profiler import neuron_profile
from neuron_studio.profiler.neuron_profile import (
    MeasuredProfile, chip_from_instance_type, load_neuron_profile, profile_from_saved, read_tables,
)
from neuron_studio.profiler.trace import TraceFormatError


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("explorer")
    return {v: write_explorer_fixture(root / v, v) for v in ("full", "split", "minimal", "no_summary", "no_ops")}


@pytest.fixture(scope="module")
def prof(fixtures: dict[str, Path]) -> MeasuredProfile:
    return load_neuron_profile(fixtures["full"])


def _by_op(p: MeasuredProfile) -> dict[tuple[str, str], tuple[int, str]]:
    return {(r.op, r.module): (int(r.device_ns), r.engine) for r in p.ops.itertuples(index=False)}


def test_measured_summary_comes_from_the_summary_and_metadata_tables(prof: MeasuredProfile) -> None:
    s = prof.summary
    assert s.modeled is False and prof.modeled_figures is False
    assert s.chip == EXPECTED["chip"]
    assert s.step_time_ns == pytest.approx(EXPECTED["total_time_ns"])
    assert prof.mfu == pytest.approx(EXPECTED["mfu"]) and prof.mbu == pytest.approx(EXPECTED["mbu"])
    for eng, u in EXPECTED["util"].items():
        assert s.engine_utilization[eng] == pytest.approx(u, abs=1e-4), eng
    assert s.peak_flops_per_s == pytest.approx(EXPECTED["peak_flops"])
    assert s.hbm_bytes_per_s == pytest.approx(EXPECTED["hbm"])
    assert s.lnc == 2
    meta = prof.trace.meta
    assert meta["backend"] == "real"
    assert meta["figures"]["device_time"] == "measured"
    assert all(meta["figures"][k] == "measured" for k in ("engine_utilization", "mfu", "mbu"))
    assert meta["source"]["chip_from"] == "Metadata.instance_type"
    assert meta["source"]["profile_schema_version"] == "12.0.1"


def test_ops_are_framework_ops_with_union_device_time_and_dominant_engine(prof: MeasuredProfile) -> None:
    assert _by_op(prof) == EXPECTED["ops"]
    mm = prof.ops[prof.ops["op"] == "aten::mm"].iloc[0]
    assert mm["flops"] == pytest.approx(2 * 512 * 512 * 512)  # transposes excluded
    assert mm["bytes"] == 1_048_576 + 524_288
    assert (prof.ops["host_ns"] == 0).all()  # host columns the profile lacks are neutral
    assert prof.ops["device_start_ns"].min() == 0  # rebased on Metadata.first_hw_timestamp


def test_epoch_ns_timestamps_keep_every_nanosecond(prof: MeasuredProfile, tmp_path: Path) -> None:
    """float64 spacing at ~1.7e18 is 256 ns: the fixture's 57 ns Sync window must stay 57 ns, at 105,000 ns."""
    sync = prof.ops[prof.ops["op"] == "(unattributed)"].iloc[0]
    assert (int(sync["device_ns"]), int(sync["device_start_ns"])) == (SYNC_NS, 105_000)
    d = tmp_path / "p90"
    d.mkdir()
    pd.DataFrame({"start_ts": [T0 + 3, T0 + 200], "end_ts": [T0 + 93, T0 + 328], "engine": ["Vector", "Tensor"],
                  "hlo_name": ["add.1", "dot.2"]}).to_parquet(d / "Instruction.parquet", index=False)
    pd.DataFrame({"total_time": [400e-9]}).to_parquet(d / "Summary.parquet", index=False)
    p = load_neuron_profile(d, chip="trn2")
    got = {r.op: (int(r.device_ns), int(r.device_start_ns)) for r in p.ops.itertuples(index=False)}
    assert got == {"add.1": (90, 0), "dot.2": (128, 197)}


def test_hot_path_carries_the_nki_source_line_measured(prof: MeasuredProfile) -> None:
    hot = prof.hot_path()
    assert [h.op for h in hot[:2]] == ["nki_ops.rmsnorm", "aten::mm"]
    k = hot[0].kernels[0]
    exp = EXPECTED["hot_kernel"]
    assert (k["kernel"], k["file"], k["line"], k["function"]) == (exp["kernel"], exp["file"], exp["line"],
                                                                    exp["function"])
    assert k["kind"] == "runs_as" and k["measured"] is True and k["saving_ns"] is None
    assert [(ln["line"], ln["instruction_ns"]) for ln in k["lines"]] == [(42, 45_000.0), (47, 20_000.0)]
    payload = prof.to_summary()
    assert payload["hot_ops"][0]["kernel"] == {"name": exp["kernel"], "kind": "runs_as", "file": NKI_FILE,
                                               "line": 42, "saving_ns": None, "scope": None, "replaces_ns": None,
                                               "modeled": False, "note": None}   # seen running: measured
    assert payload["modeled"] is False and payload["backend"] == "real"
    json.dumps(payload, allow_nan=False)


def test_every_panel_works_on_measured_data(prof: MeasuredProfile, tmp_path: Path) -> None:
    assert prof.op_table()["key"].iloc[0] == "nki_ops.rmsnorm"
    tree = prof.module_tree()
    assert "Model.RMSNorm[0]" in set(tree["key"])
    util = prof.engine_utilization(bins=11)  # from ActiveTime: 10 us bins
    assert util["tensor"].iloc[6:9].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert util["vector"].iloc[0] == pytest.approx(1.0)
    assert "aten::mm" in set(prof.roofline()["op"])
    assert prof.fusion_groups().empty and prof.sync_points().empty and prof.recompiles().empty
    assert prof.transfers() is not None and prof.idle_gaps() is not None
    c = prof.cost()
    assert c.per_step_usd > 0 and math.isnan(c.h100_step_time_ns)
    d = prof.diff(prof)
    assert d.step_time_before_ns == d.step_time_after_ns
    bundle = prof._repr_mimebundle_()
    assert "text/html" in bundle and "nki_ops.rmsnorm" in bundle["text/html"]
    assert "nki_ops.rmsnorm" in repr(prof)
    from neuron_studio.profiler.export import to_chrome_trace

    to_chrome_trace(prof, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_store_round_trip_keeps_measured_figures(prof: MeasuredProfile, tmp_path: Path) -> None:
    from neuron_studio.session import save_profile
    from neuron_studio.store import RunStore

    store = RunStore(tmp_path / "store")
    rid = store.begin_run(cell_source="x", options={}, name="m", cell_key="k", notebook=None, mode="eager",
                          chip="trn2", backend="real")
    save_profile(store, rid, prof)
    from neuron_studio.profiler.trace import Trace

    meta = json.loads(store.load_table(rid, "meta").to_pandas()["json"].iloc[0])
    tr = Trace(ops=store.load_table(rid, "ops").to_pandas(), host=store.load_table(rid, "host").to_pandas(),
               compiles=store.load_table(rid, "compiles").to_pandas(), meta=meta)
    back = profile_from_saved(tr, store.load_table(rid, "device_ops").to_pandas())
    assert back.mfu == pytest.approx(prof.mfu) and back.summary.modeled is False
    assert _by_op(back) == _by_op(prof)
    assert back.hot_path()[0].kernels[0]["line"] == 42


def test_split_tables_and_file_names_in_any_case(fixtures: dict[str, Path], prof: MeasuredProfile) -> None:
    t = read_tables(fixtures["split"])
    assert t.files["Instruction"] == ["Instruction_0.parquet", "Instruction_1.parquet"]
    assert t.files["FrameworkNode"] == ["framework_node.parquet"]
    p = load_neuron_profile(fixtures["split"])
    assert _by_op(p) == _by_op(prof)
    assert p.hot_path()[0].kernels[0]["function"] == EXPECTED["hot_kernel"]["function"]


def test_unknown_tables_and_columns_are_ignored(fixtures: dict[str, Path]) -> None:
    t = read_tables(fixtures["full"])
    assert "DmaPacket" not in t.tables and "SchemaFields" not in t.tables
    assert "future_thermal_state" in t.tables["Instruction"].columns  # read, then simply not used


def test_missing_optional_tables_use_framework_nodes_and_the_spec_table(fixtures: dict[str, Path]) -> None:
    p = load_neuron_profile(fixtures["minimal"])
    assert {k: v for k, v in EXPECTED["ops"].items() if k[0] != "(unattributed)"} == _by_op(p)
    assert p.mfu == pytest.approx(EXPECTED["mfu"])
    # no Metadata, so no instance type: the chip is not guessed (peaks and cost unavailable, with a warning) ...
    assert p.summary.chip == "unknown" and p.trace.meta["figures"]["cost"] == "unavailable"
    assert math.isnan(p.summary.peak_flops_per_s) and any("chip=" in w for w in p.to_summary()["warnings"])
    # ... until the caller names it: then the spec table's peaks
    named = load_neuron_profile(fixtures["minimal"], chip="trn2")
    assert named.summary.chip == "trn2" and "spec table" in named.summary.assumptions["peaks"]
    assert p.hot_path()[0].kernels == [] or not p.hot_path()[0].kernels[0].get("measured")
    mm = p.ops[p.ops["op"] == "aten::mm"].iloc[0]
    assert mm["flops"] == pytest.approx(2 * 512 * 512 * 512)  # 2 x (elements - transpose elements)


def test_missing_required_tables_name_the_table_and_directory(fixtures: dict[str, Path]) -> None:
    with pytest.raises(TraceFormatError, match=r"'Summary' is missing in .*no_summary"):
        load_neuron_profile(fixtures["no_summary"])
    with pytest.raises(TraceFormatError, match=r"'Instruction' and 'FrameworkNode' are both missing in .*no_ops"):
        load_neuron_profile(fixtures["no_ops"])
    with pytest.raises(TraceFormatError, match="does not exist"):
        load_neuron_profile(fixtures["full"] / "nope")


def test_empty_directory_says_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=r"expected Summary\.parquet plus Instruction\.parquet"):
        load_neuron_profile(tmp_path)


def test_corrupt_table_names_the_file(tmp_path: Path) -> None:
    d = write_explorer_fixture(tmp_path / "p")
    (d / "Metadata.parquet").write_bytes(b"not parquet")
    with pytest.raises(TraceFormatError, match=r"'Metadata' from .*Metadata\.parquet"):
        load_neuron_profile(d)


def test_profile_directory_is_found_below_a_data_path(tmp_path: Path) -> None:
    write_explorer_fixture(tmp_path / "profiles" / "global" / "run@latest")
    assert load_neuron_profile(tmp_path).mfu == pytest.approx(EXPECTED["mfu"])


def test_chip_from_instance_type_and_override(fixtures: dict[str, Path]) -> None:
    assert chip_from_instance_type("trn2.48xlarge") == "trn2"
    assert chip_from_instance_type("trn1n.32xlarge") == "trn1"
    assert chip_from_instance_type("trn3.48xlarge") == "trn3"
    assert chip_from_instance_type("inf2.xlarge") is None and chip_from_instance_type(None) is None
    p = load_neuron_profile(fixtures["full"], chip="trn3", steps=2)
    assert p.summary.chip == "trn3" and p.trace.meta["source"]["chip_from"] == "argument"
    assert any("overrides the profile's instance type 'trn2.48xlarge'" in w for w in p.to_summary()["warnings"])
    assert p.step_time_ns == pytest.approx(EXPECTED["total_time_ns"] / 2)


def test_fallback_ops_from_op_tracking_become_fallback_rows(fixtures: dict[str, Path]) -> None:
    from neuron_studio.device.real import OpTracking

    tr = OpTracking.from_api({"aten::mm", "aten::add"}, {"aten::nonzero"})
    p = load_neuron_profile(fixtures["full"], tracking=tr)
    fb = p.cpu_fallbacks()
    assert fb["op"].tolist() == ["aten::nonzero"] and fb["reason"].iloc[0] == neuron_profile.FALLBACK_REASON
    assert p.trace.meta["op_tracking"]["fallback"] == {"aten::nonzero": 1}
    assert p.summary.fallback_ops == 1
    assert p.to_summary()["badges"]["fallbacks"] == 1


def test_system_profile_device_time_is_nc_exec_running_only(tmp_path: Path) -> None:
    path = write_system_profile_json(tmp_path / "sys" / "system_profile.json")
    for target in (path, path.parent):
        p = load_neuron_profile(target)
        # nc_exec_running windows (40 us, 10 us), not the nrt_execute host calls around them (42 us, 12 us)
        assert _by_op(p) == {("aten::mm", ""): (40_000, "none"), ("aten::add", ""): (10_000, "none")}
        figs = p.trace.meta["figures"]
        assert figs["device_time"] == "measured" and figs["host_time"] == "measured"
        assert figs["engine_utilization"] == "not captured" and figs["mfu"] == "not captured"
        assert sorted(p.trace.host["category"]) == ["framework"] * 2 + ["neuron_rt"] * 3
        assert "nc_exec_running" not in set(p.trace.host["name"])
        assert p.summary.step_time_ns == 50_000 and p.summary.launches == 2   # union of the device windows
        # epoch-ns timestamps rebased in integers on the first event (nrt_tensor_write at T0 + 1 us)
        assert sorted(zip(p.ops["op"], p.ops["device_start_ns"])) == [("aten::add", 59_000), ("aten::mm", 9_000)]
        assert p.host_time_ns == 73_000 - 1_000
        p.to_summary()


def test_legacy_neuron_profile_json(tmp_path: Path) -> None:
    p = load_neuron_profile(write_neuron_profile_json(tmp_path / "np.json"))
    assert _by_op(p) == {("dot.1", ""): (30_000, "tensor"), ("add.2", ""): (10_000, "vector"),
                         ("exponential.3", ""): (5_000, "scalar")}      # HLO instruction names, not statements
    assert p.mfu == pytest.approx(0.05) and p.summary.step_time_ns == pytest.approx(50_000)
    assert p.summary.chip == "trn1" and p.trace.meta["source"]["chip_from"] == "summary.instance_type"
    assert p.trace.meta["figures"]["engine_utilization"] == "derived"
    assert p.summary.engine_utilization["tensor"] == pytest.approx(30_000 / 50_000, abs=1e-12)
    assert math.isnan(p.summary.engine_utilization["dma"])          # no DMA data: not captured, not 0


def test_real_default_file_names_in_a_directory_are_recognised(tmp_path: Path) -> None:
    d = tmp_path / "view"
    write_neuron_profile_json(d / "ntff.json")
    assert set(load_neuron_profile(d).ops["op"]) == {"dot.1", "add.2", "exponential.3"}
    d2 = tmp_path / "json_out"
    write_neuron_profile_json(d2 / "device_profile_model_10001.json")
    write_system_profile_json(d2 / "system_profile.json")
    p = load_neuron_profile(d2)
    assert set(p.ops["op"]) == {"dot.1", "add.2", "exponential.3"}       # the device profile, plus ...
    assert len(p.trace.host) == 5 and p.trace.meta["figures"]["host_time"] == "measured"   # ... its host events
    write_neuron_profile_json(d2 / "device_profile_model_10002.json")
    with pytest.raises(TraceFormatError, match=r"2 device profiles .*device_profile_model_10001\.json"):
        load_neuron_profile(d2)


def _summary_only(tmp_path: Path, row: dict) -> MeasuredProfile:
    f = tmp_path / "summary.json"
    f.write_text(json.dumps(row))
    return load_neuron_profile(f)


def test_percent_scale_is_checked_against_the_summary_own_times(tmp_path: Path) -> None:
    base = {"total_time": 1e-3, "tensor_engine_active_time": 4e-4, "instance_type": "trn2.48xlarge"}
    frac = _summary_only(tmp_path, {**base, "tensor_engine_active_time_percent": 0.4, "mfu_estimated_percent": 0.3})
    assert frac.mfu == pytest.approx(0.3) and "0-1 fractions (checked" in frac.summary.assumptions["percent_fields"]
    pct = _summary_only(tmp_path, {**base, "tensor_engine_active_time_percent": 40.0, "mfu_estimated_percent": 30.0})
    assert pct.mfu == pytest.approx(0.3) and "0-100 percent (checked" in pct.summary.assumptions["percent_fields"]
    assert pct.summary.engine_utilization["tensor"] == pytest.approx(0.4)
    bad = _summary_only(tmp_path, {**base, "tensor_engine_active_time_percent": 0.07})
    assert bad.summary.engine_utilization["tensor"] == pytest.approx(0.4)   # the times win
    assert any("disagree with their own times" in w for w in bad.to_summary()["warnings"])
    unchecked = _summary_only(tmp_path, {"total_time": 1e-3, "vector_engine_active_time_percent": 0.25})
    assert unchecked.summary.engine_utilization["vector"] == pytest.approx(0.25)
    assert "assumed" in unchecked.summary.assumptions["percent_fields"]


@pytest.mark.parametrize("doc", ['{"summary": []}', "[1, 2]", "not json", '{"instruction": [{"timestamp": "x"}]}'])
def test_bad_legacy_json_is_a_format_error(tmp_path: Path, doc: str) -> None:
    f = tmp_path / "x.json"
    f.write_text(doc)
    with pytest.raises(TraceFormatError):
        load_neuron_profile(f)


_iv = st.tuples(st.integers(0, 4), st.integers(0, 10_000), st.integers(0, 3_000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_iv, min_size=1, max_size=25), noise=st.text(max_size=12))
def test_fuzz_instruction_tables_device_time_is_the_exact_union(tmp_path: Path, rows: list, noise: str) -> None:
    """Random instruction intervals per op: device time = brute-force union length; junk strings never crash."""
    d = tmp_path / f"f{abs(hash((tuple(rows), noise))) % 10**9}"
    d.mkdir()
    ins = pd.DataFrame({"start_ts": [s for _, s, _ in rows], "end_ts": [s + w for _, s, w in rows],
                        "duration_ns": [w for _, _, w in rows], "engine": [noise or "Tensor"] * len(rows),
                        "hlo_name": [f"op{g}" for g, _, _ in rows], "nki_source_location": [noise] * len(rows)})
    ins.to_parquet(d / "Instruction.parquet", index=False)
    pd.DataFrame({"total_time": [1e-5], "mfu_estimated_percent": [noise or None]}).to_parquet(
        d / "Summary.parquet", index=False)
    p = load_neuron_profile(d)
    got = {r.op: int(r.device_ns) for r in p.ops.itertuples(index=False)}
    for g in {g for g, _, _ in rows}:
        cover = np.zeros(13_001, dtype=bool)
        for gg, s, w in rows:
            if gg == g:
                cover[s:s + w] = True
        assert got[f"op{g}"] == int(cover.sum())
    assert (p.ops["device_ns"] >= 0).all()
