"""Which aten ops the emulated device treats specially when it checks devices and records syncs.

Kept apart from the tensor subclass so the dispatch and the recorder read the same three lists.
"""
from __future__ import annotations

import torch

__all__ = ["COPY_OPS", "INDEX_OPS", "DATA_DEPENDENT_OPS"]

aten = torch.ops.aten

# Ops that legitimately mix host and device tensors (copies between them).
COPY_OPS = frozenset(
    {
        aten.copy_.default,
        aten.copy.default,  # a traced graph's functional form of copy_ (see compile_write_back)
        aten._to_copy.default,
        aten._copy_from.default,
        aten._copy_from_and_resize.default,
        aten.set_.source_Tensor,
        aten.lift_fresh.default,
    }
)
# Ops whose index arguments may stay on the host, as CUDA allows.
INDEX_OPS = frozenset(
    {
        aten.index.Tensor,
        aten.index_put_.default,
        aten.index_put.default,
        aten._index_put_impl_.default,
    }
)
# Ops whose output shape depends on tensor values: the host must wait for the device.
DATA_DEPENDENT_OPS = frozenset(
    {
        aten.nonzero.default,
        aten.masked_select.default,
        aten._unique2.default,
        aten.unique_dim.default,
        aten.unique_consecutive.default,
        aten._unique.default,
        aten.repeat_interleave.Tensor,
    }
)
