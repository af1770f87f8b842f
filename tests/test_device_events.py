"""OpEvents: every op the device executes is described to subscribers; nothing is recorded without one."""
from __future__ import annotations

import threading

import pytest
import torch

import neuron_studio
from neuron_studio.device import events as ev

pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator behaviour")


def _bus() -> ev.EventBus:
    return neuron_studio.device.registry().bus


def _names(events: list[ev.OpEvent]) -> list[str]:
    return [e.name for e in events]


def _one(events: list[ev.OpEvent], name: str) -> ev.OpEvent:
    found = [e for e in events if e.name == name]
    assert len(found) == 1, f"expected one {name} in {_names(events)}"
    return found[0]


def test_no_recording_without_subscribers() -> None:
    assert not _bus().active
    a = torch.ones(4, device="neuron")
    for _ in range(10):
        a = a + 1
    with neuron_studio.device.subscribe() as sub:
        assert _bus().active
        assert len(sub) == 0  # ops before the subscription were never recorded
        a * 2
        assert _names(sub.drain()) == ["aten::mul"]
    assert not _bus().active
    a * 2
    assert len(sub) == 0


def test_event_describes_the_op() -> None:
    a = torch.ones(8, 4, device="neuron")
    b = torch.ones(4, 3, device="neuron")
    with neuron_studio.device.subscribe() as sub:
        c = a @ b
    (e,) = [e for e in sub.drain() if e.name == "aten::mm"]
    assert (e.overload, e.input_shapes, e.input_dtypes) == ("default", ((8, 4), (4, 3)), ("float32", "float32"))
    assert (e.output_shapes, e.output_dtypes) == (((8, 3),), ("float32",))
    assert e.flops == 2 * 8 * 4 * 3  # torch.utils.flop_counter's mm rule
    assert e.end_ns >= e.start_ns > 0 and e.duration_ns >= 0
    assert e.thread == threading.get_ident() and e.device_index == 0
    assert not e.is_view and not e.is_inplace and e.sync is None and e.transfer is None and e.fallback is None
    assert e.source is None  # source lines only when asked for
    assert c.device.type == "neuron"


def test_sequence_numbers_increase_and_views_inplace_are_flagged() -> None:
    a = torch.ones(4, 4, device="neuron:1")
    with neuron_studio.device.subscribe() as sub:
        v = a.view(16)
        v.add_(1)
        a.t()
    events = sub.drain()
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert _one(events, "aten::view").is_view
    assert _one(events, "aten::add_").is_inplace
    assert _one(events, "aten::t").is_view
    assert all(e.device_index == 1 for e in events)


def test_sync_points_and_transfers() -> None:
    host = torch.ones(16, 4)
    with neuron_studio.device.subscribe() as sub:
        d = host.to("neuron")
        s = d.sum()
        s.item()
        d.cpu()
        d.tolist()
        repr(d)
        d[d > 0.5]
        torch.neuron.synchronize()
    events = sub.drain()
    h2d = [e for e in events if e.transfer == ev.TRANSFER_H2D]
    assert h2d and h2d[0].transfer_bytes == 16 * 4 * 4 and h2d[0].sync is None
    assert _one(events, "aten::_local_scalar_dense").sync == ev.SYNC_ITEM
    d2h = [e for e in events if e.transfer == ev.TRANSFER_D2H and e.sync == ev.SYNC_TO_HOST]
    assert len(d2h) == 1 and d2h[0].transfer_bytes == 256
    assert _one(events, "aten::tolist").sync == ev.SYNC_ITEM
    printed = _one(events, "aten::_print")
    assert printed.sync == ev.SYNC_PRINT and printed.transfer_bytes == 256
    assert _one(events, "aten::index").sync == ev.SYNC_DATA_DEPENDENT  # boolean mask: shape from values
    assert _one(events, "neuron::synchronize").sync == ev.SYNC_EXPLICIT
    # printing formats the tensor with many internal ops: one event, not dozens
    assert sum(e.name == "aten::_print" for e in events) == 1


def test_fallback_reasons_come_from_coverage_json() -> None:
    cov = neuron_studio.device.coverage.op_coverage()
    a = torch.tensor([0.0, 1.0, 2.0], device="neuron")
    with neuron_studio.device.subscribe() as sub:
        a.nonzero()
        torch.bernoulli(torch.full((3,), 0.5, device="neuron"))
        a.exp()
    events = sub.drain()
    # nonzero is a device op with a host read of its size (trainium.md 1.7.1): a sync, not a fallback
    assert _one(events, "aten::nonzero").fallback is None
    assert cov.device_ops["aten::nonzero"]["host_work"] == "size_read"
    assert _one(events, "aten::nonzero").sync == ev.SYNC_DATA_DEPENDENT
    assert any(e.fallback == "rng" for e in events if e.name.startswith("aten::bernoulli"))
    assert _one(events, "aten::exp").fallback is None


def test_every_coverage_entry_names_its_provenance_and_dropout_is_a_device_op() -> None:
    cov = neuron_studio.device.coverage.op_coverage()
    assert set(cov.fallback_ops) <= set(cov.provenance)
    assert all(cov.evidence(op) for op in cov.fallback_ops)
    assert "aten::native_dropout" not in cov.fallback_ops
    assert cov.device_ops["aten::native_dropout"]["host_work"] == "host_mask"
    x = torch.ones(64, device="neuron")
    with neuron_studio.device.subscribe() as sub:
        torch.nn.functional.dropout(x, 0.5, training=True)
    assert _one(sub.drain(), "aten::native_dropout").fallback is None


