"""A Mamba-style selective scan: a sequential state-space recurrence written with in-place writes.

The output buffer is made with `torch.empty` inside the model and filled one time step at a time, the
pattern that a compiled graph must keep (a dropped write leaves uninitialised memory in the output).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def selective_scan(u: torch.Tensor, delta: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                   c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """u, delta: (batch, length, dim); a: (dim, state); b, c: (batch, length, state); d: (dim,)."""
    batch, length, dim = u.shape
    delta_a = torch.exp(delta.unsqueeze(-1) * a)                    # (batch, length, dim, state)
    delta_b_u = delta.unsqueeze(-1) * b.unsqueeze(2) * u.unsqueeze(-1)
    state = torch.zeros(batch, dim, a.shape[1], device=u.device, dtype=u.dtype)
    ys = torch.empty(batch, length, dim, device=u.device, dtype=u.dtype)
    for i in range(length):
        state = delta_a[:, i] * state + delta_b_u[:, i]
        ys[:, i] = (state * c[:, i].unsqueeze(1)).sum(-1)
    return ys + u * d


class SelectiveScanModel(nn.Module):
    def __init__(self, dim: int = 8, state: int = 4) -> None:
        super().__init__()
        self.in_proj = nn.Linear(dim, dim)
        self.delta_proj = nn.Linear(dim, dim)
        self.bc_proj = nn.Linear(dim, 2 * state)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, state + 1, dtype=torch.float32)).repeat(dim, 1))
        self.d = nn.Parameter(torch.ones(dim))
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = F.silu(self.in_proj(x))
        delta = F.softplus(self.delta_proj(x))
        b, c = self.bc_proj(x).chunk(2, dim=-1)
        return self.out_proj(selective_scan(u, delta, -torch.exp(self.a_log), b, c, self.d))
