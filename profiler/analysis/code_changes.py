"""The one-line PyTorch changes a user makes before any NKI kernel, each as the recorded ops would run with it.

The what-if advisor re-models each change's ops with the NeuronCore model, like a mode or a chip, so its row is a
prediction from this trace, not a rule of thumb. Each change names the exact line that applies it and, when the
change is inside the profiled `%%neuron` cell, the whole new cell. The rewrites follow what PyTorch itself runs:

- fused optimizer (`torch.optim.AdamW(..., fused=True)`; Adam, AdamW, SGD, Adagrad have fused kernels): the
  optimizer's per-parameter (or `_foreach_*`) ops of one step become the ops the emulator records for a fused
  optimizer step: one `_foreach_add_` of the step counters (Adam family) and one `_fused_<opt>_` over the
  parameter, gradient and state lists (torch/optim/adamw.py `_fused_adamw`, torch 2.13);
- bf16 autocast (`torch.autocast("neuron", dtype=torch.bfloat16)`): autocast's casting rules (torch/amp
  autocast_mode.py and the op lists in aten/src/ATen/autocast_mode.cpp) followed over the recorded ops by the
  storages they read and write (`autocast_bf16`);
- host syncs out of the step (`.item()`, `.cpu()`, printing): those ops removed, so the step no longer waits for
  the device there and adaptive eager / compile no longer split at them;
- inputs padded to a few bucket lengths (a compiled step that recompiles for each new input shape): each step's
  ops at the padded length (the dimension that varies between the recompiles' input shapes), so the padded step's
  extra work is modeled, and the compiles counted at the bucket shapes (`bucket_shapes`).

Pure: DataFrames in, dataclasses out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis.blockers import shape_compiles, shape_recompiles
from neuron_studio.profiler.model.ops import DTYPE_BF16, DTYPE_FP32, classify_engine, shape_stats
from neuron_studio.profiler.vocabulary import source_label

__all__ = ["CodeChange", "code_changes", "fused_optimizer", "autocast_bf16", "host_syncs", "bucket_shapes",
           "FUSED_OPTIMIZERS", "AUTOCAST_LINE", "BUCKET", "data_dependent_ops", "varying_dimension", "pad_line"]

#: Optimizers with a fused implementation in torch 2.13: the op their fused step records, and whether it keeps
#: per-parameter step counters on the device (one `_foreach_add_` of them per step).
FUSED_OPTIMIZERS = {"Adam": ("aten::_fused_adam_", True), "AdamW": ("aten::_fused_adamw_", True),
                    "SGD": ("aten::_fused_sgd_", False), "Adagrad": ("aten::_fused_adagrad_", True)}
AUTOCAST_LINE = 'with torch.autocast("neuron", dtype=torch.bfloat16):'
#: Ops an optimizer's first step creates its state with (kept by the fused rewrite: a fused optimizer makes them too).
_STATE_INIT = ("aten::zeros_like",)
#: Host syncs a one-line change removes (data-dependent shapes and the profiler's own timing sync are not).
_MOVABLE_SYNCS = ("item", "to_host", "print")

FUSED_BASIS = ("re-modeled, approximate: the optimizer's ops of each step replaced by the ops a fused optimizer "
               "step records (one launch over all parameters, reading and writing each tensor once)")
AUTOCAST_BASIS = ("re-modeled, approximate: autocast's casting rules over the recorded ops (FP32 matmuls/convolutions "
                  "in BF16 after a cast of each FP32 input, ops on BF16 inputs in BF16, FP32-list ops and gradient "
                  "accumulation cast back up); op names autocast would add or drop beyond casts are not known from "
                  "an FP32 trace. Check the loss: BF16 changes numerics")
BUCKET_BASIS = ("re-modeled, approximate: each step's ops at its input length padded up to the bucket (shapes with that "
                "length, or the batch times it, padded), plus the padding op itself run eagerly on the device before "
                "the compiled step; compiles counted per distinct padded shape. "
                "Compile time is not step time: the row ranks first because each recompile costs compile time")
#: The bucket length the padding line uses (a multiple that keeps the Tensor Engine's tiles full).
BUCKET = 32
SYNC_BASIS = ("re-modeled, approximate: the step's .item()/.cpu()/print ops removed (the host no longer waits "
              "for the device there, and fusion no longer stops there)")


@dataclass(frozen=True)
class CodeChange:
    """One PyTorch change as a what-if row: the ops it would run (re-modeled by the advisor), the line that applies
    it and where, the new `%%neuron` cell when the change is inside the profiled cell, and the breakdown
    categories it shrinks."""

    key: str                     # fused_optimizer | autocast_bf16 | host_syncs
    variant: str                 # the row's name
    line: str                    # the exact line that applies it
    where: str                   # where the line goes
    ops: pd.DataFrame            # the recorded ops as they would run with the change
    basis: str
    addresses: tuple[str, ...]
    cell: str | None = None
    targets: frozenset = frozenset()   # (op, module) pairs of the recorded ops it changes (the hot path cites it)
    acts_on: str = ""                  # what those ops are, as a reason names them ("the AdamW optimizer's ops")
    compiles: tuple[int, int] | None = None   # graph compiles of the profiled steps without and with the change


def _shapes(text: Any) -> list[tuple[int, ...]]:
    """"16x8;16;()" -> [(16, 8), (16,), ()] (the trace's shape strings)."""
    if not isinstance(text, str) or not text:
        return []
    out = []
    for part in text.split(";"):
        part = part.strip()
        out.append(() if part in ("()", "") else tuple(int(d) for d in part.split("x") if d))
    return out


def _shape_text(shapes: Sequence[tuple[int, ...]]) -> str:
    return ";".join("x".join(str(d) for d in s) if s else "()" for s in shapes)


def _ids(v: Any) -> list[str]:
    if isinstance(v, str):
        return [x for x in v.split(",") if x]
    if isinstance(v, (list, tuple, np.ndarray)):
        return [str(x) for x in v]
    return []


def _derived(name: str, shapes: list[tuple[int, ...]], dtypes: list[str]) -> dict[str, Any]:
    """The model's derived columns of an op, computed as the trace computes them for a recorded op."""
    ib, ob, el, isz, dc, fl = shape_stats(name, classify_engine(name, False), shapes, dtypes, (), (), 0)
    return {"in_bytes": ib, "out_bytes": ob, "elems": el, "itemsize": isz, "dtype_class": dc, "flops": fl}


def _optimizer_tensors(group: pd.DataFrame, param_ids: set[str]) -> tuple[list[tuple], int]:
    """(the parameters the optimizer step updates as (storage, shape, dtype), state tensors per parameter), from
    the storages its in-place ops write: parameters are those the forward read, state the others (temporaries the
    step creates itself are neither)."""
    known: dict[str, tuple[tuple[int, ...], str]] = {}
    created: set[str] = set()
    written: list[str] = []
    for r in group.itertuples(index=False):
        reads, shapes = _ids(r.reads), _shapes(r.input_shapes)
        dtypes = [d for d in str(r.input_dtypes or "").split(",") if d]
        if len(reads) == len(shapes):
            for i, sid in enumerate(reads):
                known.setdefault(sid, (shapes[i], dtypes[i] if i < len(dtypes) else "float32"))
        for sid in _ids(r.writes):
            if not bool(r.is_inplace):
                created.add(sid)
            elif sid not in created and sid not in written:
                written.append(sid)
    params = [(s, *known[s]) for s in written if s in param_ids and s in known and known[s][0]]
    state = [s for s in written if s not in param_ids and s in known and known[s][0]]
    return params, (round(len(state) / len(params)) if params else 0)


def fused_optimizer(trace_ops: pd.DataFrame, optimizers: dict[str, dict] | None = None, cell: dict | None = None,
                    run_id: Any = None) -> CodeChange | None:
    """The step with the optimizer fused, or None (no optimizer of a fused kind in the trace, already fused, or the
    trace lacks the storages its ops read and wrote). `optimizers`: the profiled cell's optimizer variables
    (`meta["cell"]["optimizers"]`: class, constructor line), for the exact line; with the profiled `cell` too, the
    new `%%neuron` cell that rebuilds the optimizer fused before its step (`_fused_cell`)."""
    need = {"phase", "module", "reads", "writes", "is_inplace", "input_shapes", "input_dtypes"}
    if not len(trace_ops) or not need <= set(trace_ops.columns):
        return None
    module = trace_ops["module"].astype(str)
    is_opt = (trace_ops["phase"] == "optimizer").to_numpy() & module.str.startswith("optimizer.").to_numpy()
    if not is_opt.any():
        return None
    param_ids = {sid for v in trace_ops.loc[(trace_ops["phase"] == "forward").to_numpy(), "reads"] for sid in _ids(v)}
    drop: list[Any] = []
    new_rows: list[dict] = []
    classes: list[str] = []
    for cls in sorted(set(module[is_opt].str.removeprefix("optimizer."))):
        if cls not in FUSED_OPTIMIZERS:
            continue
        rows = trace_ops[is_opt & (module == f"optimizer.{cls}").to_numpy()]
        if rows["name"].astype(str).str.startswith("aten::_fused_").any():
            continue   # already fused
        fused_name, has_steps = FUSED_OPTIMIZERS[cls]
        for _, g in rows.groupby(["step", "device_index"], sort=False):
            # an optimizer's first step creates its state (zeros_like per state tensor): a fused one does too, and
            # makes each step counter on the device (a `zero_` per parameter): those stay, only the update is fused
            init = g["name"].astype(str).isin(_STATE_INIT).to_numpy()
            upd = g[~init]
            if len(upd) < 2:
                continue
            params, n_state = _optimizer_tensors(g, param_ids)
            if not params:
                continue
            shapes = [p[1] for p in params]
            dtypes = [p[2] for p in params]
            lists = 2 + n_state                     # parameters, gradients, state tensors
            f_shapes = shapes * lists + ([()] * len(params) if has_steps else [])
            f_dtypes = dtypes * lists + (["float32"] * len(params) if has_steps else [])
            reads = ",".join(dict.fromkeys(s for v in upd["reads"] for s in _ids(v)))
            writes = ",".join(dict.fromkeys(s for v in upd["writes"] for s in _ids(v)))
            first, last = upd.iloc[0], upd.iloc[-1]
            base = {**first.to_dict(), "output_shapes": "", "output_dtypes": "", "is_view": False, "is_inplace": True,
                    "sync": None, "transfer": None, "fallback": None, "transfer_bytes": 0.0}
            seqs = upd["seq"].to_numpy()
            counters = len(params) if init.any() and has_steps and len(seqs) >= len(params) + 2 else 0
            for k in range(counters):
                new_rows.append({**base, "name": "aten::zero_", "overload": "default", "seq": int(seqs[k]),
                                 "end_ns": int(first["start_ns"]) + 1, "input_shapes": "()", "input_dtypes": "float32",
                                 "reads": "", "writes": "", **_derived("aten::zero_", [()], ["float32"])})
            if has_steps:
                new_rows.append({**base, "name": "aten::_foreach_add_", "overload": "Scalar", "seq": int(seqs[counters]),
                                 "end_ns": int(first["start_ns"]) + 1, "input_shapes": _shape_text([()] * len(params)),
                                 "input_dtypes": ",".join(["float32"] * len(params)), "reads": "", "writes": "",
                                 **_derived("aten::_foreach_add_", [()] * len(params), ["float32"] * len(params))})
            new_rows.append({**base, "name": fused_name, "overload": "default", "seq": int(seqs[counters + 1]),
                             "start_ns": int(first["start_ns"]) + (1 if has_steps else 0), "end_ns": int(last["end_ns"]),
                             "input_shapes": _shape_text(f_shapes), "input_dtypes": ",".join(f_dtypes),
                             "reads": reads, "writes": writes, **_derived(fused_name, f_shapes, f_dtypes)})
            drop.extend(upd.index)
        if drop and cls not in classes:
            classes.append(cls)
    if not new_rows:
        return None
    kept = trace_ops.drop(index=drop)
    ops = pd.concat([kept, pd.DataFrame(new_rows, columns=trace_ops.columns).astype(
        {c: trace_ops[c].dtype for c in ("seq", "start_ns", "end_ns") if c in trace_ops})], ignore_index=True)
    ops = ops.sort_values("seq", kind="stable").reset_index(drop=True)
    cls = classes[0]
    line, where = _optimizer_line(cls, optimizers)
    targets = frozenset(zip(trace_ops.loc[drop, "name"].astype(str), trace_ops.loc[drop, "module"].astype(str)))
    return CodeChange("fused_optimizer", f"fused {cls}", line, where, ops, FUSED_BASIS, ("launch", "compute"),
                      cell=_fused_cell(cls, optimizers, cell, run_id), targets=targets,
                      acts_on=f"the {' and '.join(classes)} optimizer's ops")


def _optimizer_line(cls: str, optimizers: dict[str, dict] | None) -> tuple[str, str]:
    """The constructor line with `fused=True` (the cell's own optimizer variable and arguments when known)."""
    for var, o in (optimizers or {}).items():
        if o.get("class") == cls and o.get("constructor"):
            return f"{var} = {o['constructor']}", f"where {var} is built; then run the step again"
    return (f"torch.optim.{cls}(params, ..., fused=True)",
            f"where the {cls} optimizer is built: add fused=True to its arguments")


def _fused_cell(cls: str, optimizers: dict[str, dict] | None, cell: dict | None, run_id: Any) -> str | None:
    """The profiled cell rebuilding its optimizer variable fused once, before its first step: its body is run
    --warmup + --steps times, so the rebuild is guarded by the optimizer's own `fused` setting. None when the cell or
    the optimizer's variable and constructor are not known, or the cell is compiled (then the line alone, with Copy).

    A rebuilt optimizer starts its state again (moments, step counts), as the constructor line does wherever it goes;
    the variable keeps the fused optimizer after the cell."""
    from neuron_studio.profiler.analysis import variant_cell as _vc

    if not cell or not isinstance(cell.get("source"), str):
        return None
    var, ctor = next(((v, o["constructor"]) for v, o in (optimizers or {}).items()
                      if o.get("class") == cls and o.get("constructor")), (None, None))
    if var is None:
        return None
    options, body = _vc.split_cell(cell["source"])
    if options is not None and _vc.parse_magic_options(options).get("mode") == "compile":
        return None   # a compiled cell body is one function: a rebuild inside it would be traced, not run once
    guard = (f'if not {var}.defaults.get("fused"):  # once: {var} rebuilt as a fused {cls} (its state starts again)\n'
             f"    {var} = {ctor}")
    if options is None:
        return guard + "\n" + body
    head = _vc.variant_magic_line(options, _vc.MAGIC, compare=run_id, name_suffix="fused")
    return head + "\n" + guard + "\n" + body


#: Ops autocast runs in FP32 whatever their inputs (torch/amp autocast's fp32 list, the reductions and losses a
#: BF16 input would lose precision in): a BF16 input is cast back up first.
AUTOCAST_FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "nll_loss", "nll_loss2d", "nll_loss_forward", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "binary_cross_entropy_with_logits", "dist", "cdist",
    "renorm", "logsumexp", "sum", "prod", "cumprod", "cumsum", "softmax", "_softmax", "log_softmax",
    "_log_softmax", "mean"})


