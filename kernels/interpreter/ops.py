"""Math operators shared by `nki.language` (callable on tiles) and `nki.isa` (passed as `op=`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Op", "UNARY", "BINARY", "NUMPY_REDUCERS"]


@dataclass(frozen=True, eq=False)
class Op:
    """An NKI math operator as `nki.isa` takes it (`op=`). `nki.language` exposes callable copies."""

    name: str
    fn: Callable[..., np.ndarray]
    arity: int
    reduce: Callable[..., np.ndarray] | None = None
    flops_per_element: int = 1

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:  # tanh approximation, as the hardware activation table
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


UNARY = {op.name: op for op in [
    Op("exp", np.exp, 1, flops_per_element=1),
    Op("log", np.log, 1),
    Op("sqrt", np.sqrt, 1),
    Op("rsqrt", lambda x: 1.0 / np.sqrt(x), 1),
    Op("square", np.square, 1),
    Op("tanh", np.tanh, 1),
    Op("sigmoid", _sigmoid, 1),
    Op("silu", _silu, 1),
    Op("gelu", _gelu, 1),
    Op("relu", lambda x: np.maximum(x, 0), 1),
    Op("abs", np.abs, 1),
    Op("reciprocal", lambda x: 1.0 / x, 1),
    Op("negative", np.negative, 1),
    Op("copy", lambda x: np.array(x, copy=True), 1, flops_per_element=0),
    Op("gelu_apprx_tanh", _gelu, 1),
    Op("sin", np.sin, 1),
    Op("cos", np.cos, 1),
    Op("tan", np.tan, 1),
    Op("arctan", np.arctan, 1),
    Op("floor", np.floor, 1),
    Op("ceil", np.ceil, 1),
    Op("trunc", np.trunc, 1),
    Op("sign", np.sign, 1),
    Op("softplus", lambda x: np.logaddexp(0.0, x), 1),
    Op("mish", lambda x: x * np.tanh(np.logaddexp(0.0, x)), 1),
    Op("logical_not", lambda x: np.logical_not(x).astype(np.float32), 1),
]}

BINARY = {op.name: op for op in [
    Op("add", np.add, 2, reduce=np.add.reduce),
    Op("subtract", np.subtract, 2),
    Op("multiply", np.multiply, 2, reduce=np.multiply.reduce),
    Op("divide", np.divide, 2),
    Op("maximum", np.maximum, 2, reduce=np.maximum.reduce),
    Op("minimum", np.minimum, 2, reduce=np.minimum.reduce),
    Op("power", np.power, 2),
    Op("mod", np.mod, 2),    # Python's x % y: the sign of the divisor (NKI: "Similar to numpy.mod")
    Op("fmod", np.fmod, 2),  # the sign of the dividend (NKI: "Similar to numpy.fmod")
    Op("equal", lambda a, b: np.equal(a, b).astype(np.float32), 2),
    Op("not_equal", lambda a, b: np.not_equal(a, b).astype(np.float32), 2),
    Op("greater", lambda a, b: np.greater(a, b).astype(np.float32), 2),
    Op("greater_equal", lambda a, b: np.greater_equal(a, b).astype(np.float32), 2),
    Op("less", lambda a, b: np.less(a, b).astype(np.float32), 2),
    Op("less_equal", lambda a, b: np.less_equal(a, b).astype(np.float32), 2),
    Op("logical_and", lambda a, b: np.logical_and(a, b).astype(np.float32), 2),
    Op("logical_or", lambda a, b: np.logical_or(a, b).astype(np.float32), 2),
    Op("logical_xor", lambda a, b: np.logical_xor(a, b).astype(np.float32), 2),
]}

# numpy functions NKI accepts as `op=` of reductions (`nisa.tensor_reduce(op=np.max, ...)` in AWS's kernels)
NUMPY_REDUCERS = {"max": "maximum", "amax": "maximum", "maximum": "maximum", "min": "minimum", "amin": "minimum",
                  "minimum": "minimum", "sum": "add", "add": "add", "prod": "multiply", "multiply": "multiply"}
