"""Device memory during a capture: every allocation and free, and what each storage holds.

The emulator's allocator (C++, read through `device/emulator/memory.py`) appends each allocation and free to a `MemoryLog`
in the order it counts them, so replaying the log gives exactly the bytes `torch.neuron.memory_allocated()`
reports at every point. This module opens the log, watches the run to learn what the storages are, and
turns the log into the trace's `memory` table (one row per storage live when the profiled steps begin,
then one row per allocation or free).

Each storage gets one category, the first that applies:

  parameter        a module's parameter or buffer (module forward pre-hook; in compile mode, a compiled graph's
                   input or attribute whose Dynamo source is one: `graph_state`); under FSDP2 also the sharded
                   parameter's local shard and the unsharded parameter gathered for the module's forward
                   (read in the forward post-hook, before FSDP2 reshards)
  gradient         the `.grad` of a parameter (optimizer.step pre-hook, and at the end of the capture; in compile
                   mode also a compiled optimizer step's `.grad` input)
  optimizer_state  a tensor in `optimizer.state` (optimizer.step post-hook; in compile mode, a compiled
                   optimizer step's state attribute)
  input            a tensor passed to the outermost module's forward (not a compiled graph's GraphModule, whose
                   inputs are the model's state as well), copied to the device in the step, or
                   held before the capture began without being model or optimizer state (batches, targets,
                   and any other tensor the program keeps on the device)
  activation       saved for backward (autograd's saved-tensors pack hook)
  temporary        everything else (intermediates, the loss, gradients of activations)

A storage FSDP2 frees by resizing it to 0 bytes and gathers again later is logged as a new allocation
each time (the allocator's `MemoryLog.renewed` links them); every allocation of one storage gets the
category learned for any of them (the parameter gathered for the backward pass is the one gathered for the
forward pass).

Real Trainium: TorchNeuron exposes `torch.neuron.memory_allocated()` / `max_memory_allocated()` /
`memory_stats()` but no per-allocation hook the studio can subscribe to; `real_capture` records the
measured peak and the bytes live at the step boundaries instead (see `measured_memory`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

__all__ = ["CATEGORIES", "MemoryRecorder", "memory_frame"]

CATEGORIES = ("parameter", "gradient", "optimizer_state", "input", "activation", "temporary")
_RANK = {c: i for i, c in enumerate(CATEGORIES)}


class MemoryRecorder:
    """Opens the allocator's log for one capture and learns the category of each storage it sees."""

    def __init__(self, registry: Any, *, saved_tensor_hooks: bool = True) -> None:
        self.registry = registry
        self.tracker = registry.memory  # None on the real backend: nothing to record per allocation
        self.log = None
        self.category: dict[int, str] = {}
        self.names: dict[int, str] = {}
        self.outputs_of: dict[int, set[str]] = {}
        self.input_candidates: set[int] = set()
        self.described: dict[int, tuple[Any, tuple]] = {}  # storage -> (dtype, shape) of a tensor seen on it
        self._param_names: dict[int, str] = {}  # id(parameter tensor) -> qualified name
        self._seen_modules: set[int] = set()
        self._sharded_modules: set[int] = set()  # modules whose parameters are DTensors (FSDP2)
        self._optimizers: dict[int, Any] = {}
        self._params: dict[int, Any] = {}
        self._hooks = None
        self._use_saved_hooks = saved_tensor_hooks
        self._unrecorded: Any = None  # the emulator's context for ops that are not the program's (see _pack)

    @property
    def active(self) -> bool:
        return self.tracker is not None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        if self.tracker is None:
            return
        self.log = self.tracker.open_log(self.registry.bus)
        if self._use_saved_hooks:
            from neuron_studio.device.emulator.registration import unrecorded

            self._unrecorded = unrecorded
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
            self._hooks.__enter__()

    def settle(self) -> None:
        """Apply the frees the device has queued (it counts them lazily), so records up to now are complete."""
        if self.tracker is not None:
            self.tracker.drain()

    def stop(self) -> None:
        if self.tracker is None or self.log is None:
            return
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None
        for p in self._params.values():  # gradients of a run without an optimizer step
            self._note(p.grad, "gradient", self._param_names.get(id(p), "parameter") + ".grad")
        for opt in self._optimizers.values():
            self.optimizer_post(opt)
        self.log.close()
        # drop every reference to the user's objects: a kept profile must not keep a model alive
        self._params.clear()
        self._optimizers.clear()
        self._param_names.clear()
        self._seen_modules.clear()
        self._sharded_modules.clear()

    # -- observations (called by the capture's module and optimizer hooks) -----------------------
    def _note(self, t: Any, category: str, name: str | None = None) -> None:
        if t is None:
            return
        sid = self.tracker.storage_id(t)
        if sid is None:
            return
        self.described.setdefault(sid, (t.dtype, tuple(t.shape)))
        old = self.category.get(sid)
        if old is None or _RANK[category] < _RANK[old]:
            self.category[sid] = category
            if name is not None:
                self.names[sid] = name

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        """Note what autograd saves as an activation, and save it without its grad_fn.

        An op's own output saved for its backward (rsqrt's result, attention's output and log-sum-exp) comes
        here still carrying its grad_fn, which owns what this returns: returning `t` itself would make a cycle
        through autograd's C++ graph that the garbage collector cannot see, so a graph never run backward (a
        forward-only step, a step that failed, retain_graph=True) would keep every tensor it saved alive, on
        the device's count, after the capture and the user's last reference are gone. A detached alias of the
        same storage breaks the cycle; autograd puts the grad_fn back when it unpacks (what PyTorch's
        saved_tensors_hooks documentation advises). It is made unrecorded: it is not an op of the program.
        """
        sid = self.tracker.storage_id(t)
        if sid is not None and sid not in self.category:
            self.category[sid] = "activation"
        if t.grad_fn is None:  # inputs and leaves come detached already: no cycle through them
            return t
        with self._unrecorded():
            return t.detach()

    def module_pre(self, module: torch.nn.Module, path: str, args: Any, outermost: bool) -> None:
        if self.tracker is None:
            return
        if id(module) not in self._seen_modules:
            self._seen_modules.add(id(module))
            for name, p in module.named_parameters(prefix=path):
                self._params.setdefault(id(p), p)
                self._param_names.setdefault(id(p), name)
                self._note(p, "parameter", self._param_names[id(p)])
                if hasattr(p, "_local_tensor"):
                    self._sharded_modules.add(id(module))
            for name, b in module.named_buffers(prefix=path):
                self._note(b, "parameter", name)
        if outermost:  # inputs unless made inside a module (logits passed to a loss module are not)
            for t in _tensors(args):
                sid = self.tracker.storage_id(t)
                if sid is not None:
                    self.input_candidates.add(sid)

    def module_post(self, module: torch.nn.Module, path: str, output: Any) -> None:
        if self.tracker is None:
            return
        if id(module) in self._sharded_modules:  # FSDP2 has not resharded yet: these are the gathered ones
            for name, p in module.named_parameters(prefix=path):
                self._note(p, "parameter", name)
        for t in _tensors(output):
            sid = self.tracker.storage_id(t)
            if sid is not None:
                self.outputs_of.setdefault(sid, set()).add(path)

    def graph_state(self, seen: list[Any]) -> None:
        """A compiled graph's inputs and attributes that are model or optimizer state, as its Dynamo sources name
        them (`neuron_studio.modes.register_graph_state_hook`): module and optimizer hooks do not run inside
        compiled code. A gradient takes its parameter's name when the graph reads that parameter too."""
        if self.tracker is None:
            return
        for role, name, t, param in seen:
            if role == "parameter":
                self._params.setdefault(id(t), t)
                self._param_names.setdefault(id(t), name)
                name = self._param_names[id(t)]
            elif role == "gradient" and param is not None and id(param) in self._param_names:
                name = self._param_names[id(param)] + ".grad"
            self._note(t, role, name)

    def optimizer_pre(self, opt: Any) -> None:
        if self.tracker is None:
            return
        self._optimizers[id(opt)] = opt
        for group in opt.param_groups:
            for p in group["params"]:
                name = self._param_names.get(id(p))
                if name is None:
                    name = self._param_names[id(p)] = f"{type(opt).__name__}.param[{len(self._param_names)}]"
                self._params.setdefault(id(p), p)
                self._note(p, "parameter", name)
                self._note(p.grad, "gradient", name + ".grad")

    def optimizer_post(self, opt: Any) -> None:
        if self.tracker is None:
            return
        for p, state in list(opt.state.items()):
            base = self._param_names.get(id(p), "param")
            for key, v in state.items():
                if isinstance(v, torch.Tensor):
                    self._note(v, "optimizer_state", f"{type(opt).__name__} {key} of {base}")


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _tensors(obj: Any, depth: int = 0) -> list[torch.Tensor]:
    """Tensors in a forward's args or output (tuples, lists, dicts; two levels deep)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth >= 2:
        return []
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x, depth + 1)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x, depth + 1)]
    return []


def _share_within_storages(rec: MemoryRecorder, renewed: dict[int, int]) -> None:
    """Allocations of one storage (re-allocated by a resize; `renewed`: alloc_id -> the first one) share the
    category (the first in CATEGORIES order learned for any of them), name and dtype/shape."""
    families: dict[int, list[int]] = {}
    for aid, root in renewed.items():
        families.setdefault(root, [root]).append(aid)
    for members in families.values():
        cats = [rec.category[a] for a in members if a in rec.category]
        if cats:
            best = min(cats, key=_RANK.__getitem__)
            name = next((rec.names[a] for a in members if rec.category.get(a) == best and a in rec.names),
                        next((rec.names[a] for a in members if a in rec.names), None))
            for a in members:
                rec.category[a] = best
                if name is not None:
                    rec.names[a] = name
        described = next((rec.described[a] for a in members if a in rec.described), None)
        if described is not None:
            for a in members:
                rec.described.setdefault(a, described)


def memory_frame(rec: MemoryRecorder, ops: pd.DataFrame, *, step_times: list[int], warmup: int,
                 t0: int) -> pd.DataFrame:
    """The `memory` table: storages live when the profiled steps begin (kind 0), then each allocation
    (kind 1) and free (kind -1) in allocator order. Rows of warm-up steps are folded into the first part.

    `ops` is the capture's op table before warm-up rows are dropped (seq, name, module, phase, source,
    transfer); `step_times` the perf-counter ns of each `Capture.step()`; `t0` the capture's start.
    """
    from neuron_studio.device.emulator.memory import LOG_FIELDS

    log = rec.log
    records = log.records if log is not None else []
    cols = {f: [r[i] for r in records] for i, f in enumerate(LOG_FIELDS)}
    n = len(records)
    times = np.asarray(cols["time_ns"], dtype=np.int64)
    kinds = np.asarray(cols["kind"], dtype=np.int8)
    after = np.asarray(cols["after_seq"], dtype=np.int64)
    steps = (np.searchsorted(np.asarray(step_times, dtype=np.int64), times, side="left").astype(np.int32)
             if step_times else np.zeros(n, dtype=np.int32))
    # the op behind each row: an allocation belongs to the next op recorded (the one that allocated),
    # a free to the last op before it
    seqs = ops["seq"].to_numpy(dtype=np.int64) if len(ops) else np.zeros(0, dtype=np.int64)
    order = np.argsort(seqs, kind="stable")
    sorted_seqs = seqs[order]
    pos = np.where(kinds > 0, np.searchsorted(sorted_seqs, after, side="right"),
                   np.searchsorted(sorted_seqs, after, side="right") - 1)
    valid = (pos >= 0) & (pos < len(sorted_seqs))
    op_row = np.where(valid, order[np.clip(pos, 0, max(len(order) - 1, 0))] if len(order) else -1, -1)
    op_cols = {c: (ops[c].to_numpy(dtype=object) if c in ops.columns and len(ops) else np.empty(0, dtype=object))
               for c in ("name", "module", "phase", "source", "transfer")}

    def op_attr(col: str, rows: np.ndarray) -> list:
        arr = op_cols[col]
        return [arr[i] if i >= 0 else None for i in rows]

    op_seq = np.where(op_row >= 0, seqs[np.clip(op_row, 0, max(len(seqs) - 1, 0))] if len(seqs) else -1, -1)
    transfer = op_attr("transfer", op_row)
    ids = cols["alloc_id"]
    for i in range(n):  # storages copied from the host inside the step are input batches
        if kinds[i] > 0 and transfer[i] == "h2d" and ids[i] not in rec.category:
            rec.category[ids[i]] = "input"

    made_in_module: set[int] = set()
    module_col = op_attr("module", op_row)
    for i in range(n):
        if kinds[i] > 0 and module_col[i]:
            made_in_module.add(ids[i])
    for sid in rec.input_candidates - made_in_module:
        if sid not in rec.category or _RANK["input"] < _RANK[rec.category[sid]]:
            rec.category[sid] = "input"

    # storages held before the capture began that this step never used and freed (what an earlier run of the cell
    # left, e.g. the previous `loss` holding the previous model's parameters and gradients through its graph):
    # not the step's memory, so not in its table (counted separately in `attrs["released"]`)
    freed = {ids[i] for i in range(n) if kinds[i] < 0}
    released = {aid: nbytes for aid, _, nbytes in (log.baseline if log is not None else [])
                if aid in freed and aid not in rec.category and aid not in rec.input_candidates}

    # storages held before the capture began that are no model or optimizer state: data the step is given
    for aid, _, _ in (log.baseline if log is not None else []):
        if rec.category.get(aid) not in ("parameter", "gradient", "optimizer_state"):
            rec.category[aid] = "input"

    if log is not None and log.renewed:
        _share_within_storages(rec, log.renewed)

    # -- the live set when the profiled steps begin ----------------------------------------------
    first = int(np.searchsorted(steps, warmup, side="left")) if warmup else 0
    live: dict[int, tuple] = {}  # alloc_id -> (device, nbytes, record index or -1)
    for aid, dev, nbytes in (log.baseline if log is not None else []):
        live[aid] = (dev, nbytes, -1)
    for i in range(first):
        if kinds[i] > 0:
            live[ids[i]] = (cols["device"][i], cols["nbytes"][i], i)
        else:
            live.pop(ids[i], None)
    start_ns = int(step_times[warmup - 1] - t0) if warmup and len(step_times) >= warmup else 0
    base_idx = np.asarray([v[2] for v in live.values()], dtype=np.int64)
    rows_idx = np.concatenate([base_idx, np.arange(first, n, dtype=np.int64)])
    nb = len(base_idx)
    src = np.where(rows_idx >= 0, rows_idx, 0)

    def pick(values: list, default: Any = None) -> list:
        return [values[j] if j >= 0 else default for j in rows_idx] if n else [default] * len(rows_idx)

    alloc_ids = list(live.keys()) + ids[first:]
    kind = np.concatenate([np.zeros(nb, dtype=np.int8), kinds[first:]])
    dtypes = pick(cols["dtype"])
    shapes = pick(cols["shape"])
    for j, a in enumerate(alloc_ids):  # storages allocated before the capture: described by a tensor seen on them
        if dtypes[j] is None and a in rec.described:
            dtypes[j], shapes[j] = rec.described[a]
    row_op = np.where(rows_idx >= 0, op_row[src] if n else -1, -1)
    df = pd.DataFrame({
        "kind": kind,
        "alloc_id": np.asarray(alloc_ids, dtype=np.int64),
        "device": np.asarray([v[0] for v in live.values()] + cols["device"][first:], dtype=np.int32),
        "nbytes": np.asarray([v[1] for v in live.values()] + cols["nbytes"][first:], dtype=np.int64),
        "time_ns": np.concatenate([np.full(nb, start_ns, dtype=np.int64), times[first:] - t0]),
        "seq": np.where(row_op >= 0, op_seq[src] if n else -1, -1).astype(np.int64),
        "step": np.concatenate([np.full(nb, warmup, dtype=np.int32), steps[first:]]),
        "category": [rec.category.get(a, "temporary") for a in alloc_ids],
        "name": [rec.names.get(a) for a in alloc_ids],
        "dtype": [None if d is None else str(d).removeprefix("torch.") for d in dtypes],
        "shape": [None if s is None else "x".join(str(x) for x in s) or "()" for s in shapes],
        "op": op_attr("name", row_op),
        "module": op_attr("module", row_op),
        "phase": op_attr("phase", row_op),
        "source": op_attr("source", row_op),
        "output_of": [";".join(sorted(rec.outputs_of[a])) if a in rec.outputs_of else None for a in alloc_ids],
    })
    if released:
        df = df[~df["alloc_id"].isin(list(released))].reset_index(drop=True)
    df.attrs["released"] = {"storages": len(released), "bytes": int(sum(released.values()))}
    return df
