"""Many ranks: a job directory of per-rank traces → digests (map) → the job analysis (reduce), on local
processes, in process and on a real Dask LocalCluster with worker processes.

The jobs are written by neuron_studio/testing/synthetic_job.py (the benchmark's own generator, a few ranks × a few
thousand events here), which simulates the job on one true clock: the expected arrivals, waits, straggler and
clock skews come from that simulation, not from the analysis.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_studio.profiler.analysis.rank_digest import ACTIVITY_BINS, read_digest, write_digest
from neuron_studio.profiler.analysis.ranks import (STRAGGLER_MIN_WAIT_PER_STEP_NS, STRAGGLER_MIN_WAIT_SHARE,
                                                   RankIdentityError, reduce_digests)
from neuron_studio.profiler.importers.job_inputs import job_inputs, rank_from_name
from neuron_studio.profiler.job_map import analyze_job, local_workers, map_rank
from neuron_studio.profiler.trace import TraceFormatError

from neuron_studio.testing import synthetic_job as sj
from neuron_studio.ui.formatting import fmt_ns
from neuron_studio.ui.text import render_ranks_text

SPEC = sj.JobSpec(ranks=4, events_per_rank=6000, launches_per_step=100, launches_per_collective=25, straggler=2)


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("job")
    sj.write_job(d, SPEC)
    (d / "README.txt").write_text("not a trace")
    return d


@pytest.fixture(scope="module")
def job(job_dir):
    return analyze_job(job_dir, workers=0)


# -- inputs and rank identity ------------------------------------------------------------------------------
def test_rank_from_name_reads_the_usual_spellings():
    assert [rank_from_name(n) for n in ("trace_rank-3.json", "rank_12.pt.trace.json", "rank7", "job_r5.json",
                                        "worker0.json", "rank-1_rank-2.json")] == [3, 12, 7, 5, None, None]


def test_a_directory_lists_its_traces_in_rank_order_and_names_what_it_skipped(job_dir):
    skipped: list[str] = []
    inputs = job_inputs(job_dir, skipped=skipped)
    assert [i.name_rank for i in inputs] == list(range(SPEC.ranks))
    assert {i.kind for i in inputs} == {"chrome"} and {i.name_source for i in inputs} == {"file name"}
    assert skipped == ["README.txt"]
    assert [i.path for i in job_inputs(str(job_dir / "rank-*.json"))] == [i.path for i in inputs]   # a glob


def test_per_rank_folders_and_gz_files_take_the_folder_rank(tmp_path, job_dir):
    for r in range(2):
        (tmp_path / f"node-a_r{r}").mkdir()
        raw = (job_dir / f"rank-{r}.pt.trace.json").read_bytes()
        (tmp_path / f"node-a_r{r}" / "trace.json.gz").write_bytes(gzip.compress(raw))
    inputs = job_inputs(tmp_path)
    assert [(i.name_rank, i.name_source, Path(i.path).name) for i in inputs] == [
        (0, "folder", "trace.json.gz"), (1, "folder", "trace.json.gz")]


def test_nothing_readable_is_an_error_naming_the_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(TraceFormatError, match="no per-rank traces found.*skipped: notes.txt"):
        job_inputs(tmp_path)


def _rewrite_info(src: Path, dst: Path, info: dict | None) -> None:
    doc = json.loads(src.read_text())
    if info is None:
        doc.pop("distributedInfo", None)
    else:
        doc["distributedInfo"] = info
    dst.write_text(json.dumps(doc))


def test_rank_only_distributed_info_keeps_the_rank_and_says_where_it_came_from(tmp_path, job_dir):
    # files named against their ranks: distributedInfo {"rank": N} alone must win, and the clash be noted
    for r in range(2):
        _rewrite_info(job_dir / f"rank-{r}.pt.trace.json", tmp_path / f"rank-{1 - r}.json", {"rank": r})
    res = analyze_job(tmp_path, workers=0)
    table = res.analysis.ranks
    assert list(table["rank"]) == [0, 1] and set(table["rank_source"]) == {"distributedInfo"}
    assert any("file name says rank 1 but its distributedInfo says rank 0" in n for n in res.analysis.notes)
    assert res.digests[0].meta["world_size"] is None


def test_rank_from_file_name_then_input_order_and_duplicates_are_refused(tmp_path, job_dir):
    named, unnamed = tmp_path / "named", tmp_path / "unnamed"
    named.mkdir(), unnamed.mkdir()
    for r in (1, 0):
        _rewrite_info(job_dir / f"rank-{r}.pt.trace.json", named / f"trace_rank{r}.json", None)
    _rewrite_info(job_dir / "rank-0.pt.trace.json", unnamed / "a.json", None)
    _rewrite_info(job_dir / "rank-1.pt.trace.json", unnamed / "b.json", None)
    a = analyze_job(named, workers=0).analysis
    assert list(a.ranks["rank_source"]) == ["file name"] * 2 and list(a.ranks["rank"]) == [0, 1]
    b = analyze_job(unnamed, workers=0).analysis
    assert list(b.ranks["rank_source"]) == ["input order"] * 2
    assert any("name no rank" in n for n in b.notes)
    dup = tmp_path / "dup"
    dup.mkdir()
    shutil.copy(job_dir / "rank-0.pt.trace.json", dup / "x.json")
    shutil.copy(job_dir / "rank-0.pt.trace.json", dup / "y.json")
    with pytest.raises(RankIdentityError, match="x.json and y.json both are rank 0"):
        analyze_job(dup, workers=0)


# -- the analysis against the simulation ------------------------------------------------------------------
def test_straggler_waits_and_the_delayed_collective_match_the_simulation(job):
    arr, exits = sj.arrivals(SPEC)
    a = job.analysis
    s = a.straggler
    assert s is not None and s.rank == SPEC.straggler and s.op == "c10d::allreduce_"
    # every rank's total wait: sum over collectives of (last arrival - own arrival), on the true clock
    waits = {r: sum(max(k) - k[r] for k in arr) * 1000 for r in range(SPEC.ranks)}
    got = a.ranks.set_index("rank")["wait_ns"]
    for r in range(SPEC.ranks):
        assert got[r] == pytest.approx(waits[r], abs=len(arr) * 2)       # µs→ns rounding of each timestamp
    worst = int(np.argmax([sum(max(k) - x for x in k) for k in arr]))
    assert s.index == worst
    assert s.caused_wait_ns == pytest.approx(sum(waits.values()), abs=len(arr) * SPEC.ranks * 2)
    assert a.ranks.set_index("rank")["last_arrivals"][SPEC.straggler] == len(arr)
    assert s.compute_before_ns > s.others_compute_before_ns
    assert a.slowest_collective["ranks"] == SPEC.ranks


def test_clocks_are_aligned_from_the_collectives_and_the_residual_skew_is_stated(job):
    al = job.analysis.alignment
    assert al.method == "collective exits" and al.matched == SPEC.collectives
    for r in range(SPEC.ranks):   # each rank's wall clock was off by skew_us(r): the correction undoes it
        assert al.corrections_ns[r] == pytest.approx(-sj.skew_us(r, SPEC) * 1000, abs=2)
    assert al.residual_skew_ns is not None and al.residual_skew_ns <= 2
    block = job.report_summary()["ranks_analysis"]
    assert block["alignment"]["method"] == "collective exits" and "residual" in block["alignment"]["detail"]


def test_steps_are_intersected_across_ranks(tmp_path, job_dir):
    for r in range(SPEC.ranks):
        shutil.copy(job_dir / f"rank-{r}.pt.trace.json", tmp_path / f"rank-{r}.json")
    # rank 3 lost its last ProfilerStep annotation
    p = tmp_path / "rank-3.json"
    doc = json.loads(p.read_text())
    last = max(int(e["name"].split("#")[1]) for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != f"ProfilerStep#{last}"]
    p.write_text(json.dumps(doc))
    a = analyze_job(tmp_path, workers=0).analysis
    assert a.steps["common"] == last and a.steps["ranks_with_extra_steps"] == SPEC.ranks - 1
    assert set(a.ranks["steps"]) == {last}
    assert any("not recorded on every rank" in n for n in a.notes)
    # the per-step waits count only the collectives inside the common steps, over those steps
    per_step = SPEC.launches_per_step // SPEC.launches_per_collective
    assert a.steps["per_step"] == last and a.straggler.steps == last
    assert any(f"{SPEC.collectives - last * per_step} of {SPEC.collectives} collective instance(s) arrived outside"
               in n for n in a.notes)
    assert (a.ranks["collectives_per_step"] == per_step).all()
    arr, _ = sj.arrivals(SPEC)
    truth = sum(max(k) - x for k in arr[: last * per_step] for x in k) * 1000 / last
    assert a.straggler.wait_per_step_ns == pytest.approx(truth, abs=per_step * SPEC.ranks * 2)


# -- figures per step: the same however many steps were profiled ---------------------------------------------
def _stepped(steps: int, extra_us: float) -> sj.JobSpec:
    """Two ranks, `steps` whole steps of 4 collectives; rank 1's matmuls take `extra_us` longer."""
    spec = sj.JobSpec(ranks=2, events_per_rank=0, launches_per_step=100, launches_per_collective=25, straggler=1,
                      straggler_extra_us=extra_us)
    per_launch = sj.EVENTS_PER_LAUNCH + 2 / spec.launches_per_collective
    spec = dataclasses.replace(spec, events_per_rank=int(steps * spec.launches_per_step * per_launch) + 1)
    assert spec.launches == steps * spec.launches_per_step
    return spec


