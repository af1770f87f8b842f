"""Why a compiled graph compiled again, in words a PyTorch user knows: the one classification of each recompile.

Dynamo recompiles a frame when the guards of every graph it compiled for that frame fail on the new call. Before it
compiles again it computes, for each earlier compile, the first guard that failed (`torch._dynamo.guards.
get_and_maybe_log_recompilation_reasons`, the text `TORCH_LOGS=recompiles` prints, most recent compile first):
"0/1: tensor 'x' size mismatch at index 0. expected 2, actual 5", "0/2: GLOBAL_STATE changed: grad_mode",
"0/0: n == 3  # source comment". Those strings are Dynamo's own wording (`guards.py`, `get_guard_fail_reason_helper`
and the C++ guard managers' messages in torch 2.13) and are kept, unchanged, as the recompile's `detail`.

The cause is "shapes" only when no earlier compile of the graph had the new call's input shapes (a new shape
compiles a new graph under static shapes). Otherwise the earlier compile with the same shapes (the most recent such)
is the one the call nearly matched: its failed guard names what changed (grad mode, a Python value, a dtype, ...).
Computed once, when the compile happens (`neuron_studio.modes`), stored in the trace's `compiles` table, read by
every view. A trace recorded before this was stored is classified from its shapes alone (`fill_causes`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import pandas as pd

__all__ = ["CAUSES", "SHAPES", "FIRST", "UNKNOWN", "RecompileCause", "GuardFailure", "parse_guard_failure",
           "classify_recompile", "first_compile", "fill_causes", "cause_fix"]

FIRST, SHAPES, UNKNOWN = "first", "shapes", "unknown"

#: Each cause, as a short label (the views' "cause" column).
CAUSES: dict[str, str] = {
    FIRST: "first compile",
    SHAPES: "new input shapes",
    "strides": "new memory layout",
    "dtype": "new dtype",
    "requires_grad": "requires_grad changed",
    "device": "device or dispatch keys changed",
    "grad_mode": "grad mode changed",
    "autocast": "autocast changed",
    "deterministic": "deterministic algorithms switched",
    "global_state": "torch global state changed",
    "training": "train()/eval() switched",
    "value": "a Python value changed",
    "global": "a global variable changed",
    "length": "a container's length changed",
    "object": "a different object",
    "type": "a value's type changed",
    "aliasing": "inputs alias each other",
    "backend": "a different compile backend",
    "guard": "a guard failed",
    UNKNOWN: "reason not recorded",
}

#: What to do about each cause (the advice the views give for a recompile that was not caused by shapes).
_FIXES: dict[str, str] = {
    "strides": "pass the same memory layout each call (e.g. x.contiguous() before the compiled step)",
    "dtype": "cast inputs to one dtype once, before the compiled step",
    "requires_grad": "keep requires_grad of the inputs the same between calls",
    "device": "keep the inputs on one device (and out of inference_mode) between calls",
    "grad_mode": "expected once per grad mode (training vs torch.no_grad()/inference_mode evaluation); it "
                 "recompiles again only if a call switches to a mode no earlier compile had",
    "autocast": "keep torch.autocast on (or off) for every call of the compiled function",
    "deterministic": "set torch.use_deterministic_algorithms once, before the first compiled call",
    "global_state": "keep torch's global settings fixed between calls",
    "training": "expected once per mode (model.train() vs model.eval()): each compiles once",
    "value": "a Python number or flag is baked into the graph: keep it constant, or pass it as a tensor "
             "(torch.tensor(v)) so that its value is an input",
    "global": "a global the graph read is baked into it: keep it constant, or pass it in as a tensor",
    "length": "keep the number of items fixed between calls (or stack them into one tensor)",
    "object": "reuse the same object (model, optimizer, module) between calls of the compiled function",
    "type": "pass values of the same type each call (e.g. always a float, or always a tensor)",
    "aliasing": "pass distinct tensors (or always the same tensor twice)",
    "backend": "reuse one backend callable for torch.compile",
    "guard": "see Dynamo's guard text (TORCH_LOGS=recompiles prints the same)",
    UNKNOWN: "run with TORCH_LOGS=recompiles to see Dynamo's reason",
}


@dataclass(frozen=True)
class GuardFailure:
    """One of Dynamo's recompile reasons: the earlier compile whose guard failed, and the guard."""

    compile_id: str   # the earlier compile ("0/1"); "" when Dynamo's text names none
    guard: str        # the failed check, without Dynamo's source comment and user stack
    text: str         # as Dynamo gave it


@dataclass(frozen=True)
class RecompileCause:
    """A compile's cause (a `CAUSES` key), the words the views show, and Dynamo's guard failures (the detail)."""

    cause: str
    reason: str
    detail: str = ""


