"""The cell that runs a what-if row for real: the profiled cell with its `%%neuron` line changed to the row's
mode and chip (every other option kept), or with the row's NKI kernel swapped in first.

Why a rewrite and not just the row's line: the user's own options (`--steps`, `--warmup`, `--no-sync`, ...) decide
what is measured, so a variant that dropped them would not measure what the prediction is about. The magic line is
the cell's first non-blank line only, as IPython reads it (a cell magic's options have no line continuation).
Options are split as IPython's magics split them (quotes kept verbatim), so a value is written back exactly as typed.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

__all__ = ["VariantCellError", "MagicLine", "split_cell", "parse_magic_options", "variant_magic_line", "prediction_for",
           "variant_cell", "kernel_lines", "MAGIC"]

MAGIC = "%%neuron"

#: The `%%neuron` options that take a value, and the flags (magics.py declares them; kept in step by a test).
VALUED = ("mode", "chip", "steps", "warmup", "name", "compare", "memory-scale")
FLAGS = ("no-profile", "sync", "no-sync")

#: What a row's line sets, in the order they are written when the profiled cell did not set them.
_ROW_KEYS = ("mode", "chip")

_KERNEL_CALL = re.compile(r'^kernels\.use\((?P<model>[A-Za-z_][A-Za-z0-9_.]*), "(?P<kernel>[A-Za-z0-9_]+)"\)')


class VariantCellError(ValueError):
    """The row's line cannot be turned into a cell (names the line and what was expected)."""


@dataclass(frozen=True)
class MagicLine:
    """A `%%neuron` line split into option tokens: (name, value or None, the tokens as typed)."""

    options: tuple[tuple[str, str | None, tuple[str, ...]], ...]

    def get(self, name: str) -> str | None:
        """The value the magic would use (argparse keeps the last occurrence), or None."""
        vals = [v for n, v, _ in self.options if n == name]
        return vals[-1] if vals else None


def _tokens(args: str) -> list[str]:
    """Split as IPython's `arg_split` does for magics (non-POSIX shlex: quotes stay in the token)."""
    lex = shlex.shlex(args, posix=False)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError as exc:   # an unbalanced quote: the magic itself would have refused the line
        raise VariantCellError(f"cannot split the %%neuron options {args!r}: {exc}") from None


def _resolve(flag: str) -> str | None:
    """The option an `--abbrev` names (argparse accepts unique prefixes), or None when unknown or ambiguous."""
    name = flag[2:]
    known = VALUED + FLAGS
    if name in known:
        return name
    hits = [k for k in known if k.startswith(name)]
    return hits[0] if len(hits) == 1 else None


def parse_magic_options(args: str) -> MagicLine:
    """The options of a `%%neuron` line (the text after `%%neuron`); unknown tokens are kept as typed."""
    toks = _tokens(args)
    out: list[tuple[str, str | None, tuple[str, ...]]] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.startswith("--"):
            flag, eq, value = tok.partition("=")
            name = _resolve(flag)
            if name in VALUED:
                if eq:
                    out.append((name, value, (tok,)))
                    i += 1
                    continue
                if i + 1 < len(toks):
                    out.append((name, toks[i + 1], (tok, toks[i + 1])))
                    i += 2
                    continue
            if name in FLAGS and not eq:
                out.append((name, None, (tok,)))
                i += 1
                continue
        out.append(("", None, (tok,)))
        i += 1
    return MagicLine(tuple(out))


def split_cell(source: str) -> tuple[str | None, str]:
    """(the `%%neuron` line's options, or None when the cell has no such line; the body after it).

    Leading blank lines are skipped, as IPython does before it looks for a cell magic."""
    lines = source.split("\n")
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines):
        head = lines[i].rstrip()
        if head == MAGIC or head.startswith(MAGIC + " ") or head.startswith(MAGIC + "\t"):
            return head[len(MAGIC):].strip(), "\n".join(lines[i + 1:])
    return None, source


def _quote(value: str) -> str:
    """A value the row or the run id sets (a mode, a chip, a run id: one word); anything else is refused."""
    if not re.fullmatch(r"[A-Za-z0-9_.:/+-]+", value):
        raise VariantCellError(f"not a single-word %%neuron option value: {value!r}")
    return value


