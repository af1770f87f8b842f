"""The module path of each op: global `nn.Module` forward hooks (and optimizer step hooks) keep a stack of the
modules running on the capturing thread, stamped with the device's op sequence number and the autograd sequence
number at every transition. Used by the emulated capture and by the real-hardware op log."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from neuron_studio.profiler.vocabulary import GATED_MLP_NAMES

__all__ = ["ModuleTracker"]


def _autograd_seq() -> int:
    """Next autograd sequence number of this thread (backward nodes carry the number of their forward op)."""
    return int(torch._C._autograd._get_sequence_nr())


def _class_label(module: torch.nn.Module) -> str:
    """Class name, tagged ":GatedMLP" for a module with gate/up/down Linear children (SiLU-gated MLP shape)."""
    name = type(module).__name__
    children = {n for n, c in module.named_children() if isinstance(c, torch.nn.Linear)}
    if any(set(t) <= children for t in GATED_MLP_NAMES):
        return f"{name}:GatedMLP"
    return name


class ModuleTracker:
    """Module path per op: transitions of the module stack stamped with the device's op sequence number."""

    def __init__(self, bus: Any, memory: Any = None) -> None:
        self.bus = bus
        self.memory = memory  # a MemoryRecorder (learns which storages are parameters, inputs, ...) or None
        self.stack: list[str] = []
        self.trans_seq: list[int] = []
        self.trans_path: list[str] = []
        self.trans_phase: list[str] = []
        self.trans_autograd: list[int] = []  # autograd sequence number at each transition (forward thread)
        self.names: dict[int, str] = {}
        self.classes: dict[str, str] = {}  # module path -> class name (for kernel lookups)
        self.handles: list[Any] = []
        self.thread = threading.get_ident()
        # inside compiled graphs (no module hooks run there): the graph launch, the last op's sequence number and
        # the module the next ops belong to, each time a graph's ops enter another module (modes.py's hook)
        self.graph_launch: list[int] = []
        self.graph_seq: list[int] = []
        self.graph_path: list[str] = []
        self._graph_roots: dict[int, str] = {}   # per compile: the module its forward graph ran in

    def _name(self, module: torch.nn.Module) -> str:
        key = id(module)
        name = self.names.get(key)
        if name is not None:
            return name
        parent = self.stack[-1] if self.stack else None
        if parent is not None:
            pmod = self._modules_by_path.get(parent)
            if pmod is not None:
                # descendants, not only children: blocks in a ModuleList/ModuleDict are called by the
                # parent's forward while the container itself never runs
                for child_name, child in pmod.named_modules():
                    if child is module and child_name:
                        name = f"{parent}.{child_name}"
                        break
        if name is None:
            inner = getattr(module, "_orig_mod", None)  # torch.compile's OptimizedModule: name the model
            name = type(inner if isinstance(inner, torch.nn.Module) else module).__name__
        self.names[key] = name
        self._modules_by_path[name] = module
        self.classes[name] = _class_label(module)
        return name

    def _mark(self, phase: str) -> None:
        if self.memory is not None:
            self.memory.settle()  # frees before this module boundary are recorded before it
        self.trans_autograd.append(_autograd_seq())
        self.trans_seq.append(self.bus.last_seq)
        self.trans_path.append(self.stack[-1] if self.stack else "")
        self.trans_phase.append(phase)

    def _forward_call(self) -> bool:
        """A module call of the program's forward: on the profiled thread, and not made by the autograd engine
        (activation checkpointing re-runs modules inside the backward, on the thread that called backward)."""
        return threading.get_ident() == self.thread and torch._C._current_autograd_node() is None

    def pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():  # inside a compiled graph: ops carry the graph, not modules
            return
        if not self._forward_call():
            return
        path = self._name(module)
        if self.memory is not None:   # a compiled graph's GraphModule is no user module: its inputs are not a batch
            self.memory.module_pre(module, path, args,
                                   outermost=not self.stack and not isinstance(module, torch.fx.GraphModule))
        self.stack.append(path)
        self._mark("forward")

    def post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():  # inside a compiled graph: ops carry the graph, not modules
            return
        if not self._forward_call() or not self.stack:
            return
        path = self.stack.pop()
        if self.memory is not None:
            self.memory.module_post(module, path, output)
        self._mark("forward")

    def opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if torch.compiler.is_compiling():  # Dynamo traces optimizer.step's hooks: keep the studio out of the graph
            return
        if self.memory is not None:
            self.memory.optimizer_pre(optimizer)
        self.stack.append(f"optimizer.{type(optimizer).__name__}")
        self._mark("optimizer")

    def opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if torch.compiler.is_compiling():
            return
        if self.memory is not None:
            self.memory.optimizer_post(optimizer)
        if self.stack:
            self.stack.pop()
        self._mark("forward")

    def graph_module(self, absolute: str, relative: str | None, backward: bool, compiled: int) -> None:
        """A compiled graph's next ops belong to a module (`modes.GraphModulePath`; a backward graph's, to the backward
        of that module). A compiled module's own graph names its modules below it (`relative`): they go under the
        module it runs in (the forward's, remembered for the backward of the same compile), as eager names them."""
        path = absolute
        if relative is not None:
            if not backward:
                outer = next((p for p in reversed(self.stack) if self.classes.get(p) != "GraphModule"), None)
                if outer is not None:
                    self._graph_roots[compiled] = outer
            if compiled in self._graph_roots:
                path = self._graph_roots[compiled] + relative
        self.graph_launch.append(int(self.bus.current_graph))
        self.graph_seq.append(int(self.bus.last_seq))
        self.graph_path.append((f"{path} (backward)" if path else "(backward)") if backward else path)  # as eager

    def start(self) -> None:
        self._modules_by_path: dict[str, torch.nn.Module] = {}
        from torch.nn.modules import module as m
        from torch.optim import optimizer as o

        from neuron_studio.modes import register_graph_module_hook, register_graph_state_hook

        self.handles = [
            m.register_module_forward_pre_hook(self.pre),
            m.register_module_forward_hook(self.post, always_call=True),
            o.register_optimizer_step_pre_hook(self.opt_pre),
            o.register_optimizer_step_post_hook(self.opt_post),
            register_graph_module_hook(self.graph_module),
        ]
        if self.memory is not None:
            self.handles.append(register_graph_state_hook(self.memory.graph_state))

    def stop(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self._modules_by_path = {}

    def modules_of_forward(self, autograd_seqs: np.ndarray) -> np.ndarray:
        """The module that was running when each forward op with these autograd sequence numbers ran."""
        out = np.full(len(autograd_seqs), "", dtype=object)
        if not self.trans_autograd or not len(autograd_seqs):
            return out
        i = np.searchsorted(np.asarray(self.trans_autograd, dtype=np.int64), autograd_seqs, side="right") - 1
        paths = np.empty(len(self.trans_path), dtype=object)
        paths[:] = self.trans_path
        out[i >= 0] = paths[i[i >= 0]]
        return out

    def graph_modules(self, seqs: np.ndarray, graphs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(module path, known) of ops run inside compiled graphs (`graphs`: each op's graph launch): the module the
        graph's nodes named for the op (`graph_module`), known only for an op whose own launch said one."""
        paths = np.full(len(seqs), "", dtype=object)
        if not self.graph_seq or not len(seqs):
            return paths, np.zeros(len(seqs), dtype=bool)
        i = np.searchsorted(np.asarray(self.graph_seq, dtype=np.int64), seqs, side="left") - 1
        launches = np.asarray(self.graph_launch, dtype=np.int64)
        known = (i >= 0) & (launches[np.maximum(i, 0)] == graphs)
        marks = np.empty(len(self.graph_path), dtype=object)
        marks[:] = self.graph_path
        paths[known] = marks[i[known]]
        return paths, known

    def assign(self, seqs: np.ndarray) -> tuple[list[str], list[str]]:
        """Module path and phase for each op sequence number."""
        if not self.trans_seq:
            return [""] * len(seqs), ["forward"] * len(seqs)
        idx = np.searchsorted(np.asarray(self.trans_seq, dtype=np.int64), seqs, side="left") - 1
        paths = [self.trans_path[i] if i >= 0 else "" for i in idx]
        phases = [self.trans_phase[i] if i >= 0 else "forward" for i in idx]
        return paths, phases