_ID = re.compile(r"^\s*(?P<id>!?\d+(?:/\d+)+(?:_\d+)?)\s*:\s*")
_TENSOR = re.compile(r"^tensor '(?P<name>[^']+)' (?P<what>[\w ]+?) mismatch\b(?P<rest>.*)$", re.S)
_INDEX = re.compile(r"at index (?P<i>\d+)\. expected (?P<exp>[^,]+), actual (?P<act>\S+)")
_EXPECTED = re.compile(r"expected (?P<exp>[^,]+?)(?:, actual (?P<act>\S+))?$")
_GLOBAL_STATE = re.compile(r"^GLOBAL_STATE changed:\s*(?P<what>.*)$")
_TRAINING = re.compile(r"^(?P<module>.+)\.training == (?P<was>True|False)$")
_LEN = re.compile(r"^len\((?P<x>.+)\) == (?P<n>\d+)$")
_CHECK = re.compile(r"^___check_(?P<kind>obj_id|type_id)\((?P<x>.+?), \d+\)$")
_TYPE_OF = re.compile(r"^expected type of '(?P<x>.+?)' to be")
_EQUALS = re.compile(r"^(?P<x>.+?) == (?P<v>.+)$")
_GLOBAL_NAME = re.compile(r"""^G\[['"](?P<g>[^'"]+)['"]\]""")


def parse_guard_failure(text: str) -> GuardFailure:
    """Dynamo's reason text -> its compile id and the failed guard alone (the first line, before the source
    comment Dynamo appends after `#`, without the 'User stack trace' it may add)."""
    text = str(text or "")
    head = text.split("\nUser stack trace:", 1)[0]
    m = _ID.match(head)
    cid = m.group("id") if m else ""
    body = head[m.end():] if m else head
    guard = body.split("\n", 1)[0]
    if not guard.startswith("tensor '") and "  #" in guard:
        guard = guard.split("  #", 1)[0]
    return GuardFailure(cid, guard.strip(), text)


def _guard_cause(guard: str) -> tuple[str, str]:
    """(cause, words) of one failed guard."""
    t = _TENSOR.match(guard)
    if t:
        name, what, rest = t.group("name"), t.group("what").strip(), t.group("rest")
        # Dynamo's own names (a value a graph break left on the stack, "___stack1") are not the user's
        name = f"input {name}" if name.startswith("___") else name
        at = _INDEX.search(rest)
        if what == "size":
            dim = f" dimension {at.group('i')} was {at.group('exp')}, now {at.group('act')}" if at else ""
            return SHAPES, f"tensor '{name}'{dim}"
        if what == "stride":
            return "strides", (f"tensor '{name}' has the same shape but other strides (a transposed or non-contiguous "
                               "input)")
        e = _EXPECTED.search(rest)
        if what == "dtype":
            was = f": compiled for {e.group('exp')}, now {e.group('act')}" if e and e.group("act") else ""
            return "dtype", f"tensor '{name}' has a new dtype{was}"
        if what == "requires_grad":
            exp = e.group("exp") if e else ""
            now = "True" if exp.endswith("=0") else "False" if exp.endswith("=1") else "changed"
            return "requires_grad", f"tensor '{name}' requires_grad is now {now}"
        if what in ("dispatch key set", "device"):
            return "device", f"tensor '{name}' moved to another device or changed autograd/inference mode"
        return "guard", f"tensor '{name}' {what} changed"
    g = _GLOBAL_STATE.match(guard)
    if g:
        what = g.group("what").strip()
        if "grad_mode" in what:
            return "grad_mode", "a call under torch.no_grad()/inference_mode() after calls with grad, or the reverse"
        if "autocast" in what:
            return "autocast", f"torch.autocast was entered or left ({what})"
        if "deterministic" in what:
            return "deterministic", "torch.use_deterministic_algorithms(...) was called between the calls"
        return "global_state", what or "unnamed"
    if guard.startswith("Duplicate tensor"):
        return "aliasing", guard.split(":", 1)[-1].strip() + " are the same tensor in this call, not in the earlier one"
    if guard.startswith("BACKEND_MATCH"):
        return "backend", "torch.compile was called with a different backend callable"
    m = _TRAINING.match(guard)
    if m:
        mode = "eval()" if m.group("was") == "True" else "train()"
        return "training", f"{m.group('module')} was switched to {mode}"
    m = _LEN.match(guard)
    if m:
        return "length", f"len({m.group('x')}) is no longer {m.group('n')}"
    m = _CHECK.match(guard)
    if m:
        if m.group("kind") == "obj_id":
            return "object", f"{m.group('x')} is a different object than the one compiled for"
        return "type", f"{m.group('x')} has a different type than the one compiled for"
    m = _TYPE_OF.match(guard)
    if m:
        return "type", f"{m.group('x')} has a different type than the one compiled for"
    m = _EQUALS.match(guard)
    if m:
        x, v = m.group("x").strip(), m.group("v").strip()
        gname = _GLOBAL_NAME.match(x)
        if gname:
            return "global", f"global {gname.group('g')}{x[gname.end():]} is no longer {v}"
        return "value", f"{x} is no longer {v}"
    return "guard", guard or "a guard failed"


