"""Typed errors raised by the NKI interpreter."""
from __future__ import annotations

__all__ = ["NkiError", "NkiRuleError", "NkiUsageError"]


class NkiError(Exception):
    """Base class for interpreter errors."""


class NkiRuleError(NkiError):
    """A kernel broke a hardware tile rule (the compiler would reject it, or the hardware would misbehave).

    `rule` is a short stable id (e.g. "partition_dim", "psum_bank", "matmul_moving_fmax", "sbuf_capacity",
    "matmul_operand_buffer"); `tensor` names the offending tensor (variable name when found, else shape/buffer);
    `kernel_line` is "file.py:LINE" of the kernel source line that issued the instruction.
    """

    def __init__(self, rule: str, detail: str, *, tensor: str = "", kernel_line: str = "") -> None:
        self.rule = rule
        self.tensor = tensor
        self.kernel_line = kernel_line
        self.detail = detail
        where = f" at {kernel_line}" if kernel_line else ""
        what = f" (tensor {tensor})" if tensor else ""
        super().__init__(f"NKI rule '{rule}' violated{where}{what}: {detail}")


class NkiUsageError(NkiError):
    """The interpreter was used outside its contract (e.g. an nl call outside an @nki.jit kernel)."""
