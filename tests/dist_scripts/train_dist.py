"""A small data-parallel training job for the distributed tests, launched with torchrun.

Environment: DIST_DEVICE (cpu|neuron), DIST_MODE (ddp|fsdp), DIST_STEPS, DIST_OUT (where rank 0 saves
the final parameters), DIST_SLOW_RANK / DIST_SLOW_S (that rank sleeps before backward: a straggler).
Under `neuron-studio run` the studio is already active; the script itself never imports it.
"""
import os
import time

import torch
import torch.distributed as dist
from torch import nn

device_type = os.environ.get("DIST_DEVICE", "cpu")
mode = os.environ.get("DIST_MODE", "ddp")
steps = int(os.environ.get("DIST_STEPS", "3"))
slow_rank = int(os.environ.get("DIST_SLOW_RANK", "-1"))
slow_s = float(os.environ.get("DIST_SLOW_S", "0"))

dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", "0"))
# one process per (emulated) NeuronCore: each rank uses its process's device 0
device = torch.device(device_type)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).to(device)
if mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
else:
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

g = torch.Generator().manual_seed(1234 + rank)
for step in range(steps):
    x = torch.randn(8, 16, generator=g).to(device)
    y = torch.randn(8, 8, generator=g).to(device)
    loss = ((model(x) - y) ** 2).mean()
    if rank == slow_rank:
        time.sleep(slow_s)
    loss.backward()
    opt.step()
    opt.zero_grad()

if mode == "fsdp":
    state = {k: v.full_tensor().detach().cpu() for k, v in model.state_dict().items()}
else:
    state = {k: v.detach().cpu() for k, v in model.module.state_dict().items()}
out = os.environ.get("DIST_OUT")
if out and rank == 0:
    torch.save(state, out)
dist.barrier()
dist.destroy_process_group()