def _base(name: str) -> str:
    return name.split("::", 1)[-1].split(".", 1)[0]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def autocast_bf16(trace_ops: pd.DataFrame, cell: dict | None = None, run_id: Any = None,
                  kinds: np.ndarray | None = None) -> CodeChange | None:
    """The step under bf16 autocast, or None when no FP32 matmul/convolution ran on the device (or the trace lacks
    the storages its ops read and wrote, which the casts are placed by).

    Follows autocast's rules over the recorded ops in order, tracking which storages hold BF16 values: an FP32
    matmul/convolution (forward or backward) runs in BF16, each FP32 input first cast down by its own `_to_copy`
    (a parameter once per forward pass: autocast caches the casts of leaf tensors until the autocast block exits,
    and the backward reuses what the forward saved); an op whose float inputs are all BF16 runs in BF16 (half the
    bytes); an op of autocast's FP32 list, or an in-place update of an FP32 tensor (gradient accumulation), casts
    its BF16 inputs back up; other mixed ops promote inside the op. The optimizer step is unchanged (its tensors
    stay FP32).

    The cast cache lives for one forward pass and its backward: it starts empty at each step and each forward
    pass that follows a backward or optimizer op (torch/amp/autocast_mode.py clears it when the outermost
    autocast block exits, `torch.clear_autocast_cache`), so the weights are cast again every step, as they are
    when the step runs under autocast. A storage written again in any phase (the optimizer's update of a
    parameter) drops its cached copy, and an FP32 write takes it out of the BF16 set."""
    need = {"dtype_class", "phase", "reads", "writes", "input_shapes", "input_dtypes", "is_inplace"}
    if not len(trace_ops) or not need <= set(trace_ops.columns):
        return None
    names = trace_ops["name"].astype(str)
    engine = names.map(lambda n: classify_engine(n, False)).to_numpy(dtype=object)
    on_device = (np.asarray(kinds, dtype=object) == "device") if kinds is not None and len(kinds) == len(trace_ops) \
        else trace_ops["fallback"].isna().to_numpy()
    fp32 = (engine == "tensor") & (trace_ops["dtype_class"].to_numpy() == DTYPE_FP32) & on_device
    fp32 = fp32 & trace_ops["phase"].isin(["forward", "backward"]).to_numpy()
    if not fp32.any():
        return None
    ops = trace_ops.copy()
    next_id = 1 + max((int(x) for v in trace_ops["writes"] for x in _ids(v) if x.isdigit()), default=0)
    low: set[str] = set()
    cached: dict[str, str] = {}          # an FP32 storage -> its BF16 copy (autocast's cast cache)
    casts: list[dict] = []               # new rows, each with the position of the op it precedes
    in_b, out_b = ops["in_bytes"].to_numpy(dtype=float).copy(), ops["out_bytes"].to_numpy(dtype=float).copy()
    dclass = ops["dtype_class"].to_numpy().copy()
    isize = ops["itemsize"].to_numpy().copy()
    reads_col = ops["reads"].to_numpy(dtype=object).copy()
    phase = ops["phase"].to_numpy(dtype=object)
    inplace = ops["is_inplace"].to_numpy(dtype=bool)
    dtypes_col = ops["input_dtypes"].astype(str).to_numpy(dtype=object).copy()
    rows = ops.to_dict("records")
    steps = ops["step"].to_numpy() if "step" in ops else np.zeros(len(ops), dtype=np.int64)

    def cast(i: int, sid: str, shape: tuple[int, ...], down: bool) -> str:
        nonlocal next_id
        fresh = str(next_id)
        next_id += 1
        n = _numel(shape)
        src, dst = ("float32", "bfloat16") if down else ("bfloat16", "float32")
        casts.append({**rows[i], "name": "aten::_to_copy", "overload": "default", "flops": 0.0,
                      "in_bytes": float(n * (4 if down else 2)), "out_bytes": float(n * (2 if down else 4)),
                      "elems": float(n), "itemsize": 2 if down else 4, "dtype_class": DTYPE_BF16 if down else DTYPE_FP32,
                      "is_inplace": False, "is_view": False, "input_shapes": _shape_text([shape]),
                      "output_shapes": _shape_text([shape]), "input_dtypes": src, "output_dtypes": dst,
                      "reads": sid, "writes": fresh, "_at": i - 0.5})
        return fresh

    def written(i: int, writes: list[str], bf16: bool) -> None:
        """Storages op i wrote: any cached BF16 copy of them is stale, and those it wrote in FP32 hold no BF16
        value (an in-place op keeps its destination's dtype)."""
        keep = bf16 or (bool(inplace[i]) and bool(writes) and writes[0] in low)
        for sid in writes:
            cached.pop(sid, None)
            if not keep:
                low.discard(sid)

    for i in range(len(ops)):
        if i and (steps[i] != steps[i - 1] or (phase[i] == "forward" and phase[i - 1] != "forward")):
            cached.clear()                    # a new forward pass: a new autocast block, an empty cast cache
        writes = _ids(rows[i]["writes"])
        if phase[i] not in ("forward", "backward"):
            written(i, writes, False)         # the optimizer step runs in FP32 (it updates the parameters)
            continue
        reads, shapes = _ids(reads_col[i]), _shapes(rows[i]["input_shapes"])
        dts = [d for d in str(dtypes_col[i]).split(",") if d]
        if len(reads) != len(shapes) or len(dts) < len(shapes):
            written(i, writes, False)         # cannot tell which storage is which input: left as recorded (FP32)
            continue
        floats = [k for k in range(len(reads)) if dts[k] == "float32"]
        is_low = [reads[k] in low for k in floats]
        if engine[i] == "none":               # a view of a BF16 tensor is BF16
            if is_low and all(is_low):
                low.update(writes)
            else:
                written(i, writes, False)
            continue
        new_reads = list(reads)
        bf16 = False                            # whether the op runs (and writes) in BF16
        if fp32[i]:
            for k in floats:
                if reads[k] in low:
                    continue
                if reads[k] not in cached:
                    cached[reads[k]] = cast(i, reads[k], shapes[k], True)
                new_reads[k] = cached[reads[k]]
            in_b[i], out_b[i], dclass[i], isize[i] = in_b[i] / 2, out_b[i] / 2, DTYPE_BF16, 2
            dtypes_col[i] = str(dtypes_col[i]).replace("float32", "bfloat16")
            bf16 = True
        elif floats and any(is_low):
            target_fp32 = bool(inplace[i]) and writes and writes[0] not in low
            if _base(str(rows[i]["name"])) in AUTOCAST_FP32 or target_fp32:
                for k, lw in zip(floats, is_low):
                    if lw:
                        new_reads[k] = cast(i, reads[k], shapes[k], False)
            elif all(is_low):
                in_b[i], out_b[i], isize[i] = in_b[i] / 2, out_b[i] / 2, 2
                dtypes_col[i] = str(dtypes_col[i]).replace("float32", "bfloat16")
                bf16 = True
            else:                               # promoted inside the op: the BF16 inputs read half the bytes
                in_b[i] -= sum(_numel(shapes[k]) * 2 for k, lw in zip(floats, is_low) if lw)
        written(i, writes, bf16)
        if bf16:
            low.update(writes)
        reads_col[i] = ",".join(new_reads)
    ops["in_bytes"], ops["out_bytes"], ops["dtype_class"], ops["itemsize"] = in_b, out_b, dclass, isize
    ops["reads"], ops["input_dtypes"] = reads_col, dtypes_col
    extra = pd.DataFrame(casts, columns=[*trace_ops.columns, "_at"])
    extra["seq"] = int(trace_ops["seq"].max()) + 1 + np.arange(len(extra))
    order = np.concatenate([np.arange(len(ops), dtype=float), extra["_at"].to_numpy(dtype=float)])
    ops = pd.concat([ops, extra.drop(columns="_at").astype({c: trace_ops[c].dtype for c in ("seq",)})],
                    ignore_index=True).iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    new_cell, where = _autocast_cell(trace_ops, cell, run_id)
    targets = frozenset(zip(trace_ops.loc[fp32, "name"].astype(str), trace_ops.loc[fp32, "module"].astype(str)))
    return CodeChange("autocast_bf16", "bf16 autocast", AUTOCAST_LINE, where, ops, AUTOCAST_BASIS, ("compute",),
                      cell=new_cell, targets=targets, acts_on="the FP32 matmuls/convolutions")


