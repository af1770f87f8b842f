"""Execution modes (eager, adaptive-eager, compile) and the `torch.compile` backend named "neuron".

On the emulator the backend follows TorchNeuron's rules: static shapes only (a symbolic dimension is an
error), `mode="default"` only (others warn and fall back), every new input shape a recompile. Each compile is
logged with its cause (Dynamo's guard failure, in words: `profiler/recompile_causes.py`), here and on real
hardware, where the backend defers to TorchNeuron's own. Compiled forward/backward graphs run their aten ops on
the device, which records each as an OpEvent tagged with the graph launch, so the model charges one launch per
graph execution.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import time
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from neuron_studio import device as _device
from neuron_studio.profiler.vocabulary import MODES

__all__ = ["MODES", "ModeSettings", "mode_settings", "neuron_dynamo_backend", "StaticShapeError",
           "compile_cell_function", "GraphBreaks", "graph_breaks_recorded", "register_graph_module_hook",
           "graph_module_path", "GraphModulePath", "graph_state_role", "register_graph_state_hook"]



class StaticShapeError(RuntimeError):
    """torch-neuronx requires static shapes: a graph had a symbolic (dynamic) dimension."""


@dataclass(frozen=True)
class ModeSettings:
    """What a mode means on this backend, and the effective TorchNeuron switches (recorded per run)."""

    mode: str
    backend: str
    switches: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


_EAGER_SWITCHES = ("NEURON_LAUNCH_BLOCKING", "TORCH_NEURONX_ENABLE_CONCATENATION", "TORCH_NEURONX_ENABLE_PROLOGUE")


def mode_settings(mode: str) -> ModeSettings:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    backend = _device.backend()
    switches = {k: os.environ.get(k, "<unset>") for k in _EAGER_SWITCHES}
    if backend == "emulated":
        notes = {
            "eager": ("executes op by op on CPU; the model charges one NeuronCore launch per op",),
            "adaptive": ("executes eagerly on CPU; the model groups fusible ops between sync points "
                         "(TorchNeuron's adaptive eager / op concatenation)",),
            "compile": ("torch.compile(backend='neuron', dynamic=False); one launch per compiled graph, "
                        "each new input shape is a recompile (so is any other failed Dynamo guard: its cause is "
                        "logged)",),
        }[mode]
        return ModeSettings(mode, backend, switches, notes)
    from neuron_studio.device.real import eager_switches

    effective = {k: f"{v.value} ({v.source})" for k, v in eager_switches().items()}
    return ModeSettings(mode, backend, effective, ("real TorchNeuron: effective eager switches recorded",))


# -- the torch.compile backend ------------------------------------------------------------------------
def _check_static(example_inputs: list[Any]) -> None:
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt) or (
            isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape)
        ):
            raise StaticShapeError(
                f"torch-neuronx requires static shapes: graph input {i} has a dynamic dimension. "
                "Call torch.compile(..., dynamic=False) (the default for backend='neuron') and pad or bucket "
                "inputs to a few fixed shapes."
            )


def _shape_of(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return "x".join(str(int(d)) for d in x.shape) or "()"
    return type(x).__name__


def _current_compile_id() -> Any:
    """Dynamo's id of the compile in progress (a `torch._guards.CompileId`, "0/1" = frame 0's second compile), or
    None when the backend is called outside Dynamo."""
    try:
        from torch._guards import CompileContext

        return CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - an unknown id: the compile is logged as a first compile of "graph"
        return None


def _frame_prefix(cid: Any) -> str:
    """The part of a compile id that names its frame: "0/" of "0/3" ("!1/0/" under compiled autograd)."""
    return str(cid).rsplit("/", 1)[0] + "/"


def _dynamo_recompile_reasons(cid: Any) -> list[str]:
    """Dynamo's guard failures that made this compile a recompile, one per earlier compile of the frame, most
    recent first, as `TORCH_LOGS=recompiles` prints them ("0/1: tensor 'x' size mismatch at index 0. ...").

    Dynamo computes them just before it compiles again (`convert_frame._compile` ->
    `guards.get_and_maybe_log_recompilation_reasons`) and appends each to `torch._dynamo.utils.guard_failures`
    (its per-code record of guard failures, cleared by `torch._dynamo.reset()`); this compile's are the latest run
    of entries naming earlier compiles of the same frame, one per compile id. [] when none are recorded."""
    try:
        from torch._dynamo.utils import guard_failures
    except ImportError:
        return []
    prefix = _frame_prefix(cid)
    for reasons in list(guard_failures.values()):
        mine = [r for r in reasons if isinstance(r, str) and r.startswith(prefix)]
        if not mine:
            continue
        batch: list[str] = []
        seen: set[str] = set()
        for r in reversed(mine):            # Dynamo appends one per cache entry, most recent entry first
            rid = r.split(":", 1)[0]
            if rid in seen:
                break
            seen.add(rid)
            batch.append(r)
        return batch[::-1]
    return []


def _earlier_compiles(log: list[dict[str, Any]], cid: Any) -> dict[str, str]:
    """{compile id: input shapes} of the earlier compiles of `cid`'s frame in the registry's compile log, since
    the frame's last first compile (`torch._dynamo.reset()` starts frame ids again)."""
    prefix = _frame_prefix(cid)
    out: dict[str, str] = {}
    for e in log:
        c = str(e.get("compile_id") or "")
        if c.startswith(prefix) and c.count("/") == prefix.count("/"):
            if not e.get("recompile"):
                out = {}
            out[c] = str(e.get("shapes", ""))
    return out


