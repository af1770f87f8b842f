"""The cell a `%%neuron` profile ran from, as the what-if advisor needs it to write a variant cell: the cell's
source as typed (magic line and body), its notebook and cell id (where the JupyterLab extension inserts the
variant below it), and per swappable NKI kernel the variable of the cell's model to swap it into.

Stamped into the trace's metadata (`meta["cell"]`) by the runner, so a stored run keeps it.
"""
from __future__ import annotations

import ast
from typing import Any

__all__ = ["cell_origin", "swap_targets", "optimizers"]


def _names(source: str) -> list[str]:
    """The global names a cell body reads, in the order they first appear (an unparsable body: none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    seen: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            seen.setdefault(node.id, None)
    return list(seen)


def swap_targets(body: str, namespace: dict[str, Any]) -> dict[str, str]:
    """Per swappable kernel: the one module variable the body uses that holds a module the kernel matches and is not
    itself inside another such variable (`model`, not `model.layers[0]` bound to `block`). Kernels with no such
    variable, or several unrelated ones, are left out: the advisor then shows the snippet, not a cell."""
    import torch

    from neuron_studio.kernels.swap import SWAPPABLE

    mods = {n: namespace[n] for n in _names(body) if isinstance(namespace.get(n), torch.nn.Module)}
    subs = {n: list(m.modules()) for n, m in mods.items()}
    out: dict[str, str] = {}
    for kernel, (match, _make) in SWAPPABLE.items():
        hits = [n for n in mods if any(match(sub) for sub in subs[n])]
        roots = [n for n in hits if not any(o != n and any(s is mods[n] for s in subs[o]) for o in hits)]
        if len(roots) == 1:
            out[kernel] = roots[0]
    return out


#: Constructor arguments left out of the rebuilt line: the ones a fused optimizer sets itself or forbids with it.
_IMPLIED = ("params", "fused", "foreach", "capturable", "differentiable")


def optimizers(body: str, namespace: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per torch optimizer variable the body uses: its class and the constructor line that rebuilds it fused
    (`torch.optim.AdamW(model.parameters(), lr=0.0003, fused=True)`: the arguments that differ from the class
    defaults kept, the parameters named by the module variable that holds exactly them), for the advisor's
    fused-optimizer row."""
    import inspect

    import torch

    out: dict[str, dict[str, str]] = {}
    for name in _names(body):
        opt = namespace.get(name)
        if not isinstance(opt, torch.optim.Optimizer):
            continue
        cls = type(opt)
        if cls.__module__.split(".")[:2] != ["torch", "optim"]:
            continue
        params = [p for g in opt.param_groups for p in g["params"]]
        ids = {id(p) for p in params}
        src = next((n for n, m in namespace.items() if not n.startswith("_") and isinstance(m, torch.nn.Module)
                    and {id(p) for p in m.parameters()} == ids), None)
        if len(opt.param_groups) != 1:
            continue   # per-group settings: the line would have to rebuild every group
        sig = inspect.signature(cls.__init__).parameters
        args = [f"{src}.parameters()" if src else f"[p for g in {name}.param_groups for p in g['params']]"]
        for k, v in opt.defaults.items():
            if k in _IMPLIED or k not in sig or sig[k].default is inspect.Parameter.empty:
                continue
            if isinstance(v, torch.Tensor) or v == sig[k].default:
                continue
            args.append(f"{k}={v!r}")
        args.append("fused=True")
        out[name] = {"class": cls.__name__, "constructor": f"torch.optim.{cls.__name__}({', '.join(args)})"}
    return out


def cell_origin(*, options_line: str, body: str, transformed_body: str, notebook: str | None, cell_id: str | None,
                namespace: dict[str, Any]) -> dict[str, Any]:
    """`meta["cell"]`: the cell as typed (`%%neuron <options>` then the body), where it lives, swap targets."""
    head = f"%%neuron {options_line.strip()}".rstrip()
    # IPython hands a cell magic its body with a newline added; the cell as typed has none
    return {"source": f"{head}\n{body.rstrip(chr(10))}", "notebook": notebook, "id": cell_id,
            "swap_targets": swap_targets(transformed_body, namespace),
            "optimizers": optimizers(transformed_body, namespace)}
