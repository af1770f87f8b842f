"""The fields of an OpEvent computed from an op's arguments: shapes, dtype names, FLOPs, backward tags and the
storages the op reads and writes.

Pure functions of the op and its (unwrapped) arguments, kept apart from the tensor subclass's dispatch.
"""
from __future__ import annotations

import torch
from torch.utils.flop_counter import flop_registry

__all__ = ["dtype_name", "describe", "flops", "backward_tags", "cache_dtype_names", "storage_ids"]

_Tensor = torch.Tensor


def dtype_name(dt: torch.dtype) -> str:
    """The short dtype name events carry ("float32", "bfloat16")."""
    return _DTYPE_NAMES.get(dt) or str(dt).removeprefix("torch.")


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def describe(values) -> tuple[tuple, tuple]:  # noqa: ANN001
    """Shapes and dtype names of the tensors in `values` (also inside tensor lists), in order."""
    shapes = []
    dtypes = []
    for v in values:
        if isinstance(v, _Tensor):
            shapes.append(tuple(v.shape))
            dtypes.append(dtype_name(v.dtype))
        elif isinstance(v, (list, tuple)) and v and isinstance(v[0], _Tensor):
            for x in v:
                if isinstance(x, _Tensor):
                    shapes.append(tuple(x.shape))
                    dtypes.append(dtype_name(x.dtype))
    return tuple(shapes), tuple(dtypes)


def flops(func, uargs, kw, out) -> int:  # noqa: ANN001
    """The op's FLOPs by torch's flop formulas; 0 where torch has none for it."""
    fn = flop_registry.get(func._overloadpacket)
    if fn is None:
        return 0
    try:
        return int(fn(*uargs, **kw, out_val=out))
    except Exception:  # flop formulas reject some argument forms; a missing count is not an error
        return 0


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


def backward_tags() -> tuple[str, ...]:
    """Tags of an op run by the autograd engine: "backward" and the forward op's sequence number if known."""
    # runs on the autograd engine's thread, where an exception would abort the process: never raise
    try:
        node = torch._C._current_autograd_node()
        seq = node._sequence_nr() if node is not None else None
    except Exception:  # noqa: BLE001 - some nodes (hooks, custom functions) carry no sequence number
        seq = None
    return ("backward", f"fwd_seq={seq}") if isinstance(seq, int) else ("backward",)


def cache_dtype_names() -> None:
    """Precompute the names of the common dtypes (called once at registration by tensor.configure)."""
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
               torch.int8, torch.uint8, torch.bool, torch.int16, torch.complex64, torch.float8_e4m3fn,
               torch.float8_e5m2):
        _DTYPE_NAMES[dt] = str(dt).removeprefix("torch.")