_GLOBAL_CAUSES = frozenset({"grad_mode", "autocast", "deterministic", "global_state"})


def first_compile() -> RecompileCause:
    return RecompileCause(FIRST, CAUSES[FIRST])


def classify_recompile(failures: Sequence[str], shapes: str, earlier: Mapping[str, str]) -> RecompileCause:
    """The cause of a recompile. `failures`: Dynamo's recompile reasons, one per earlier compile of the frame, most
    recent first ("0/1: ..."); `shapes`: this compile's graph input shapes; `earlier`: {compile id: input shapes} of
    the frame's earlier compiles, in compile order (those this process saw)."""
    parsed = [parse_guard_failure(f) for f in failures if str(f or "").strip()]
    detail = "\n".join(p.text for p in parsed)
    before = list(earlier.values())
    last = before[-1] if before else None
    new_shape = bool(before) and shapes not in before
    if new_shape:
        size = next((_guard_cause(p.guard)[1] for p in parsed if _guard_cause(p.guard)[0] == SHAPES), "")
        said = f"; {size}" if size else ""
        return RecompileCause(SHAPES, f"new input shapes ({shapes}; compiled before for {last}){said}",
                              detail or "Dynamo gave no guard failure")
    if not parsed:
        why = ("the input shapes are the same as an earlier compile's; Dynamo's guard failures were not available"
               if before else "Dynamo's guard failures were not available")
        return RecompileCause(UNKNOWN, f"{CAUSES[UNKNOWN]}: {why}", "")
    # Dynamo checks torch's global state (grad mode, autocast, ...) first: an earlier compile that failed on
    # another guard matched that state, so its failure is the closer one
    same = [p for p in parsed if earlier.get(p.compile_id) == shapes]
    closer = sorted(same or parsed, key=lambda p: _guard_cause(p.guard)[0] in _GLOBAL_CAUSES)
    p = closer[0]
    cause, words = _guard_cause(p.guard)
    if cause == SHAPES:   # a size guard failed, yet the graph's input shapes are unchanged: a tensor not passed in
        cause, words = "guard", f"{words} (not one of the graph's inputs, whose shapes are unchanged)"
    same_shapes = " with the same input shapes" if before else ""
    return RecompileCause(cause, f"{CAUSES[cause]}{same_shapes}: {words}", detail)


def cause_fix(cause: str) -> str:
    """What would stop recompiles of this cause ("" for shapes: the shapes advice names the padding line)."""
    return _FIXES.get(cause, _FIXES["guard"])


def fill_causes(compiles: pd.DataFrame) -> pd.DataFrame:
    """A compiles table recorded before causes were stored: classified from its shapes alone (a recompile whose
    shapes no earlier compile of its graph had is "shapes"; one with shapes seen before is "unknown": Dynamo's
    reason was not kept). Tables that have the columns are returned as they are."""
    if {"cause", "detail", "compile_id"} <= set(compiles.columns):
        return compiles
    out = compiles.copy()
    if "compile_id" not in out.columns:
        out["compile_id"] = pd.Series([""] * len(out), index=out.index, dtype=object)
    if "cause" in out.columns and "detail" in out.columns:
        return out
    causes, reasons = [], []
    seen: dict[object, list[str]] = {}
    for key, shapes, recompile in zip(out["graph_key"], out["shapes"].astype(str), out["recompile"]):
        before = seen.setdefault(key, [])
        if not bool(recompile):
            c = first_compile()
        else:
            c = classify_recompile((), shapes, {str(i): s for i, s in enumerate(before)})
            if c.cause == UNKNOWN and before:
                c = RecompileCause(UNKNOWN, f"{CAUSES[UNKNOWN]}: recompiled with input shapes an earlier compile had; "
                                            "the trace was recorded before the studio kept Dynamo's reason")
        before.append(shapes)
        causes.append(c.cause)
        reasons.append(c.reason)
    out["cause"] = pd.Series(causes, index=out.index, dtype=object)
    out["reason"] = pd.Series(reasons, index=out.index, dtype=object)
    out["detail"] = pd.Series([""] * len(out), index=out.index, dtype=object)
    return out