_CELL_LINE = re.compile(r"^cell-(?P<cell>[^:]+):(?P<line>\d+)$")


def _cell_lines(sources: pd.Series) -> set[int]:
    out = set()
    for s in sources.dropna().astype(str):
        m = _CELL_LINE.match(s)
        if m:
            out.add(int(m.group("line")))
    return out


def _autocast_cell(trace_ops: pd.DataFrame, cell: dict | None, run_id: Any) -> tuple[str | None, str]:
    """The profiled cell with its forward lines inside the autocast block, and where that is; None when the cell is
    unknown or its forward shares a line with the backward or the optimizer (`loss(model(x)).backward()`)."""
    from neuron_studio.profiler.analysis import variant_cell as _vc

    generic = "around the forward pass and the loss, not the backward or optimizer step"
    if not cell or not isinstance(cell.get("source"), str) or "source" not in trace_ops:
        return None, generic
    options, body = _vc.split_cell(cell["source"])
    lines = body.split("\n")
    # backward ops carry their forward op's line; the line that calls .backward() records the gradient seed as a
    # forward op: neither belongs inside the block
    starts_backward = {i for i, t in enumerate(lines, 1) if ".backward(" in t}
    fwd = {x for x in _cell_lines(trace_ops.loc[trace_ops["phase"] == "forward", "source"])
           if x not in starts_backward and x <= len(lines)}
    other = _cell_lines(trace_ops.loc[trace_ops["phase"] == "optimizer", "source"]) | starts_backward
    if not fwd:
        return None, generic
    a, b = min(fwd), max(fwd)
    if any(a <= x <= b for x in other):
        return None, generic
    indent = len(lines[a - 1]) - len(lines[a - 1].lstrip())
    block = lines[a - 1:b]
    if any(t.strip() and len(t) - len(t.lstrip()) < indent for t in block):
        return None, generic
    pad = lines[a - 1][:indent]
    new_body = lines[:a - 1] + [pad + AUTOCAST_LINE] + ["    " + t if t.strip() else t for t in block] + lines[b:]
    where = (f"around lines {a}-{b} of the cell, the forward pass" if b > a
             else f"around line {a} of the cell, the forward pass")
    if options is None:
        return "\n".join(new_body), where
    head = _vc.variant_magic_line(options, _vc.MAGIC, compare=run_id, name_suffix="bf16")
    return head + "\n" + "\n".join(new_body), where


