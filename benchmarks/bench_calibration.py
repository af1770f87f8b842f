"""Calibrate the NeuronCore model: reproduce every published measurement in profiler/model/calibration.json.

For each row: `kernel:*` runs the published kernel on the NKI interpreter and times the trace with
`kernels.kernel_time` (AWS's tutorial kernels as studio-written ports that keep AWS's loop nests, tile lists and
instruction order, benchmarks/calibration_kernels.py; CS149's kernels unmodified from a checkout given with
--cs149, benchmarks/calibration_cs149.py); `dma:*` models the DMA engine time of a published kernel's first transfer; `op:*` and `collective:*` model the
equivalent aten/c10d op with `profiler.model.model_run`; `step:bert_large_ph1` records a BERT-Large training
step (all aten ops with shapes, on meta tensors) and models it as the compiled graph torch-neuronx runs. Prints modeled / measured per row and the geometric-mean error
(exp of the mean |log ratio|) over the rows in the fit.

    python benchmarks/bench_calibration.py [--rows ID ...] [--no-step] [--write] [--cs149 PATH]

`--write` stores each row's modeled value in calibration.json; the calibration a profile states
(`calibration_summary(chip)`, per chip) is derived from the stored values, and tests/test_calibration.py recomputes
them.

Kernel rows run at the published shapes with the Tensor Engine's numerics skipped (the interpreter's numpy
matmuls would take minutes); before that, each port is run at a small shape with and without numerics and the
two instruction traces must be identical, so the timing-only trace is the trace of the real run.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("NEURON_STUDIO_NKI", "interpreter")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import calibration_cs149 as cs149  # noqa: E402
import calibration_kernels as ck  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from neuron_studio.device.emulator.op_event_fields import storage_ids  # noqa: E402
from neuron_studio.device.events import OpEvent, StorageIds  # noqa: E402
from neuron_studio.kernels import kernel_time  # noqa: E402
from neuron_studio.kernels.interpreter import isa as _isa  # noqa: E402
from neuron_studio.profiler.model import model_run  # noqa: E402
from neuron_studio.profiler.model.calibration import (  # noqa: E402
    CalibrationRow, calibration_summary_or_none, geomean_error, load_calibration, write_modeled,
)


# -- kernels ----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def tensor_engine_numerics_skipped() -> Iterator[None]:
    """nc_matmul records its instruction exactly as the interpreter does but skips the numpy product."""
    original = _isa.nc_matmul

    def nc_matmul(dst: Any, stationary: Any, moving: Any, **_: Any) -> None:
        k, m = stationary.shape
        _, n = moving.shape
        dt = "float32" if "float32" in (stationary.dtype, moving.dtype) else moving.dtype
        _isa.record("tensor", "nc_matmul", (dst, stationary, moving), dt, k * n, 2 * k * m * n, cycles_hint=n)

    _isa.nc_matmul = nc_matmul
    try:
        yield
    finally:
        _isa.nc_matmul = original


def _signature(trace: Any) -> list[tuple]:
    return [(i.engine, i.opcode, i.shapes, i.dtype, i.elements, i.flops, i.bytes, i.cycles_hint) for i in trace]


def _check_timing_only(kernel: Any, args: tuple, kwargs: dict) -> None:
    _, full = kernel.run(*args, chip="trn2", **kwargs)
    with tensor_engine_numerics_skipped():
        _, fast = kernel.run(*args, chip="trn2", **kwargs)
    if _signature(full) != _signature(fast):
        raise RuntimeError(f"{kernel.__name__}: the timing-only trace differs from the real one")


def _matmul_inputs(k: int, m: int, n: int, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(k, m, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype))


# Small shapes at which each port's timing-only trace is checked against the real run (multiples of its blocks)
_SMALL = {"matmul_fully_optimized": ((512, 512, 1024), {"tiles_m": 2, "tiles_n": 1, "tiles_k": 2}),
          "trn2_matmul_v4_block_free": ((512, 256, 1024), {}),
          "trn2_matmul_v5_block_all": ((512, 512, 1024), {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1,
                                                         "TILES_IN_BLOCK_K": 2})}


def model_kernel(row: CalibrationRow) -> float:
    name = row.reproduce.split(":", 1)[1]
    cfg = row.config
    if name in ck.MATMUL_KERNELS or name in ck.TRN2_MATMUL_KERNELS:
        kernel = ck.MATMUL_KERNELS.get(name) or ck.TRN2_MATMUL_KERNELS[name]
        dtype = getattr(torch, cfg["dtype"])
        (k, m, n), small = _SMALL.get(name, ((512, 512, 1024), {}))
        _check_timing_only(kernel, _matmul_inputs(k, m, n, dtype), small)
        lhsT, rhs = _matmul_inputs(cfg["K"], cfg["M"], cfg["N"], dtype)
        with tensor_engine_numerics_skipped():
            _, trace = kernel.run(lhsT, rhs, chip=row.chip)
    elif name.startswith("cs149_"):
        return cs149.model(row)
    elif name in ck.LAYERNORM_KERNELS:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(cfg["rows"], cfg["cols"], generator=g)
        _, trace = ck.LAYERNORM_KERNELS[name].run(x, torch.randn(cfg["cols"], generator=g),
                                                  torch.randn(cfg["cols"], generator=g), chip=row.chip)
    else:
        raise KeyError(f"no kernel port named {name!r}")
    return kernel_time(trace, row.chip).total_ns / 1e3


# -- one DMA transfer ----------------------------------------------------------------------------------------
def model_dma(row: CalibrationRow) -> float:
    """The DMA engine time (µs) of the first transfer of a published kernel: how long each engine it uses is busy."""
    import ml_dtypes
    import numpy as np

    from neuron_studio.hardware import chip_spec
    from neuron_studio.kernels.cost import dma_shape

    name = row.reproduce.split(":", 1)[1]
    x = np.ones(tuple(row.config["shape"]), dtype=getattr(ml_dtypes, row.config["dtype"], None) or row.config["dtype"])
    _, trace = ck.DMA_KERNELS[name].run(x, chip=row.chip)
    ins = trace[0]
    return dma_shape(ins.bytes, ins.partitions, ins.descriptors, chip_spec(row.chip), ins.opcode).engine_ns / 1e3


# -- single ops and collectives -------------------------------------------------------------------------
def _one_op(name: str, ins: list[tuple[int, ...]], in_dt: list[str], outs: list[tuple[int, ...]],
            out_dt: list[str], **extra: Any) -> list[OpEvent]:
    return [OpEvent(seq=1, name=name, overload="default", start_ns=0, end_ns=1, thread=0, device_index=0,
                    input_shapes=tuple(ins), input_dtypes=tuple(in_dt), output_shapes=tuple(outs),
                    output_dtypes=tuple(out_dt), **extra)]


def model_op(row: CalibrationRow) -> float:
    cfg = row.config
    if row.reproduce == "op:mm":
        ev = _one_op("aten::mm", [(cfg["M"], cfg["K"]), (cfg["K"], cfg["N"])], [cfg["dtype"]] * 2,
                     [(cfg["M"], cfg["N"])], [cfg["dtype"]])
        run = model_run(ev, chip=row.chip, mode="eager")
        return float(run.ops["duration_ns"][0]) / 1e3
    raise KeyError(f"no op reproduction named {row.reproduce!r}")


_C10D = {"all_reduce": "c10d::allreduce_", "all_gather": "c10d::allgather_", "reduce_scatter": "c10d::reduce_scatter_",
         "permute": "c10d::send"}


def model_collective(row: CalibrationRow) -> float:
    cfg = row.config
    n = cfg["bytes"] // 4
    ev = _one_op(_C10D[cfg["op"]], [(n,)], [cfg["dtype"]], [(n,)], [cfg["dtype"]], transfer_bytes=cfg["bytes"])
    run = model_run(ev, chip=row.chip, mode="eager", world_size=cfg["ranks"],
                    local_world_size=cfg["ranks"] // cfg["nodes"])
    return float(run.ops["duration_ns"][0]) / 1e3


# -- BERT-Large training step -------------------------------------------------------------------------------
class _BertLayer(torch.nn.Module):
    """Post-norm BERT encoder layer (as HuggingFace BertLayer): attention, residual + LN, GELU FFN, residual + LN."""

    def __init__(self, d: int, heads: int, ffn: int, p: float) -> None:
        super().__init__()
        self.heads, self.p = heads, p
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.o = torch.nn.Linear(d, d)
        self.ln1 = torch.nn.LayerNorm(d, eps=1e-12)
        self.up = torch.nn.Linear(d, ffn)
        self.down = torch.nn.Linear(ffn, d)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-12)
        self.drop = torch.nn.Dropout(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, h, d // h).transpose(1, 2)

        a = torch.nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                                             attn_mask=mask, dropout_p=self.p if self.training else 0)
        x = self.ln1(x + self.drop(self.o(a.transpose(1, 2).reshape(b, t, d))))
        return self.ln2(x + self.drop(self.down(torch.nn.functional.gelu(self.up(x)))))


class _BertForPreTraining(torch.nn.Module):
    """BERT with the MLM head (tied decoder) and the next-sentence head, as in the pre-training tutorial."""

    def __init__(self, layers: int, d: int = 1024, heads: int = 16, ffn: int = 4096, vocab: int = 30522,
                 p: float = 0.1) -> None:
        super().__init__()
        self.word = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(512, d)
        self.typ = torch.nn.Embedding(2, d)
        self.ln = torch.nn.LayerNorm(d, eps=1e-12)
        self.drop = torch.nn.Dropout(p)
        self.layers = torch.nn.ModuleList(_BertLayer(d, heads, ffn, p) for _ in range(layers))
        self.mlm_dense = torch.nn.Linear(d, d)
        self.mlm_ln = torch.nn.LayerNorm(d, eps=1e-12)
        self.mlm_bias = torch.nn.Parameter(torch.zeros(vocab))
        self.pool = torch.nn.Linear(d, d)
        self.nsp = torch.nn.Linear(d, 2)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor, mlm_labels: torch.Tensor,
                nsp_labels: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.ln(self.word(ids) + self.pos(pos) + self.typ(types)))
        for layer in self.layers:
            x = layer(x, mask)
        h = self.mlm_ln(torch.nn.functional.gelu(self.mlm_dense(x)))
        logits = h @ self.word.weight.t() + self.mlm_bias
        nsp = self.nsp(torch.tanh(self.pool(x[:, 0])))
        f = torch.nn.functional.cross_entropy
        return f(logits.view(-1, logits.shape[-1]).float(), mlm_labels.view(-1), ignore_index=-100) + \
            f(nsp.float(), nsp_labels)


class _MetaRecorder(TorchDispatchMode):
    """Records every aten op of a program run on meta tensors as an OpEvent (shapes, dtypes and the storages each
    op reads and writes, as the emulated device records them).

    The published BERT row ran under torch-neuronx (XLA): the whole micro-step is one compiled graph with
    on-device RNG, so every op is recorded as a graph op and none as a CPU fallback. Meta tensors make the
    full 24-layer step cheap to record (no arithmetic on the host)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[OpEvent] = []
        self.storages = StorageIds()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        ins = [a for a in _flat(args) + _flat(list((kwargs or {}).values())) if isinstance(a, torch.Tensor)]
        outs = [o for o in _flat([out]) if isinstance(o, torch.Tensor)]
        reads, writes = storage_ids(func, args, kwargs or {}, out if isinstance(out, (tuple, list)) else (out,),
                                    self.storages)
        self.events.append(OpEvent(
            seq=len(self.events) + 1, name=func._schema.name, overload=func._overloadname, start_ns=0, end_ns=0,
            thread=0, device_index=0, input_shapes=tuple(tuple(t.shape) for t in ins),
            input_dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in ins),
            output_shapes=tuple(tuple(t.shape) for t in outs),
            output_dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in outs),
            is_view=bool(func.is_view), graph=0, reads=reads, writes=writes))
        return out


