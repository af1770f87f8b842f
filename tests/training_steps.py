"""The small training step the what-if and step-breakdown tests profile: a seeded MLP on `neuron` trained with
AdamW on one fixed batch (shared so that both suites test the same run)."""
from __future__ import annotations

from typing import Callable

import torch

from neuron_studio.profiler.capture import profile

__all__ = ["mlp_training_step", "profile_mlp"]


def mlp_training_step(dropout: float | None = None, *, item: bool = False) -> Callable[[], None]:
    """One AdamW step of Linear(64, 128) [-> Dropout(dropout)] -> GELU -> Linear(128, 64) on a (8, 64) batch;
    `item`: read the loss back to the host at the end of the step (a sync point)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 128)] + ([torch.nn.Dropout(dropout)] if dropout is not None else []) \
        + [torch.nn.GELU(), torch.nn.Linear(128, 64)]
    model = torch.nn.Sequential(*layers).to("neuron")
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 64, device="neuron")

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if item:
            loss.item()

    return step


def profile_mlp(mode: str = "eager", *, steps: int = 2, dropout: float | None = None, item: bool = False):  # noqa: ANN201
    """The step above profiled on trn2 with one warm-up step."""
    return profile(mlp_training_step(dropout, item=item), steps=steps, warmup=1, mode=mode, chip="trn2")
