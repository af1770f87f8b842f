"""What ZeroRedundancyOptimizer and FSDP2 hold on each of N cores, replayed over a single-process memory record: which modules become
FSDP units, when each unit's parameters are gathered, and how long its gradients stay full size. The memory
forecast's ZeRO-1, ZeRO-2 and FSDP levers are built on it (memory_forecast.py).

ZeroRedundancyOptimizer (ZeRO-1) gives each parameter's optimizer state to one rank: parameters sorted by
size, largest first, each to the rank holding the fewest elements so far (its `_partition_parameters`).
With few large parameters the ranks are uneven, and the rank with the most state runs out first.

FSDP2 (`torch.distributed.fsdp.fully_shard`) keeps 1/N of every parameter, gradient and optimizer state on
each core. Around that:

- a unit's parameters are all-gathered (full size, next to the shard) when its forward starts. With
  `reshard_after_forward=True` (FSDP2's default for every unit but the root) they are freed when its forward
  ends and gathered again for its backward; the root unit (the model itself, holding every parameter that
  is in no other unit: for a GPT the embeddings, the final norm and the head) is not resharded after forward,
  so its parameters stay gathered from the start of the forward pass until its backward ends, which is the
  end of the backward pass. With `reshard_after_forward=False` (ZeRO-2) every unit keeps its parameters
  gathered from its forward until its backward ends.
- a unit's gradients are full size from when autograd produces them until the unit's backward ends, when
  FSDP2 reduce-scatters them to 1/N.

Rows of the record carry the module of the op that allocated or freed the storage ("GPT.blocks.0.qkv",
backward ops "GPT.blocks.0.qkv (backward)"): a unit's forward (backward) is its first to last row under it.
- in backward, a unit's pre-backward also gathers the unit whose backward comes next (FSDP2's implicit
  backward prefetch; the root's prefetches the last unit of the forward pass).

Not modeled: the all-gather and reduce-scatter staging copies (one unit at a time).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["fsdp_units", "gathered_bytes", "zero1_rank_state"]

_BACKWARD = " (backward)"


def fsdp_units(rows: pd.DataFrame, classes: dict[str, str]) -> tuple[str, ...]:
    """The modules to wrap with fully_shard before the model: the members of the repeated-block group
    (sibling modules of one class) that holds the most parameter bytes; () when the model has none (the
    model is then one unit)."""
    params = rows[(rows["kind"] >= 0) & (rows["category"] == "parameter")].drop_duplicates("alloc_id")
    names = params["name"].fillna("").tolist()
    sizes = params["nbytes"].tolist()
    groups: dict[tuple[str, str], list[str]] = {}
    for path, cls in classes.items():
        if "." in path:
            groups.setdefault((path.rsplit(".", 1)[0], cls), []).append(path)
    best: tuple[str, ...] = ()
    best_bytes = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        total = sum(s for n, s in zip(names, sizes) if any(n.startswith(m + ".") for m in members))
        if total > best_bytes:
            best, best_bytes = tuple(sorted(members)), total
    return best


def _unit_of(name: object, units: tuple[str, ...]) -> str:
    """The unit a parameter (or its gradient, "<param>.grad") belongs to; "" for the root unit."""
    if not isinstance(name, str):
        return ""
    for u in units:
        if name.startswith(u + "."):
            return u
    return ""


def _under(modules: np.ndarray, path: str) -> np.ndarray:
    prefix = path + "."
    return np.asarray([isinstance(m, str) and (m == path or m.startswith(prefix)) for m in modules], dtype=bool)


def gathered_bytes(rows: pd.DataFrame, category: np.ndarray, units: tuple[str, ...], *, shards: int,
                   reshard_after_forward: bool) -> np.ndarray:
    """Bytes FSDP2 holds on one core beyond the 1/`shards` shards, after each row of one device's record:
    gathered parameters of each unit while it is gathered, plus the full-size gradients of each unit (less
    their shard, which the caller counts) until its backward ends. `category` is each row's storage category."""
    n = len(rows)
    extra = np.zeros(n + 1, dtype=np.float64)  # a difference array: += at the start row, -= after the end row
    if n == 0:
        return extra[:0]
    phase = rows["phase"].to_numpy(dtype=object)
    module = rows["module"].to_numpy(dtype=object)
    steps = rows["step"].to_numpy()
    fwd_mod = np.where(phase == "forward", module, None)
    bwd_mod = np.asarray([m[: -len(_BACKWARD)] if p == "backward" and isinstance(m, str) and m.endswith(_BACKWARD)
                          else None for m, p in zip(module, phase)], dtype=object)
    kind = rows["kind"].to_numpy()
    first = (kind >= 0) & ~rows["alloc_id"].duplicated().to_numpy()
    names = rows["name"].to_numpy(dtype=object)
    nbytes = rows["nbytes"].to_numpy(dtype=np.int64)
    param_bytes: dict[str, int] = {}
    for i in np.flatnonzero(first & (category == "parameter")):
        u = _unit_of(names[i], units)
        param_bytes[u] = param_bytes.get(u, 0) + int(nbytes[i])

    def span(mask: np.ndarray) -> tuple[int, int] | None:
        idx = np.flatnonzero(mask)
        return (int(idx[0]), int(idx[-1])) if len(idx) else None

    def add(a: int, b: int, v: float) -> None:  # rows a..b inclusive
        if b >= a and v:
            extra[a] += v
            extra[b + 1] -= v

    bwd_end: dict[tuple[int, str], int] = {}
    for s in np.unique(steps):
        in_step = steps == s
        all_fwd = span(in_step & (phase == "forward"))
        all_bwd = span(in_step & (phase == "backward"))
        if all_fwd is None:
            continue
        root_end = all_bwd[1] if all_bwd is not None else all_fwd[1]
        add(all_fwd[0], root_end, param_bytes.get("", 0))
        bwd_end[(int(s), "")] = root_end
        fwd: dict[str, tuple[int, int] | None] = {}
        bwd: dict[str, tuple[int, int] | None] = {}
        for u in units:
            fwd[u] = span(in_step & _under(fwd_mod, u))
            bwd[u] = span(in_step & _under(bwd_mod, u))
            if bwd[u] is not None:
                bwd_end[(int(s), u)] = bwd[u][1]
        # backward prefetch: a unit's backward gathers the unit whose backward comes next (the root's, the
        # last unit of the forward pass), so each unit is gathered from the start of the previous backward
        root_bwd = span(in_step & _under(bwd_mod, units[0].split(".")[0])) if units else None
        starts = [(b[0], 1, u) for u, b in bwd.items() if b is not None]
        if root_bwd is not None:
            starts.append((root_bwd[0], 0, ""))
        gather_from: dict[str, int] = {}
        prev = None
        for start, _, u in sorted(starts):
            if u:
                gather_from[u] = start if prev is None else prev
            prev = start
        for u in units:
            f, b = fwd[u], bwd[u]
            if f is None:
                continue
            if reshard_after_forward or b is None:
                add(f[0], f[1], param_bytes.get(u, 0))
                if b is not None:
                    add(gather_from[u], b[1], param_bytes.get(u, 0))
            else:
                add(f[0], b[1], param_bytes.get(u, 0))
    # gradients produced in a backward pass: full size until their unit's backward ends, then a shard
    keep = 1.0 - 1.0 / shards
    free_row = {a: i for i, (a, k) in enumerate(zip(rows["alloc_id"].to_numpy(), kind)) if k < 0}
    for i in np.flatnonzero(first & (kind > 0) & (category == "gradient")):
        end = bwd_end.get((int(steps[i]), _unit_of(names[i], units)))
        if end is None or end < i:
            continue
        freed = free_row.get(rows["alloc_id"].iat[i])
        add(int(i), min(end, freed - 1) if freed is not None else end, keep * int(nbytes[i]))
    return np.cumsum(extra)[:n]