def host_syncs(trace_ops: pd.DataFrame, source_text: Callable[[str], str | None] | None = None,
               kinds: np.ndarray | None = None) -> CodeChange | None:
    """The step without its movable host syncs (ops the one op classification, `profiler.op_kinds`, calls `sync`
    whose reason is a read the user wrote: `.item()`, `.cpu()`, printing), or None when it has none."""
    if not len(trace_ops) or "sync" not in trace_ops:
        return None
    sync = trace_ops["sync"].isin(_MOVABLE_SYNCS).to_numpy().copy()
    if kinds is not None and len(kinds) == len(sync):
        sync &= np.asarray(kinds, dtype=object) == "sync"
    if "tags" in trace_ops:
        sync &= ~trace_ops["tags"].astype(str).str.contains("timing_sync").to_numpy()
    if not sync.any():
        return None
    srcs = list(dict.fromkeys(s for s in trace_ops.loc[sync, "source"].tolist() if isinstance(s, str) and s))
    shown = [source_text(s) if source_text else None for s in srcs]
    code = next((t.strip() for t in shown if t), None)
    n = int(sync.sum())
    steps = max(1, int(trace_ops["step"].nunique())) if "step" in trace_ops else 1
    line = (f"keep the value on the device (e.g. accumulate into a tensor) and read it once after the loop, or every "
            f"N steps, instead of `{code}`" if code else
            "keep values on the device; read them (.item(), .cpu(), print) once after the loop or every N steps")
    where = "at " + ", ".join(source_label(x) for x in srcs[:3]) if srcs else "in the step"
    ops = trace_ops[~sync].reset_index(drop=True)
    targets = frozenset(zip(trace_ops.loc[sync, "name"].astype(str), trace_ops.loc[sync, "module"].astype(str)))
    return CodeChange("host_syncs", f"no host sync in the step ({n / steps:.3g} per step)", line, where, ops,
                      SYNC_BASIS, ("sync", "launch"), targets=targets, acts_on="the host syncs")


