"""The emulated `neuron` tensor: a wrapper subclass whose data lives in a CPU tensor.

Every aten op reaching a `NeuronTensor` unwraps to CPU, runs the CPU kernel, rewraps the result on the
same `neuron:N` device and, when somebody subscribed to the device's events, records an OpEvent. The
fast path (no subscriber) does only the unwrap/run/rewrap, to keep the per-op overhead within a few µs.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
import threading
import time
from typing import Callable

import torch

from neuron_studio.device import events as ev
from neuron_studio.device.coverage import op_coverage
from neuron_studio.device.errors import UnsupportedMemoryFormatError
from neuron_studio.device.emulator.attention import ATTENTION_RECORD_EXTRA, SPECIAL_OPS
from neuron_studio.device.emulator.compile_write_back import host_copy, write_back
from neuron_studio.device.emulator.device_ordinals import check_index, set_device_count
from neuron_studio.device.emulator.memory import MemoryTracker
from neuron_studio.device.emulator.op_event_fields import (
    backward_tags,
    cache_dtype_names,
    describe,
    dtype_name,
    flops,
    storage_ids,
)
from neuron_studio.device.emulator.op_kinds import COPY_OPS, DATA_DEPENDENT_OPS, INDEX_OPS
from neuron_studio.device.emulator.storage import device_storage, host_storage

__all__ = ["NeuronTensor", "wrap", "DEVICE_TYPE", "unrecorded"]

DEVICE_TYPE = "neuron"
_CPU = torch.device("cpu")
_STRIDED = torch.strided
_Tensor = torch.Tensor
_make_wrapper = torch.Tensor._make_wrapper_subclass
_UntypedStorage = torch.UntypedStorage
aten = torch.ops.aten

_state = threading.local()
# op -> fn(func, uargs, kwargs, out) -> OpEvent fields to set (collectives); filled by emulator.distributed.install()
RECORD_EXTRA: dict = dict(ATTENTION_RECORD_EXTRA)


class NeuronTensor(torch.Tensor):
    """A tensor on the emulated `neuron` device. `_elem` is the CPU tensor holding its data."""

    _elem: torch.Tensor
    _nidx: int

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int = 0) -> "NeuronTensor":
        if elem.layout is not _STRIDED:
            raise RuntimeError(
                f"neuron: {elem.layout} tensors are not supported on the neuron device (TorchNeuron supports "
                "dense strided tensors only); keep sparse tensors on the CPU"
            )
        if elem.is_quantized:
            raise_quantized_unsupported()
        r = _make_wrapper(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=_DEVICES[index],
            requires_grad=elem.requires_grad,
        )
        r._elem = elem
        r._nidx = index
        if elem.is_conj():  # conj()/_neg_view() are lazy bits: the wrapper must carry them too
            torch._C._set_conj(r, True)
        if elem.is_neg():
            torch._C._set_neg(r, True)
        _memory.track(r, elem, index)
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    # Traceable wrapper subclass: Dynamo/AOTAutograd see through it to the CPU ops on `_elem`, so
    # torch.compile works; the "neuron" backend then runs the traced graph itself and records each op.
    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return ["_elem"], self._nidx

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):  # noqa: ANN001, ANN205
        return NeuronTensor(inner["_elem"], ctx)

    # -- host-side conveniences that C++ would otherwise do on a storage we do not have -------------
    def __repr__(self, *, tensor_contents=None) -> str:  # noqa: ANN001
        if type(self._elem) is not _Tensor or _tracing():  # traced (fake) data: describe, never compute
            return f"NeuronTensor(shape={tuple(self.shape)}, dtype={self.dtype}, device='{self.device}', traced)"
        with unrecorded():
            if tensor_contents is None:
                tensor_contents = torch._tensor_str._tensor_str(self._elem.detach(), len("tensor("))
            text = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        if text.startswith("NeuronTensor("):  # torch prefixes subclasses with their class name
            text = "tensor(" + text[len("NeuronTensor("):]
        _record_marker("aten::_print", self, ev.SYNC_PRINT)
        return text

    def tolist(self):  # noqa: ANN201 - same as torch.Tensor.tolist
        _record_marker("aten::tolist", self, ev.SYNC_ITEM)
        return self._elem.tolist()

    def numpy(self, *, force: bool = False):  # noqa: ANN201
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )

    def __reduce_ex__(self, proto):  # noqa: ANN001, ANN204
        # Saved like XLA/privateuse1 tensors: a CPU copy plus the device string, which
        # `torch.load(weights_only=True)` accepts and maps back (or to map_location).
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (self._elem.detach().clone(), self.dtype, str(self.device), self.requires_grad),
        )

    def data_ptr(self) -> int:
        return self._elem.data_ptr()

    def __deepcopy__(self, memo: dict) -> "NeuronTensor":
        # torch's default copies the storage, which on a neuron storage means device-side storage kernels
        # the emulator does not have; clone the data instead (torch's path for wrapper subclasses)
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the moment."
            )
        with torch.no_grad():
            new = NeuronTensor(self._elem.clone(memory_format=torch.preserve_format), self._nidx)
        new.requires_grad_(self.requires_grad)
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for key, value in self.__dict__.items():
            if key not in ("_elem", "_nidx"):
                setattr(new, key, copy.deepcopy(value, memo))
        memo[id(self)] = new
        return new

    def untyped_storage(self) -> torch.UntypedStorage:
        """The tensor's storage on the neuron device, addressing the CPU memory that holds its data.

        The wrapper's own storage has no data (torch calls it an invalid python storage), so
        `storage().data_ptr()` and `x.set_(x.storage(), ...)` need this one. It keeps the CPU storage
        alive and is the same object for every view of that storage, as on other devices.
        """
        if type(self._elem) is not _Tensor:  # traced (fake) data: no memory behind it
            return super().untyped_storage()
        return device_storage(self._elem.untyped_storage(), self.device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        bus = _bus
        if bus.active and not getattr(_state, "quiet", False) and not _tracing():
            return _dispatch_recorded(func, args, kwargs or {})
        return _dispatch(func, args, kwargs)


def raise_quantized_unsupported(*_args: object, **_kwargs: object) -> None:
    """Quantized tensors (torch.quint8/qint8/qint32) have no neuron kernels: say so, naming the way out."""
    raise RuntimeError(
        "neuron: quantized tensors (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2) are not supported on "
        "the emulated neuron device (it has no quantized kernels); keep them on the CPU, or dequantize() before "
        "moving to neuron (for low precision on the device use torch.bfloat16 or the float8 dtypes)"
    )


_FAKE = torch._C._TorchDispatchModeKey.FAKE
_PROXY = torch._C._TorchDispatchModeKey.PROXY


def _tracing() -> bool:
    """True while torch.compile/export traces through the subclass: those calls are not executions."""
    return torch._C._get_dispatch_mode(_FAKE) is not None or torch._C._get_dispatch_mode(_PROXY) is not None


def _unwrap(args: tuple, traced: list | None = None) -> tuple[list, int, bool]:
    """Unwrap NeuronTensors (also inside lists, for foreach ops). Returns args, device index, host seen.

    A traced tensor on the neuron device that is not a NeuronTensor (see below) is copied to the host
    side; each (original, copy) pair is appended to `traced` so that writes into the copy can be carried
    back (`write_back`).
    """
    out = []
    index = -1
    host = False
    for a in args:
        t = type(a)
        if t is NeuronTensor:
            if index < 0:
                index = a._nidx
            elif index != a._nidx:
                _raise_mixed(f"{DEVICE_TYPE}:{index}", str(a.device))
            out.append(a._elem)
        elif t is list or t is tuple:
            # Tensor lists (foreach, cat) and optional-tensor lists (index: [None, idx]); int lists pass.
            if a and (isinstance(a[0], _Tensor) or a[0] is None):
                inner = []
                for x in a:
                    if type(x) is NeuronTensor:
                        if index < 0:
                            index = x._nidx
                        elif index != x._nidx:
                            _raise_mixed(f"{DEVICE_TYPE}:{index}", str(x.device))
                        inner.append(x._elem)
                    else:
                        if isinstance(x, _Tensor):
                            if x.device.type == DEVICE_TYPE:
                                x = host_copy(x, traced)
                            elif x.dim() > 0:
                                host = True
                        inner.append(x)
                out.append(inner)
            else:
                out.append(a)
        elif t is _Tensor or isinstance(a, _Tensor):
            # a tensor claiming the neuron device without being a NeuronTensor is a FakeTensor
            # created while torch.compile traces: it is on the device, not the host
            if isinstance(a, NeuronTensor):  # a subclass (emulator.lazy's uninitialized parameters)
                if index < 0:
                    index = a._nidx
                a = a._elem
            elif a.device.type == DEVICE_TYPE:
                a = host_copy(a, traced)  # its data lives on the host side of the emulator, like every _elem
            elif a.dim() > 0:
                host = True
            out.append(a)
        elif t is _UntypedStorage and a.device.type == DEVICE_TYPE:  # set_(storage, ...)
            out.append(host_storage(a))
        else:
            out.append(a)
    return out, index, host


_REJECTED_FORMATS = (torch.channels_last, torch.channels_last_3d)


def raise_memory_format(func, memory_format) -> None:  # noqa: ANN001
    """channels_last on the device is an error in TorchNeuron, not a fallback: say so and what to do instead."""
    fmt = str(memory_format).removeprefix("torch.")
    message = op_coverage().memory_format_error(fmt)
    if message is not None:
        raise UnsupportedMemoryFormatError(
            f"neuron: {func.name() if func is not None else 'aten::empty'} with memory_format=torch.{fmt}: {message} "
            "(TorchNeuron raises here; it is not a CPU fallback). Drop the memory_format argument or use "
            "torch.contiguous_format on the neuron device; keep channels_last tensors on the CPU"
        )


def _raise_mixed(first: str, second: str, func=None) -> None:  # noqa: ANN001
    where = f" (when checking arguments for {func})" if func is not None else ""
    raise RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {first} and {second}!{where}"
    )


def _target_device(kwargs: dict) -> tuple[dict, int | None]:
    """Map a `device=` kwarg naming neuron to CPU for the inner call; report the requested index."""
    dev = kwargs.get("device")
    if dev is None:
        return kwargs, None
    dev = torch.device(dev)
    kwargs = dict(kwargs)
    if dev.type == DEVICE_TYPE:
        kwargs["device"] = _CPU
        return kwargs, check_index(dev.index)
    return kwargs, -1  # explicit host device: result stays on the host


def _prepare(func, args, kwargs):  # noqa: ANN001, ANN202
    if kwargs and kwargs.get("memory_format") in _REJECTED_FORMATS:
        raise_memory_format(func, kwargs["memory_format"])
    traced: list = []
    uargs, index, host = _unwrap(args, traced)
    if kwargs:
        kwargs, target = _target_device(kwargs)
        # Tensors passed by keyword (out=, sorter=, weight=, ...) are unwrapped like positional ones.
        keys = [k for k, v in kwargs.items() if isinstance(v, (_Tensor, list, tuple))]
        if keys:
            kvals, kindex, khost = _unwrap(tuple(kwargs[k] for k in keys), traced)
            kwargs = dict(kwargs)
            kwargs.update(zip(keys, kvals))
            if kindex >= 0:
                if index < 0:
                    index = kindex
                elif index != kindex:
                    _raise_mixed(f"{DEVICE_TYPE}:{index}", f"{DEVICE_TYPE}:{kindex}", func.name())
            host = host or khost
    else:
        target = None
    if host and index >= 0 and func not in COPY_OPS:
        if func in INDEX_OPS:
            pass
        else:
            _raise_mixed(f"{DEVICE_TYPE}:{index}", "cpu", func.name())
    if target is None:
        target = index if index >= 0 else 0
    return uargs, kwargs, target, traced


def _rewrap(out, args, uargs, kwargs, target: int, traced: list | None = None):  # noqa: ANN001, ANN202
    """Wrap results on the target device; `kwargs` are the caller's (un-unwrapped) keyword arguments."""
    # isinstance, not `type is`: while torch.compile traces, the CPU results are FakeTensors
    if type(out) is _Tensor or (isinstance(out, _Tensor) and type(out) is not NeuronTensor):
        return _wrap_one(out, args, uargs, kwargs, target, traced)
    if isinstance(out, (tuple, list)):
        res = [
            _wrap_one(o, args, uargs, kwargs, target, traced)
            if isinstance(o, _Tensor) and type(o) is not NeuronTensor else o
            for o in out
        ]
        return type(out)(res) if isinstance(out, tuple) else res
    return out


