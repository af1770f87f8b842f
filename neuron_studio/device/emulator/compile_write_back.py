"""Host copies of traced neuron tensors during torch.compile, and carrying writes into them back.

While Dynamo traces, a neuron tensor that is not a NeuronTensor (a fake tensor from a factory call)
reaches the subclass's dispatch: the op runs on a host copy, and an in-place or out= write into that
copy must be copied back into the original or the traced graph loses it.
"""
from __future__ import annotations

import torch

__all__ = ["host_copy", "write_back"]

_CPU = torch.device("cpu")


def host_copy(t: torch.Tensor, traced: list | None) -> torch.Tensor:
    """A host copy of traced neuron tensor `t`, noted in `traced` (if given) for `write_back`."""
    c = t.to(_CPU)
    if traced is not None:
        traced.append((t, c))
    return c


_WRITTEN: dict = {}  # op -> (positional indices, keyword names) of the arguments its schema writes to


def _written_args(func) -> tuple[tuple[int, ...], tuple[str, ...]]:  # noqa: ANN001
    found = _WRITTEN.get(func)
    if found is None:
        pos, names = [], []
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                pos.append(i)
                names.append(a.name)
        found = _WRITTEN[func] = (tuple(pos), tuple(names))
    return found


def write_back(func, traced: list, uargs: list, kw: dict) -> None:  # noqa: ANN001
    """Carry an op's writes into host copies of traced neuron tensors back to the tensors themselves.

    While torch.compile traces, a factory such as `torch.zeros(..., device="neuron")` gives a plain
    fake tensor on the neuron device, not a NeuronTensor. An op mixing it with NeuronTensors reaches
    `__torch_dispatch__`, which runs the op on a host copy of it; for an in-place or out= op the write
    must land in the original, or the traced graph silently drops it (`out[:, 0] = x` left `out` zero).
    """
    positions, names = _written_args(func)
    if not positions:
        return
    written = []
    for i, name in zip(positions, names):
        v = uargs[i] if i < len(uargs) else kw.get(name)
        if isinstance(v, (list, tuple)):
            written.extend(v)
        elif v is not None:
            written.append(v)
    for orig, copy in traced:
        if any(copy is w for w in written):
            if orig.shape != copy.shape:
                orig.resize_(copy.shape)
            orig.copy_(copy)
