"""`nki.typing` / `neuronxcc.nki.typing`: the `tensor` annotation type (`x: nt.tensor[128, 512]`)."""
from __future__ import annotations

from typing import Any

__all__ = ["tensor"]


class tensor:  # noqa: N801 - NKI name
    """Annotation-only tensor type: `tensor` and `tensor[shape...]` may appear in signatures and annotations."""

    def __class_getitem__(cls, shape: Any) -> type:
        return cls
