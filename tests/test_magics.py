"""The %%neuron magic and %neuron_* line magics, driven through IPython's InteractiveShell."""
from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")
from IPython.testing import globalipapp  # noqa: E402

import neuron_studio  # noqa: E402
from neuron_studio.session import session  # noqa: E402
from neuron_studio.ui.bundle import MIME_TYPE  # noqa: E402
from neuron_studio.ui.html import render_html  # noqa: E402


@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    shell = globalipapp.get_ipython()   # the one test shell, shared with other modules
    store_dir = tmp_path_factory.mktemp("store")
    session().use_store(store_dir)
    shell.run_line_magic("load_ext", "neuron_studio")
    shell.run_line_magic("load_ext", "neuron_studio")  # loading twice is harmless
    ok = shell.run_cell(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to('neuron')\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.01)\n"
        "x = torch.randn(8, 32, device='neuron')\n"
        "calls = 0\n"
    )
    assert ok.success
    yield shell
    session().use_store(None)
    # the shell outlives this module: drop the cells' variables (a model, tensors on the device) so that
    # later tests in the process start from an empty device (their memory peaks count what is live)
    shell.reset(new_session=False)


STEP = "calls += 1\nloss = m(x).pow(2).mean()\nloss.backward(); opt.step(); opt.zero_grad()\n"


def run(ip, line: str, body: str = STEP):
    res = ip.run_cell(f"%%neuron {line}\n{body}")
    return res


def test_cell_runs_profiles_and_keeps_namespace(ip):
    ip.user_ns["calls"] = 0
    res = run(ip, "--steps 3 --warmup 2 --name first")
    assert res.success, res.error_in_exec
    prof = res.result
    assert ip.user_ns["calls"] == 5                       # warm-up + profiled steps, in the user's namespace
    assert "loss" in ip.user_ns and ip.user_ns["loss"].device.type == "neuron"
    assert prof.steps == 3
    assert prof is neuron_studio.last()
    assert ip.user_ns["_"] is prof
    s = prof.summary_payload
    assert s["name"] == "first" and s["mode"] == "eager" and s["steps"] == 3 and s["modeled"] is True
    assert s["step_time_ns"] > 0 and 0 <= s["mfu"] <= 1
    assert {e["engine"] for e in s["engines"]} == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    assert s["hot_ops"] and all(0 < h["share"] <= 1 for h in s["hot_ops"])
    table = prof.op_table()
    assert "aten::addmm" in set(table["key"]) or "aten::mm" in set(table["key"])


def test_mime_bundle_is_json_and_escaped_html(ip):
    res = run(ip, "--name bundle")
    bundle = res.result._repr_mimebundle_()
    assert set(bundle) == {MIME_TYPE, "text/html", "text/plain"}
    json.dumps(bundle[MIME_TYPE], allow_nan=False)
    assert "<script" not in bundle["text/html"].lower()
    assert "modeled" in bundle["text/html"]


def test_adaptive_fuses_and_item_is_a_sync_point(ip):
    eager = run(ip, "--mode eager --name e1", STEP + "v = loss.item()\n").result
    adaptive = run(ip, "--mode adaptive --name a1", STEP + "v = loss.item()\n").result
    # regions end at each matmul and every in-place optimizer update runs alone (TorchNeuron's rules): fewer
    # launches than eager, never fewer than the matmul regions plus the in-place ops
    assert adaptive.launches_per_step < eager.launches_per_step
    ops = adaptive.ops[adaptive.ops["kind"] == "device"]["op"].str.split("::").str[-1].str.split(".").str[0]
    assert adaptive.launches_per_step >= ops.str.endswith("_").sum() / adaptive.steps
    sp = adaptive.sync_points()
    assert "aten::_local_scalar_dense" in set(sp["op"])
    src = sp[sp["op"] == "aten::_local_scalar_dense"]["source"].iloc[0]
    assert re.fullmatch(r"cell \[\d+\] line 4", src), src       # the line of `.item()`, in the one source format
    raw = adaptive.sync_points(as_captured=True)
    assert raw.loc[raw["op"] == "aten::_local_scalar_dense", "source"].iloc[0].startswith("cell-")   # the key links parse


