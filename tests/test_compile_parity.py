"""torch.compile on `neuron` tensors gives CPU eager's results: in-place writes, the parity models, a Mamba scan.

Compiled graphs may decompose and reorder ops (AOTAutograd), so results are compared with
`assert_close`'s float32 tolerances, against plain CPU eager. The OpInfo sweep under compile is in
tests/test_compile_opinfo.py.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import neuron_studio
from tests.models.blocks import PreNormBlock
from tests.models.selective_scan import SelectiveScanModel
from tests.test_device_parity import CNN, MLP, EmbedLSTM, NormMLP

pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator runs CPU kernels")


@pytest.fixture(autouse=True)
def _fresh_dynamo():  # noqa: ANN202
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _write_column(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(2, 2, device=x.device)
    out[:, 0] = x[:, 0] * 2
    return out


@pytest.mark.parametrize("backend", ["neuron", "aot_eager"])
def test_inplace_write_into_tensor_created_in_graph(backend: str) -> None:
    got = torch.compile(_write_column, backend=backend)(torch.ones(2, 2, device="neuron"))
    assert got.device.type == "neuron"
    assert torch.equal(got.cpu(), _write_column(torch.ones(2, 2))), got


def _fill_by_ops(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Writes of every kind into tensors made inside the graph: out=, in-place ops, index_put_, views."""
    a = torch.empty(3, 4, device=x.device)
    torch.mul(x, 3, out=a)
    b = torch.zeros(3, 4, device=x.device)
    b.add_(x).mul_(2)
    b[1] += x[0]
    c = torch.ones(4, 3, device=x.device)
    c.t()[:, 1:].copy_(x[:, 1:] - 1)
    c[torch.tensor([0, 2], device=x.device)] = 5.0
    return a, b, c


def test_every_kind_of_write_into_graph_tensors() -> None:
    x = torch.randn(3, 4)
    expected = _fill_by_ops(x)
    got = torch.compile(_fill_by_ops, backend="neuron")(x.to("neuron"))
    for e, g in zip(expected, got):
        assert g.device.type == "neuron"
        assert torch.equal(g.cpu(), e)


def test_selective_scan_compiled_matches_cpu_and_records_its_ops() -> None:
    torch.manual_seed(0)
    cpu = SelectiveScanModel()
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(2, 16, 8)
    expected = cpu(x)
    compiled = torch.compile(dev, backend="neuron")
    compiled(x.to("neuron"))  # compile outside the recording
    with neuron_studio.device.subscribe() as sub:
        got = compiled(x.to("neuron"))
        events = sub.drain()
    torch.testing.assert_close(got.cpu(), expected)
    in_graph = [e for e in events if e.graph >= 0]
    # one step of the scan is at least a multiply, an add and the write of its output: 3 ops per step
    assert len(in_graph) >= 3 * x.shape[1], f"the compiled graph recorded only {len(in_graph)} ops"


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 12, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(x)[0]


_MODELS = {
    "mlp": (MLP, lambda: torch.randn(16, 32), True),
    "cnn_eval": (CNN, lambda: torch.randn(4, 3, 16, 16), False),
    "cnn_train": (CNN, lambda: torch.randn(4, 3, 16, 16), True),
    "transformer_block": (PreNormBlock, lambda: torch.randn(2, 12, 32), True),
    "norm_mlp": (NormMLP, lambda: torch.randn(2, 12, 32), True),
    "embedding_lstm": (EmbedLSTM, lambda: torch.randint(0, 50, (3, 7)), True),
    "gru": (GRUNet, lambda: torch.randn(2, 5, 8), True),
    "selective_scan": (SelectiveScanModel, lambda: torch.randn(2, 16, 8), True),
}


@pytest.mark.slow  # ~8 s of compiling per model
@pytest.mark.parametrize("name", list(_MODELS))
def test_parity_model_compiled_on_neuron_matches_cpu_eager(name: str) -> None:
    """Forward, loss and every gradient of the compiled model on neuron equal the CPU eager model's."""
    factory, make_input, train = _MODELS[name]
    torch.manual_seed(0)
    cpu = factory()
    dev = copy.deepcopy(cpu).to("neuron")
    cpu.train(train)
    dev.train(train)
    torch.manual_seed(1)
    x = make_input()
    torch.manual_seed(2)
    out = cpu(x)
    loss = out.float().square().mean()
    loss.backward()
    compiled = torch.compile(dev, backend="neuron")
    torch.manual_seed(2)  # dropout draws from the CPU generator on both devices
    out_d = compiled(x.to("neuron"))
    loss_d = out_d.float().square().mean()
    loss_d.backward()
    assert out_d.device.type == "neuron"
    torch.testing.assert_close(out_d.detach().cpu(), out.detach(), msg=lambda m: f"{name} output: {m}")
    torch.testing.assert_close(loss_d.detach().cpu(), loss.detach())
    for (pname, p), pd in zip(cpu.named_parameters(), dev.parameters()):
        assert pd.grad is not None and pd.grad.device.type == "neuron", f"{name}: no neuron grad for {pname}"
        torch.testing.assert_close(pd.grad.cpu(), p.grad, msg=lambda m, pname=pname: f"{name} grad {pname}: {m}")
    for (bname, b), bd in zip(cpu.named_buffers(), dev.buffers()):
        torch.testing.assert_close(bd.cpu(), b, msg=lambda m, bname=bname: f"{name} buffer {bname}: {m}")

