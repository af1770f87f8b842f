"""Issue 16 / trainium.md §1.7.1: what TorchNeuron does that is neither a device op nor a fallback.

- An on-device cast to or from a 64-bit type goes through the CPU with a sync: the emulator records it as a host
  round trip (reason and provenance from device/coverage.json) and the model charges the device-to-host copy, the
  host cast, the host-to-device copy and the sync; it ends an adaptive group.
- channels_last raises in TorchNeuron ("Neuron tensors only support contiguous or preserve memory format"): the
  emulator raises a typed error naming what is wrong and what to do, instead of running it.
"""
from __future__ import annotations

import pytest
import torch

import neuron_studio
from neuron_studio.device import UnsupportedMemoryFormatError
from neuron_studio.device.coverage import op_coverage
from neuron_studio.device.events import SYNC_HOST_ROUND_TRIP
from neuron_studio.profiler.model import model_run

emulated = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator behaviour")


def _events(fn) -> list:  # noqa: ANN001
    with neuron_studio.device.subscribe() as sub:
        fn()
    return sub.drain()


@emulated
@pytest.mark.parametrize("cast", [lambda x: x.double(), lambda x: x.long(), lambda x: x.double().float(),
                                  lambda x: torch.zeros(4, dtype=torch.int64, device="neuron").copy_(x)],
                         ids=["f32->f64", "f32->i64", "f64->f32", "copy_ into int64"])
def test_a_64_bit_cast_on_the_device_is_a_host_round_trip_with_a_sync(cast) -> None:  # noqa: ANN001
    x = torch.arange(4.0, device="neuron")
    casts = [e for e in _events(lambda: cast(x)) if e.name in ("aten::_to_copy", "aten::copy_")]
    assert casts and all(e.fallback == "host_round_trip_cast" and e.sync == SYNC_HOST_ROUND_TRIP for e in casts)
    cov = op_coverage()
    assert "64-bit" in cov.explain("host_round_trip_cast") and "sync" in cov.explain("host_round_trip_cast")
    assert cov.round_trip_casts["provenance"] == "src_snapshot"


@emulated
def test_other_casts_and_host_transfers_are_not_round_trips() -> None:
    x = torch.arange(4.0, device="neuron")
    events = _events(lambda: (x.half(), x.int(), torch.ones(4, dtype=torch.int64).to("neuron"),
                              torch.ones(4, dtype=torch.int64, device="neuron").cpu()))
    assert {e.transfer for e in events} >= {"h2d", "d2h"} and len(events) >= 4
    assert all(e.fallback is None and e.sync != SYNC_HOST_ROUND_TRIP for e in events)


@emulated
def test_a_64_bit_cast_inside_a_compiled_graph_is_lowered_by_the_compiler() -> None:
    f = torch.compile(lambda t: (t.double() * 2).float(), backend="neuron", dynamic=False)
    x = torch.arange(4.0, device="neuron")
    f(x)
    events = _events(lambda: f(x))
    assert any(e.graph >= 0 and e.name == "aten::_to_copy" for e in events)
    assert all(e.fallback is None for e in events if e.graph >= 0)


@emulated
def test_the_model_charges_the_round_trip_and_the_sync() -> None:
    n = 1 << 20
    x = torch.ones(n, device="neuron")
    events = _events(lambda: (x * 2).double().sum())
    run = model_run(events, chip="trn2", mode="adaptive")
    cfg = run.config
    i = [k for k, e in enumerate(events) if e.name == "aten::_to_copy"][0]
    copies = (4 * n + 8 * n) / cfg.host_link_bytes_per_s * 1e9 + 2 * cfg.host_transfer_latency_ns
    assert run.ops["engine"][i] == "host" and run.ops["bound"][i] == "fallback"
    assert run.ops["duration_ns"][i] >= copies + cfg.host_op_overhead_ns
    # the round trip is a host wait: mul, the cast and sum run one by one (three groups)
    assert len(run.groups) == 3 and run.groups[1].boundary_reason == "fallback"
    plain = model_run(_events(lambda: (x * 2).float().sum()), chip="trn2", mode="adaptive")
    assert run.summary.step_time_ns > plain.summary.step_time_ns + copies


# -- channels_last -------------------------------------------------------------------------------------------
@emulated
@pytest.mark.parametrize("op", [
    lambda x: x.contiguous(memory_format=torch.channels_last),
    lambda x: x.to(memory_format=torch.channels_last),
    lambda x: torch.empty_like(x, memory_format=torch.channels_last),
    lambda x: torch.empty(2, 3, 4, 4, device="neuron", memory_format=torch.channels_last),
    lambda x: torch.randn(2, 3, 4, 4).to("neuron", memory_format=torch.channels_last),
    lambda x: torch.nn.Conv2d(3, 3, 1).to("neuron").to(memory_format=torch.channels_last),
    lambda x: torch.randn(1, 3, 2, 4, 4, device="neuron").contiguous(memory_format=torch.channels_last_3d),
], ids=["contiguous", "to", "empty_like", "empty", "to-from-cpu", "module.to", "channels_last_3d"])
def test_channels_last_on_the_device_is_an_error_not_a_fallback(op) -> None:  # noqa: ANN001
    x = torch.randn(2, 3, 4, 4, device="neuron")
    with pytest.raises(UnsupportedMemoryFormatError,
                       match=r"memory_format=torch\.channels_last(_3d)?: Neuron tensors only support contiguous or "
                             r"preserve memory format \(TorchNeuron raises here; it is not a CPU fallback\)\. "
                             r"Drop the memory_format argument"):
        op(x)
    assert issubclass(UnsupportedMemoryFormatError, RuntimeError)
    assert op_coverage().memory_format_errors["provenance"] == "src_snapshot"


@emulated
def test_contiguous_and_preserve_formats_still_work_and_match_cpu() -> None:
    cpu = torch.randn(2, 3, 4, 4)
    x = cpu.to("neuron")
    for fmt in (torch.contiguous_format, torch.preserve_format):
        assert torch.equal(x.contiguous(memory_format=fmt).cpu(), cpu.contiguous(memory_format=fmt))
        assert torch.equal(x.clone(memory_format=fmt).cpu(), cpu)
    cl = cpu.contiguous(memory_format=torch.channels_last)
    assert torch.equal(cl.cpu(), cpu)   # channels_last on the CPU is untouched