def test_chip_option_changes_the_model(ip):
    a = run(ip, "--chip trn1 --name c1").result
    b = run(ip, "--chip trn3 --name c3").result
    assert a.summary.chip == "trn1" and b.summary.chip == "trn3"
    assert a.step_time_ns != b.step_time_ns


def test_compile_mode_counts_recompiles_on_new_shape(ip):
    body = "y = m(xs)\ny.sum().backward()\n"
    ip.user_ns["xs"] = torch.randn(4, 32, device="neuron")
    first = run(ip, "--mode compile --name comp", body)
    assert first.success, first.error_in_exec
    assert first.result.summary_payload["badges"]["recompiles"] == 0
    assert (first.result.trace.ops["graph"] >= 0).any()        # ops ran inside compiled graph launches
    ip.user_ns["xs"] = torch.randn(6, 32, device="neuron")
    second = run(ip, "--mode compile --name comp", body)
    assert second.success, second.error_in_exec
    rc = second.result.recompiles()
    assert len(rc) >= 1 and "6x32" in " ".join(rc["shapes"])
    assert set(rc["cause"]) == {"shapes"} and all(r.startswith("new input shapes") for r in rc["reason"])
    assert second.result.summary_payload["badges"]["recompiles"] >= 1


def test_compile_mode_names_a_recompile_that_shapes_did_not_cause(ip):
    """The same cell again with the same input shapes and another value of a global it reads: Dynamo recompiles
    for the value, and the cell's output says so, not "new input shapes"."""
    body = "y = m(xs) * scale\ny.sum().backward()\n"
    ip.user_ns["xs"] = torch.randn(4, 32, device="neuron")
    ip.user_ns["scale"] = 2.0
    first = run(ip, "--mode compile --name scaled", body)
    assert first.success, first.error_in_exec
    ip.user_ns["scale"] = 3.0
    second = run(ip, "--mode compile --name scaled", body)
    assert second.success, second.error_in_exec
    rc = second.result.recompiles()
    assert len(rc) >= 1 and set(rc["cause"]) == {"global"}, rc[["cause", "reason"]]
    assert all("scale is no longer 2.0" in r and "new input shapes" not in r for r in rc["reason"])
    shown = second.result.summary_payload["recompiles"]
    assert [r["cause"] for r in shown] == list(rc["cause"]) and all(r["detail"] for r in shown)
    advice = [r.text for r in second.result.step_breakdown().recommendations if r.category == "recompile"]
    assert len(advice) == 1 and "unchanged input shapes" in advice[0] and "pad" not in advice[0]


@pytest.mark.parametrize("cell, message", [
    ("%%neuron --mode adaptiv\ncalls += 1\n", "--mode must be one of eager, adaptive, compile (got 'adaptiv')"),
    ("%%neuron --steps 0\ncalls += 1\n", "--steps must be >= 1 (got 0)"),
    ("%%neuron --steps abc\ncalls += 1\n", "invalid int value: 'abc'"),
    ("%%neuron --warmup -1\ncalls += 1\n", "--warmup must be >= 0 (got -1)"),
    ("%%neuron --chip trn9\ncalls += 1\n", "--chip must be one of trn1, trn2, trn3 (got 'trn9')"),
    ("%%neuron --bogus\ncalls += 1\n", "unrecognized arguments: --bogus"),
    ("%%neuron extra words\ncalls += 1\n", "unrecognized arguments: extra words"),
    ("%neuron_runs many", "%neuron_runs: LIMIT must be an integer, got 'many'"),
    ("%neuron_show", "usage: %neuron_show RUN"),
    ("%neuron_show a b", "usage: %neuron_show RUN"),
    ("%neuron_show 'unbalanced", "%neuron_show: No closing quotation"),
    ("%neuron_compare 1", "usage: %neuron_compare RUN_A RUN_B"),
    ("%neuron_check 1 2", "usage: %neuron_check [RUN]"),
])
def test_invalid_options_fail_the_cell(ip, capsys, cell, message):
    """Issue 14 item 3: a bad option raises UsageError (the cell fails, Run All stops); the body never runs."""
    from IPython.core.error import UsageError

    ip.user_ns["calls"] = 0
    res = ip.run_cell(cell)
    assert not res.success and isinstance(res.error_in_exec, UsageError), res
    assert message in str(res.error_in_exec)
    if cell.startswith("%%neuron"):
        assert "usage: %%neuron" in str(res.error_in_exec)
    assert ip.user_ns["calls"] == 0
    capsys.readouterr()


