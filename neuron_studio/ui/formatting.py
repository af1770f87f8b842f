"""How the renderers print figures: nanoseconds, shares, dollars, counts, source locations.

Each formatter returns plain text (the HTML templates escape it). A value that is not a number where a
number belongs (a corrupt or hand-edited stored summary) is shown as it is, never as a made-up figure.
"""
from __future__ import annotations

import math
from typing import Any

from neuron_studio.profiler.analysis.memory_forecast import fmt_bytes as _bytes
from neuron_studio.profiler.summary_numbers import usd_text
from neuron_studio.profiler.vocabulary import source_label

__all__ = ["fmt_ns", "fmt_bytes", "fmt_count", "fmt_pct", "fmt_signed_pct", "fmt_usd", "fmt_sci", "fmt_source", "basename",
           "as_number", "fmt_kernel", "fmt_change"]


def as_number(v: Any) -> float | None:
    """`v` as a finite float, or None when it is missing or not a number (bools are not numbers here)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _shown(v: Any) -> str:
    return "–" if v is None else str(v)


def fmt_bytes(v: Any) -> str:
    """A byte count in binary units (the memory analysis' own formatter); a non-number is shown as it is."""
    f = as_number(v)
    return _shown(v) if f is None else _bytes(f)


def fmt_ns(ns: Any) -> str:
    """A duration given in nanoseconds, in the largest unit that keeps it >= 1 (3 significant digits)."""
    f = as_number(ns)
    if f is None:
        return _shown(ns)
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(f) >= div:
            return f"{f / div:.3g} {unit}"
    return f"{f:.0f} ns"


def fmt_pct(v: Any, missing: str = "–") -> str:
    """A 0..1 fraction as a percentage with one decimal (`missing` when None)."""
    if v is None:
        return missing
    f = as_number(v)
    return str(v) if f is None else f"{f * 100:.1f}%"


def fmt_signed_pct(v: Any) -> str:
    """A change already in percent, with its sign."""
    f = as_number(v)
    return _shown(v) if f is None else f"{f:+.1f}%"


def fmt_usd(v: Any) -> str:
    """Dollars to 3 significant digits, plain decimals (`usd_text`)."""
    f = as_number(v)
    return _shown(v) if f is None else usd_text(f)


def fmt_sci(v: Any) -> str:
    """A count of FLOPs or bytes, 3 significant digits; missing is 0 (as the summary's sums are)."""
    if v is None:
        return "0"
    f = as_number(v)
    return str(v) if f is None else f"{f:.3g}"


def fmt_count(v: Any) -> str:
    """A count that may be a per-step average: whole numbers as such, else one decimal."""
    f = as_number(v)
    if f is None:
        return _shown(v)
    return f"{f:,.0f}" if f == int(f) else f"{f:.1f}"


def fmt_source(src: Any) -> str:
    """An op source as it reads everywhere: `cell [n] line L` or `file.py:L` (`vocabulary.source_label`)."""
    return source_label(src)


def fmt_kernel(k: Any) -> str:
    """A hot op's NKI kernel cell: the kernel, what it is, and its modeled saving against the time it replaces
    ("rmsnorm_kernel (candidate): saves ~48 µs of the module's 80 µs, module model.norm"), or why no saving."""
    if not isinstance(k, dict) or not k.get("name"):
        return "–"
    kind = str(k.get("kind") or "")
    head = f"{k['name']} ({kind})" if kind else str(k["name"])
    if kind != "candidate":
        return head
    saving, replaces = as_number(k.get("saving_ns")), as_number(k.get("replaces_ns"))
    if k.get("modeled") is False or saving is None:
        return f"{head}: saving not modeled" + (" (a kernel outside this repository)" if not k.get("file") else "")
    scope = str(k.get("scope") or "op")
    if replaces is None:
        return f"{head}: saves ~{fmt_ns(saving)}/step (modeled)"
    of = f"of the module's {fmt_ns(replaces)}, {scope}" if scope.startswith("module") else f"of this op's {fmt_ns(replaces)}"
    return f"{head}: saves ~{fmt_ns(saving)}/step {of} (modeled)"


def fmt_change(c: Any) -> str:
    """A hot op's PyTorch change, tried before any kernel: "first: AdamW(fused=True), 1.5x (What if)"."""
    if not isinstance(c, dict) or not c.get("variant"):
        return ""
    sp = as_number(c.get("speedup"))
    return f"first: {c['variant']}" + (f", {sp:.1f}x" if sp else "") + " (What if tab)"


def basename(path: Any) -> str:
    return "" if path is None else str(path).rsplit("/", 1)[-1]