def zero1_rank_state(rows: pd.DataFrame, category: np.ndarray, shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Two bools per row (by storage): optimizer state that ZeroRedundancyOptimizer's partition over `shards`
    ranks leaves on the rank holding the most of it, and optimizer state matched to no parameter (the caller
    splits that evenly). Parameters are balanced by bytes (by elements, for one dtype); optimizer state is
    matched to its parameter by name ("AdamW exp_avg of GPT.head.weight")."""
    first = (rows["kind"] >= 0).to_numpy() & ~rows["alloc_id"].duplicated().to_numpy()
    names = rows["name"].to_numpy(dtype=object)
    nbytes = rows["nbytes"].to_numpy(dtype=np.int64)
    params = [(int(nbytes[i]), names[i]) for i in np.flatnonzero(first & (category == "parameter"))]
    load = [0] * shards
    rank_of: dict[str, int] = {}
    for size, name in sorted(params, key=lambda x: -x[0]):  # stable: equal sizes keep the model's order
        r = load.index(min(load))
        load[r] += size
        if isinstance(name, str):
            rank_of[name] = r
    owner = np.asarray([rank_of.get(n.split(" of ", 1)[1], -1) if isinstance(n, str) and " of " in n else -1
                        for n in names], dtype=np.int64)
    state = category == "optimizer_state"
    held = [int(nbytes[first & state & (owner == r)].sum()) for r in range(shards)]
    return state & (owner == int(np.argmax(held))), state & (owner < 0)