def test_nbclient_stops_at_a_bad_neuron_option(tmp_path):
    """Run All / nbclient / papermill stop at the bad cell instead of carrying on with stale state."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext neuron_studio\nran = []"),
        nbformat.v4.new_code_cell("%%neuron --mode adaptiv\nran.append('body')"),
        nbformat.v4.new_code_cell("ran.append('next cell')"),
    ])
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError, match="UsageError") as info:
        client.execute()
    assert "--mode must be one of eager, adaptive, compile (got 'adaptiv')" in str(info.value)
    shown = "".join(o.get("text", "") for o in nb.cells[1].outputs)     # IPython shows a UsageError on stderr
    assert "UsageError: %%neuron: --mode must be one of" in shown and "usage: %%neuron" in shown
    assert nb.cells[2].get("outputs") == [] and nb.cells[2].get("execution_count") is None


def test_error_saves_partial_run_and_next_cell_works(ip):
    res = ip.run_cell("%%neuron --steps 2 --warmup 0 --name broken\ny = m(x)\nraise ValueError('boom in cell')\n")
    assert isinstance(res.error_in_exec, ValueError) and "boom in cell" in str(res.error_in_exec)
    rec = session().store.get_run("broken")
    assert rec.status == "error"
    assert "device_ops" in session().store.list_tables(rec.id)  # the partial trace was kept
    assert run(ip, "--name after-error").success


def test_interrupt_stops_cleanly(ip):
    res = ip.run_cell("%%neuron --name interrupted\ny = m(x)\nraise KeyboardInterrupt\n")
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    assert session().store.get_run("interrupted").status == "interrupted"
    assert run(ip, "--name after-interrupt").success


def test_line_magics(ip):
    run(ip, "--name lm-a")
    run(ip, "--name lm-b --mode adaptive")
    runs = ip.run_line_magic("neuron_runs", "")
    assert {"lm-a", "lm-b"} <= set(runs["name"].dropna())
    shown = ip.run_line_magic("neuron_show", "lm-a")
    assert shown.summary_payload["name"] == "lm-a"
    cmp_ = ip.run_line_magic("neuron_compare", "lm-a lm-b")
    assert cmp_.diff.step_time_after_ns < cmp_.diff.step_time_before_ns   # adaptive fuses: faster (modeled)
    assert "vs run" in repr(cmp_)
    dev = ip.run_line_magic("neuron_device", "")
    assert "emulated" in repr(dev) and "neuron:0" in repr(dev)
    check = ip.run_line_magic("neuron_check", "")
    topics = {i.topic for i in check.report.items}
    assert {"fallbacks", "dynamic_shapes", "dtypes", "sync_points", "efficiency", "cost"} <= topics
    assert "H100" in repr(check)


def test_check_reports_fallbacks_and_float64(ip):
    res = run(ip, "--name fb", "z = torch.randn(64, device='neuron', dtype=torch.float64)\nu = torch.unique(x)\n")
    assert res.success, res.error_in_exec
    report = ip.run_line_magic("neuron_check", "").report
    by = {i.topic: i for i in report.items}
    assert by["fallbacks"].severity == "error" and any("unique" in d for d in by["fallbacks"].details)
    assert by["dtypes"].severity == "warning" and "float64" in by["dtypes"].message


def test_sources_in_earlier_cells_name_the_cell(ip):
    ok = ip.run_cell("def helper(t):\n    return t.exp()\n")
    assert ok.success
    count = ok.execution_count
    res = run(ip, "--name src", "y = helper(x)\n")
    src = res.result.op_table  # noqa: F841 - the profile exists
    exp = res.result.trace.ops
    exp = exp[exp["name"] == "aten::exp"]["source"].iloc[0]
    assert exp == f"cell-{count}:2"


def test_compare_with_previous_run_of_the_same_cell(ip):
    run(ip, "--name same")
    second = run(ip, "--name same").result
    cmp_ = second.summary_payload["compare"]
    assert cmp_ is not None and cmp_["run_id"] < second.run_id


def test_compare_with_the_previous_run_in_memory_equals_reloading_it_from_the_store(ip):
    from neuron_studio.runner import _compare_block
    from neuron_studio.session import Session

    first = run(ip, "--name reuse").result
    second = run(ip, "--name reuse").result
    store = session().store
    rec = store.get_run(first.run_id)
    remembered = Session(store_root=store.root)
    remembered.remember(first, store)
    assert remembered.stored_profile(store, rec) is first           # no reload, no re-modeling
    reloaded = Session(store_root=store.root)
    assert reloaded.stored_profile(store, rec) is not first
    got = _compare_block(remembered, store, second.run_id, None, second)
    assert got["run_id"] == first.run_id and got["ops"]
    assert got == _compare_block(reloaded, store, second.run_id, None, second)
    # the same run id in another store is another run
    elsewhere = Session(store_root=store.root)
    elsewhere.remember(first, store)
    elsewhere.last_profile_store = store.root / "elsewhere"
    assert elsewhere.stored_profile(store, rec) is not first


def test_no_profile_runs_without_a_store_entry(ip):
    before = len(session().store.list_runs())
    ip.user_ns["calls"] = 0
    res = run(ip, "--no-profile --steps 2 --warmup 1")
    assert res.success and res.result is None and ip.user_ns["calls"] == 3
    assert len(session().store.list_runs()) == before


def test_hostile_names_are_escaped_in_html():
    hostile = "<script>alert(1)</script>"
    s = {"run_id": 1, "name": hostile, "mode": "eager", "chip": "trn2", "backend": "emulated", "modeled": True,
         "status": "ok", "engines": [], "hot_ops": [{"op": hostile, "module": hostile, "source": hostile,
                                                     "device_ns": 1, "share": 0.5, "bound": "memory", "why": hostile,
                                                     "kernel": {"name": hostile, "kind": "candidate",
                                                                "file": hostile, "line": 3}}],
         "op_table": [{"op": hostile, "count": 1, "device_ns": 1, "host_ns": 1, "flops": 0, "bytes": 0,
                       "engine": hostile, "bound": hostile, "share": 0.1}],
         "badges": {}, "fallbacks": [{"op": hostile, "count": 1, "reason": hostile, "time_ns": 1}],
         "sync_points": [{"op": hostile, "reason": hostile, "source": hostile, "module": hostile}],
         "recompiles": [{"graph": hostile, "shape": hostile, "reason": hostile}], "cost": {}, "warnings": [hostile]}
    out = render_html(s)
    assert "<script>" not in out and "&lt;script&gt;" in out


def test_the_magics_own_sync_is_not_a_user_sync_point(ip):
    res = run(ip, "--name quiet-step --steps 2")
    assert res.result.summary_payload["badges"]["sync_points"] == 0
    ops = res.result.trace.ops
    # still modeled: the studio syncs the device at the end of every step (so no fused region spans two steps)
    assert (ops["name"] == "neuron::synchronize").sum() == 2
    res = run(ip, "--name user-sync", STEP + "torch.neuron.synchronize()\n")
    assert res.result.summary_payload["badges"]["sync_points"] == 1


def test_profiled_cell_prints_no_kineto_markers_but_keeps_the_users_stderr(ip, capfd):
    """Issue 14 item 5: fd-level stderr of a %%neuron cell holds what the cell wrote, and no USDT lines."""
    capfd.readouterr()
    res = run(ip, "--steps 2 --name quiet", STEP + "import os, sys\nos.write(2, b'user fd line\\n')\n"
                                                   "print('user py line', file=sys.stderr)\n")
    assert res.success, res.error_in_exec
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_start" not in err and "profiler_stop" not in err
    assert err.count("user fd line") == 3 and err.count("user py line") == 3      # warm-up 1 + 2 profiled steps


def test_kineto_marker_filter_keeps_other_lines(capfd):
    import os

    from neuron_studio.profiler.kineto_log import without_kineto_markers

    with without_kineto_markers():
        os.write(2, b"USDT:2026-11-30 16:03:52 3169:3169 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
                    b"ERROR: something kineto wants you to see\n"
                    b"USDT:2026-11-30 16:03:52 3169:3169 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    err = capfd.readouterr().err
    assert err == "ERROR: something kineto wants you to see\n"


def test_progress_is_a_real_bar_cleared_when_done(monkeypatch):
    """Issue 14 item 5: not a quoted Python string that stays in the output; a bar, then nothing."""
    import IPython.display

    from neuron_studio.runner import _Progress

    shown = []

    class Handle:
        def update(self, obj, **kw):
            shown.append((obj, kw))

    def fake_display(obj, **kw):
        shown.append((obj, kw))
        return Handle()

    monkeypatch.setattr(IPython.display, "display", fake_display)
    bar = _Progress(3, "%%neuron eager", live=True)
    bar.update(2)
    bar.close()
    assert all(isinstance(obj, dict) and kw.get("raw") for obj, kw in shown)      # a MIME bundle, not a str
    assert "<progress value='2' max='3'>" in shown[1][0]["text/html"]
    assert shown[1][0]["text/plain"].startswith("%%neuron eager: step 2/3")
    assert shown[-1][0] == {"text/plain": ""}                                  # cleared when done
    assert _Progress(3, "x", live=False).handle is None                        # no frontend: nothing shown


def test_failing_cell_traceback_starts_with_the_users_frames(ip, capsys):
    """Issue 28: the studio's frames (magic, runner, the cell runner) are hidden as IPython hides its own, so the
    traceback goes from the cell straight to the user's line."""
    capsys.readouterr()
    res = ip.run_cell("%%neuron --name tb\nwrong = torch.randn(3, 7, device='neuron')\ny = m(wrong)\n")
    assert isinstance(res.error_in_exec, RuntimeError)
    shown = capsys.readouterr().out
    assert "y = m(wrong)" in shown
    before_user = shown.split("y = m(wrong)")[0]
    assert "neuron_studio" not in before_user and "runner.py" not in shown and "magics.py" not in shown, shown