def _flat(xs: Any) -> list:
    out: list = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        else:
            out.append(x)
    return out


def _bert_step_events(layers: int, batch: int, seq: int) -> tuple[list[OpEvent], list[OpEvent], int]:
    """(micro-step events, optimizer-step events, parameter count) of BERT pre-training, BF16 compute with FP32 master weights
    (as autocast BF16 runs the matmuls and attention in BF16), AdamW."""
    torch.manual_seed(0)
    with torch.device("meta"):
        model = _BertForPreTraining(layers).train()
    bf16 = model.to(torch.bfloat16)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    types = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    mask = torch.ones(batch, 1, 1, seq, dtype=torch.bool, device="meta")
    labels = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    nsp = torch.zeros(batch, dtype=torch.long, device="meta")
    rec = _MetaRecorder()
    with rec:
        bf16(ids, types, mask, labels, nsp).backward()
    micro = rec.events
    with torch.device("meta"):
        master = _BertForPreTraining(layers)
    for p in master.parameters():
        p.grad = torch.empty_like(p)
    opt = torch.optim.AdamW(master.parameters(), lr=1e-4, foreach=True)
    rec = _MetaRecorder()
    with rec:
        opt.step()
    return micro, rec.events, sum(p.numel() for p in master.parameters())


def model_step(row: CalibrationRow) -> float:
    """Micro-step time per NeuronCore: the micro-step graph every micro-batch, the optimizer graph and the
    gradient all-reduce once per `grad_accumulation` micro-batches (global batch 16384 = 32 ranks x 16 x 32)."""
    cfg = row.config
    ws, accum = cfg["world_size"], cfg["grad_accumulation"]
    micro, optim, params = _bert_step_events(24, cfg["micro_batch"], cfg["seq"])
    t_micro = model_run(micro, chip=row.chip, mode="compile", world_size=ws).summary.step_time_ns / 1e3
    t_opt = model_run(optim, chip=row.chip, mode="compile", world_size=ws).summary.step_time_ns / 1e3
    ar = model_collective(CalibrationRow.synthetic(
        row.chip, {"op": "all_reduce", "ranks": ws, "nodes": 1, "bytes": 4 * params, "dtype": "float32"}))
    return t_micro + (t_opt + ar) / accum


