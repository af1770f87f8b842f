"""Errors of the device layer, in a module of their own so every device module can raise them without cycles."""
from __future__ import annotations

__all__ = ["BackendError", "UnsupportedMemoryFormatError"]


class BackendError(RuntimeError):
    """The requested backend cannot be used here (names what is missing and how to fix it)."""


class UnsupportedMemoryFormatError(RuntimeError):
    """A memory format TorchNeuron rejects (channels_last): an error on the device, not a CPU fallback."""