def test_op_sources_of_earlier_cells_name_the_cell(ip):
    """Issue 28: a source in an earlier cell (an ipykernel temp file in IPython) reads `cell-<In>:<line>` in every
    table (op sources, memory rows), named once where the device records it."""
    ok = ip.run_cell("def fwd_in_earlier_cell(t):\n    return m(t)\n")
    assert ok.success
    res = run(ip, "--name src", "y = fwd_in_earlier_cell(x)\n")
    assert res.success, res.error_in_exec
    prof = res.result
    sources = set(prof.trace.ops["source"].dropna())
    assert sources and all(s.startswith("cell-") for s in sources), sources
    assert f"cell-{ok.execution_count}:2" in sources
    mem_sources = set(prof.memory_peak(as_captured=True)["source"].dropna())
    assert f"cell-{ok.execution_count}:2" in mem_sources                  # old code: IPython's own file name
    assert all(s.startswith("cell-") for s in mem_sources), mem_sources
    # as the user reads them: the one source format
    shown = set(prof.memory_peak()["source"].dropna())
    assert f"cell [{ok.execution_count}] line 2" in shown
    assert all(re.fullmatch(r"cell \[\d+\] line \d+", s) for s in shown), shown


def test_missing_run_is_a_message_not_a_traceback(ip, capsys):
    from IPython.core.error import UsageError

    for line in ("%neuron_show 99999", "%neuron_compare 99998 99999", "%neuron_check 99999"):
        res = ip.run_cell(line)
        assert isinstance(res.error_in_exec, UsageError), (line, res.error_in_exec)
        assert "99999" in str(res.error_in_exec) or "99998" in str(res.error_in_exec)
    shown = capsys.readouterr()
    assert "Traceback" not in shown.out + shown.err and "RunNotFound" not in shown.out + shown.err


