"""Model parity: outputs, gradients and parameters on `neuron` equal plain CPU, bit for bit.

The emulator runs the very CPU kernels on the same data, so torch.equal is the right check everywhere
here; the one place a tolerance would be needed is said where it is used.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import neuron_studio
from tests.models.blocks import PreNormBlock

pytestmark = pytest.mark.skipif(neuron_studio.device.backend() != "emulated", reason="emulator runs CPU kernels")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(16 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(x.flatten(1)))


Block = PreNormBlock  # d=32, heads=4 by default


class NormMLP(nn.Module):
    """The transformer block's LayerNorm + GELU MLP residual path."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln(x))


class EmbedLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.head = nn.Linear(24, 50)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.emb(tokens))
        return self.head(out)


def _pair(factory) -> tuple[nn.Module, nn.Module]:  # noqa: ANN001
    torch.manual_seed(0)
    cpu = factory()
    return cpu, copy.deepcopy(cpu).to("neuron")


# Where the emulator cannot run the very kernel CPU runs, and so needs a tolerance:
RNN_REASON = (
    "ATen's LSTM takes CUDA's fused-cell path on any non-CPU device (bias-free matmuls, then the fused gate "
    "kernel adds the biases) while CPU uses addmm with the bias: same math, different rounding"
)


def _assert_same(cpu: torch.Tensor, dev: torch.Tensor, what: str, tolerance: str | None = None) -> None:
    assert dev.device.type == "neuron", f"{what} is on {dev.device}"
    assert dev.dtype == cpu.dtype, f"{what}: dtype {dev.dtype} vs {cpu.dtype}"
    if tolerance is not None:  # float32 defaults: rtol 1.3e-6, atol 1e-5
        torch.testing.assert_close(dev.detach().cpu(), cpu.detach(), msg=lambda m: f"{what}: {m} ({tolerance})")
        return
    assert torch.equal(dev.detach().cpu(), cpu.detach()), (
        f"{what} differs: max abs diff {(dev.detach().cpu().float() - cpu.detach().float()).abs().max()}"
    )


def _check_forward_backward(factory, inputs: torch.Tensor, loss_fn, train: bool, tolerance: str | None = None) -> None:  # noqa: ANN001, E501
    cpu, dev = _pair(factory)
    cpu.train(train)
    dev.train(train)
    torch.manual_seed(1)
    out = cpu(inputs)
    loss = loss_fn(out)
    loss.backward()
    torch.manual_seed(1)
    out_d = dev(inputs.to("neuron"))
    loss_d = loss_fn(out_d)
    loss_d.backward()
    _assert_same(out, out_d, "output", tolerance)
    _assert_same(loss, loss_d, "loss", tolerance)
    for (name, p), pd in zip(cpu.named_parameters(), dev.parameters()):
        _assert_same(p.grad, pd.grad, f"grad of {name}", tolerance)
    for (name, b), bd in zip(cpu.named_buffers(), dev.buffers()):
        _assert_same(b, bd, f"buffer {name}", tolerance)


def test_mlp() -> None:
    torch.manual_seed(2)
    _check_forward_backward(MLP, torch.randn(16, 32), lambda y: y.logsumexp(-1).mean(), train=True)


def test_cnn_eval() -> None:
    torch.manual_seed(3)
    _check_forward_backward(CNN, torch.randn(4, 3, 16, 16), lambda y: y.square().mean(), train=False)


def test_cnn_train_mode_batchnorm_and_dropout() -> None:
    # Dropout draws from the CPU generator on both devices: the same seed gives the same mask.
    torch.manual_seed(3)
    _check_forward_backward(CNN, torch.randn(4, 3, 16, 16), lambda y: y.square().mean(), train=True)


def test_transformer_block_sdpa() -> None:
    torch.manual_seed(4)
    _check_forward_backward(Block, torch.randn(2, 12, 32), lambda y: y.pow(2).mean(), train=True)  # SDPA runs CPU's flash kernel: exact


def test_transformer_block_without_attention_kernel_is_exact() -> None:
    """Everything in the block but the fused attention kernel: bit-identical."""
    torch.manual_seed(4)
    _check_forward_backward(NormMLP, torch.randn(2, 12, 32), lambda y: y.pow(2).mean(), train=True)


def test_embedding_lstm() -> None:
    torch.manual_seed(5)
    tokens = torch.randint(0, 50, (3, 7))
    _check_forward_backward(
        EmbedLSTM, tokens, lambda y: F.cross_entropy(y.flatten(0, 1), tokens.to(y.device).flatten()), train=True,
        tolerance=RNN_REASON,
    )


def test_gru_runs_and_matches() -> None:
    torch.manual_seed(5)
    class GRU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 12, num_layers=2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gru(x)[0]

    _check_forward_backward(GRU, torch.randn(2, 5, 8), lambda y: y.square().mean(), train=True,
                            tolerance=RNN_REASON.replace("LSTM", "GRU"))


def test_adamw_training_loop_bf16_autocast() -> None:
    """5 AdamW steps under bf16 autocast. The CPU reference uses CPU autocast; for the ops in this model
    (linear -> bf16; layer_norm, mse_loss -> fp32) the emulator's neuron autocast lists (CUDA's) and
    CPU's agree, so every cast and every kernel is the same and the results are bit-identical.
    """
    cpu, dev = _pair(NormMLP)
    opt = torch.optim.AdamW(cpu.parameters(), lr=1e-2, weight_decay=0.1)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-2, weight_decay=0.1)
    torch.manual_seed(6)
    batches = [(torch.randn(2, 12, 32), torch.randn(2, 12, 32)) for _ in range(5)]
    for step, (x, y) in enumerate(batches):
        opt.zero_grad()
        opt_d.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = cpu(x)
            loss = F.mse_loss(out.float(), y)
        with torch.autocast("neuron", dtype=torch.bfloat16):
            out_d = dev(x.to("neuron"))
            loss_d = F.mse_loss(out_d.float(), y.to("neuron"))
        _assert_same(out, out_d, f"step {step} output")
        _assert_same(loss, loss_d, f"step {step} loss")
        loss.backward()
        loss_d.backward()
        opt.step()
        opt_d.step()
    for (name, p), pd in zip(cpu.named_parameters(), dev.parameters()):
        _assert_same(p, pd, f"parameter {name} after 5 steps")
    for st, st_d in zip(opt.state.values(), opt_d.state.values()):
        _assert_same(st["exp_avg_sq"], st_d["exp_avg_sq"], "AdamW exp_avg_sq")
