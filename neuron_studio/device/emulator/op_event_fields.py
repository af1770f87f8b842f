"""The storages an op reads and writes, computed from its Python-level arguments.

The emulated device records these in C++ (csrc/NeuronKernels.cpp); this is the same rule for recorders that
see ops in Python (a TorchDispatchMode over meta tensors, as benchmarks/bench_calibration.py uses).
"""
from __future__ import annotations

import torch

__all__ = ["storage_ids"]

_Tensor = torch.Tensor


def _storages(value, into: dict, ids, fresh: bool = False) -> None:  # noqa: ANN001
    if isinstance(value, _Tensor):
        value = (value,)
    elif not isinstance(value, (list, tuple)):
        return
    for x in value:
        if isinstance(x, _Tensor):
            address = x.untyped_storage()._cdata
            into[ids.fresh(address) if fresh else ids.of(address)] = None


def storage_ids(func, uargs, kw, outs, ids) -> tuple[tuple[int, ...], tuple[int, ...]]:  # noqa: ANN001
    """(storages read, storages written) by one op, as ids from `ids` (an events.StorageIds: one id per storage
    lifetime, shared by views).

    Read: every tensor argument. Written: the arguments the schema marks as mutated (in-place self, out=, foreach
    lists) and the fresh outputs (returns the schema does not alias to an argument: new storages, new ids). A
    view writes nothing. The model schedules the ops of one launch over the engines from these facts."""
    reads: dict = {}
    for v in uargs:
        _storages(v, reads, ids)
    if kw:
        for v in kw.values():
            _storages(v, reads, ids)
    writes: dict = {}
    schema = func._schema
    for i, arg in enumerate(schema.arguments):
        alias = arg.alias_info
        if alias is not None and alias.is_write:
            _storages(uargs[i] if i < len(uargs) else (kw or {}).get(arg.name), writes, ids)
    rets = schema.returns
    for i, o in enumerate(outs):
        if i >= len(rets) or rets[i].alias_info is None:
            _storages(o, writes, ids, fresh=True)
    return tuple(reads), tuple(writes)