def test_eager_cast_tags() -> None:
    a = torch.ones(3, dtype=torch.float64, device="neuron")
    with neuron_studio.device.subscribe() as sub:
        a * 2
    assert "f64_to_f32" in _one(sub.drain(), "aten::mul").tags


def test_source_location_when_asked() -> None:
    a = torch.ones(2, device="neuron")
    with neuron_studio.device.subscribe(with_source=True) as sub:
        a.exp(); line = __import__("inspect").currentframe().f_lineno  # noqa: E702
    e = _one(sub.drain(), "aten::exp")
    assert e.source == f"{__file__}:{line}"


def test_bounded_buffer_counts_drops() -> None:
    a = torch.ones(2, device="neuron")
    with neuron_studio.device.subscribe(capacity=5) as sub:
        for _ in range(12):
            a.neg()
        assert len(sub) == 5 and sub.dropped == 7
        kept = sub.drain()
    assert [e.name for e in kept] == ["aten::neg"] * 5
    assert kept[-1].seq - kept[0].seq == 4  # the newest five survive


def test_two_subscribers_and_threads() -> None:
    a = torch.ones(2, device="neuron")
    seen: list[int] = []
    with neuron_studio.device.subscribe() as s1, neuron_studio.device.subscribe() as s2:
        def work() -> None:
            seen.append(threading.get_ident())
            a.sin()

        t = threading.Thread(target=work)
        t.start()
        t.join()
        a.cos()
    e1, e2 = s1.drain(), s2.drain()
    assert _names(e1) == _names(e2) == ["aten::sin", "aten::cos"]
    assert e1[0].thread == seen[0] != e1[1].thread


def test_backward_ops_are_recorded() -> None:
    w = torch.randn(4, 4, device="neuron", requires_grad=True)
    x = torch.randn(2, 4, device="neuron")
    with neuron_studio.device.subscribe() as sub:
        (x @ w).sum().backward()
    names = _names(sub.drain())
    assert names.count("aten::mm") >= 2  # forward and the weight gradient
    assert w.grad is not None and w.grad.device.type == "neuron"


def test_drained_columns_share_signatures_across_pulls() -> None:
    a = torch.ones(3, 4, device="neuron")
    with neuron_studio.device.subscribe() as objects, neuron_studio.device.subscribe() as columns:
        for _ in range(4):
            (a @ a.t()).relu()
        assert len(objects) == 12  # a pull mid-run: the rows reach the subscriptions in two batches
        a.neg()
    batch = columns.drain_columns()
    events = objects.drain()
    assert _names(events) == ["aten::t", "aten::mm", "aten::relu"] * 4 + ["aten::neg"]
    # what the ops of one signature share is computed once: 3 signatures in the first batch, 1 in the second
    assert len(batch) == 13 and len(batch.signatures) == 4
    assert batch.events() == events
    mm = [e for e in events if e.name == "aten::mm"]
    assert {e.flops for e in mm} == {2 * 3 * 4 * 3}
    # storage ids stay right across the two batches: neg (second batch) reads the storage t read (first)
    assert events[-1].reads == events[0].reads and len(events[-1].reads) == 1


def test_a_small_subscription_keeps_its_newest_events_beside_a_large_one() -> None:
    a = torch.ones(2, device="neuron")
    with neuron_studio.device.subscribe(capacity=3) as small, neuron_studio.device.subscribe() as large:
        for _ in range(5):
            a.neg()
        assert len(small) == 3 and small.dropped == 2
        a.exp()
        got = small.drain()
        assert _names(got) == ["aten::neg", "aten::neg", "aten::exp"] and small.dropped == 3
        assert got[-1].seq - got[0].seq == 2
    assert _names(large.drain()) == ["aten::neg"] * 5 + ["aten::exp"] and large.dropped == 0


def test_backward_ops_of_nodes_without_a_forward_op_name_none() -> None:
    w = torch.randn(4, device="neuron", requires_grad=True)
    with neuron_studio.device.subscribe() as sub:
        (w * 2).sum().backward()
    backward = [e for e in sub.drain() if "backward" in e.tags]
    fwd = [int(t[8:]) for e in backward for t in e.tags if t.startswith("fwd_seq=")]
    assert fwd and all(0 <= s < 2**63 for s in fwd)  # never the "no sequence number" sentinel (UINT64_MAX)
    assert any(not any(t.startswith("fwd_seq=") for t in e.tags) for e in backward)  # AccumulateGrad's ops


def test_flop_formulas_load_with_the_first_subscription_not_the_import() -> None:
    import subprocess
    import sys

    code = """
import sys, torch, neuron_studio
from torch.nn.functional import scaled_dot_product_attention as sdpa
q = torch.randn(2, 4, 16, 8).to("neuron")
assert "torch.utils.flop_counter" not in sys.modules  # torch's CUDA wheels: it imports triton (~130 ms)
with neuron_studio.device.subscribe() as sub:
    sdpa(q, q, q, is_causal=True)
    (q @ q.transpose(-1, -2)).sum()
events = sub.drain()
from torch.utils.flop_counter import sdpa_flop_count
att = [e for e in events if "attention" in e.name]
assert len(att) == 1 and att[0].flops == sdpa_flop_count((2, 4, 16, 8), (2, 4, 16, 8), (2, 4, 16, 8)), att
assert "causal" in att[0].tags, att[0].tags
bmm = [e for e in events if e.name in ("aten::bmm", "aten::matmul", "aten::mm")]
assert bmm and bmm[0].flops == 2 * 2 * 4 * 16 * 16 * 8, bmm
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
