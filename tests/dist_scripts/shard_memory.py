"""One GPT training step sharded over the ranks of a torchrun job, reporting each rank's allocator peak.

The memory forecast's sharding levers (ZeRO-1, FSDP) are checked against this: the same model, batch and
optimizer as tests/test_memory.py's single-process profile, with the optimizer state (ZeRO-1:
ZeroRedundancyOptimizer) or parameters, gradients and optimizer state (FSDP2: fully_shard on each block,
then on the model) sharded over the ranks. Environment: SHARD_MODE (zero1|fsdp), SHARD_OUT (a directory;
each rank writes peak_r<rank>.json there). The script imports neuron_studio itself (that registers the
emulated `neuron` device in every rank).

Only zero1 is asserted on (tests/test_memory.py). The fsdp mode runs, but the emulator's allocator does not
yet see FSDP2 freeing an unsharded parameter by resizing its storage to 0 (it keeps counting the full
parameter), so its reported peak overstates what FSDP2 holds; it is here to reproduce that.
"""
import gc
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import neuron_studio  # noqa: E402,F401  registers the neuron device
from tests.models.gpt import GPT, lm_loss  # noqa: E402

mode = os.environ["SHARD_MODE"]
out = Path(os.environ["SHARD_OUT"])

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = GPT(vocab=512, d=64, heads=4, layers=4, seq=64).to("neuron")
idx = torch.randint(0, 512, (8, 64)).to("neuron")
tgt = torch.randint(0, 512, (8, 64)).to("neuron")
if mode == "zero1":
    from torch.distributed.optim import ZeroRedundancyOptimizer

    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    # data parallel: average the gradients (what DDP would do) without DDP's bucket buffers
    def sync() -> None:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())
elif mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def sync() -> None:
        pass
else:
    raise SystemExit(f"SHARD_MODE must be zero1 or fsdp, got {mode!r}")


def step() -> None:
    loss = lm_loss(model, idx, tgt)
    loss.backward()
    sync()
    opt.step()
    opt.zero_grad()


step()  # warm-up: the optimizer state is allocated here
gc.collect()
torch.neuron.reset_peak_memory_stats()
base = torch.neuron.memory_allocated()
step()
peak = torch.neuron.max_memory_allocated()
(out / f"peak_r{rank}.json").write_text(json.dumps({"rank": rank, "peak": peak, "base": base}))
dist.barrier()
dist.destroy_process_group()
