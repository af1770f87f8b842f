"""Which NKI kernel runs an op ("runs_as": TorchNeuron's built-in kernels) or could replace it ("candidate":
Neuron Studio kernels). The hot-path analysis uses this to point at a kernel file and line.

Patterns are fnmatch-style, matched against aten op names ("aten::mm"), module class names ("LlamaRMSNorm")
and dotted module paths ("model.layers.0.mlp"). Kernel file/line are found with `inspect` at the first lookup of each kernel object.
"""
from __future__ import annotations

import fnmatch
import importlib
import inspect
import os
from dataclasses import dataclass
from typing import Any

from neuron_studio.profiler.vocabulary import GATED_MLP_NAMES

__all__ = ["KernelEntry", "KernelMatch", "KernelRegistry", "get_registry", "lookup", "lookup_module",
           "is_gated_mlp", "kernel_source", "GATE_NAMES"]

_TNX_KERNELS = "torch_neuronx/python_ops/nki_kernels"


@dataclass(frozen=True)
class KernelEntry:
    """One registry row. `target` is "module:function" inside neuron_studio.kernels, or None for kernels that
    live in another package (then `file` is their path relative to that package's root and line is unknown)."""

    kernel: str
    kind: str  # "runs_as" | "candidate"
    ops: tuple[str, ...] = ()
    module_classes: tuple[str, ...] = ()
    module_paths: tuple[str, ...] = ()
    target: str | None = None
    file: str | None = None
    note: str = ""
    exclude_ops: tuple[str, ...] = ()
    line: int | None = None  # the kernel's def line when `file` is a user's kernel file


@dataclass(frozen=True)
class KernelMatch:
    """A registry hit for one op / module."""

    kernel: str
    kind: str
    pattern: str
    file: str | None
    line: int | None
    note: str = ""


def _default_entries() -> list[KernelEntry]:
    sdpa = ("aten::_scaled_dot_product_*attention*", "aten::scaled_dot_product_attention")
    return [
        # TorchNeuron's own NKI kernels (trainium.md §1.6): these are what the op runs as on the device.
        KernelEntry("scaled_dot_product_attention", "runs_as", ops=sdpa, exclude_ops=("*_backward",),
                    file=f"{_TNX_KERNELS}/scaled_dot_product_attention.py",
                    note="TorchNeuron built-in NKI SDPA (forward)"),
        KernelEntry("scaled_dot_product_attention_backward", "runs_as",
                    ops=("aten::_scaled_dot_product_*attention*_backward",),
                    file=f"{_TNX_KERNELS}/scaled_dot_product_attention_backward.py",
                    note="TorchNeuron built-in NKI SDPA (backward)"),
        KernelEntry("grouped_mm", "runs_as", ops=("aten::_grouped_mm",), file=f"{_TNX_KERNELS}/grouped_mm.py",
                    note="TorchNeuron built-in NKI grouped matmul"),
        KernelEntry("gather", "runs_as", ops=("aten::gather",), file=f"{_TNX_KERNELS}/gather.py",
                    note="TorchNeuron built-in NKI gather"),
        KernelEntry("scatter_add", "runs_as", ops=("aten::scatter_add", "aten::scatter_add_"),
                    file=f"{_TNX_KERNELS}/scatter_add.py", note="TorchNeuron built-in NKI scatter_add"),
        # Neuron Studio kernels that could replace an op or a module.
        KernelEntry("flash_attention_kernel", "candidate", ops=sdpa, module_classes=("*Attention",),
                    exclude_ops=("*_backward",),
                    target="flash_attention:flash_attention_kernel", note="causal flash-attention forward"),
        KernelEntry("matmul_kernel", "candidate", ops=("aten::mm", "aten::addmm", "aten::matmul", "aten::linear"),
                    target="matmul:matmul_kernel", note="tiled matmul"),
        KernelEntry("layernorm_kernel", "candidate", ops=("aten::native_layer_norm", "aten::layer_norm"),
                    module_classes=("LayerNorm",), target="layernorm:layernorm_kernel"),
        KernelEntry("rmsnorm_kernel", "candidate", ops=("aten::rms_norm", "aten::_fused_rms_norm"),
                    module_classes=("RMSNorm", "*RMSNorm"), target="rmsnorm:rmsnorm_kernel"),
        KernelEntry("softmax_kernel", "candidate", ops=("aten::_softmax", "aten::softmax"),
                    target="softmax:softmax_kernel"),
        KernelEntry("swiglu_mlp_kernel", "candidate",
                    module_classes=("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP", "GemmaMLP", "*GatedMLP",
                                    "SwiGLU*", "*SwiGLU"),
                    target="swiglu_mlp:swiglu_mlp_kernel", note="module with gate/up/down linears + SiLU"),
        KernelEntry("rope_kernel", "candidate", ops=("*apply_rotary_pos_emb*",),
                    module_classes=("*RotaryEmbedding",), target="rope:rope_kernel"),
        # The NKI Library (package `nki-library`, module `nkilib`) ships a fused Adam kernel; an optimizer
        # step in eager mode is dozens of small elementwise launches per parameter group.
        KernelEntry("fused_adam", "candidate", module_paths=("optimizer.Adam", "optimizer.AdamW"),
                    note="NKI Library (pip install nki-library; nkilib) fused-adam: one kernel per step instead of "
                         "the foreach ops"),
    ]