# -- driver -------------------------------------------------------------------------------------------------
_REPRODUCERS: dict[str, Callable[[CalibrationRow], float]] = {
    "kernel": model_kernel, "op": model_op, "collective": model_collective, "step": model_step, "dma": model_dma}


def reproduce(row: CalibrationRow) -> float:
    """The model's value (µs) for one calibration row."""
    return _REPRODUCERS[row.kind](row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="*", help="only these row ids")
    ap.add_argument("--no-step", action="store_true", help="skip the BERT-Large step (the slowest row)")
    ap.add_argument("--write", action="store_true", help="store the modeled values in calibration.json")
    ap.add_argument("--cs149", metavar="PATH", help="a checkout (work tree or git directory) of "
                    "xaviergonzalez/asst4-trainium2 for the cs149_* rows (default: $NEURON_STUDIO_CS149_REPO)")
    args = ap.parse_args()
    cs149.set_repo(args.cs149)
    rows = load_calibration()
    if args.rows:
        rows = [r for r in rows if r.id in args.rows]
    if args.no_step:
        rows = [r for r in rows if not r.reproduce.startswith("step:")]
    print(f"{'row':<36} {'chip':<5} {'measured':>12} {'modeled':>12} {'ratio':>7}  {'wall':>6}")
    fit, out = [], []
    for row in rows:
        t0 = time.perf_counter()
        try:
            modeled = reproduce(row)
        except cs149.Cs149Unavailable as exc:  # kept as stored; says why
            print(f"{row.id:<36} {row.chip:<5} NOT REPRODUCED: {exc}", flush=True)
            continue
        wall = time.perf_counter() - t0
        r = modeled / row.value
        flag = "" if row.in_fit else "  (not in fit)"
        ok = "" if 1 / 1.5 <= r <= 1.5 else "  OUT OF BAND"
        print(f"{row.id:<36} {row.chip:<5} {row.value:>10.5g}us {modeled:>10.5g}us {r:>7.2f}  {wall:>5.1f}s"
              f"{flag}{ok}", flush=True)
        out.append((row, modeled, r))
        if row.in_fit:
            fit.append(r)
    for chip in sorted({row.chip for row, _, _ in out}):
        mine = [r for row, _, r in out if row.in_fit and row.chip == chip]
        if mine:
            worst = max(mine, key=lambda x: abs(math.log(x)))
            print(f"\n{chip}: rows in fit: {len(mine)}; geometric-mean error {geomean_error(mine):.3f}x; "
                  f"range {min(mine):.2f}-{max(mine):.2f}x; worst {worst:.2f}; "
                  f"all within 0.67-1.5x: {all(1 / 1.5 <= x <= 1.5 for x in mine)}")
    if args.write:
        write_modeled({row.id: modeled for row, modeled, _ in out})
        for chip in sorted({row.chip for row, _, _ in out}):
            cal = calibration_summary_or_none(chip)
            print(f"stored; what a {chip} profile states: " + (cal.text if cal else "nothing yet (rows without a "
                                                                "stored value: run --write on them)"))


if __name__ == "__main__":
    main()
