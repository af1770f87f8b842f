"""torch.compile's Inductor on the emulated `neuron` device: CPU's code generation on the device's bytes.

The device's memory is host memory, so the C++ kernels Inductor generates for CPU run unchanged on neuron
tensors (they receive data pointers); the wrapper allocates its buffers on `neuron`. Dynamo needs a device
interface for the device type and Inductor a code generator per device type: both are registered when torch
loads those modules (a one-shot import hook: importing them at registration would cost `import neuron_studio`
about a second).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from typing import Any, Callable

__all__ = ["register_inductor_backend"]


def _device_interface() -> None:
    import torch
    from torch._dynamo import device_interface as di

    class NeuronInterface(di.CpuInterface):
        """The emulated device to Dynamo: CPU's answers, except for its own ordinals and synchronize."""

        @staticmethod
        def current_device() -> int:
            return torch.neuron.current_device()

        @staticmethod
        def device_count() -> int:
            return torch.neuron.device_count()

        @staticmethod
        def set_device(device: Any) -> None:
            torch.neuron.set_device(device)

        @staticmethod
        def synchronize(device: Any = None) -> None:
            torch.neuron.synchronize(device)

        @staticmethod
        def is_triton_capable(device: Any = None) -> bool:
            return False

    di.register_interface_for_device("neuron", NeuronInterface)


def _codegen() -> None:
    """Inductor registers its code generators when it first compiles (`init_backend_registration`); the
    device's are registered right after CPU's (importing them now would be circular)."""
    from torch._inductor.codegen import common

    original = common.init_backend_registration
    if getattr(original, "_neuron", False):
        return

    def init_backend_registration() -> None:
        original()
        if common.get_scheduling_for_device("neuron") is None:
            from torch._inductor.codegen.cpp import CppScheduling
            from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
            from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen
            from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

            common.register_backend_for_device("neuron", CppScheduling, _wrapper_codegen(PythonWrapperCodegen),
                                               CppWrapperCpu, WrapperFxCodegen)
            common.register_device_op_overrides("neuron", CpuDeviceOpOverrides())

    init_backend_registration._neuron = True  # type: ignore[attr-defined]
    common.init_backend_registration = init_backend_registration


def _wrapper_codegen(base: type) -> type:
    """Inductor's Python wrapper, calling the generated C++ kernels on `neuron` as it does on CPU."""
    import torch

    class NeuronWrapperCodegen(base):
        @staticmethod
        def create(is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None
                   ) -> Any:
            if is_subgraph:
                return base.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
            return NeuronWrapperCodegen()

        def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None,
                                         triton: bool = True, **kwargs: Any) -> Any:
            from torch._inductor.virtualized import V

            device = device or V.graph.get_current_device_or_throw()
            if not triton and device.type == "neuron":
                device = torch.device("cpu")
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton,
                                                        **kwargs)

    return NeuronWrapperCodegen


_AFTER_IMPORT: dict[str, Callable[[], None]] = {
    "torch._dynamo.device_interface": _device_interface,
    "torch._inductor.codegen.common": _codegen,
}


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        action = _AFTER_IMPORT.pop(name, None)
        if action is None:
            return None
        if not _AFTER_IMPORT:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module: types.ModuleType) -> None:
            exec_module(module)
            action()

        spec.loader.exec_module = exec_and_register  # type: ignore[method-assign]
        return spec


def register_inductor_backend() -> None:
    """Register now for what torch already loaded, the rest when torch loads it."""
    for name in list(_AFTER_IMPORT):
        if name in sys.modules:
            _AFTER_IMPORT.pop(name)()
    if _AFTER_IMPORT:
        sys.meta_path.insert(0, _Hook())
