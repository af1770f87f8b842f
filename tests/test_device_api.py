"""The `neuron` device's PyTorch surface: what must work unmodified, with results equal to plain CPU.

The emulator runs the CPU kernels, so results are compared with torch.equal (bit-exact) unless noted.
"""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import neuron_studio

pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator behaviour")


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


# -- creation and movement --------------------------------------------------------------------------
def test_randn_on_neuron_equals_cpu_after_same_seed() -> None:
    torch.manual_seed(7)
    a = torch.randn(4, 5, device="neuron")
    torch.manual_seed(7)
    b = torch.randn(4, 5)
    assert a.device == torch.device("neuron", 0)
    assert torch.equal(a.cpu(), b)
    torch.manual_seed(3)
    c = torch.rand(6, device="neuron:1")
    torch.manual_seed(3)
    assert c.device == torch.device("neuron", 1) and torch.equal(c.cpu(), torch.rand(6))


def test_tensor_to_neuron_cpu_roundtrip() -> None:
    data = [[1.5, -2.0], [3.25, 4.0]]
    t = torch.tensor(data, device="neuron")
    assert t.device.type == "neuron" and t.dtype == torch.float32
    assert t.tolist() == data
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for moved in (x.to("neuron"), x.neuron(), x.to(device="neuron", dtype=torch.float32), x.neuron(1)):
        assert moved.device.type == "neuron"
        assert torch.equal(moved.cpu(), x)
    assert x.neuron(1).device.index == 1
    assert torch.equal(x.to("neuron").to("neuron:2").cpu(), x)
    assert x.to("neuron").to(torch.float64).dtype == torch.float64


def test_numpy_after_cpu_and_directly_raises_like_cuda() -> None:
    t = torch.tensor([1.0, 2.0], device="neuron")
    assert t.cpu().numpy().tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="can't convert neuron:0 device type tensor to numpy. Use Tensor.cpu()"):
        t.numpy()


def test_item_and_repr() -> None:
    t = torch.tensor([1.0, 2.0], device="neuron")
    assert t.sum().item() == 3.0
    assert repr(t) == "tensor([1., 2.], device='neuron:0')"
    assert "grad_fn=<MulBackward0>" in repr(t.requires_grad_() * 2)


def test_module_to_and_forward_equal_cpu() -> None:
    m = _mlp()
    mn = _mlp().to("neuron")
    assert all(p.device.type == "neuron" for p in mn.parameters())
    x = torch.randn(3, 8)
    assert torch.equal(mn(x.to("neuron")).cpu(), m(x))
    assert next(mn.cpu().parameters()).device.type == "cpu"


# -- autograd ---------------------------------------------------------------------------------------
def test_autograd_grad_equals_cpu() -> None:
    x = torch.randn(5, requires_grad=True)
    xn = x.detach().to("neuron").requires_grad_()
    (g,) = torch.autograd.grad((x.sin() * x).sum(), x)
    (gn,) = torch.autograd.grad((xn.sin() * xn).sum(), xn)
    assert gn.device.type == "neuron" and torch.equal(gn.cpu(), g)


def test_checkpoint_equals_cpu() -> None:
    m, mn = _mlp(), _mlp().to("neuron")
    x = torch.randn(4, 8, requires_grad=True)
    xn = x.detach().to("neuron").requires_grad_()
    checkpoint(m, x, use_reentrant=False).sum().backward()
    checkpoint(mn, xn, use_reentrant=False).sum().backward()
    assert torch.equal(xn.grad.cpu(), x.grad)
    for p, pn in zip(m.parameters(), mn.parameters()):
        assert torch.equal(pn.grad.cpu(), p.grad)


# -- optimizers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
@pytest.mark.parametrize("form", ["default", "foreach", "fused"])
def test_optimizer_steps_equal_cpu(name: str, form: str) -> None:
    kw = {"lr": 0.01}
    if name == "SGD":
        kw["momentum"] = 0.9
    if form != "default":
        kw[form] = True
    models = {}
    for dev in ("cpu", "neuron"):
        m = _mlp().to(dev)
        opt = getattr(torch.optim, name)(m.parameters(), **kw)
        torch.manual_seed(1)
        for _ in range(3):
            opt.zero_grad()
            x = torch.randn(4, 8).to(dev)
            F.mse_loss(m(x), torch.zeros(4, 4, device=dev)).backward()
            opt.step()
        models[dev] = m
    for p, pn in zip(models["cpu"].parameters(), models["neuron"].parameters()):
        assert pn.device.type == "neuron"
        assert torch.equal(pn.detach().cpu(), p.detach())


