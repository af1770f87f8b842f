"""Keep TorchDynamo out of the emulator's dispatch code.

When a compiled region graph-breaks, Dynamo tries to compile every new Python frame, including the
emulator's `__torch_dispatch__`, splitting it into resume functions. Marking those code objects as
"skip, recursively" fixes that at zero per-op cost. torch._dynamo is heavy to import (over a second), so
the marking happens when something else imports it: a one-shot import hook wraps its loader.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from typing import Any

__all__ = ["skip_emulator_frames_in_dynamo"]

_TARGET = "torch._dynamo"


def _code_objects(module: types.ModuleType) -> list[types.CodeType]:
    codes = []
    for value in vars(module).values():
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            codes.append(value.__code__)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr in vars(value).values():
                fn = getattr(attr, "__func__", attr)
                if isinstance(fn, types.FunctionType):
                    codes.append(fn.__code__)
    return codes


def _mark(modules: list[types.ModuleType]) -> None:
    from torch._dynamo.eval_frame import FrameAction, FrameExecStrategy, set_code_exec_strategy

    strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    for m in modules:
        for code in _code_objects(m):
            set_code_exec_strategy(code, strategy)


class _Hook(importlib.abc.MetaPathFinder):
    def __init__(self, modules: list[types.ModuleType]) -> None:
        self.modules = modules

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        modules = self.modules

        def exec_and_mark(module: types.ModuleType) -> None:
            exec_module(module)
            _mark(modules)

        spec.loader.exec_module = exec_and_mark  # type: ignore[method-assign]
        return spec


def skip_emulator_frames_in_dynamo(modules: list[types.ModuleType]) -> None:
    if _TARGET in sys.modules:
        _mark(modules)
    else:
        sys.meta_path.insert(0, _Hook(modules))
