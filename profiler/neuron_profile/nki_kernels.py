"""Which NKI kernels ran each op, and the source line that took the most time (KernelInstructions,
KernelStackFrames, or `Instruction.nki_source_location`)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.values import num_col, str_col

__all__ = ["kernels_per_op"]


def kernels_per_op(t: ExplorerTables, g: np.ndarray, dur: np.ndarray, keys: list) -> dict:
    """Per op key: the NKI kernels that ran it, hottest first, with the source line that took the most time."""
    ins = t.get("Instruction")
    ki, frames = t.get("KernelInstructions"), t.get("KernelStackFrames")
    n = len(ins)
    file = np.full(n, "", dtype=object)
    line = np.full(n, -1, dtype=np.int64)
    func = np.full(n, "", dtype=object)
    kern = np.full(n, "", dtype=object)
    names: dict[int, tuple[str, int | None]] = {}
    if frames is not None and "stack_frame_id" in frames.columns:
        for sid, fq, parent in zip(num_col(frames, "stack_frame_id", -1).astype(np.int64),
                                   str_col(frames, "fully_qualified_function_name"),
                                   num_col(frames, "parent_stack_frame_id", -1).astype(np.int64)):
            names[int(sid)] = (fq, int(parent) if parent >= 0 else None)

    def outermost(sid: int) -> tuple[str, str]:
        deepest = names.get(sid, ("", None))[0]
        top, cur, seen = deepest, sid, set()
        while cur is not None and cur in names and cur not in seen:
            seen.add(cur)
            fq, parent = names[cur]
            top = fq or top
            cur = parent
        return top, deepest

    if ki is not None and "kernel_instruction_name" in ki.columns and "kernel_instruction_name" in ins.columns:
        kfile, kline = str_col(ki, "file_path"), num_col(ki, "line_number", -1).astype(np.int64)
        ksid = num_col(ki, "stack_frame_id", -1).astype(np.int64)
        index = {nm: i for i, nm in enumerate(str_col(ki, "kernel_instruction_name")) if nm}
        cache: dict[int, tuple[str, str]] = {}
        for i, nm in enumerate(str_col(ins, "kernel_instruction_name")):
            j = index.get(nm) if nm else None
            if j is None:
                continue
            file[i], line[i] = kfile[j], kline[j]
            sid = int(ksid[j])
            if sid >= 0:
                if sid not in cache:
                    cache[sid] = outermost(sid)
                kern[i], func[i] = cache[sid]
    if "nki_source_location" in ins.columns:  # fallback: "file.py:42" or a list of such strings
        for i, loc in enumerate(str_col(ins, "nki_source_location")):
            if file[i] or not loc:
                continue
            m = re.search(r"([^'\"\[\],\s][^'\"\[\],]*?):(\d+)", loc)
            if m:
                file[i], line[i] = m.group(1).strip(), int(m.group(2))
    has = np.asarray([bool(f) for f in file])
    if not has.any():
        return {}
    df = pd.DataFrame({"g": g[has], "file": file[has], "line": line[has], "func": func[has], "kern": kern[has],
                       "dur": dur[has]})
    df["kern"] = [k or Path(f).stem for k, f in zip(df["kern"], df["file"])]
    out: dict = {}
    for (gi, k), sub in df.groupby(["g", "kern"], sort=False):
        lines = sub.groupby(["file", "line", "func"], sort=False)["dur"].sum().sort_values(ascending=False)
        (f0, l0, fn0), _t = lines.index[0], lines.iloc[0]
        out.setdefault(keys[int(gi)], []).append({
            "kernel": k, "name": k, "kind": "runs_as", "file": f0, "line": int(l0) if l0 >= 0 else None,
            "function": fn0 or k, "saving_ns": None, "measured": True, "instruction_ns": float(sub["dur"].sum()),
            "lines": [{"file": f, "line": int(ln) if ln >= 0 else None, "function": fn or None,
                       "instruction_ns": float(v)} for (f, ln, fn), v in lines.head(5).items()],
        })
    for v in out.values():
        v.sort(key=lambda k: -k["instruction_ns"])
    return out
