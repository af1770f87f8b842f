"""A many-rank run's job timeline in the run store: three small tables the trace viewer's job view reads
instead of every rank's events (the extension's `job_view`).

- `job_ranks`: per rank its stored table suffix (position), clock offset onto the job's aligned clock, span
  on its own clock, activity bin width, where its rank came from, whether it is the straggler;
- `job_activity`: per rank and activity bin (own clock) its compute and collective busy ns (the digest's);
- `job_collectives`: per matched collective instance and rank its arrival and exit on the aligned clock,
  the wait and whether this rank arrived last.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

__all__ = ["save_job_tables", "JOB_TABLES"]

JOB_TABLES = ("job_ranks", "job_activity", "job_collectives")


def save_job_tables(store: Any, run_id: int, analysis: Any, positions: Sequence[int] | None = None) -> None:
    """Write the job tables of `analysis` (a `RankAnalysis` with its digests); `positions[i]` is the table
    suffix the i-th rank (rank order) is stored under (default 0..N-1)."""
    table = analysis.ranks
    ranks = table["rank"].astype(int).tolist()
    positions = list(range(len(ranks))) if positions is None else list(positions)
    offsets = (analysis.alignment.offsets_ns if analysis.alignment is not None else {}) or {}
    straggler = analysis.straggler.rank if analysis.straggler is not None else None
    digests = analysis.digests
    store.save_table(run_id, "job_ranks", pd.DataFrame({
        "rank": np.array(ranks, dtype=np.int64), "position": np.array(positions, dtype=np.int64),
        "offset_ns": np.array([int(offsets.get(r, 0)) for r in ranks], dtype=np.int64),
        "first_ns": np.array([int(d.meta.get("first_ns") or 0) for d in digests], dtype=np.int64),
        "last_ns": np.array([int(d.meta.get("last_ns") or 0) for d in digests], dtype=np.int64),
        "bin_ns": np.array([int(d.meta.get("activity_bin_ns") or 1) for d in digests], dtype=np.int64),
        "rank_source": table["rank_source"].astype(str).to_numpy(),
        "straggler": np.array([r == straggler for r in ranks], dtype=bool),
    }))
    act = [d.activity.assign(rank=r) for r, d in zip(ranks, digests)]
    store.save_table(run_id, "job_activity", pd.concat(act, ignore_index=True)[
        ["rank", "start_ns", "compute_ns", "collective_ns"]].astype("int64"))
    c = analysis.collectives
    store.save_table(run_id, "job_collectives", pd.DataFrame({
        "key": c["key"].astype(str).to_numpy(), "op": c["op"].astype(str).to_numpy(),
        "index": c["index"].astype(np.int64).to_numpy(), "rank": c["rank"].astype(np.int64).to_numpy(),
        "arrival_ns": c["arrival_ns"].astype(np.int64).to_numpy(),
        "exit_ns": c["issue_end_ns"].astype(np.int64).to_numpy(),
        "wait_ns": c["wait_ns"].astype(np.int64).to_numpy(), "is_last": c["is_last"].astype(bool).to_numpy(),
    }))
