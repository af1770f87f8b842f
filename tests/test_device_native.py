"""The native (C++ PrivateUse1) `neuron` device: the PyTorch idioms that need a real device, each compared with
plain CPU PyTorch bit for bit (torch.load map_location, backward on neuron:1, CUDA-style torchrun scripts,
init_process_group() without a backend, the CPU kernels of silu/mish backward, storages on the device)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import neuron_studio

pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator behaviour")

SCRIPT = Path(__file__).parent / "dist_scripts" / "cuda_style.py"
JOB_TIMEOUT_S = 150


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


# -- torch.load(map_location=...) -----------------------------------------------------------------------
_LOCATIONS = {
    "neuron": ("neuron", 0),
    "neuron:0": ("neuron:0", 0),
    "neuron:1": ("neuron:1", 1),
    "device": (torch.device("neuron", 2), 2),
    "dict": ({"cpu": "neuron"}, 0),
    "dict_index": ({"cpu": "neuron:3"}, 3),
    "callable": (lambda storage, loc: storage.neuron(1), 1),
}


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("where", list(_LOCATIONS))
def test_torch_load_cpu_checkpoint_onto_neuron(tmp_path: Path, where: str, weights_only: bool) -> None:
    location, index = _LOCATIONS[where]
    sd = _mlp().state_dict()
    path = tmp_path / "ck.pt"
    torch.save({"model": sd, "step": 3}, path)
    got = torch.load(path, map_location=location, weights_only=weights_only)
    assert got["step"] == 3
    for k, v in sd.items():
        assert got["model"][k].device == torch.device("neuron", index), k
        assert torch.equal(got["model"][k].cpu(), v), k
    model = _mlp().to("neuron")
    model.load_state_dict(got["model"])
    x = torch.randn(2, 8)
    assert torch.equal(model(x.to("neuron")).cpu(), _mlp()(x))


def test_neuron_checkpoint_loads_back_anywhere(tmp_path: Path) -> None:
    model = _mlp().to("neuron:1")
    path = tmp_path / "ck.pt"
    torch.save(model, path)
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    whole = torch.load(path, weights_only=False)
    assert next(whole.parameters()).device == torch.device("neuron", 1)
    sd = torch.load(tmp_path / "sd.pt", weights_only=True)
    assert all(v.device == torch.device("neuron", 1) for v in sd.values())
    on_cpu = torch.load(tmp_path / "sd.pt", map_location="cpu", weights_only=True)
    assert all(v.device.type == "cpu" for v in on_cpu.values())
    moved = torch.load(tmp_path / "sd.pt", map_location={"neuron:1": "neuron:2"}, weights_only=True)
    assert all(v.device == torch.device("neuron", 2) for v in moved.values())
    for k, v in _mlp().state_dict().items():
        assert torch.equal(on_cpu[k], v) and torch.equal(moved[k].cpu(), v)
    buf = io.BytesIO()
    torch.save(torch.arange(6.0, device="neuron")[2:], buf)  # a view: its whole storage is saved
    buf.seek(0)
    view = torch.load(buf, weights_only=True)
    assert view.device.type == "neuron" and view.tolist() == [2.0, 3.0, 4.0, 5.0]


# -- autograd on every device ---------------------------------------------------------------------------
def _grads_on(device: str) -> list[torch.Tensor]:
    m = _mlp().to(device)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5)).to(device)
    F.mse_loss(m(x), torch.zeros(3, 4, device=device)).backward()
    assert all(p.grad.device == torch.device(device) for p in m.parameters())
    return [p.grad.cpu() for p in m.parameters()]


def test_backward_on_neuron_1_and_after_set_device() -> None:
    expected = _grads_on("cpu")
    for got in (_grads_on("neuron:1"), _grads_on("neuron:3")):
        assert all(torch.equal(g, e) for g, e in zip(got, expected))
    torch.neuron.set_device(1)
    try:
        m = _mlp().to("neuron")
        assert next(m.parameters()).device == torch.device("neuron", 1)
        x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5)).to("neuron")
        F.mse_loss(m(x), torch.zeros(3, 4, device="neuron")).backward()
        assert all(torch.equal(p.grad.cpu(), e) for p, e in zip(m.parameters(), expected))
    finally:
        torch.neuron.set_device(0)



def _backward_thread(device: str) -> tuple[int, list[torch.Tensor]]:
    """The thread autograd ran the backward of a small MLP on `device` in, and the gradients."""
    seen: list[int] = []
    m = _mlp().to(device)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5)).to(device)
    x.requires_grad_(True)
    x.register_hook(lambda g: seen.append(threading.get_ident()))
    F.mse_loss(m(x), torch.zeros(3, 4, device=device)).backward()
    return seen[0], [p.grad.cpu() for p in m.parameters()]


def test_backward_runs_on_the_calling_thread_as_on_cpu() -> None:
    """A second OpenMP pool on autograd's device thread slows every CPU kernel in the process (NeuronRuntime.cpp):
    the device's backward runs on the thread that calls it, in the main thread and in any other thread that runs
    neuron ops, with CPU's gradients; a program that turns autograd's device threads back on is obeyed."""
    expected = _grads_on("cpu")
    here, grads = _backward_thread("neuron")
    assert here == threading.get_ident()
    assert all(torch.equal(g, e) for g, e in zip(grads, expected))
    assert not torch.autograd.is_multithreading_enabled()

    out: dict[str, object] = {}

    def worker() -> None:
        out["caller"] = threading.get_ident()
        out["ran"], out["grads"] = _backward_thread("neuron")

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out["ran"] == out["caller"]
    assert all(torch.equal(g, e) for g, e in zip(out["grads"], expected))

    with torch.autograd.set_multithreading_enabled(True):
        ran, grads = _backward_thread("neuron")
    assert ran != threading.get_ident()   # autograd's device thread, as the program asked
    assert all(torch.equal(g, e) for g, e in zip(grads, expected))
    assert not torch.autograd.is_multithreading_enabled()

# -- the CPU kernels, not torch's decompositions -------------------------------------------------------
@pytest.mark.parametrize("act", ["silu", "mish"])
def test_activation_backward_runs_cpus_kernel_bit_for_bit(act: str) -> None:
    x = torch.randn(64, 33, dtype=torch.float32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    xn = x.detach().to("neuron").requires_grad_()
    fn = getattr(F, act)
    fn(x).pow(2).sum().backward()
    with neuron_studio.device.subscribe() as sub:
        fn(xn).pow(2).sum().backward()
    assert torch.equal(xn.grad.cpu(), x.grad)
    assert f"aten::{act}_backward" in [e.name for e in sub.drain()]  # one op, as on CPU


def test_swiglu_training_equals_cpu_bit_for_bit() -> None:
    class SwiGLU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate, self.up, self.down = nn.Linear(16, 32), nn.Linear(16, 32), nn.Linear(32, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(F.silu(self.gate(x)) * self.up(x))

    params = {}
    for dev in ("cpu", "neuron"):
        torch.manual_seed(0)
        m = SwiGLU().to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for step in range(3):
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step)).to(dev)
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
        params[dev] = [p.detach().cpu() for p in m.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(params["cpu"], params["neuron"]))


# -- torch.compile on the device -------------------------------------------------------------------------
def _metadata_mutation(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.unsqueeze_(0)      # an in-place view op: functionalization replays it on the traced tensor's wrapper
    y.transpose_(1, 2)
    return y + 1


@pytest.mark.parametrize("fn", [_metadata_mutation,
                                lambda x: torch.quantile(x, torch.tensor([0.25, 0.5], device=x.device), dim=0),
                                lambda x: torch.histc(x, bins=4)],
                         ids=["inplace_view", "quantile", "histc"])
def test_compiled_graph_with_metadata_mutations_equals_cpu(fn) -> None:  # noqa: ANN001
    """Tracing replays metadata-only ops (unsqueeze_, as_strided_) on tensors without bytes; they run on the device
    as on CPU, and the compiled result equals CPU eager."""
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", dynamic=False)(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), fn(x))


# -- torch.distributed ------------------------------------------------------------------------------------
def test_init_process_group_without_a_backend(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group(init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        t = torch.arange(4.0, device="neuron")
        dist.all_reduce(t)
        out = torch.empty(4, device="neuron")
        dist.all_gather_into_tensor(out, t)
        dist.barrier()
        assert torch.equal(out.cpu(), torch.arange(4.0)) and t.device.type == "neuron"
    finally:
        dist.destroy_process_group()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


@pytest.mark.slow
def test_cuda_style_torchrun_script_two_ranks_equals_cpu(tmp_path: Path) -> None:
    results = {}
    for device in ("cpu", "neuron"):
        out = tmp_path / f"{device}.pt"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(SCRIPT)]
        r = subprocess.run(cmd, env=_env(DIST_DEVICE=device, DIST_OUT=str(out)), capture_output=True, text=True,
                           timeout=JOB_TIMEOUT_S)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
        results[device] = torch.load(out)
    assert results["cpu"].keys() == results["neuron"].keys()
    for k in results["cpu"]:
        torch.testing.assert_close(results["neuron"][k], results["cpu"][k], rtol=0, atol=0, msg=k)
    assert results["neuron"]["all_reduced"].tolist() == [3.0, 3.0, 3.0]