def _first_input_dims(shapes: Any) -> tuple[int, ...] | None:
    """The first input's dims of a compile's shape string ("2x50x128, 128x128, 128"), or None."""
    first = re.split(r"[;,]", str(shapes or ""))[0].strip()
    parts = first.split("x")
    return tuple(int(p) for p in parts) if first and all(p.isdigit() for p in parts) else None


def varying_dimension(shapes: Sequence[Any]) -> tuple[int, list[tuple[int, ...]]] | None:
    """(the one dimension of the first input that differs between compiles, each compile's first-input dims), or None
    when the shapes do not parse, differ in rank, or differ in more or fewer than one dimension."""
    dims = [d for d in (_first_input_dims(s) for s in shapes) if d is not None]
    if len(dims) < 2 or len({len(d) for d in dims}) != 1:
        return None
    varying = [i for i in range(len(dims[0])) if len({d[i] for d in dims}) > 1]
    return (varying[0], dims) if len(varying) == 1 else None


def pad_line(ndim: int, dim: int, bucket: int = BUCKET) -> str:
    """The line that pads dimension `dim` of an `ndim`-dimensional input `x` up to a multiple of `bucket`."""
    pad = ", ".join(["0"] * (2 * (ndim - 1 - dim)) + ["0", f"-x.shape[{dim}] % {bucket}"])
    return f"x = F.pad(x, ({pad}))"


