"""A CUDA-style DDP script with `neuron` for `cuda`: set_device(local_rank), tensors on f"neuron:{local_rank}",
init_process_group() with no backend. DIST_DEVICE=cpu runs the same steps on CPU with gloo (the reference).
Writes rank 0's parameters, gradients and an all-reduced tensor to DIST_OUT."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

if os.environ.get("DIST_DEVICE", "neuron") == "neuron":
    import neuron_studio  # noqa: F401

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local_rank)
    dist.init_process_group()
    device = torch.device(f"neuron:{local_rank}")
    assert torch.empty(1, device="neuron").device == device
else:
    dist.init_process_group("gloo")
    device = torch.device("cpu")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 4)).to(device)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(3):
    gen = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(4, 8, generator=gen).to(device)
    opt.zero_grad()
    ddp(x).square().mean().backward()
    opt.step()
t = torch.full((3,), float(rank + 1), device=device)
dist.all_reduce(t)
torch.accelerator.synchronize() if device.type == "neuron" else None
if rank == 0:
    out = {f"param.{k}": v.detach().cpu() for k, v in model.state_dict().items()}
    out.update({f"grad.{k}": p.grad.cpu() for k, p in model.named_parameters()})
    out["all_reduced"] = t.cpu()
    torch.save(out, os.environ["DIST_OUT"])
dist.destroy_process_group()