def variant_magic_line(options: str | None, row_line: str, *, compare: int | str | None = None,
                       name_suffix: str | None = None) -> str:
    """The profiled cell's `%%neuron` line with the row's mode and chip (each replacing the profiled value where it
    was set, else added), every other option as typed, `--compare` set to the profiled run (the variant's output
    then diffs against it) and `--name` suffixed (two runs of one name would shadow each other in the store).

    `options` None (the cell had no `%%neuron` line): the row's line itself, plus `--compare`."""
    if not row_line.startswith(MAGIC):
        raise VariantCellError(f"not a %%neuron line: {row_line!r}")
    row = parse_magic_options(row_line[len(MAGIC):])
    if options is None:
        line = row_line.rstrip()
        return line + (f" --compare {_quote(str(compare))}" if compare is not None else "")
    mine = parse_magic_options(options)
    want = {k: row.get(k) for k in _ROW_KEYS if row.get(k) is not None}
    if compare is not None:
        want["compare"] = str(compare)
    parts: list[str] = []
    placed: set[str] = set()
    for name, value, typed in mine.options:
        if name in want:
            if name not in placed:   # at the first occurrence; later ones would override it, so they go
                parts.append(f"--{name} {_quote(want[name])}")
                placed.add(name)
            continue
        if name == "name" and name_suffix and value is not None:
            # IPython keeps quotes in the value (`--name "a b"` names the run `"a b"`): suffix inside them
            q = value[0] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else ""
            parts.append(f"--name {q}{value[len(q):len(value) - len(q)]}-{name_suffix}{q}")
            continue
        parts.extend(typed)
    for name in [*_ROW_KEYS, "compare"]:
        if name in want and name not in placed:
            parts.append(f"--{name} {_quote(want[name])}")
    return " ".join([MAGIC, *parts])


def kernel_lines(run: str, model_var: str | None = None) -> tuple[str, str] | None:
    """(kernel, model expression) of a kernel row's `kernels.use(model, "kernel")` snippet, or None if the
    snippet is not one. `model_var` replaces the snippet's placeholder model."""
    m = _KERNEL_CALL.match(run.strip())
    if not m:
        return None
    return m.group("kernel"), model_var or m.group("model")


def variant_cell(source: str, run: str, *, compare: int | str | None = None, model_var: str | None = None) -> str:
    """The new cell for an advisor row: `source` is the profiled cell as the user wrote it (with its `%%neuron` line,
    if any), `run` the row's `run` (a `%%neuron` line or a `kernels.use(...)` snippet).

    - a `%%neuron` row: the magic line rewritten (`variant_magic_line`), the body unchanged; a cell with no magic
      line gets the row's line on top;
    - a kernel row: the profiled magic line (with `--compare`), then the import and a `kernels.use(...)` that
      swaps the kernel in (it runs with each run of the body; `use` leaves a module it already swapped to the same
      kernel as it is), then the body unchanged."""
    options, body = split_cell(source)
    if run.startswith(MAGIC):
        row = parse_magic_options(run[len(MAGIC):])
        suffix = "-".join(v for v in (row.get("mode"), row.get("chip")) if v)
        head = variant_magic_line(options, run, compare=compare, name_suffix=suffix)
        return f"{head}\n{body}"
    kernel = kernel_lines(run, model_var)
    if kernel is None:
        raise VariantCellError(f"an advisor row's run is a %%neuron line or kernels.use(model, \"kernel\"); got {run!r}")
    name, model = kernel
    swap = f'from neuron_studio import kernels\nkernels.use({model}, "{name}")  # the advisor\'s NKI kernel swap'
    if options is None:
        return f"{swap}\n{body}"
    head = variant_magic_line(options, f"{MAGIC}", compare=compare, name_suffix=name)
    return f"{head}\n{swap}\n{body}"


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n")).strip()


def prediction_for(rows: list[dict], source: str | None, step_time_ns: float) -> dict | None:
    """What a run's `--compare` run predicted for it: the advisor row (of the compared run's summary) whose cell is
    exactly this run's cell, with this run's step time against it; None when the cell is no row's cell (edited, or
    not a variant), so a prediction is never set beside a run it was not made for."""
    if not source:
        return None
    want = _norm(source)
    for r in rows:
        if not isinstance(r, dict) or r.get("current") or not isinstance(r.get("cell"), str) or _norm(r["cell"]) != want:
            continue
        pred, low, high = r.get("step_time_ns"), r.get("step_time_low_ns"), r.get("step_time_high_ns")
        if not isinstance(pred, (int, float)) or pred <= 0:
            return None
        ranged = isinstance(low, (int, float)) and isinstance(high, (int, float))
        return {"variant": r.get("variant"), "step_time_ns": float(pred), "low_ns": float(low) if ranged else None,
                "high_ns": float(high) if ranged else None, "measured_ns": float(step_time_ns),
                "ratio": float(step_time_ns) / float(pred),
                "within": (float(low) <= float(step_time_ns) <= float(high)) if ranged else None}
    return None