def _step_length(shapes: pd.Series, ref: tuple[int, ...], d: int) -> int | None:
    """A step's input length: dimension `d` of the first of its ops' shapes that matches `ref` in every other."""
    for text in shapes:
        for shp in _shapes(text):
            if len(shp) == len(ref) and all(shp[i] == ref[i] for i in range(len(ref)) if i != d):
                return shp[d]
    return None


def bucket_shapes(trace_ops: pd.DataFrame, compiles: pd.DataFrame | None,
                  all_steps: pd.DataFrame | None = None) -> CodeChange | None:
    """The compiled step with its input padded to BUCKET-multiples of the length that varies between the recompiles,
    or None (no recompiles, or not exactly one varying dimension of the first input). Each step's length is read
    from its ops' shapes (the first shape of the compiles' rank that matches them in every other dimension);
    shapes of that length, or of the batch dimensions times it (a flattened batch), are padded and the ops' sizes
    recomputed from the padded shapes. `all_steps`: the whole trace when `trace_ops` are some of its steps (the
    what-if's re-modeled ones): the padded compiles are counted over all of its steps."""
    if compiles is None or not len(shape_recompiles(compiles)) or not len(trace_ops):
        return None
    found = varying_dimension(shape_compiles(compiles)["shapes"].tolist())
    if found is None or "step" not in trace_ops:
        return None
    d, dims = found
    ref = dims[0]
    lead = int(np.prod(ref[:d])) if d else 1
    every = all_steps if all_steps is not None else trace_ops
    length_of = {k: _step_length(every.loc[idx, "input_shapes"], ref, d)
                 for k, idx in every.groupby("step", sort=False).groups.items()}
    lengths = [v for v in length_of.values() if v]
    padded_keys = {ref[:d] + (-(-v // BUCKET) * BUCKET,) + ref[d + 1:] for v in lengths}
    out = trace_ops.copy()
    out["seq"] = out["seq"] * 2      # room for each step's pad op just before the step's first op
    pads: list[dict] = []
    for k, idx in out.groupby("step", sort=False).groups.items():
        g = out.loc[idx]
        length = length_of.get(k)
        if not length:
            continue
        padded = -(-length // BUCKET) * BUCKET
        # the padding line itself: one eager op on the device each step, before the compiled graph
        first = g.loc[g["seq"].idxmin()]
        dtype = (str(first.get("input_dtypes") or "float32").split(",") or ["float32"])[0] or "float32"
        x_in = ref[:d] + (length,) + ref[d + 1:]
        x_out = ref[:d] + (padded,) + ref[d + 1:]
        ib, ob, el, isz, dc, _ = shape_stats("aten::constant_pad_nd", classify_engine("aten::constant_pad_nd", False),
                                             [x_in], [dtype], [x_out], [dtype], 0)
        pads.append({**first.to_dict(), "name": "aten::constant_pad_nd", "overload": "default",
                     "seq": int(first["seq"]) - 1, "end_ns": int(first["start_ns"]) + 1,
                     "input_shapes": _shape_text([x_in]), "input_dtypes": dtype, "output_shapes": _shape_text([x_out]),
                     "output_dtypes": dtype, "graph": -1, "is_view": False, "is_inplace": False, "sync": None,
                     "transfer": None, "fallback": None, "transfer_bytes": 0.0, "reads": "", "writes": "",
                     "module": "", "source": None, "tags": "", "in_bytes": ib, "out_bytes": ob, "elems": el,
                     "itemsize": isz, "dtype_class": dc, "flops": 0.0})
        if padded == length:
            continue

        def pad(text: Any, length: int = length, padded: int = padded) -> Any:
            if not isinstance(text, str) or not text:
                return text
            return _shape_text([tuple(padded if v == length else lead * padded if lead > 1 and v == lead * length
                                      else v for v in shp) for shp in _shapes(text)])

        for i in idx:
            r = out.loc[i]
            ins, outs = pad(r["input_shapes"]), pad(r["output_shapes"])
            if ins == r["input_shapes"] and outs == r["output_shapes"]:
                continue
            name = str(r["name"])
            eng = classify_engine(name, False)
            dts = [x for x in str(r.get("input_dtypes") or "").split(",") if x]
            odts = [x for x in str(r.get("output_dtypes") or "").split(",") if x]
            old_n = max(1.0, float(r.get("elems") or 0.0))
            # a matmul's FLOPs are recomputed from its padded shapes; other work grows with the elements
            ib, ob, el, _, _, fl = shape_stats(name, eng, _shapes(ins), dts, _shapes(outs), odts, 0)
            if eng != "tensor":
                fl = float(r.get("flops") or 0.0) * el / old_n
            out.loc[i, ["input_shapes", "output_shapes"]] = [ins, outs]
            out.loc[i, ["in_bytes", "out_bytes", "elems", "flops"]] = [ib, ob, el, fl]
    if not lengths:
        return None
    # recompiles with another cause (grad mode, a Python value) happen at the padded shapes too
    before, after = int(len(compiles)), len(padded_keys) + int(len(compiles) - len(shape_compiles(compiles)))
    if after >= before:
        return None
    out = pd.concat([out, pd.DataFrame(pads, columns=out.columns).astype(
        {c: out[c].dtype for c in ("seq", "start_ns", "end_ns") if c in out})], ignore_index=True)
    out = out.sort_values("seq", kind="stable")
    seen = ", ".join(str(v) for v in list(dict.fromkeys(lengths))[:6]) + (", ..." if len(set(lengths)) > 6 else "")
    where = (f"where the step's input is made, before the compiled step (dimension {d} seen as {seen}); "
             "padding is exact for a causal model or with the padded positions masked out of the loss")
    return CodeChange("bucket_shapes", f"pad to buckets of {BUCKET} ({before} → {after} compile{'s' if after != 1 else ''})",
                      pad_line(len(ref), d), where, out.reset_index(drop=True), BUCKET_BASIS, ("recompile",),
                      compiles=(before, after))


def data_dependent_ops(trace_ops: pd.DataFrame, kinds: np.ndarray | None = None) -> list[str]:
    """Ops whose output shape depends on values (nonzero, masked_select, unique; `sync` ops by the one op
    classification, with that reason): torch.compile must break or recompile at them."""
    if not len(trace_ops) or "sync" not in trace_ops:
        return []
    dd = (trace_ops["sync"] == "data_dependent").to_numpy()
    if kinds is not None and len(kinds) == len(dd):
        dd = dd & (np.asarray(kinds, dtype=object) == "sync")
    return list(dict.fromkeys(trace_ops.loc[dd, "name"].astype(str)))


def code_changes(trace_ops: pd.DataFrame, *, cell: dict | None = None, run_id: Any = None,
                 kinds: np.ndarray | None = None, compiles: pd.DataFrame | None = None,
                 all_steps: pd.DataFrame | None = None) -> list[CodeChange]:
    """Every change that applies to this trace, in a fixed order (the advisor ranks them with the other rows).
    `kinds`: each op's kind (`profiler.op_kinds`, row i of `trace_ops`); `compiles`: the trace's graph compiles
    (a compile-mode trace: recompiles make the bucketing row); `all_steps`: the whole trace when `trace_ops` are
    some of its steps (`bucket_shapes` counts compiles over all of them)."""
    cell = cell if isinstance(cell, dict) else None
    text = _source_text(cell)
    out = [fused_optimizer(trace_ops, (cell or {}).get("optimizers"), cell, run_id), autocast_bf16(trace_ops, cell, run_id, kinds),
           host_syncs(trace_ops, text, kinds), bucket_shapes(trace_ops, compiles, all_steps)]
    return [c for c in out if c is not None]


def _source_text(cell: dict | None) -> Callable[[str], str | None]:
    """`cell-N:L` -> the text of line L of the profiled cell's body (the sources its ops carry), else None."""
    lines: list[str] = []
    if cell and isinstance(cell.get("source"), str):
        from neuron_studio.profiler.analysis import variant_cell as _vc

        lines = _vc.split_cell(cell["source"])[1].split("\n")

    def text(source: str) -> str | None:
        m = _CELL_LINE.match(str(source))
        if not m or not 1 <= int(m.group("line")) <= len(lines):
            return None
        return lines[int(m.group("line")) - 1]

    return text