def _writes_graph_input(n: torch.fx.Node) -> bool:
    """An input mutation's write-back: `copy_` into a graph input (AOTAutograd's keep_inference_input_mutations).
    TorchNeuron's backend removes it and aliases the new value's output buffer to the input
    (torch_neuronx/neuron_dynamo_backend/fx/passes/functionalize_copy_inplace_result.py, FunctionalizeCopyInplacePass,
    parmoham-aws/test-repo-parmoham @98154b86): the NEFF writes the value in place, no copy runs on the device."""
    return (n.op == "call_function" and n.target is torch.ops.aten.copy_.default and bool(n.args)
            and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder")


def _write_back_unrecorded(*args: Any, **kwargs: Any) -> Any:
    """An input mutation's write-back (`_writes_graph_input`): run (the emulator keeps the value), not recorded."""
    from neuron_studio.device.emulator.registration import unrecorded

    with unrecorded():
        return torch.ops.aten.copy_.default(*args, **kwargs)


#: `register_graph_module_hook`'s hooks, by handle id (as torch keeps its global module hooks)
_graph_module_hooks: "OrderedDict[int, Callable[[str, str | None, bool, int], None]]" = OrderedDict()
_compile_ids = itertools.count()
#: a Dynamo source's leading frame variable: L['x'] (a local, e.g. a compiled module's own `self`) or G['x']
_SOURCE_ROOT = re.compile(r"^[A-Z]\[['\"][^'\"]*['\"]\]")
_SOURCE_INDEX = re.compile(r"\._modules\[['\"]([^'\"]*)['\"]\]|\[['\"]([^'\"]*)['\"]\]|\[(\d+)\]")


@dataclass(frozen=True)
class GraphModulePath:
    """The module a compiled graph node came from, as the module tracker names it in eager.

    `absolute`: the outermost module Dynamo saw, by class, then the attribute path ("Block.layers.0"; "" for none,
    top level). `relative`: when the graph is a compiled module's own forward, Dynamo's sources start at that
    module's `self`, which its stack does not list: the path below it (".layers.0"), to be put under the module the
    graph runs in; None otherwise."""

    absolute: str
    relative: str | None = None


def _source_path(source: str, root: str) -> str:
    rest = source[len(root):] if source.startswith(root) else ""
    return _SOURCE_INDEX.sub(lambda m: "." + next(g for g in m.groups() if g is not None), rest)


def graph_module_path(stack: Any) -> GraphModulePath:
    """A graph node's module from Dynamo's `nn_module_stack` ({key: (source, class)}, outermost first; sources such
    as "G['model'].layers.0", "L['self'].layers[0]", "L['m']._modules['0']")."""
    entries = [e[:2] for e in (stack.values() if isinstance(stack, dict) else ())
               if isinstance(e, tuple) and len(e) >= 2 and isinstance(e[0], str)]
    if not entries:
        return GraphModulePath("")
    (root_source, root_class), (source, _) = entries[0], entries[-1]
    name = getattr(root_class, "__name__", None) or str(root_class).rsplit(".", 1)[-1].strip("'>")
    # a compiled module's forward: the outermost listed module is an attribute of a local (its `self`), not the
    # local itself, a global, or a closure cell of a compiled function
    frame = _SOURCE_ROOT.match(root_source)
    below = root_source[frame.end():] if frame and frame.group(0).startswith("L[") else ""
    relative = _source_path(source, frame.group(0)) if below and not below.startswith(".__") else None
    return GraphModulePath(name + _source_path(source, root_source), relative)


def register_graph_module_hook(hook: Callable[[str, str | None, bool, int], None]) -> Any:
    """Call `hook(absolute, relative, backward, compiled)` each time a compiled graph's ops enter another module
    (the `GraphModulePath` of its nodes' `nn_module_stack`; a backward graph's nodes name the forward module they
    differentiate; `compiled` is the same for the forward and backward graphs of one compile). Module hooks do not
    run inside a graph: this is how a profile attributes its ops. Returns a removable handle, as torch's
    `register_module_forward_hook` does."""
    from torch.utils.hooks import RemovableHandle

    handle = RemovableHandle(_graph_module_hooks)
    _graph_module_hooks[handle.id] = hook
    return handle


#: `register_graph_state_hook`'s hooks, by handle id; each is told [(role, name, tensor, parameter or None), ...]
_graph_state_hooks: "OrderedDict[int, Callable[[list[tuple]], None]]" = OrderedDict()
#: a parameter's or buffer's source: `._parameters['w']` / `._buffers['b']` of a module, an attribute of one
#: (Dynamo's ParamBufferSource), or an optimizer's `param_groups[i]['params'][j]`
_PARAM_SOURCE = re.compile(r"\._(?:parameters|buffers)\[|\['params'\]\[\d+\]$")
#: a tensor in an optimizer's `state`, which is keyed by parameters (Dynamo reads it through the key list)
_STATE_SOURCE = re.compile(r"\.state\[(?:list\(dict\.keys\(|.*(?:_parameters\[|\['params'\]\[))")
_STATE_INDEX = re.compile(r"\.state\)\)\[(\d+)\]")
_GETATTR = re.compile(r"^getattr\((.+?), '([^']+)'\)")
_LAST_KEY = re.compile(r"\[['\"]([^'\"]+)['\"]\]$")


def graph_state_role(source: str, param_buffer: bool = False,
                     classes: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(role, name) of a compiled graph's input or attribute that is model or optimizer state, by its Dynamo source
    ("G['model']._modules['0']._parameters['weight']", "L['self'].param_groups[0]['params'][0].grad",
    "L['self'].state[list(dict.keys(L['self'].state))[1]]['exp_avg']"); None for anything else (the user's own
    tensors). Roles are memory categories: "parameter" (a parameter or buffer), "gradient" (a parameter's
    `.grad`), "optimizer_state". `param_buffer`: Dynamo says it is a module's parameter or buffer. `classes`: the
    class of the module a frame variable holds ({"G['model']": "Sequential"}): a parameter is named as the module
    tracker names it in eager ("Sequential.0.weight"), else by the variable ("model.0.weight")."""
    if source.endswith(".grad"):
        base = graph_state_role(source[:-len(".grad")], param_buffer, classes)
        return ("gradient", base[1] + ".grad") if base is not None and base[0] == "parameter" else None
    if _STATE_SOURCE.search(source):
        key = _LAST_KEY.search(source)
        index = _STATE_INDEX.search(source)
        what = key.group(1) if key else "state"
        return "optimizer_state", f"optimizer {what}" + (f" of param {index.group(1)}" if index else "")
    if param_buffer or _PARAM_SOURCE.search(source):
        plain = source
        while plain.startswith("getattr("):   # getattr(G['model'], '0').weight -> G['model'].0.weight
            plain = _GETATTR.sub(r"\1.\2", plain, count=1)
        root = _SOURCE_ROOT.match(plain)
        head = (classes or {}).get(root.group(0)) or root.group(0)[3:-2] if root else ""
        path = _SOURCE_INDEX.sub(lambda m: "." + next(g for g in m.groups() if g is not None),
                                 plain[root.end():] if root else plain)
        return "parameter", (head + path.replace("._parameters", "").replace("._buffers", "")).lstrip(".") or source
    return None


def register_graph_state_hook(hook: Callable[[list[tuple]], None]) -> Any:
    """Call `hook([(role, name, tensor, parameter), ...])` each time a graph compiled by the emulator's backend runs,
    with its inputs and attributes that are model or optimizer state (`graph_state_role`; `parameter`: the
    parameter a gradient belongs to, when the graph reads it, else None). Module and optimizer hooks do not run
    inside compiled code (Dynamo traces them): this is how memory capture knows parameters, gradients and optimizer
    state in compile mode. Returns a removable handle."""
    from torch.utils.hooks import RemovableHandle

    handle = RemovableHandle(_graph_state_hooks)
    _graph_state_hooks[handle.id] = hook
    return handle


def _graph_state(gm: torch.fx.GraphModule) -> tuple[list[tuple], list[tuple]]:
    """The state a Dynamo graph reads: (graph input position, role, name, its parameter's position or tensor) of
    its placeholders, and (role, name, tensor, None) of the tensors Dynamo made its attributes (an optimizer's
    parameters and state)."""
    inputs: list[tuple[int, str, bool]] = []   # (position, source, is a ParamBufferSource)
    classes: dict[str, str] = {}                 # frame variable holding a module -> the module's class
    i = 0
    for n in gm.graph.nodes:
        stack = n.meta.get("nn_module_stack")
        for entry in (stack.values() if isinstance(stack, dict) else ()):
            if isinstance(entry, tuple) and len(entry) >= 2 and isinstance(entry[0], str) \
                    and _SOURCE_ROOT.fullmatch(entry[0]):
                classes.setdefault(entry[0], getattr(entry[1], "__name__", None) or str(entry[1]))
        if n.op == "placeholder":
            source = getattr(n.meta.get("grapharg"), "source", None)
            if source is not None and hasattr(source, "name"):
                inputs.append((i, str(source.name), type(source).__name__ == "ParamBufferSource"))
            i += 1
    by_source: dict[str, Any] = {src: pos for pos, src, _ in inputs}
    attrs: list[tuple] = []
    for name, source in (getattr(gm, "_param_name_to_source", None) or {}).items():
        t = getattr(gm, name, None)
        src = str(getattr(source, "name", ""))
        role = graph_state_role(src, type(source).__name__ == "ParamBufferSource", classes)
        if isinstance(t, torch.Tensor) and role is not None:
            attrs.append((*role, t, None))
            by_source.setdefault(src, t)
    positions = []
    for pos, src, pb in inputs:
        role = graph_state_role(src, pb, classes)
        if role is not None:
            positions.append((pos, *role, by_source.get(src[:-len(".grad")]) if role[0] == "gradient" else None))
    return positions, attrs


def _telling_graph_state(compiled: Callable, gm: torch.fx.GraphModule) -> Callable:
    """`compiled`, first telling the graph-state hooks (`register_graph_state_hook`) the state it is given."""
    positions, attrs = _graph_state(gm)
    if not positions and not attrs:
        return compiled

    def run(*args: Any) -> Any:
        if _graph_state_hooks:
            # Dynamo calls it with the graph's inputs, or with them in one list when it boxes them (a graph
            # input is never a list); its `_boxed_call` attribute does not say which (AOTAutograd copies it)
            flat = args[0] if len(args) == 1 and isinstance(args[0], list) else args

            def arg(x: Any) -> Any:
                return flat[x] if isinstance(x, int) and x < len(flat) else x

            seen = attrs + [(role, name, flat[i], arg(of)) for i, role, name, of in positions
                            if i < len(flat) and isinstance(flat[i], torch.Tensor)]
            for hook in tuple(_graph_state_hooks.values()):
                hook(seen)
        return compiled(*args)

    run.__dict__.update(compiled.__dict__)   # what AOTAutograd's function carries (zero_grad, serialize, ...)
    return run


def _enter_graph_module(absolute: str, relative: str | None, backward: bool, compiled: int) -> None:
    """Inserted into a compiled graph where its nodes' module changes (`_mark_graph_modules`); plain values, as FX
    writes them into the graph's code."""
    for hook in tuple(_graph_module_hooks.values()):
        hook(absolute, relative, backward, compiled)


def _mark_graph_modules(gm: torch.fx.GraphModule, backward: bool, compiled: int) -> None:
    """Before each op of `gm` whose module differs from the previous op's, a call telling the hooks
    (`register_graph_module_hook`) which module the following ops belong to."""
    key = "fwd_nn_module_stack" if backward else "nn_module_stack"
    last = None
    for n in list(gm.graph.nodes):
        if n.op != "call_function":
            continue
        path = graph_module_path(n.meta.get(key))
        if path != last:
            with gm.graph.inserting_before(n):
                gm.graph.call_function(_enter_graph_module, (path.absolute, path.relative, backward, compiled))
            last = path


def _graph_runner(kind: str, compiled: int) -> Callable[[torch.fx.GraphModule, list[Any]], Callable]:
    """Runs AOTAutograd's graph on the device; while a subscriber listens, its ops are recorded as one launch
    (an input mutation's write-back runs unrecorded: TorchNeuron's NEFF has no such copy)."""
    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        from functorch.compile import make_boxed_func

        bus = _device.registry().bus
        for n in gm.graph.nodes:
            if _writes_graph_input(n):
                n.target = _write_back_unrecorded
        _mark_graph_modules(gm, kind == "backward", compiled)
        gm.recompile()

        def run(*args: Any) -> Any:
            if not bus.active:
                return gm(*args)
            prev = bus.current_graph
            bus.current_graph = bus.next_graph_launch()
            try:
                return gm(*args)
            finally:
                bus.current_graph = prev

        return make_boxed_func(run)

    compiler.__name__ = f"neuron_{kind}_compiler"
    return compiler


def _log_compile(reg: Any, cid: Any, shapes: str, failures: list[str], compile_ns: int) -> None:
    """One row of the registry's compile log: the graph, its input shapes, and why it compiled (the one
    classification, `profiler.recompile_causes`, computed here, once, while Dynamo's reasons are at hand)."""
    from neuron_studio.profiler.recompile_causes import classify_recompile, first_compile

    recompile = cid is not None and (getattr(cid, "frame_compile_id", 0) or 0) > 0
    cause = (classify_recompile(failures, shapes, _earlier_compiles(reg.compile_log, cid)) if recompile
             else first_compile())
    reg.compile_log.append({
        "graph_key": f"frame{getattr(cid, 'frame_id', 0)}" if cid is not None else "graph",
        "shapes": shapes,
        "reason": cause.reason,
        "compile_ns": int(compile_ns),
        "recompile": bool(recompile),
        "cause": cause.cause,
        "detail": cause.detail,
        "compile_id": str(cid) if cid is not None else "",
    })


def neuron_dynamo_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable:
    """`torch.compile(model, backend="neuron")`. Each compile is logged with its cause (`_log_compile`), on the
    emulator and on real TorchNeuron alike."""
    reg = _device.registry()
    cid = _current_compile_id()
    shapes = ", ".join(_shape_of(x) for x in example_inputs if isinstance(x, torch.Tensor))
    failures = _dynamo_recompile_reasons(cid) if cid is not None and getattr(cid, "frame_compile_id", 0) else []
    t0 = time.perf_counter_ns()
    if reg.backend == "real":
        from torch_neuronx.neuron_dynamo_backend.backend import neuron_backend

        compiled = neuron_backend(gm, example_inputs, **kwargs)
        _log_compile(reg, cid, shapes, failures, time.perf_counter_ns() - t0)
        return compiled
    mode = kwargs.pop("mode", None)
    if mode not in (None, "default"):
        warnings.warn(
            f"backend 'neuron' supports mode='default' only; mode={mode!r} falls back to default (as TorchNeuron)",
            stacklevel=2,
        )
    _check_static(example_inputs)
    from torch._dynamo.backends.common import aot_autograd

    # As TorchNeuron's backend (torch_neuronx/neuron_dynamo_backend/backend.py @98154b86: "Prevent Copy-back"):
    # input mutations of inference graphs (optimizer updates) stay in the graph as copy_ into the input's buffer
    # (its executor aliases the output to the input), so they run inside the NEFF, not as eager copies after it.
    from neuron_studio.device.emulator.registration import unrecorded

    compile_id = next(_compile_ids)   # the forward and backward graphs of this compile share it
    # What torch runs while it compiles is not the program's: its structured-trace logging formats real device
    # tensors (a recompile inside a profiled step recorded three host syncs for their printing), FakeTensor runs
    # real kernels for ops without meta kernels
    with unrecorded():
        compiled = aot_autograd(fw_compiler=_graph_runner("forward", compile_id),
                                bw_compiler=_graph_runner("backward", compile_id),
                                keep_inference_input_mutations=True)(gm, example_inputs)
    _log_compile(reg, cid, shapes, failures, time.perf_counter_ns() - t0)
    return _telling_graph_state(compiled, gm)


def compile_cell_function(fn: Callable[[], Any]) -> Callable[[], Any]:
    """The compile mode of `%%neuron` and of `profile(fn, mode="compile")`: `fn` under
    torch.compile(backend='neuron', dynamic=False). Warnings torch emits while it compiles for the studio (a
    deprecation inside torch's own modules) are not the user's and are not printed into the cell."""
    compiled = torch.compile(fn, backend="neuron", dynamic=False)

    def run() -> Any:
        with _quiet_dynamo_profiler_notes(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
            warnings.filterwarnings("ignore", message=r".*torch\.jit\.script_method.*")
            warnings.filterwarnings("ignore", message=r"Profiler function .* will be ignored")
            return compiled()

    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run


class _DropProfilerNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "will be ignored" not in record.getMessage()


class _quiet_dynamo_profiler_notes:
    """Dynamo logs "Profiler (record) function ... will be ignored" for torch.optim's record_function while it
    traces: a note about the profiler, not the user's program. Dropped while a studio-compiled function runs."""

    _LOGGERS = ("torch._dynamo.variables.ctx_manager", "torch._dynamo.variables.torch")

    def __enter__(self) -> None:
        self.f = _DropProfilerNotes()
        for n in self._LOGGERS:
            logging.getLogger(n).addFilter(self.f)

    def __exit__(self, *exc: object) -> None:
        for n in self._LOGGERS:
            logging.getLogger(n).removeFilter(self.f)


# -- graph breaks, with the user's line ---------------------------------------------------------------
_BREAK_AT = re.compile(r"Graph break in user code at (?P<src>.+?:\d+)\s*\n")
_BREAK_REASON = re.compile(r"Graph Break Reason:\s*(?P<reason>.*?)(?:\n\s*\n|\n\s*Explanation:|$)", re.S)
_EXPLANATION = re.compile(r"Explanation:\s*(?P<why>[^\n]+)")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _not_user_dirs() -> tuple[str, ...]:
    """Frames in these are not the user's: torch, the standard library and the studio's own packages."""
    import importlib.util

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.__file__), os.path.dirname(os.path.abspath(__file__))]
    for name in ("neuron_studio.profiler", "neuron_studio.kernels"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs += list(spec.submodule_search_locations)
    return tuple(os.path.join(d, "") for d in dirs) + ("<frozen",)


def _library_dirs() -> tuple[str, ...]:
    """Installed third-party packages (site-packages): a break inside one (transformers' logging) is reported at
    the user's line that called into it, naming the library's file:line in the reason."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")} | set(site.getsitepackages())
    return tuple(os.path.join(d, "") for d in sorted(x for x in dirs if x))


_NOT_USER = _not_user_dirs()
_LIBRARY = _library_dirs()
_BREAKS_BY_FUNCTION: "weakref.WeakKeyDictionary[Any, list[dict[str, Any]]]" = weakref.WeakKeyDictionary()


class GraphBreaks:
    """Collects Dynamo's graph-break records (its `graph_breaks` log artifact, which names the user's file:line)
    while a compiled cell or function runs, without printing them. `rows()`: one row per (line, reason)."""

    def __init__(self, enabled: bool = True, key: Any = None) -> None:
        self.enabled = enabled
        self.key = key
        self.records: list[tuple[str, str]] = []
        self._saved: list[tuple[logging.Logger, int, bool, bool]] = []
        self._handler: logging.Handler | None = None

    def __enter__(self) -> "GraphBreaks":
        if not self.enabled:
            return self
        import torch._dynamo.symbolic_convert  # noqa: F401 - creates the artifact loggers

        outer = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                outer._add(record.getMessage())

        self._handler = _Handler(logging.DEBUG)
        for name in [n for n in logging.Logger.manager.loggerDict if n.endswith("__graph_breaks")]:
            lg = logging.getLogger(name)
            self._saved.append((lg, lg.level, lg.propagate, lg.disabled))
            lg.addHandler(self._handler)
            lg.setLevel(logging.DEBUG)
            lg.propagate = False   # captured, not printed into the cell
            lg.disabled = False
        return self

    def __exit__(self, *exc: object) -> None:
        for lg, level, propagate, disabled in self._saved:
            lg.removeHandler(self._handler)
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
        self._saved = []
        if self.key is not None:
            try:
                if self.records:
                    _BREAKS_BY_FUNCTION[self.key] = list(self.records)
                else:   # a cached compiled function does not recompile: its breaks are the ones seen before
                    self.records = list(_BREAKS_BY_FUNCTION.get(self.key, []))
            except TypeError:   # not weak-referenceable: nothing to remember
                pass

    def _add(self, message: str) -> None:
        at = _BREAK_AT.search(message)
        if at is None:
            return
        src = at.group("src")
        # Dynamo names the innermost frame (torch.optim's own graph_break()): report the user's line that led there
        tb = message.split("User code traceback:", 1)[-1] if "User code traceback:" in message else ""
        user = [f"{m.group('file')}:{m.group('line')}" for m in _FRAME.finditer(tb)
                if not m.group("file").startswith(_NOT_USER + _LIBRARY)]
        inner = src.rsplit(":", 1)[0]
        if user and inner.startswith(_NOT_USER + _LIBRARY):
            src = user[-1]
        m = _BREAK_REASON.search(message)
        reason = " ".join((m.group("reason") if m else "").split()) or "unknown reason"
        why = _EXPLANATION.search(message)
        if why is not None:   # Dynamo's one-line explanation says it best ("does not know how to trace print")
            reason = why.group("why").strip()
        if src != at.group("src"):
            lib = next((d for d in _LIBRARY if inner.startswith(d)), None)
            where = (f"{os.path.relpath(at.group('src'), lib)}" if lib is not None and not inner.startswith(_NOT_USER)
                     else os.path.relpath(inner, os.path.dirname(os.path.dirname(torch.__file__))))
            reason = f"{reason} (in {where})"
        self.records.append((src, reason))

    def rows(self, source_of: Callable[[str], Any] | None = None) -> list[dict[str, Any]]:
        """[{"source": "file:line", "reason": ..., "count": n}] in first-seen order; `source_of` rewrites a
        source (e.g. IPython's cell file names to cell-N)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for src, reason in self.records:
            src = str(source_of(src)) if source_of is not None else src
            row = out.setdefault((src, reason), {"source": src, "reason": reason, "count": 0})
            row["count"] += 1
        return list(out.values())


def graph_breaks_recorded(enabled: bool = True, key: Any = None) -> GraphBreaks:
    """Context manager: record Dynamo's graph breaks (user file:line and reason) while it is open. `key`: the
    compiled function, so that a later run of the same cached function reports the breaks of its compile."""
    return GraphBreaks(enabled=enabled, key=key)
