"""torch.distributed on the emulated neuron device (gloo underneath), and the multi-rank analysis.

The torchrun jobs are small (a 2-layer MLP, 3 steps) and bounded by subprocess timeouts: on a 2-core
machine each job takes ~10-25 s, most of it interpreter and torch start-up per rank.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from neuron_studio.profiler.analysis.ranks import analyze_ranks, find_straggler
from neuron_studio.profiler.trace import OPS_COLUMNS, Trace
from neuron_studio.store import RunStore

SCRIPT = Path(__file__).parent / "dist_scripts" / "train_dist.py"
JOB_TIMEOUT_S = 150


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _torchrun(n: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", str(SCRIPT)]


def _cpu_reference(tmp_path: Path, n: int, mode: str) -> dict[str, torch.Tensor]:
    out = tmp_path / f"cpu_{mode}_{n}.pt"
    r = subprocess.run(_torchrun(n), env=_env(DIST_DEVICE="cpu", DIST_MODE=mode, DIST_OUT=str(out)),
                       capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-3000:]
    return torch.load(out)


def _studio_job(tmp_path: Path, n: int, mode: str, slow_rank: int = -1) -> tuple[dict, RunStore, int, str]:
    out = tmp_path / f"neuron_{mode}_{n}.pt"
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "neuron_studio.cli", "run", "--quiet", "--store", str(store), "--warmup", "1",
           "--", *_torchrun(n)]
    env = _env(DIST_DEVICE="neuron", DIST_MODE=mode, DIST_OUT=str(out), DIST_SLOW_RANK=str(slow_rank),
               DIST_SLOW_S="0.3")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    st = RunStore(store)
    run_id = st.list_runs()[0].id
    return torch.load(out), st, run_id, r.stdout


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def _check_ranks(st: RunStore, run_id: int, n: int) -> dict:
    rec = st.get_run(run_id)
    assert rec.ranks == n and rec.status == "ok"
    tables = set(st.list_tables(run_id))
    for r in range(n):
        assert {f"ops_r{r}", f"meta_r{r}", f"device_ops_r{r}"} <= tables
        ops = st.load_table(run_id, f"ops_r{r}").to_pandas()
        assert ops["name"].str.startswith("c10d::").any(), f"rank {r} recorded no collective"
        meta = json.loads(st.load_table(run_id, f"meta_r{r}").to_pandas()["json"].iloc[0])
        assert meta["rank"] == r and meta["world_size"] == n
    assert "ops" in tables  # rank 0's copy for single-run tools
    return rec.summary["ranks_analysis"]


@pytest.mark.slow
def test_ddp_two_ranks_parity_and_straggler(tmp_path: Path) -> None:
    ref = _cpu_reference(tmp_path, 2, "ddp")
    got, st, run_id, stdout = _studio_job(tmp_path, 2, "ddp", slow_rank=1)
    _assert_same(ref, got)
    block = _check_ranks(st, run_id, 2)
    s = block["straggler"]
    assert s is not None and s["rank"] == 1 and s["op"] == "c10d::allreduce_"
    assert s["steps"] == 2 and s["caused_wait_ns"] > 0.2e9 * 2  # two recorded steps, 0.3 s sleep each
    assert s["wait_per_step_ns"] == s["caused_wait_ns"] / 2 and s["wait_per_step_ns"] > 0.2e9
    assert block["steps"]["per_step"] == 2
    # each profiled step holds rank 1's 0.3 s sleep (rank 0 waits it out); the ops after the last step mark
    # (saving the parameters) are no step and are not averaged in
    assert all(r["step_time_ns"] > 0.3e9 and r["steps"] == 2 for r in block["ranks"])
    assert block["slowest_collective"]["last_rank"] == 1
    assert "straggler: rank 1" in stdout


@pytest.mark.slow
def test_ddp_four_ranks_parity(tmp_path: Path) -> None:
    ref = _cpu_reference(tmp_path, 4, "ddp")
    got, st, run_id, _ = _studio_job(tmp_path, 4, "ddp", slow_rank=2)
    _assert_same(ref, got)
    block = _check_ranks(st, run_id, 4)
    assert block["straggler"]["rank"] == 2


@pytest.mark.slow
def test_fsdp2_two_ranks_parity_and_straggler(tmp_path: Path) -> None:
    ref = _cpu_reference(tmp_path, 2, "fsdp")
    got, st, run_id, _ = _studio_job(tmp_path, 2, "fsdp", slow_rank=1)
    _assert_same(ref, got)
    block = _check_ranks(st, run_id, 2)
    ops = set(st.load_table(run_id, "ops_r0").to_pandas()["name"])
    assert {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_"} <= ops
    s = block["straggler"]
    assert s is not None and s["rank"] == 1 and s["op"].startswith("c10d::")


# -- in-process: collectives on neuron tensors with a one-rank gloo group ------------------------------
def test_single_rank_collectives_on_neuron_tensors(tmp_path: Path) -> None:
    import torch.distributed as dist

    from neuron_studio import device
    from neuron_studio.device.emulator import distributed

    assert distributed.install()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        with device.subscribe() as sub:
            t = torch.arange(4.0, device="neuron")
            dist.all_reduce(t)
            out = [torch.empty(4, device="neuron")]
            dist.all_gather(out, t)  # Tensor[][] arguments
            big = torch.empty(4, device="neuron")
            dist.all_gather_into_tensor(big, t)
            events = sub.drain()
        assert t.device.type == "neuron" and torch.equal(out[0].cpu(), torch.arange(4.0))
        assert torch.equal(big.cpu(), torch.arange(4.0))
        names = [e.name for e in events if e.name.startswith("c10d::")]
        assert names == ["c10d::allreduce_", "c10d::allgather_", "c10d::_allgather_base_"]
        assert dist.Backend.default_device_backend_map["neuron"] == "gloo"
        assert torch.neuron.current_stream() is not None  # FSDP2's stream API
    finally:
        dist.destroy_process_group()


def test_message_bytes_rules() -> None:
    from neuron_studio.device.emulator.distributed import message_bytes

    t = torch.zeros(8)  # 32 bytes
    assert message_bytes("c10d::allreduce_", ([t],)) == 32
    assert message_bytes("c10d::_allgather_base_", (torch.zeros(16), t)) == 64  # the gathered output
    assert message_bytes("c10d::_reduce_scatter_base_", (torch.zeros(4), t)) == 32  # the reduced input
    assert message_bytes("c10d::allgather_", ([[t, t]], [t])) == 64
    assert message_bytes("c10d::barrier", (t,)) == 0


# -- the analysis on synthetic traces (exact) ------------------------------------------------------------
def _trace(rank: int, start_wall_ns: int, rows: list[tuple[str, int, int, int]]) -> Trace:
    """rows: (name, start_ns, end_ns, step)."""
    n = len(rows)
    data = {c: np.zeros(n, dtype=dt) if dt not in ("object", "bool") else
            (np.zeros(n, dtype=bool) if dt == "bool" else np.array([""] * n, dtype=object))
            for c, dt in OPS_COLUMNS.items()}
    df = pd.DataFrame(data)
    df["seq"] = np.arange(1, n + 1)
    df["name"] = [r[0] for r in rows]
    df["start_ns"] = [r[1] for r in rows]
    df["end_ns"] = [r[2] for r in rows]
    df["step"] = [r[3] for r in rows]
    df["in_bytes"] = 1024.0
    df["out_bytes"] = 1024.0
    for c in ("sync", "transfer", "fallback", "source"):
        df[c] = None
    return Trace(ops=df, meta={"rank": rank, "start_wall_ns": start_wall_ns, "run_start_wall_ns": 1_000})


def test_straggler_and_slowest_collective_on_synthetic_ranks() -> None:
    ms = 1_000_000
    # rank 1 starts 1 ms later (aligned by start_wall_ns) and computes 5 ms longer before the 2nd allreduce
    r0 = _trace(0, 1_000, [("aten::mm", 0, 2 * ms, 0), ("c10d::allreduce_", 2 * ms, 2 * ms + 10, 0),
                           ("aten::mm", 3 * ms, 4 * ms, 1), ("c10d::allreduce_", 4 * ms, 4 * ms + 10, 1)])
    r1 = _trace(1, 1_000 + ms, [("aten::mm", 0, ms, 0), ("c10d::allreduce_", ms, ms + 10, 0),
                                ("aten::mm", 2 * ms, 8 * ms, 1), ("c10d::allreduce_", 8 * ms, 8 * ms + 10, 1)])
    ra = analyze_ranks([r0, r1])
    assert list(ra.ranks["rank"]) == [0, 1]
    c = ra.collectives
    # both arrive together at the first (2 ms on the common axis); rank 0 waits 5 ms at the second
    assert c.loc[(c["rank"] == 0) & (c["index"] == 1), "wait_ns"].item() == 5 * ms
    assert c.loc[(c["rank"] == 0) & (c["index"] == 0), "wait_ns"].item() == 0
    s = ra.straggler
    assert s is not None and s.rank == 1 and s.op == "c10d::allreduce_" and s.op_before == "aten::mm"
    assert s.caused_wait_ns == 5 * ms
    assert ra.slowest_collective["index"] == 1 and ra.slowest_collective["last_rank"] == 1
    assert find_straggler(c, steps=2, min_wait_per_step_ns=5 * ms) is None  # 2.5 ms per step: below it
    assert ra.to_summary()["straggler"]["rank"] == 1


def test_ranks_a_few_us_apart_at_every_collective_have_no_straggler() -> None:
    """300 collectives after 1 ms of compute each, rank 0 arriving up to 9 µs after rank 1 at most of them: its
    lateness adds up past 1 ms (the old rule named it the straggler) but is under 1% of the compute rank 1 did
    before those collectives: noise. Make rank 0 5% slower and it is the straggler again."""
    ms, us = 1_000_000, 1_000

    def job(late_ns):  # noqa: ANN001
        rows: dict[int, list] = {0: [], 1: []}
        t = {0: 0, 1: 0}
        for k in range(300):
            for r in (0, 1):
                extra = late_ns(k) if r == 0 else (2 * us if k % 4 == 0 else 0)
                rows[r].append(("aten::mm", t[r], t[r] + ms + extra, k // 10))
                t[r] += ms + extra
            arrive = max(t.values())
            for r in (0, 1):
                rows[r].append(("c10d::allreduce_", t[r], arrive + 10, k // 10))
                t[r] = arrive + 10
        return analyze_ranks([_trace(r, 1_000, rows[r]) for r in (0, 1)])

    noisy = job(lambda k: (k * 7919) % (9 * us))
    caused = noisy.collectives.query("rank == 1")["wait_ns"].sum()
    assert caused > 1 * ms                       # past the absolute threshold ...
    assert noisy.straggler is None               # ... but 0.5% of the waiting rank's compute: not a straggler
    slow = job(lambda k: 50 * us)
    assert slow.straggler is not None and slow.straggler.rank == 0
