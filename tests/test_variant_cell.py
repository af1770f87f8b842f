"""The cell a what-if row inserts: the profiled cell with its `%%neuron` line changed to the row's mode and chip
(the user's other options kept, as the magic's own parser reads them) or with the row's kernel swapped in; and,
run through the magic on the emulator, each variant cell measures what its row predicted."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from IPython.core.magic_arguments import parse_argstring  # noqa: E402
from IPython.testing import globalipapp  # noqa: E402

from neuron_studio.magics import NeuronMagics  # noqa: E402
from neuron_studio.profiler.analysis import variant_cell as vc  # noqa: E402
from neuron_studio.session import session  # noqa: E402
from neuron_studio.ui.formatting import fmt_ns  # noqa: E402
from neuron_studio.ui.html import render_html  # noqa: E402
from neuron_studio.ui.text import render_text  # noqa: E402

ROW = "%%neuron --mode adaptive --chip trn2 --steps 3 --warmup 1"


def _args(line: str):
    """What the magic itself makes of a `%%neuron` line."""
    assert line.startswith("%%neuron")
    return parse_argstring(NeuronMagics.neuron, line[len("%%neuron"):])


def test_option_table_is_the_magics_own():
    parser = NeuronMagics.neuron.parser
    valued = {a.option_strings[0][2:] for a in parser._actions if a.option_strings and a.nargs is None
              and a.const is None and a.option_strings[0] != "-h"}
    flags = {s[2:] for a in parser._actions if a.option_strings and a.nargs == 0 for s in a.option_strings} - {"help"}
    assert set(vc.VALUED) == valued
    assert set(vc.FLAGS) == flags


def test_magic_line_replaced_other_options_kept_as_the_magic_reads_them():
    src = "%%neuron --steps 3 --warmup=2 --no-sync --name base --mode eager --chip trn1\nloss = m(x)\nloss.backward()"
    out = vc.variant_cell(src, ROW, compare=7)
    head, body = out.split("\n", 1)
    assert body == "loss = m(x)\nloss.backward()"
    before, after = _args(src.split("\n", 1)[0]), _args(head)
    assert (after.mode, after.chip, after.compare) == ("adaptive", "trn2", "7")
    assert (after.steps, after.warmup, after.sync, after.no_profile) == (before.steps, before.warmup, False, False)
    assert after.name == "base-adaptive-trn2"   # the variant's run has a name of its own
    # replaced where it was written, nothing duplicated
    assert head == "%%neuron --steps 3 --warmup=2 --no-sync --name base-adaptive-trn2 --mode adaptive --chip trn2 --compare 7"


def test_options_the_cell_did_not_set_are_added_and_abbreviations_replaced():
    head = vc.variant_cell("%%neuron --ste 2 --mo compile --mode eager\ny = m(x)", ROW).split("\n", 1)[0]
    args = _args(head)
    assert (args.mode, args.chip, args.steps) == ("adaptive", "trn2", 2)
    assert head.count("--mo") == 1   # both earlier spellings of --mode are gone (the last would win)
    bare = vc.variant_cell("%%neuron\ny = m(x)", "%%neuron --mode compile --chip trn3 --steps 1 --warmup 0",
                           compare=3).split("\n", 1)[0]
    assert bare == "%%neuron --mode compile --chip trn3 --compare 3"


def test_quoted_multi_word_options_and_a_long_body_survive_byte_for_byte():
    body = ("\n# a comment\nfor i in range(2):\n    loss = m(x).pow(2).mean()  # --mode eager in a comment\n"
            "    loss.backward()\n\nopt.step(); opt.zero_grad()\n")
    src = f"\n\n%%neuron --name \"two words\"   --compare 'run a' --steps 2\n{body}"
    out = vc.variant_cell(src, ROW, compare=None)
    head, rest = out.split("\n", 1)
    assert rest == body
    args = _args(head)
    assert args.name == '"two words-adaptive-trn2"'   # IPython keeps the quotes in the value; so do we
    assert args.compare == "'run a'" and args.steps == 2 and args.mode == "adaptive"


def test_kernel_row_adds_the_swap_after_the_magic_line():
    src = "%%neuron --steps 2 --name blk\nwith torch.no_grad():\n    y = net(x)"
    out = vc.variant_cell(src, 'kernels.use(model, "rmsnorm")  # from neuron_studio import kernels', compare=5,
                          model_var="net")
    lines = out.split("\n")
    assert _args(lines[0]).steps == 2 and _args(lines[0]).compare == "5" and _args(lines[0]).mode == "eager"
    assert lines[1] == "from neuron_studio import kernels"
    assert lines[2].startswith('kernels.use(net, "rmsnorm")')
    assert "\n".join(lines[3:]) == "with torch.no_grad():\n    y = net(x)"


def test_cell_with_no_magic_line():
    src = "y = m(x)\ny.sum()"
    assert vc.variant_cell(src, ROW, compare=2) == f"{ROW} --compare 2\n{src}"
    swap = vc.variant_cell(src, 'kernels.use(model, "layernorm")', model_var="m")
    assert swap == 'from neuron_studio import kernels\nkernels.use(m, "layernorm")  # the advisor\'s NKI kernel swap\n' + src
    assert vc.split_cell("%%neuronx --mode eager\ny") == (None, "%%neuronx --mode eager\ny")   # another magic


def test_bad_rows_are_typed_errors():
    with pytest.raises(vc.VariantCellError, match="kernels.use"):
        vc.variant_cell("%%neuron\ny", "print('hi')")
    with pytest.raises(vc.VariantCellError, match="unbalanced|quotation|cannot split"):
        vc.variant_cell('%%neuron --name "open\ny', ROW)


def test_repeated_swap_in_a_cell_body_is_left_as_it_is_and_restores_the_original():
    from neuron_studio import kernels

    ln = torch.nn.LayerNorm(16)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), ln)
    x = torch.randn(4, 16)
    ref = net(x)
    first = kernels.use(net, "layernorm")
    fwd = ln.forward
    second = kernels.use(net, "layernorm")     # what a body that swaps does on its second run
    assert ln.forward.__func__ is fwd.__func__ and second.modules == first.modules
    torch.testing.assert_close(net(x), ref, rtol=1e-4, atol=1e-4)
    second.restore()
    assert "forward" not in ln.__dict__        # the original forward, not the first swap's


# ---- through the magic, on the emulator -------------------------------------------------------------

MLP_SETUP = (
    "import torch\nimport torch.nn as nn\n"
    "torch.manual_seed(0)\n"
    "model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to('neuron')\n"
    "x = torch.randn(64, 256, device='neuron')\n"
    "target = torch.randn(64, 256, device='neuron')\n"
)
TUTORIAL_01 = "%%neuron --name first-step\nloss = nn.functional.mse_loss(model(x), target)\nloss.backward()"


@pytest.fixture()
def ip(tmp_path):
    shell = globalipapp.get_ipython()
    session().use_store(tmp_path / "store")
    shell.run_line_magic("load_ext", "neuron_studio")
    yield shell
    session().use_store(None)
    shell.reset(new_session=False)


def _run(ip, source: str):
    res = ip.run_cell(source)
    assert res.success, res.error_in_exec or res.error_before_exec
    return res.result


def test_tutorial_01_adaptive_variant_measures_the_prediction(ip):
    """The tutorial's eager step; the adaptive row's cell, run as the extension inserts it (right after, with the
    gradients the first run left), measures a step inside the row's range."""
    assert _run(ip, MLP_SETUP) is None
    prof = _run(ip, TUTORIAL_01)
    rows = prof.to_summary()["what_if"]
    assert rows["cell"]["source"] == TUTORIAL_01
    row = next(r for r in rows["rows"] if r["mode"] == "adaptive" and r["chip"] == "trn2")
    assert row["cell"] == ("%%neuron --name first-step-adaptive-trn2 --mode adaptive --chip trn2 "
                           f"--compare {prof.run_id}\n" + TUTORIAL_01.split("\n", 1)[1])
    assert row["run"] == row["cell"].split("\n", 1)[0]
    wi = prof.what_if(chips=["trn2"])
    assert wi["current"].iloc[0] and wi["cell"].iloc[0] is None     # the profile's own row has no variant cell
    assert wi["cell"].iloc[1:].map(lambda c: isinstance(c, str)).all()   # modes and bf16 autocast: cell changes
    ran = _run(ip, row["cell"])
    assert (ran.trace.mode, ran.summary.chip, ran.trace.meta["name"]) == ("adaptive", "trn2", "first-step-adaptive-trn2")
    # the gradients the first run left make backward accumulate (a few more ops): inside the range, not equal
    assert row["step_time_low_ns"] <= ran.step_time_ns <= row["step_time_high_ns"]
    # from the state the profiled run started in (the tutorial resets the gradients), the prediction itself
    _run(ip, "model.zero_grad(set_to_none=True)")
    again = _run(ip, row["cell"])
    assert again.step_time_ns == pytest.approx(row["step_time_ns"], rel=1e-9)
    diff = again.summary_payload["compare"]
    assert diff["run_id"] == prof.run_id       # the variant's output diffs against the profiled run
    # and sets the row's prediction beside what it measured
    p = diff["prediction"]
    assert (p["variant"], p["step_time_ns"], p["low_ns"], p["high_ns"]) == (
        "adaptive on trn2", row["step_time_ns"], row["step_time_low_ns"], row["step_time_high_ns"])
    assert p["measured_ns"] == again.step_time_ns and p["within"] is True
    assert p["ratio"] == pytest.approx(1.0, rel=1e-9)
    assert f"this run: {fmt_ns(again.step_time_ns)}, within the range" in render_text(again.summary_payload)
    assert "predicted " + fmt_ns(row["step_time_ns"]) + " by run " in render_html(again.summary_payload)
    # an edited variant is no row's cell: no prediction beside it
    edited = _run(ip, row["cell"].replace("loss.backward()", "loss.backward()\nloss.item()"))
    assert edited.summary_payload["compare"]["run_id"] == prof.run_id
    assert edited.summary_payload["compare"]["prediction"] is None