def _caused_per_step(spec: sj.JobSpec, steps: int) -> tuple[float, float]:
    """From the simulation: the others' wait per step (ns) and its share of their compute before those collectives."""
    arr, exits = sj.arrivals(spec)
    wait = sum(max(k) - x for k in arr for x in k) * 1000
    starts = [0.0] + exits[:-1]
    compute = sum(k[r] - s for k, s in zip(arr, starts) for r in range(spec.ranks) if r != spec.straggler) * 1000
    return wait / steps, wait / compute


@pytest.mark.parametrize("steps", [2, 8, 32])
@pytest.mark.parametrize("extra_us, named", [(3.5, False), (10.0, True)])
def test_the_straggler_rule_is_per_step_whatever_the_number_of_profiled_steps(tmp_path, steps, extra_us, named):
    """A rank that makes the other wait a fixed time per step: below `STRAGGLER_MIN_WAIT_PER_STEP_NS` it is no
    straggler at 2, 8 or 32 profiled steps (a total over the steps passed the old 1 ms floor from about 15 steps on);
    above it, a straggler at every count (the old floor missed it at 2 steps). Its share of the compute passes
    in both cases, so the per-step floor alone decides."""
    spec = _stepped(steps, extra_us)
    per_step, share = _caused_per_step(spec, steps)
    assert share >= 2 * STRAGGLER_MIN_WAIT_SHARE
    assert (per_step > 1.5 * STRAGGLER_MIN_WAIT_PER_STEP_NS) if named else \
        (0.5 * STRAGGLER_MIN_WAIT_PER_STEP_NS < per_step < 0.8 * STRAGGLER_MIN_WAIT_PER_STEP_NS)
    sj.write_job(tmp_path, spec)
    res = analyze_job(tmp_path, workers=0)
    a = res.analysis
    assert a.steps["per_step"] == steps and not [n for n in a.notes if "per step" in n or "outside" in n]
    waited = a.ranks.set_index("rank")["wait_per_step_ns"][0]
    assert waited == pytest.approx(per_step, abs=2 * spec.collectives / steps)   # µs→ns rounding per timestamp
    per_step_collectives = spec.launches_per_step // spec.launches_per_collective
    assert a.ranks.set_index("rank")["collectives_per_step"][0] == per_step_collectives
    if named:
        assert a.straggler is not None and a.straggler.rank == spec.straggler and a.straggler.steps == steps
        assert a.straggler.wait_per_step_ns == pytest.approx(per_step, abs=2 * spec.collectives / steps)
        text = render_ranks_text(res.report_summary()["ranks_analysis"])
        assert f"the others wait {fmt_ns(a.straggler.wait_per_step_ns)} per step (over {steps} steps)" in text
    else:
        assert a.straggler is None
        rule = a.to_summary()["straggler_rule"]
        assert rule == {"min_wait_per_step_ns": STRAGGLER_MIN_WAIT_PER_STEP_NS,
                        "min_wait_share": STRAGGLER_MIN_WAIT_SHARE, "steps": steps}
    # the job op table is per step too: every rank runs 20 matmuls a step, whatever the steps profiled
    ops = a.op_table.set_index("key")
    mm_per_step = spec.launches_per_step // 5
    assert ops.loc["aten::mm", "count_per_step"] == spec.ranks * mm_per_step
    assert ops.loc["c10d::allreduce_", "count_per_step"] == spec.ranks * per_step_collectives