# -- autocast ---------------------------------------------------------------------------------------
def test_autocast_bf16_matches_cpu_autocast() -> None:
    m, mn = _mlp(), _mlp().to("neuron")
    x = torch.randn(3, 8)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        yn = mn(x.to("neuron"))
        ln = F.mse_loss(yn, torch.zeros(3, 4, device="neuron"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
        loss = F.mse_loss(y, torch.zeros(3, 4))
    assert yn.dtype == torch.bfloat16 and ln.dtype == torch.float32  # linear low precision, mse_loss fp32
    assert torch.equal(yn.cpu(), y)
    assert torch.equal(ln.cpu(), loss)


# -- serialization ----------------------------------------------------------------------------------
def test_state_dict_save_load_weights_only() -> None:
    mn = _mlp().to("neuron")
    buf = io.BytesIO()
    torch.save(mn.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    for k, v in mn.state_dict().items():
        assert sd[k].device == v.device and torch.equal(sd[k].cpu(), v.cpu())
    buf.seek(0)
    on_cpu = torch.load(buf, weights_only=True, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu.values())
    fresh = _mlp()
    fresh.load_state_dict(on_cpu)
    fresh2 = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("neuron")
    fresh2.load_state_dict(sd)
    x = torch.randn(2, 8)
    assert torch.equal(fresh2(x.to("neuron")).cpu(), fresh(x))


# -- torch.accelerator and torch.neuron -------------------------------------------------------------
def test_current_accelerator_is_neuron() -> None:
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.neuron.device_count()


def test_torch_neuron_runtime_functions(neuron_device: torch.device) -> None:
    info = neuron_studio.device.info()
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == info.device_count == info.logical_cores
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(1)
    assert torch.neuron.current_device() == 1
    assert torch.empty(2, device="neuron").device == torch.device("neuron", 1)
    torch.neuron.set_device("neuron:0")
    torch.neuron.synchronize()
    torch.neuron.synchronize("neuron:0")
    torch.neuron.empty_cache()
    props = torch.neuron.get_device_properties(0)
    assert props.total_memory == info.hbm_bytes_per_logical_core
    assert "emulated" in props.name


def test_torch_neuron_manual_seed_matches_cpu_stream() -> None:
    torch.neuron.manual_seed(11)
    a = torch.randn(8, device="neuron").cpu()
    torch.manual_seed(11)
    assert torch.equal(a, torch.randn(8))
    state = torch.neuron.get_rng_state()
    b = torch.rand(3, device="neuron").cpu()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.rand(3, device="neuron").cpu(), b)


def test_memory_figures_tracked_by_the_emulator() -> None:
    dev = "neuron:3"  # a device no other test uses, so the figures are this test's own
    torch.neuron.reset_peak_memory_stats(dev)
    before = torch.neuron.memory_allocated(dev)
    x = torch.empty(1000, device=dev)
    assert torch.neuron.memory_allocated(dev) == before + 4000
    view = x[10:20]  # a view shares the storage: not counted again
    assert torch.neuron.memory_allocated(dev) == before + 4000
    y = torch.ones(500, dtype=torch.float64, device=dev)
    assert torch.neuron.max_memory_allocated(dev) == before + 8000
    stats = torch.neuron.memory_stats(dev)
    assert stats["allocated_bytes.all.current"] == before + 8000
    assert stats["allocated_bytes.all.peak"] == before + 8000
    del x, view, y
    assert torch.neuron.memory_allocated(dev) == before
    assert torch.neuron.max_memory_allocated(dev) == before + 8000
    torch.neuron.reset_peak_memory_stats(dev)
    assert torch.neuron.max_memory_allocated(dev) == before


# -- data loading and compile -----------------------------------------------------------------------
def test_dataloader_pin_memory_feeds_neuron_model() -> None:
    ds = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 4))
    m, mn = _mlp(), _mlp().to("neuron")
    losses, losses_n = [], []
    for x, y in torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True):
        assert x.is_pinned()
        losses_n.append(F.mse_loss(mn(x.to("neuron", non_blocking=True)), y.to("neuron", non_blocking=True)).item())
        losses.append(F.mse_loss(m(x), y).item())
    assert losses_n == losses


def test_pin_memory_pins_a_host_copy_and_plain_tensors_are_not_pinned() -> None:
    x = torch.randn(4)
    assert not x.is_pinned()  # an ordinary CPU tensor, as without the studio
    p = x.pin_memory()
    assert p is not x and p.device.type == "cpu" and p.is_pinned() and torch.equal(p, x)
    assert not x.is_pinned() and p.pin_memory() is p
    e = torch.empty(3, 2, pin_memory=True)
    assert e.is_pinned() and e.shape == (3, 2)
    n = x.to("neuron")
    assert not n.is_pinned()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        n.pin_memory()


def test_torch_compile_on_neuron_tensors() -> None:
    torch._dynamo.reset()
    m, mn = _mlp(), _mlp().to("neuron")
    x = torch.randn(3, 8)
    for backend in ("inductor", "aot_eager"):
        cm = torch.compile(mn, backend=backend)
        out = cm(x.to("neuron"))
        assert out.device.type == "neuron"
        assert torch.equal(out.cpu(), m(x))


# -- torch.accelerator, generators ------------------------------------------------------------------
def test_accelerator_synchronize_and_memory_figures() -> None:
    dev = "neuron:2"
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(dev)
    before = torch.accelerator.memory_allocated(dev)
    assert before == torch.neuron.memory_allocated(dev)
    x = torch.empty(256, device=dev)
    assert torch.accelerator.memory_allocated(dev) == before + 1024
    assert torch.accelerator.max_memory_allocated(dev) >= before + 1024
    assert torch.accelerator.memory_stats(dev)["allocated_bytes.all.current"] == before + 1024
    del x
    assert torch.accelerator.memory_allocated(dev) == before
    with neuron_studio.device.subscribe() as sub:
        torch.accelerator.synchronize()
    assert [e.name for e in sub.drain()] == ["neuron::synchronize"]


def test_neuron_generator_draws_what_a_cpu_generator_draws() -> None:
    g = torch.Generator("neuron")
    assert g.device == torch.device("neuron", 0)
    g.manual_seed(4)
    a = torch.randn(5, device="neuron", generator=g)
    b = torch.randn(5, generator=torch.Generator().manual_seed(4))
    assert a.device.type == "neuron" and torch.equal(a.cpu(), b)
    state = g.get_state()
    c = torch.rand(3, device="neuron", generator=g)
    g.set_state(state)
    assert torch.equal(torch.rand(3, device="neuron", generator=g).cpu(), c.cpu())
    assert torch.Generator("neuron:1").device == torch.device("neuron", 1)
    cpu_gen = torch.randn(5, device="neuron", generator=torch.Generator().manual_seed(4))
    assert torch.equal(cpu_gen.cpu(), b)  # a CPU generator also serves neuron tensors
