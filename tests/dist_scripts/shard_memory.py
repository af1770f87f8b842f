"""One training step sharded over the ranks of a torchrun job, reporting each rank's allocator peak.

The memory forecast's sharding levers are checked against this (tests/test_memory_sharding.py): the same
model, batch and optimizer as tests/test_memory.py's single-process profile, sharded over the ranks:

  zero1  optimizer state: ZeroRedundancyOptimizer (AdamW), gradients averaged with all_reduce
  zero2  optimizer state and gradients: FSDP2 fully_shard(reshard_after_forward=False) on the units below
         (torch's documented equivalent of ZeRO-2 / FSDP1's SHARD_GRAD_OP: parameters are gathered once per
         step and stay gathered until their gradients are reduce-scattered)
  fsdp   parameters, gradients and optimizer state: FSDP2 fully_shard (reshard_after_forward=True) on the units
         below, then on the model

Environment: SHARD_MODE (zero1|zero2|fsdp), SHARD_MODEL (gpt|block), SHARD_UNITS (the module paths to wrap
with fully_shard before the model, comma-separated, relative to the model, e.g. "blocks.0,blocks.1"),
SHARD_OUT (a directory; each rank writes peak_r<rank>.json there: its peak over one steady-state step and,
from a profile of that step, the bytes by category at the peak and where the peak is). The script imports
neuron_studio itself (that registers the emulated `neuron` device in every rank).
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
from neuron_studio.profiler.capture import Capture  # noqa: E402
from tests.test_memory import MODELS  # noqa: E402  the models and batches of the single-process profiles

mode = os.environ["SHARD_MODE"]
out = Path(os.environ["SHARD_OUT"])
units = [u for u in os.environ.get("SHARD_UNITS", "").split(",") if u]

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
model, loss_fn = MODELS[os.environ.get("SHARD_MODEL", "gpt")]()
if mode == "zero1":
    from torch.distributed.optim import ZeroRedundancyOptimizer

    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)

    def sync() -> None:  # data parallel: average the gradients (what DDP does) without DDP's bucket buffers
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())
elif mode in ("zero2", "fsdp"):
    from torch.distributed.fsdp import fully_shard

    # fsdp: FSDP2's default (reshard after forward, except the root unit, whose parameters backward needs first)
    kw = {"reshard_after_forward": False} if mode == "zero2" else {}
    for path in units:
        fully_shard(model.get_submodule(path), **kw)
    fully_shard(model, **kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def sync() -> None:  # FSDP2 reduce-scatters the gradients itself
        pass
else:
    raise SystemExit(f"SHARD_MODE must be zero1, zero2 or fsdp, got {mode!r}")


def step() -> None:
    loss = loss_fn(model)
    loss.backward()
    sync()
    opt.step()
    opt.zero_grad()


step()  # warm-up: the optimizer state is allocated here
gc.collect()
torch.neuron.reset_peak_memory_stats()
base = torch.neuron.memory_allocated()
with Capture(host_events=False) as cap:
    step()
    cap.step()
peak = torch.neuron.max_memory_allocated()
at_peak = cap.profile.memory_peak()
report = {"rank": rank, "peak": peak, "base": base, "captured_peak": int(at_peak.attrs["peak_bytes"]),
          "by_category": {k: int(v) for k, v in at_peak.attrs["by_category"].items()},
          "where": {k: at_peak.attrs[k] for k in ("op", "module", "phase")}}
(out / f"peak_r{rank}.json").write_text(json.dumps(report))
dist.barrier()
dist.destroy_process_group()