def _wrap_one(o: torch.Tensor, args, uargs, kwargs, target: int, traced: list | None = None):  # noqa: ANN001, ANN202
    # In-place ops and out= return the very tensor they were given: hand back the caller's object.
    for a, u in zip(args, uargs):
        if u is o:
            if type(a) is NeuronTensor:
                _sync_metadata(a)
            return a
    if traced:
        for orig, copy in traced:
            if copy is o:
                return orig
    if kwargs:
        # out= and the other output arguments (max(..., out=(values, indices)) passes `max=`, `max_values=`)
        for value in kwargs.values():
            if isinstance(value, (_Tensor, list, tuple)):
                found = _match_out(o, value)
                if found is not o:
                    return found
        if "out" in kwargs:
            return o
    if target < 0:
        return o
    return NeuronTensor(o, target)


def _match_out(o: torch.Tensor, outk):  # noqa: ANN001, ANN202
    items = outk if isinstance(outk, (list, tuple)) else [outk]
    for x in items:
        if type(x) is NeuronTensor and x._elem is o:
            _sync_metadata(x)
            return x
    return o


_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def _sync_metadata(w: NeuronTensor) -> None:
    """After resize_/out=/transpose_/as_strided_, the wrapper's geometry must follow its CPU data."""
    e = w._elem
    if w.shape != e.shape or w.stride() != e.stride() or w.storage_offset() != e.storage_offset():
        with torch._C._DisableTorchDispatch():
            # The wrapper's own (data-less) storage must be large enough for the new geometry first.
            if w.numel() < e.untyped_storage().nbytes() // max(e.element_size(), 1):
                aten.resize_.default.redispatch(_CPU_KEYS, w, [e.untyped_storage().nbytes() // max(e.element_size(), 1)])
            aten.as_strided_.default.redispatch(_CPU_KEYS, w, e.shape, e.stride(), e.storage_offset())
        _memory.follow(e, w._nidx)  # a resize may have moved or grown the storage


def _dispatch(func, args, kwargs):  # noqa: ANN001, ANN202
    if _memory._dead:  # frees since the last op are counted (and logged) before this op's
        _memory.drain()
    uargs, kw, target, traced = _prepare(func, args, kwargs)
    if traced:
        return _dispatch_traced(func, args, kwargs, uargs, kw, target, traced)
    impl = SPECIAL_OPS.get(func, func)
    out = impl(*uargs, **kw) if kw else impl(*uargs)
    if target < 0 and func is aten._to_copy.default:
        return out
    return _rewrap(out, args, uargs, kwargs, target)


def _dispatch_traced(func, args, kwargs, uargs, kw, target: int, traced: list):  # noqa: ANN001, ANN202
    """An op on host copies of traced neuron tensors (torch.compile): run it, then carry its writes back."""
    if func is aten.copy_.default and args[0] is traced[0][0]:
        # `out[:, 0] = x`: copy straight into the traced tensor (copy_ crosses devices); the host copy
        # made for it is never read, so tracing drops it from the graph
        return args[0].copy_(uargs[1], *uargs[2:])
    impl = SPECIAL_OPS.get(func, func)
    out = impl(*uargs, **kw) if kw else impl(*uargs)
    write_back(func, traced, uargs, kw)
    return _rewrap(out, args, uargs, kwargs, target, traced)


# ------------------------------------------------------------------------------------------ recording
_SKIP_DIRS: tuple[str, ...] = ()


def user_source(depth: int = 3, namer: Callable[[str, int], str] | None = None) -> str | None:
    """file:line of the innermost frame outside torch and neuron_studio: the user's code (named by `namer(file,
    line)` when the session gave one: a notebook cell's temp file becomes `cell-<In>:<line>`)."""
    try:
        f = sys._getframe(depth)
    except ValueError:  # shallow stacks, e.g. the autograd engine's device thread
        return None
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP_DIRS) and "<frozen" not in fn:
            return namer(fn, f.f_lineno) if namer is not None else f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None


def _dispatch_recorded(func, args, kwargs):  # noqa: ANN001, ANN202
    uargs, kw, target, traced = _prepare(func, args, kwargs)
    if traced:  # traced fake tensors: a trace, not an execution, so nothing to record
        return _dispatch_traced(func, args, kwargs, uargs, kw, target, traced)
    impl = SPECIAL_OPS.get(func, func)
    t0 = time.perf_counter_ns()
    out = impl(*uargs, **kw) if kw else impl(*uargs)
    t1 = time.perf_counter_ns()
    to_host = target < 0 and func is aten._to_copy.default
    result = out if to_host else _rewrap(out, args, uargs, kwargs, target)
    try:
        _record(func, args, uargs, kw, out, t0, t1, target)
    except Exception:  # noqa: BLE001 - recording must never break the user's op (or abort autograd's thread)
        _bus.record_errors += 1
    return result


def _record(func, args, uargs, kw, out, t0: int, t1: int, target: int,  # noqa: ANN001
            in_graph: bool = False) -> None:
    bus = _bus
    name = func._schema.name
    outs = out if isinstance(out, (tuple, list)) else (out,)
    in_shapes, in_dtypes = describe(uargs)
    out_shapes, out_dtypes = describe(outs)
    sync = None
    transfer = None
    transfer_bytes = 0
    if func is aten._local_scalar_dense.default:
        sync = ev.SYNC_ITEM
        transfer = ev.TRANSFER_D2H  # one element copied to the host
        transfer_bytes = uargs[0].element_size() if uargs and isinstance(uargs[0], _Tensor) else 0
    elif func in DATA_DEPENDENT_OPS:
        sync = ev.SYNC_DATA_DEPENDENT
    elif func is aten.index.Tensor and any(
        isinstance(i, _Tensor) and i.dtype == torch.bool for i in (uargs[1] if len(uargs) > 1 else ())
    ):
        sync = ev.SYNC_DATA_DEPENDENT
    in_graph = in_graph or bus.current_graph >= 0
    if func in COPY_OPS and not in_graph:  # inside a compiled graph every tensor is on the device
        src_dev, dst_dev = _copy_direction(func, args, kw, target)
        if src_dev != dst_dev:
            transfer = ev.TRANSFER_D2H if dst_dev == "cpu" else ev.TRANSFER_H2D
            t = outs[0] if isinstance(outs[0], _Tensor) else None
            transfer_bytes = t.numel() * t.element_size() if t is not None else 0
            if transfer == ev.TRANSFER_D2H:
                sync = ev.SYNC_TO_HOST
    coverage = op_coverage()
    fallback = coverage.fallback_reason(name, uargs)
    if fallback is None and transfer is None and not in_graph:
        fallback = coverage.round_trip_cast(name, in_dtypes, out_dtypes)
        if fallback is not None:
            sync = ev.SYNC_HOST_ROUND_TRIP
    tags = coverage.cast_tags(in_dtypes)
    if torch.are_deterministic_algorithms_enabled():
        tags = tags + ("deterministic",)
    if torch._C._current_graph_task_id() != -1:
        # the forward op's autograd sequence number lets the profiler name its module and source line
        tags = tags + backward_tags()
    elif torch.is_grad_enabled():
        # autograd numbered this op's backward node before dispatching to us: the counter is one past it
        tags = tags + (f"seq={torch._C._autograd._get_sequence_nr() - 1}",)
    index = target if target >= 0 else next(
        (a._nidx for a in args if type(a) is NeuronTensor), 0
    )
    reads, writes = storage_ids(func, uargs, kw, outs, bus.storages)
    event = ev.OpEvent(
        seq=bus.next_seq(),
        name=name,
        overload=func._overloadname,
        start_ns=t0,
        end_ns=t1,
        thread=threading.get_ident(),
        device_index=index,
        input_shapes=in_shapes,
        input_dtypes=in_dtypes,
        output_shapes=out_shapes,
        output_dtypes=out_dtypes,
        flops=flops(func, uargs, kw, out),
        is_view=func.is_view,
        is_inplace=func._schema.is_mutable,
        sync=sync,
        transfer=transfer,
        transfer_bytes=transfer_bytes,
        fallback=fallback,
        source=user_source(4, bus.source_namer) if bus.want_source else None,
        graph=bus.current_graph,
        tags=tags,
        reads=reads,
        writes=writes,
    )
    extra = RECORD_EXTRA.get(func)
    if extra is not None:  # e.g. collectives: message size and group tags
        fields = extra(func, uargs, kw, out)
        fields["tags"] = event.tags + tuple(fields.get("tags", ()))
        event = dataclasses.replace(event, **fields)
    bus.publish(event)


def record_op(func, args, kwargs, out, t0: int, t1: int, index: int) -> None:  # noqa: ANN001
    """Record an op that ran outside the subclass (a compiled graph's node on CPU tensors)."""
    if _bus.active:
        _record(func, args, args, kwargs, out, t0, t1, index, in_graph=True)


def _copy_direction(func, args, kw, target: int) -> tuple[str, str]:  # noqa: ANN001
    def dev(x) -> str:  # noqa: ANN001
        return "neuron" if type(x) is NeuronTensor else "cpu"

    if func is aten._to_copy.default:
        return dev(args[0]), ("cpu" if target < 0 else "neuron")
    if func in (aten._copy_from.default, aten._copy_from_and_resize.default):
        return dev(args[0]), dev(args[1])
    if func is aten.copy_.default:
        return dev(args[1]), dev(args[0])
    return "neuron", "neuron"


def _record_marker(name: str, t: NeuronTensor, sync: str) -> None:
    """Record a host-visible event that is not an aten op (printing, tolist) as a sync point."""
    bus = _bus
    if not bus.active or getattr(_state, "quiet", False):
        return
    now = time.perf_counter_ns()
    bus.publish(
        ev.OpEvent(
            seq=bus.next_seq(),
            name=name,
            overload="default",
            start_ns=now,
            end_ns=now,
            thread=threading.get_ident(),
            device_index=t._nidx,
            input_shapes=(tuple(t.shape),),
            input_dtypes=(dtype_name(t.dtype),),
            output_shapes=(),
            output_dtypes=(),
            sync=sync,
            transfer=ev.TRANSFER_D2H,
            transfer_bytes=t.numel() * t.element_size(),
            source=user_source(3, bus.source_namer) if bus.want_source else None,
            graph=bus.current_graph,
        )
    )


class unrecorded:
    """Suppress recording for internal ops, which are not ops of the user's program: printing formats a tensor
    with dozens of ops; the profiler's saved-tensor hook detaches what autograd saves. The ops still run and
    their outputs are counted by the memory tracker as usual."""

    def __enter__(self) -> None:
        self.prev = getattr(_state, "quiet", False)
        _state.quiet = True

    def __exit__(self, *exc: object) -> None:
        _state.quiet = self.prev


# ---------------------------------------------------------------------------------- configuration
_bus: ev.EventBus = None  # type: ignore[assignment]  # set by configure(); the device registry owns it
_memory: MemoryTracker = None  # type: ignore[assignment]
_DEVICES: list[torch.device] = []


def configure(bus: ev.EventBus, memory: MemoryTracker, device_count: int, skip_dirs: tuple[str, ...]) -> None:
    """Bind the module to the device registry's bus and memory tracker (called once at registration)."""
    global _bus, _memory, _DEVICES, _SKIP_DIRS
    _bus = bus
    _memory = memory
    set_device_count(device_count)
    _DEVICES = [torch.device(DEVICE_TYPE, i) for i in range(device_count)]
    _SKIP_DIRS = skip_dirs
    cache_dtype_names()


def wrap(t: torch.Tensor, index: int = 0) -> NeuronTensor:
    return NeuronTensor(t, check_index(index))