def _kernel_object(target: str) -> Any:
    """The kernel function `module:function` inside this package (None: not importable)."""
    mod_name, func_name = target.split(":")
    package = __package__ or "kernels"
    try:
        return getattr(importlib.import_module(f"{package}.{mod_name}"), func_name)
    except (ImportError, AttributeError):
        return None


def kernel_source(kernel: Any) -> tuple[str | None, int | None]:
    """Absolute file and `def` line of a kernel (JitKernel, grid launch or plain function).

    getsourcelines starts at the first decorator; the `def` line is reported so editors land on the function."""
    func = getattr(kernel, "func", None) or inspect.unwrap(kernel)
    try:
        file = inspect.getsourcefile(func)
        lines, start = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return None, None
    offset = next((i for i, text in enumerate(lines) if text.lstrip().startswith(("def ", "async def "))), 0)
    return (os.path.abspath(file) if file else None), start + offset


def _first_match(name: str | None, patterns: tuple[str, ...]) -> str | None:
    if not name:
        return None
    for pat in patterns:
        if fnmatch.fnmatchcase(name, pat):
            return pat
    return None


class KernelRegistry:
    """Op / module pattern -> kernel table. Use `get_registry()` for the per-process instance."""

    def __init__(self, entries: list[KernelEntry] | None = None) -> None:
        self.entries: list[KernelEntry] = list(entries if entries is not None else _default_entries())
        # target -> (kernel object, (file, def line)): inspect tokenizes the kernel's whole source per call
        # (~15 ms), and every hot-path lookup of every profile asks; a reloaded module is a new object
        self._locations: dict[str, tuple[Any, tuple[str | None, int | None]]] = {}

    def location(self, target: str) -> tuple[str | None, int | None]:
        """Absolute file and `def` line of the kernel function `module:function` (found with inspect)."""
        obj = _kernel_object(target)
        hit = self._locations.get(target)
        if hit is None or hit[0] is not obj:
            hit = self._locations[target] = (obj, (None, None) if obj is None else kernel_source(obj))
        return hit[1]

    def register(self, entry: KernelEntry) -> None:
        """Add a kernel (e.g. a user's own) to the table."""
        if entry.kind not in ("runs_as", "candidate"):
            raise ValueError(f"kind must be 'runs_as' or 'candidate', got {entry.kind!r}")
        self.entries.append(entry)

    def lookup(self, op_name: str, module_path: str | None = None,
               module_class: str | None = None) -> list[KernelMatch]:
        """Kernels for an op (and optionally the module it ran in); "runs_as" matches first."""
        out: list[KernelMatch] = []
        for e in self.entries:
            if _first_match(op_name, e.exclude_ops):
                continue
            pat = (_first_match(op_name, e.ops) or _first_match(module_class, e.module_classes)
                   or _first_match(module_path, e.module_paths))
            if pat is None:
                continue
            if e.target is not None:
                file, line = self.location(e.target)
            else:
                file, line = e.file, e.line
            out.append(KernelMatch(e.kernel, e.kind, pat, file, line, e.note))
        out.sort(key=lambda m: m.kind != "runs_as")
        return out


_registry: KernelRegistry | None = None


def get_registry() -> KernelRegistry:
    """The per-process registry, created on first use."""
    global _registry
    if _registry is None:
        _registry = KernelRegistry()
    return _registry


def lookup(op_name: str, module_path: str | None = None, module_class: str | None = None) -> list[KernelMatch]:
    """Kernels that run (`runs_as`) or could replace (`candidate`) an aten op / module; fnmatch patterns."""
    return get_registry().lookup(op_name, module_path, module_class)


GATE_NAMES = GATED_MLP_NAMES  # re-exported: the one definition is in the profiler's vocabulary


def is_gated_mlp(module: Any) -> bool:
    """True for a module with gate/up/down Linear children (the SiLU-gated MLP pattern)."""
    children = dict(module.named_children()) if hasattr(module, "named_children") else {}
    for names in GATE_NAMES:
        if all(n in children and type(children[n]).__name__ == "Linear" for n in names):
            return True
    return False


def lookup_module(module: Any, module_path: str = "") -> list[KernelMatch]:
    """Lookup by module object: class-name patterns plus the structural gated-MLP check."""
    registry = get_registry()
    matches = registry.lookup("", module_path or None, type(module).__name__)
    if is_gated_mlp(module) and not any(m.kernel == "swiglu_mlp_kernel" for m in matches):
        file, line = registry.location("swiglu_mlp:swiglu_mlp_kernel")
        matches.append(KernelMatch("swiglu_mlp_kernel", "candidate", "<gate/up/down linears>", file, line,
                                   "module with gate/up/down linears + SiLU"))
    return matches