def test_without_profiler_steps_nothing_is_put_per_step_and_the_report_says_so(tmp_path, job_dir):
    """Traces without ProfilerStep annotations: the steps are unknown, so the waits stay totals over the
    capture, the straggler rests on its share of compute alone, and every view says so."""
    for r in range(SPEC.ranks):
        doc = json.loads((job_dir / f"rank-{r}.pt.trace.json").read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
        (tmp_path / f"rank-{r}.json").write_text(json.dumps(doc))
    res = analyze_job(tmp_path, workers=0)
    a = res.analysis
    assert a.steps["per_step"] is None
    assert any("no ProfilerStep annotations" in n and "not per step" in n and "was not applied" in n
               for n in a.notes)
    assert a.ranks["wait_per_step_ns"].isna().all() and (a.ranks["wait_ns"] > 0).sum() == SPEC.ranks - 1
    s = a.straggler
    assert s is not None and s.rank == SPEC.straggler and s.steps is None and s.wait_per_step_ns is None
    block = res.report_summary()["ranks_analysis"]
    assert block["straggler"]["wait_per_step_ns"] is None and block["straggler_rule"]["steps"] is None
    text = render_ranks_text(block)
    assert "in total over the capture (its steps are unknown)" in text and "waited/step" not in text
    from neuron_studio.cli import report_html

    page = report_html(res.report_summary(name="job"))
    assert "in total over the capture (its steps are unknown)" in page and "waited (total)" in page


def test_digests_are_compact_and_survive_parquet(tmp_path, job):
    d = job.digests[0]
    assert len(d.activity) == ACTIVITY_BINS and len(d.collectives) == SPEC.collectives
    assert len(d.ops) < 20 and len(d.steps) == -(-SPEC.collectives * SPEC.launches_per_collective // SPEC.launches_per_step)
    for i, dig in enumerate(job.digests):
        write_digest(dig, tmp_path / f"d{i}")
    again = [read_digest(tmp_path / f"d{i}") for i in range(len(job.digests))]
    a, b = job.analysis.to_summary(), reduce_digests(again, job.inputs).to_summary()
    assert a == b


def test_report_summary_has_the_first_rank_profile_and_the_ranks(job):
    s = job.report_summary(name="job")
    assert s["ranks"] == SPEC.ranks and s["name"] == "job" and s["ranks_analysis"]["straggler"]["rank"] == 2
    assert s["ops"] if "ops" in s else s.get("op_table")      # the first rank's own profile summary is there
    assert s["ranks_analysis"]["op_table"][0]["ranks"] == SPEC.ranks


# -- engines: the same report from every engine ---------------------------------------------------------
def _comparable(job) -> dict:
    return job.analysis.to_summary()


def test_local_processes_give_the_same_report_and_bounded_worker_memory(job_dir, job):
    local = analyze_job(job_dir, workers=2)
    assert local.engine == "local processes (2)"
    assert _comparable(local) == _comparable(job)
    assert len(local.worker_peak_rss_bytes) == SPEC.ranks and min(local.worker_peak_rss_bytes) > 0


def test_dask_local_cluster_with_worker_processes_gives_the_same_report(job_dir, job):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the test extra")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        via_client = analyze_job(job_dir, client=client)
        via_address = analyze_job(job_dir, scheduler=cluster.scheduler_address)
        pids = set(client.run(lambda: __import__("os").getpid()).values())
    import os

    assert os.getpid() not in pids and len(pids) == 2          # worker processes, not threads of this one
    assert via_client.engine.startswith("dask (tcp://")
    assert _comparable(via_client) == _comparable(job) == _comparable(via_address)


def test_a_failing_rank_is_named(tmp_path, job_dir):
    from neuron_studio.profiler.job_map import JobMapError

    shutil.copy(job_dir / "rank-0.pt.trace.json", tmp_path / "rank-0.json")
    (tmp_path / "rank-1.json").write_text('{"traceEvents": [')
    with pytest.raises(JobMapError, match="1 of 2 rank.*rank-1.json"):
        analyze_job(tmp_path, workers=0)


def test_local_workers_are_sized_to_memory(job_dir):
    inputs = job_inputs(job_dir)
    assert local_workers(inputs, available=64 << 30, cpus=8) == SPEC.ranks
    assert local_workers(inputs, available=1 << 30, cpus=8) == 1
    r = map_rank(inputs[0])
    assert "payload" in r and r["peak_rss"] > 0


# -- Perfetto ------------------------------------------------------------------------------------------------
def test_the_whole_job_exports_as_one_aligned_trace(tmp_path, job):
    from neuron_studio.profiler.job_export import export_job_trace

    doc = json.loads(gzip.decompress(export_job_trace(job, tmp_path / "job.json.gz", workers=0).read_bytes()))
    ev = doc["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == sum(d.meta["ops"] for d in job.digests)
    assert {e["pid"] for e in xs} == set(range(SPEC.ranks))
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[SPEC.straggler] == f"rank {SPEC.straggler} (straggler)"
    flows = [e for e in ev if e["ph"] in "stf"]
    assert sum(e["ph"] == "s" for e in flows) == SPEC.collectives == sum(e["ph"] == "f" for e in flows)
    assert all(e["pid"] == SPEC.straggler for e in flows if e["ph"] == "f")     # every flow ends at the last
    # on the aligned clock a collective's exits coincide across ranks (the skew was taken out)
    coll = [e for e in xs if e["name"] == "c10d::allreduce_"]
    first_exit = sorted(coll, key=lambda e: e["ts"])[: SPEC.ranks]
    exits = [e["ts"] + e["dur"] for e in first_exit]
    assert max(exits) - min(exits) < 0.01
    assert doc["metadata"]["neuron_studio_job"]["alignment"]["method"] == "collective exits"


# -- CLI ---------------------------------------------------------------------------------------------------
def test_cli_report_and_import_a_job_directory(tmp_path, job_dir, capsys):
    from neuron_studio.cli import load_rank_profiles, main
    from neuron_studio.store import RunStore

    out = tmp_path / "job.html"
    trace = tmp_path / "job.json.gz"
    assert main(["report", str(job_dir), "-o", str(out), "--workers", "2", "--perfetto", str(trace), "--quiet"]) == 0
    assert "ranks mapped" not in capsys.readouterr().err
    assert sum(e["ph"] == "s" for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]) \
        == SPEC.collectives
    page = out.read_text()
    assert "Straggler: rank 2" in page and "Ranks (4)" in page and "collective exits" in page
    store = tmp_path / "store"
    capsys.readouterr()
    assert main(["import", str(job_dir), "--store", str(store), "--workers", "2", "--json"]) == 0
    rs = RunStore(store, create=False)
    rec = rs.list_runs()[0]
    captured = capsys.readouterr()
    said = json.loads(captured.out)                     # --json: only the stored run, for programs
    # progress on stderr, a line per rank mapped; never the "neuron-studio: " prefix of the error line
    progress = [ln.split()[2] for ln in captured.err.splitlines() if "ranks mapped" in ln]
    assert progress == [f"{i}/{SPEC.ranks}" for i in range(1, SPEC.ranks + 1)]
    assert not any(ln.startswith("neuron-studio: ") for ln in captured.err.splitlines())
    assert said == {"run_id": rec.id, "name": job_dir.name, "ranks": SPEC.ranks, "store": str(rs.root)}
    assert rec.ranks == SPEC.ranks and rec.status == "ok"
    profiles = load_rank_profiles(rs, rec)
    assert [p.trace.meta["rank"] for _, p in sorted(profiles.items())] == list(range(SPEC.ranks))
    assert rec.summary["ranks_analysis"]["straggler"]["rank"] == SPEC.straggler
    assert "device_ops" in rs.list_tables(rec.id)        # rank 0's unsuffixed tables, as a torchrun job has
    # the stored job exports from its job tables (no second map) the same events, flows and straggler
    stored = tmp_path / "stored.json.gz"
    assert main(["report", str(rec.id), "--store", str(store), "--perfetto", str(stored), "-o",
                 str(tmp_path / "stored.html"), "--workers", "2"]) == 0
    assert "ranks mapped" not in capsys.readouterr().err
    direct, again = (json.loads(gzip.decompress(t.read_bytes())) for t in (trace, stored))
    assert sorted(map(json.dumps, again["traceEvents"])) == sorted(map(json.dumps, direct["traceEvents"]))
    assert again["metadata"]["neuron_studio_job"]["straggler"] == SPEC.straggler
    assert again["metadata"]["neuron_studio_job"]["alignment"]["method"] == "collective exits"
    assert main(["report", str(tmp_path / "nothing-*.json")]) == 2


def test_cli_report_on_a_dask_scheduler(tmp_path, job_dir):
    distributed = pytest.importorskip("distributed")
    from neuron_studio.cli import main

    out = tmp_path / "job.html"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert main(["report", str(job_dir), "-o", str(out), "--scheduler", cluster.scheduler_address]) == 0
    assert "Straggler: rank 2" in out.read_text()


# -- real traces (../shared/traces) ------------------------------------------------------------------------
def test_real_two_rank_directory(tmp_path):
    import trace_truth as truth
    from shared_data import require

    src = require("traces")
    for n in ("trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz"):
        shutil.copy(src / n, tmp_path / n)
    res = analyze_job(tmp_path, workers=0)
    t = res.analysis.ranks
    assert list(t["rank"]) == [0, 1] and list(t["rank_source"]) == ["distributedInfo"] * 2
    for r in (0, 1):
        raw = truth.load(f"trace_filter_sampled_rank-{r}.json.gz")
        assert t.set_index("rank").loc[r, "step_time_ns"] == pytest.approx(truth.mean_step_ns(raw), abs=0.5)
    # NCCL collectives return at once on the host: they cannot measure the skew, so the wall clock stands
    assert res.analysis.alignment.method == "wall clock" and res.analysis.alignment.residual_skew_ns is None


# -- Neuron Explorer per-rank folders ----------------------------------------------------------------------
def test_neuron_explorer_per_rank_folders_are_one_job(tmp_path):
    from make_explorer_fixtures import write_explorer_fixture

    for r in (1, 0):                      # as TorchNeuron's profiler writes them: <out>/rank<RANK>/
        write_explorer_fixture(tmp_path / f"rank{r}")
    inputs = job_inputs(tmp_path)
    assert [(i.kind, i.name_rank, i.name_source) for i in inputs] == [("neuron-explorer", 0, "folder"),
                                                                       ("neuron-explorer", 1, "folder")]
    a = analyze_job(tmp_path, workers=0).analysis
    assert list(a.ranks["rank"]) == [0, 1] and list(a.ranks["rank_source"]) == ["folder", "folder"]
    assert (a.ranks["ops"] > 0).all()
