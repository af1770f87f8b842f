"""Held-out check (never fitted): AWS's SD attention kernel and its CI latency thresholds, against the model.

    python benchmarks/bench_heldout_attention.py --nki-samples PATH [--chip trn2] [--seq 4096]

PATH is a git directory or work tree of aws-neuron/nki-samples with history: the kernel
(`fused_self_attn_for_SD_small_head_size`, removed from the repository in c4b806e) is read from the commit before
that removal and checked against its git blob id, then loaded unmodified with `kernels.load_kernel` (nothing is
shipped). The thresholds are `test/unit/test_SD_attention_small_head.py` @87846b2: 1 x 4096 x 128, non-causal,
536 us bf16 / 675 us fp32 (the CI's p1 latency must stay below them; no instance type is named), so a ratio above
1 is an upper-bound miss. Also printed: the studio's own flash_attention_kernel at the same shape, and the op-level
model of `scaled_dot_product_attention` (two-core logical NeuronCore, eager), which is not like-for-like.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from neuron_studio import kernels as K

COMMIT = "8370e11ba8d894be5e3c687c0772e7e1e889de4c"  # nki-samples, the commit before c4b806e removed the reference kernels
BLOB = "f7a608fcac01711ec6a480ad7c4b5d905c5f236c"    # git blob id of attention.py at that commit
PATH = "src/nki_samples/reference/attention.py"
THRESHOLD_US = {"bfloat16": 536.0, "float32": 675.0}


def kernel_source(repo: str) -> str:
    git = ["git", "--git-dir", repo] if os.path.isfile(os.path.join(repo, "HEAD")) else ["git", "-C", repo]
    try:
        blob = subprocess.run([*git, "rev-parse", f"{COMMIT}:{PATH}"], check=True, capture_output=True,
                              text=True).stdout.strip()
        if blob != BLOB:
            sys.exit(f"{repo}: {PATH} at {COMMIT[:12]} is blob {blob[:12]}, not the published {BLOB[:12]}")
        return subprocess.run([*git, "show", f"{COMMIT}:{PATH}"], check=True, capture_output=True,
                              text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"cannot read {PATH} at {COMMIT[:12]} from {repo}: {exc}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nki-samples", required=True, metavar="PATH")
    ap.add_argument("--chip", default="trn2")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--dtype", nargs="*", default=["bfloat16", "float32"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "attention.py"
        path.write_text(kernel_source(args.nki_samples))
        sd = K.load_kernel(path, "fused_self_attn_for_SD_small_head_size")
        print(f"{'kernel':<28} {'dtype':<9} {'modeled':>10} {'threshold':>10} {'ratio':>6} {'max err':>8} {'wall':>6}")
        for dname in args.dtype:
            dt = getattr(torch, dname)
            g = torch.Generator().manual_seed(0)
            q = torch.rand(1, 128, args.seq, generator=g).to(dt)
            k, v = (torch.rand(1, args.seq, 128, generator=g).to(dt) for _ in range(2))
            ref = torch.softmax(q.float().transpose(1, 2) * 0.125 @ k.float().transpose(1, 2), -1) @ v.float()
            t0 = time.process_time()
            out, trace = K.run(sd[1], q, k, v, chip=args.chip)
            ns = K.kernel_time(trace, args.chip).total_ns
            err = float((out.float() - ref).abs().max())
            lim = THRESHOLD_US[dname] if args.seq == 4096 else float("nan")
            print(f"{'SD attention (AWS)':<28} {dname:<9} {ns / 1e3:>8.0f}us {lim:>8.0f}us {ns / 1e3 / lim:>6.2f} "
                  f"{err:>8.3g} {time.process_time() - t0:>5.0f}s")
            t0 = time.process_time()
            qs = q.transpose(1, 2).contiguous()
            _, ftrace = K.run(K.flash_attention_kernel, qs, k, v, softmax_scale=0.125, causal=False, chip=args.chip)
            ns = K.kernel_time(ftrace, args.chip).total_ns
            print(f"{'flash_attention_kernel':<28} {dname:<9} {ns / 1e3:>8.0f}us {lim:>8.0f}us {ns / 1e3 / lim:>6.2f} "
                  f"{'':>8} {time.process_time() - t0:>5.0f}s")


if __name__ == "__main__":
    main()