def test_every_row_cell_runs_its_mode_chip_and_kernel(ip):
    """Each row's cell, run through the magic, runs that row's mode on that row's chip, and a kernel row's cell runs
    the kernel (its custom op is in the trace) on the model the cell uses, under its own variable name."""
    from tests.models.blocks import TransformerBlock

    ip.user_ns["TransformerBlock"] = TransformerBlock
    assert _run(ip, "import torch\ntorch.manual_seed(0)\nnet = TransformerBlock(128, 4).to('neuron')\n"
                    "x = torch.randn(4, 128, 128, device='neuron')\n") is None
    cell = "%%neuron --steps 2 --name blk\nwith torch.no_grad():\n    y = net(x)"
    prof = _run(ip, cell)
    wi = prof.what_if(chips=["trn1", "trn2"])
    kernel_rows = wi[wi["kernel"].notna()]
    assert len(kernel_rows) and kernel_rows["cell"].notna().all()
    assert wi.loc[(wi["kind"] != "code") & ~wi["current"], "cell"].notna().all()
    for r in wi[~wi["current"]].itertuples():
        if r.kind == "code" and r.cell is None:   # a change outside the cell (where the optimizer is built)
            assert r.where and r.run, r.variant
            continue
        ran = _run(ip, r.cell)
        assert (ran.trace.mode, ran.summary.chip) == (r.mode, r.chip), r.variant
        names = set(ran.trace.ops["name"])
        if r.variant == "bf16 autocast":   # the cell runs its forward matmuls in bf16
            mm = ran.trace.ops[ran.trace.ops["name"].isin(["aten::mm", "aten::addmm", "aten::bmm"])]
            assert len(mm) and mm["input_dtypes"].str.contains("bfloat16").all(), r.variant
        if isinstance(r.kernel, str):
            assert f"neuron_studio::{r.kernel.removesuffix('_kernel')}" in names, r.variant
            assert 'kernels.use(net, "' in r.cell and 'kernels.use(net, "' in r.run
            _run(ip, "from neuron_studio import kernels\n"
                     "for _m in net.modules():\n    _m.__dict__.pop('forward', None)\n")   # unswap for the next row
        else:
            assert not any(n.startswith("neuron_studio::") for n in names), r.variant


def test_inline_html_shows_each_rows_line_and_cell_escaped_and_names_the_extension(ip):
    """Without the extension the output cannot run code: each row's line (and whole cell) is shown, selectable,
    escaped, and the output says the JupyterLab extension adds the one-click buttons."""
    assert _run(ip, MLP_SETUP) is None
    prof = _run(ip, "%%neuron --name lt\ny = model(x)\nneg = (y < 0).float().sum()")
    s = prof.summary_payload
    h = render_html(s)
    assert "(y < 0)" not in h and "(y &lt; 0)" in h
    adaptive = next(r for r in s["what_if"]["rows"] if (r["mode"], r["chip"]) == ("adaptive", "trn2"))
    assert f"<code class='runline' style='white-space:nowrap;user-select:all'>{adaptive['run']}</code>" in h
    assert adaptive["run"] == f"%%neuron --name lt-adaptive-trn2 --mode adaptive --chip trn2 --compare {prof.run_id}"
    assert "the Neuron Studio extension adds “Insert &amp; run” buttons" in h
    assert h.count("<details class='runcell'>") == sum(1 for r in s["what_if"]["rows"] if not r["current"] and r["cell"])