_ONE_FORMAT = re.compile(r"cell \[\d+\] line \d+")


def test_check_counts_read_as_integers_and_sources_in_the_one_format(ip):
    """Issue 28 (walk F10): `%neuron_check` wrote "9.0 host syncs per step" and "at cell-2:19"."""
    body = STEP + "for _ in range(3):\n    v = loss.item()\n"
    res = run(ip, "--mode adaptive --steps 2 --name check-syncs", body)
    assert res.success, res.error_in_exec
    by = {i.topic: i for i in ip.run_line_magic("neuron_check", "check-syncs").report.items}
    sync = by["sync_points"]
    assert sync.message.startswith("3 host syncs per step "), sync.message      # a count, not "3.0"
    assert sync.details and all(_ONE_FORMAT.search(d) and "cell-" not in d for d in sync.details), sync.details
    assert all(re.search(r" at cell \[\d+\] line 5$", d) for d in sync.details if "item" in d), sync.details


def test_compile_mode_notes_and_tables_use_the_one_source_format_and_name_modules(ip):
    """Walk F6/F7: the breakdown's graph-break note read "graph breaks at cell-7:2", and the hot path's module
    column "(backward)" alone (compile mode records no module inside its graphs)."""
    res = run(ip, "--mode compile --steps 2 --name compile-labels")
    assert res.success, res.error_in_exec
    prof = res.result
    notes = " ".join(prof.step_breakdown().notes)
    assert "graph breaks at" in notes and "cell-" not in notes and _ONE_FORMAT.search(notes), notes
    s = prof.summary_payload
    assert all("cell-" not in w for w in s.get("warnings") or []), s.get("warnings")
    modules = [h["module"] for h in s["hot_ops"]]
    assert modules and all(m and not m.startswith("(") for m in modules), modules
    assert "top level" not in " ".join(modules)      # not known in compile mode: never claimed
    checked = ip.run_line_magic("neuron_check", "compile-labels").report.items
    details = [d for i in checked for d in i.details]
    assert all("cell-" not in d for d in details), details


def test_ops_outside_every_module_read_top_level(ip):
    """Walk F11: a loss computed in the cell (outside every module) read "in (backward)" in its backward."""
    res = run(ip, "--name top-level")
    assert res.success, res.error_in_exec
    prof = res.result
    raw = set(prof.trace.ops["module"])
    assert "" in raw and "(backward)" in raw                      # pow/mean of the loss and their backward
    peak, captured = prof.memory_peak(), prof.memory_peak(as_captured=True)
    pairs = {(c, m) for c, m, op in zip(captured["module"], peak["module"], peak["op"]) if isinstance(op, str)}
    assert ("", "top level") in pairs or ("(backward)", "top level (backward)") in pairs, pairs
    assert all(m == {"": "top level", "(backward)": "top level (backward)"}.get(c, c) for c, m in pairs), pairs
    s = prof.summary_payload
    labels = {h["module"] for h in s["hot_ops"]} | {r["module"] for r in s["memory"]["live"] if r["op"]}
    assert not any(m == "" or m.startswith("(") for m in labels), labels
