"""Every Neuron profiler sample in `shared/neuron-profiles/` loads, and shows the figures the sample implies.

The samples are AWS documentation excerpts, real published summary figures and layouts rebuilt from real output
(the directory's SOURCES.txt says which values are verbatim). The expected figures are computed here from each
sample's own fields with plain Python (integer nanoseconds, no code from the reader): utilization = active time
/ total time (or the 0-1 `*_percent` field), step time = `total_time`, chip from the instance type wherever the
format puts it, op names, engines, NKI source lines, ns-exact durations and start offsets.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

import shared_data
from neuron_studio.profiler.neuron_profile import load_neuron_profile as load_profile
from neuron_studio.profiler.trace import TraceFormatError


SAMPLES = shared_data.require("neuron-profiles", module_level=True)    # tests/shared_data.py
SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
ENGINES = ("tensor", "vector", "scalar", "gpsimd")
_ENGINE_OF = {"tensormatrix": "tensor", "tensor": "tensor", "vector": "vector", "scalar": "scalar",
              "gpsimd": "gpsimd", "sync": "dma"}


# -- the sample's own figures, read with json / pyarrow only ------------------------------------------------
def _union(ivs: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(ivs):
        if end is None or s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _chip(instance_type: Any) -> str:
    m = re.match(r"\s*(trn|inf)(\d)", str(instance_type or "").lower())
    return f"{m.group(1)}{m.group(2)}" if m else "unknown"


def _op_key(r: dict) -> tuple[str, str]:
    layer, hlo, nki = r.get("layer") or "", r.get("hlo_name") or "", r.get("nki_source_location") or ""
    if layer:
        parts = [p for p in layer.split("/") if p]
        leaf = parts[-1]
        return ("aten::" + leaf[5:] if leaf.startswith("aten.") else leaf), ".".join(parts[:-1])
    if hlo:
        return re.match(r"%?([^\s=]+)", hlo).group(1), ""
    if nki:
        return nki.rsplit(":", 1)[0].rsplit("/", 1)[-1], ""
    return "(unattributed)", ""


def _read_sample(d: Path) -> dict[str, Any]:
    """kind, summary row, metadata row, instruction rows (ts, dur, engine label, ...), dma rows, system events."""
    out: dict[str, Any] = {"summary": {}, "meta": {}, "ins": [], "dma": [], "events": [], "origin": None}
    parquet = {p.stem: p for p in d.glob("*.parquet")}
    if parquet:
        import pyarrow.parquet as pq

        rows = {k: pq.read_table(p).to_pylist() for k, p in parquet.items()}
        out["kind"] = "parquet"
        out["summary"] = rows["Summary"][0]
        out["meta"] = rows.get("Metadata", [{}])[0]
        out["ins"] = [{"ts": r["start_ts"], "dur": r["duration_ns"], "engine": r["engine"],
                       "hlo_name": r.get("hlo_name"), "opcode": r.get("opcode")} for r in rows.get("Instruction", [])]
        out["origin"] = out["meta"].get("first_hw_timestamp")
        return out
    (f,) = [p for p in d.glob("*.json")]
    doc = json.loads(f.read_text())
    if isinstance(doc, dict) and isinstance(doc.get("instruction"), list):
        out["kind"] = "instructions-json"
        out["summary"] = doc["summary"][0]
        out["meta"] = (doc.get("metadata") or [{}])[0]
        out["ins"] = [dict(r, ts=r["timestamp"], dur=r["duration"], engine=r.get("subgroup") or r.get("label"))
                      for r in doc["instruction"]]
        out["dma"] = [(r["timestamp"], r["timestamp"] + r["duration"]) for r in doc.get("dma") or []]
        out["active"] = doc.get("active_time") or []
        return out
    if isinstance(doc, dict) and "total_time" in doc:
        out["kind"] = "summary-json"
        out["summary"] = doc
        return out
    out["kind"] = "system"
    if isinstance(doc, dict) and isinstance(doc.get("trace_event"), list):
        out["events"] = list(doc["trace_event"])
    else:
        recs = doc if isinstance(doc, list) else [{k: v} for k, v in doc.items()]
        for rec in recs:
            for k, v in rec.items():
                if k in ("Neuron_Runtime_API_Event", "Framework_Event"):
                    out["events"].extend(v if isinstance(v, list) else [v])
    return out


def _expected(d: Path) -> dict[str, Any]:
    s = _read_sample(d)
    summ, meta = s["summary"], s["meta"]
    exp: dict[str, Any] = {"kind": s["kind"]}
    exp["chip"] = _chip(meta.get("instance_type") or summ.get("instance_type"))
    if s["kind"] == "system":
        evs = s["events"]
        origin = min(e["timestamp"] for e in evs)
        dev = [e for e in evs if e["name"] == "nc_exec_running"]
        exp["device_ivs"] = sorted((e["timestamp"] - origin, e["duration"]) for e in dev)
        exp["step_time_ns"] = _union([(e["timestamp"], e["timestamp"] + e["duration"]) for e in dev]) if dev else None
        exp["host"] = sorted((e["name"], e["timestamp"] - origin, e["duration"]) for e in evs
                             if e["name"] != "nc_exec_running")
        ends = [e["timestamp"] + e["duration"] for e in evs if e["name"] != "nc_exec_running"]
        exp["host_span_ns"] = max(ends) - origin if ends else None
        exp["launches"] = len(dev)
        return exp
    total = summ.get("total_time")
    exp["step_time_ns"] = total * 1e9
    by_engine: dict[str, list[tuple[int, int]]] = {}
    for r in s["ins"]:
        by_engine.setdefault(_ENGINE_OF[re.sub(r"[^a-z]", "", r["engine"].lower())], []).append(
            (r["ts"], r["ts"] + r["dur"]))
    util: dict[str, float] = {}
    for e in ENGINES:
        if summ.get(f"{e}_engine_active_time") is not None:
            util[e] = summ[f"{e}_engine_active_time"] / total
        elif summ.get(f"{e}_engine_active_time_percent") is not None:
            util[e] = summ[f"{e}_engine_active_time_percent"]       # a 0-1 fraction (checked in the samples)
        elif s["ins"]:
            util[e] = _union(by_engine.get(e, [])) / (total * 1e9)
    if summ.get("dma_active_time") is not None:
        util["dma"] = summ["dma_active_time"] / total
    elif summ.get("dma_active_time_percent") is not None:
        util["dma"] = summ["dma_active_time_percent"]
    elif s["dma"]:
        util["dma"] = _union(s["dma"]) / (total * 1e9)
    else:
        util["dma"] = None                                       # not in the sample: must not be invented
    exp["util"] = util
    exp["mfu"] = summ.get("mfu_estimated_percent")
    exp["mbu"] = summ.get("mbu_estimated_percent")
    origin = s["origin"] if s["origin"] is not None else (min(r["ts"] for r in s["ins"]) if s["ins"] else 0)
    ops: dict[tuple[str, str], dict[str, Any]] = {}
    for r in s["ins"]:
        key = _op_key(r)
        o = ops.setdefault(key, {"ivs": [], "eng": {}, "nki": None, "src": None, "wait": 0, "hbm": 0})
        o["ivs"].append((r["ts"], r["ts"] + r["dur"]))
        eng = _ENGINE_OF[re.sub(r"[^a-z]", "", r["engine"].lower())]
        o["eng"][eng] = o["eng"].get(eng, 0) + r["dur"]
        if r.get("nki_source_location"):
            o["nki"] = r["nki_source_location"]
        if r.get("bir_debug_info_source_location"):
            o["src"] = r["bir_debug_info_source_location"]
        o["wait"] += int(r.get("evt_wait_time") or 0)
        o["hbm"] += int(r.get("hbm_read_bytes") or 0) + int(r.get("hbm_write_bytes") or 0)
    exp["ops"] = {k: {"device_ns": _union(o["ivs"]), "engine": max(o["eng"], key=o["eng"].get),
                      "start_ns": min(a for a, _ in o["ivs"]) - origin, "nki": o["nki"], "src": o["src"],
                      "wait": o["wait"], "hbm": o["hbm"]} for k, o in ops.items()}
    exp["hlo"] = {re.match(r"%?([^\s=]+)", r["hlo_name"]).group(1) for r in s["ins"] if r.get("hlo_name")}
    return exp


def _close(a: float | None, b: float | None) -> bool:
    if b is None:
        return a is None or (isinstance(a, float) and math.isnan(a))
    return a is not None and abs(a - b) <= 1e-9


# -- every sample --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", SAMPLE_DIRS, ids=[p.name for p in SAMPLE_DIRS])
def test_every_sample_loads_with_the_figures_it_implies(d: Path) -> None:
    exp = _expected(d)
    prof = load_profile(d)
    s, meta = prof.summary, prof.trace.meta
    assert s.modeled is False and meta["backend"] == "real"
    assert s.chip == exp["chip"], (s.chip, meta["source"].get("chip_from"))
    if exp["kind"] == "system":
        host = sorted((str(n), int(a), int(b)) for n, a, b in
                      zip(prof.trace.host["name"], prof.trace.host["start_ns"], prof.trace.host["dur_ns"]))
        assert host == exp["host"]                                     # epoch ns rebased exactly, no float
        dev = sorted((int(a), int(b)) for a, b in zip(prof.ops["device_start_ns"], prof.ops["device_ns"])
                     if b > 0)
        if exp["step_time_ns"] is None:
            assert meta["figures"]["device_time"] == "not captured"
            assert math.isnan(s.step_time_ns) and prof.to_summary()["step_time_ns"] is None
            assert dev == []
        else:
            assert meta["figures"]["device_time"] == "measured"
            assert s.step_time_ns == exp["step_time_ns"] and isinstance(exp["step_time_ns"], int)
            assert dev == exp["device_ivs"] and s.launches == exp["launches"]
        assert prof.host_time_ns == exp["host_span_ns"]
        assert meta["figures"]["engine_utilization"] == "not captured"
        return
    assert s.step_time_ns == pytest.approx(exp["step_time_ns"], rel=1e-12)
    for eng, u in exp["util"].items():
        assert _close(s.engine_utilization.get(eng), u), (eng, s.engine_utilization.get(eng), u)
    if exp["mfu"] is not None:
        assert prof.mfu == pytest.approx(exp["mfu"], abs=1e-12) and meta["figures"]["mfu"] == "measured"
    if exp["mbu"] is not None:
        assert prof.mbu == pytest.approx(exp["mbu"], abs=1e-12) and meta["figures"]["mbu"] == "measured"
    got = {(r.op, r.module): r for r in prof.ops.itertuples(index=False)}
    assert set(got) == set(exp["ops"])
    for key, e in exp["ops"].items():
        r = got[key]
        assert int(r.device_ns) == e["device_ns"] and float(r.device_ns) == e["device_ns"], key
        assert int(r.device_start_ns) == e["start_ns"] and float(r.device_start_ns) == e["start_ns"], key
        assert r.engine == e["engine"], key
        if e["src"]:
            assert r.source == e["src"], key
        if e["hbm"]:
            assert int(r.bytes) == e["hbm"], key
    if exp["hlo"]:
        assert set(prof.trace.ops["hlo_name"]) == exp["hlo"]      # the HLO instruction name, not the statement
    hot = {(h.op, h.module): h for h in prof.hot_path(top_share=1.0, max_ops=50)}
    for key, e in exp["ops"].items():
        if e["nki"]:
            file, line = e["nki"].rsplit(":", 1)
            k = hot[key].kernels[0]
            assert (k["file"], k["line"], k["measured"]) == (file, int(line), True), key
    if exp["kind"] == "summary-json":
        assert prof.ops.empty and "per-op device time" in meta["not_captured"]


# -- what each sample says, spelled out (the figures the issue names) ----------------------------------------
def _load(name: str) -> Any:
    return load_profile(SAMPLES / name)


def test_summary_percent_fields_are_fractions_not_percent() -> None:
    prof = _load("c1_pantheon_in_neuron_profile_json")
    s = prof.summary
    busy_tensor, total = 0.000134001233, 0.000149710075              # the sample's active and total time (s)
    assert s.engine_utilization["tensor"] == pytest.approx(busy_tensor / total, abs=1e-12)   # 0.895, not 0.00895
    assert s.engine_busy_ns["tensor"] == pytest.approx(134_001.233, abs=1e-6)
    assert prof.mfu == pytest.approx(0.004885633591650872, abs=1e-15)
    assert prof.mbu == pytest.approx(0.13826581387961806, abs=1e-15)
    assert not [w for w in prof.to_summary()["warnings"] if "percent" in w]   # consistent: nothing to warn


def test_chip_comes_from_wherever_the_format_puts_the_instance_type() -> None:
    for name, where in (("b1_trnblas_summary_json", "summary.instance_type"),
                        ("b2_trnblas_in_neuron_profile_json", "summary.instance_type"),
                        ("b3_trnblas_in_parquet", "Metadata.instance_type")):
        prof = _load(name)
        assert prof.summary.chip == "trn1" and prof.trace.meta["source"]["chip_from"] == where, name
        assert prof.summary.price_per_chip_hour_usd == pytest.approx(1.34375)    # trn1, not trn2's price
    e1 = _load("e1_neuron_profile_2x_ntff_json")
    assert e1.summary.chip == "inf2" and e1.trace.meta["source"]["chip_from"] == "metadata[0].instance_type"
    c1 = _load("c1_pantheon_in_neuron_profile_json")
    assert c1.summary.chip == "unknown" and c1.trace.meta["source"]["chip_from"] == "not recorded in the profile"
    assert math.isnan(c1.summary.cost_per_step_usd) and c1.trace.meta["figures"]["cost"] == "unavailable"
    warn = " ".join(c1.to_summary()["warnings"])
    assert "instance type" in warn and "chip=" in warn


def test_system_trace_counts_only_nc_exec_running_as_device_time() -> None:
    prof = _load("d1_explorer_system_trace_json")
    assert prof.summary.step_time_ns == 3 * 3_934_127                    # not nrt_execute's 3 x 4,030,017
    assert set(prof.ops["op"]) == {"ccwork/graph.neff"}
    assert sorted(prof.trace.host["name"]) == ["nrt_execute"] * 3
    assert prof.trace.meta["source"]["kind"] == "system-trace-json"


def test_system_profile_without_device_events_says_device_time_not_captured() -> None:
    for name in ("a3_aws_system_profile_beta", "a3b_aws_system_profile_beta_list", "a4_aws_system_profile_getstarted"):
        prof = _load(name)
        meta = prof.trace.meta
        assert meta["figures"]["device_time"] == "not captured", name
        assert "device time" in meta["not_captured"], name
        # the framework event's duration is host time, never reported as device time
        assert float(prof.ops["device_ns"].sum()) == 0.0, name
        fw = prof.trace.host[prof.trace.host["name"] == "PjitFunction(matmul_allgather)"].iloc[0]
        assert int(fw["start_ns"]) == 1729888382798557372 - 1729888371056597613 and int(fw["dur_ns"]) == 3758079


def test_ntff_json_2x_reads_engines_layers_nki_lines_dma_and_wait_time() -> None:
    prof = _load("e1_neuron_profile_2x_ntff_json")
    ops = {(r.op, r.module): r for r in prof.ops.itertuples(index=False)}
    mm = ops[("aten::mm", "NeuronQwen3MoeDecoderLayer[.49].MoE.RouterTopK")]
    red = ops[("aten::sum", "NeuronQwen3MoeDecoderLayer[.49].CustomRMSNorm")]
    assert (int(mm.device_ns), mm.engine, int(red.device_ns), red.engine) == (2_000, "tensor", 600, "vector")
    assert mm.source == "/home/ubuntu/model.py:204"
    assert int(red.bytes) == 2 * 262_144
    assert int(prof.trace.ops.set_index("name").loc["aten::mm", "evt_wait_ns"]) == 4 * 40
    (h,) = [h for h in prof.hot_path(top_share=1.0) if h.op == "aten::sum"]
    k = h.kernels[0]
    assert (k["file"], k["line"]) == ("/home/ubuntu/kernels/rmsnorm.py", 42)
    # DMA utilization from the dma rows (1,200 ns busy of a 149,710.075 ns step), labelled derived
    assert prof.summary.engine_utilization["dma"] == pytest.approx(1_200 / 149_710.075, abs=1e-12)
    assert prof.trace.meta["figure_sources"]["utilization.dma"].startswith("derived")
    # the timeline comes from the active_time rows
    util = prof.engine_utilization(bins=10)
    assert util["start_ns"].iloc[0] == 0 and util["end_ns"].iloc[-1] == 149_710      # total_time, whole ns


def test_dma_utilization_is_never_the_sync_engine_in_disguise() -> None:
    prof = _load("c1_pantheon_in_neuron_profile_json")          # sync_engine_* present, no dma_active_time*
    assert prof.summary.engine_utilization["sync"] == pytest.approx(0.015691782934448468, abs=1e-15)
    assert math.isnan(prof.summary.engine_utilization["dma"])
    assert prof.trace.meta["figure_sources"]["utilization.dma"].startswith("not captured")
    dma = [e for e in prof.to_summary()["engines"] if e["engine"] == "dma"][0]
    assert dma["utilization"] is None


def test_timeline_spans_total_time_like_the_summary() -> None:
    prof = _load("c2_pantheon_in_parquet")
    util = prof.engine_utilization(bins=7)
    total_ns = 0.000149710075 * 1e9
    assert util["start_ns"].iloc[0] == 0 and util["end_ns"].iloc[-1] == int(total_ns)   # bins in whole ns
    widths = (util["end_ns"] - util["start_ns"]).to_numpy()
    mean_tensor = float((util["tensor"].to_numpy() * widths).sum() / widths.sum())
    # the op rows' busy time over total_time (0.895), not over the ops' own span (1.0); bin edges are whole ns
    assert mean_tensor == pytest.approx(134_001 / total_ns, abs=1e-4)


def test_measured_profile_says_what_it_is_measured_from_and_what_not() -> None:
    prof = _load("c2_pantheon_in_parquet")
    meta = prof.trace.meta
    assert "Summary.parquet" in meta["measured_from"] and "Instruction.parquet" in meta["measured_from"]
    assert "host time" in meta["not_captured"]
    assert meta["figures"]["host_time"] == "not captured"
    assert math.isnan(prof.host_time_ns) and prof.to_summary()["host_time_ns"] is None
    payload = prof.to_summary()
    assert payload["provenance"]["not_captured"] == meta["not_captured"]
    assert "host time: not captured" in prof._repr_mimebundle_()["text/html"]
    assert "host time: not captured" in repr(prof)
    for key, label in meta["figures"].items():
        assert label in ("measured", "derived", "modeled", "not captured", "unavailable"), (key, label)


def test_unreadable_inputs_name_the_format_and_what_is_missing(tmp_path: Path) -> None:
    f = tmp_path / "ntff.json"
    f.write_text(json.dumps({"summary": [{"total_time": 1e-3}], "instruction": [{"duration": 5}]}))
    with pytest.raises(TraceFormatError, match=r"neuron-profile JSON.*instruction\[0\].*timestamp"):
        load_profile(f)
    f.write_text(json.dumps({"trace_event": [{"name": "nc_exec_running", "duration": 5}]}))
    with pytest.raises(TraceFormatError, match=r"system trace.*trace_event\[0\].*timestamp"):
        load_profile(f)
    f.write_text(json.dumps({"event_count": 3}))
    with pytest.raises(TraceFormatError, match=r"summary-json.*total_time"):
        load_profile(f)
