"""Plotly figures of a profile: the engine timeline (zoomable tracks) and the roofline.

Data preparation and drawing are separate: `timeline_frame` picks the rows (pure), `timeline_figure`
draws them. plotly is imported lazily (it is part of the `lab` extra).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.vocabulary import DEVICE_ENGINES, HOST_ENGINE

__all__ = ["timeline_frame", "timeline_figure", "roofline_figure"]

ENGINE_ORDER = [*DEVICE_ENGINES, HOST_ENGINE]
COLORS = {"tensor": "#4e79a7", "vector": "#59a14f", "scalar": "#f28e2b", "gpsimd": "#b07aa1", "dma": "#9c755f",
          "host": "#e15759"}


def timeline_frame(ops: pd.DataFrame, *, max_ops: int = 20000) -> pd.DataFrame:
    """Device ops with time > 0, longest first when there are more than `max_ops` (so charts stay light)."""
    missing = [c for c in ("op", "engine", "core", "device_start_ns", "device_end_ns", "module") if c not in ops]
    if missing:
        raise ValueError(f"timeline needs columns {missing}")
    sel = ops[(ops["device_end_ns"] > ops["device_start_ns"]) & (ops["engine"] != "none")]
    if len(sel) > max_ops:
        sel = sel.nlargest(max_ops, "device_ns")
    out = sel.assign(track=sel["core"].astype(str).radd("core ") + " · " + sel["engine"].astype(str))
    return out.sort_values(["core", "device_start_ns"])


def timeline_figure(ops: pd.DataFrame, *, title: str = "NeuronCore engine timeline (modeled)") -> Any:
    import plotly.graph_objects as go

    df = timeline_frame(ops)
    fig = go.Figure()
    for eng in ENGINE_ORDER:
        part = df[df["engine"] == eng]
        if part.empty:
            continue
        fig.add_trace(go.Bar(
            y=part["track"], x=(part["device_end_ns"] - part["device_start_ns"]) / 1e3,
            base=part["device_start_ns"] / 1e3, orientation="h", name=eng, marker_color=COLORS[eng],
            customdata=np.stack([part["op"], part["module"].fillna("")], axis=-1),
            hovertemplate="%{customdata[0]}<br>%{customdata[1]}<br>%{base:.1f} µs + %{x:.2f} µs<extra></extra>",
        ))
    fig.update_layout(title=title, barmode="overlay", xaxis_title="µs (device time)", height=120 + 28 * df["track"].nunique(),
                      yaxis={"autorange": "reversed"}, legend_orientation="h", margin={"l": 10, "r": 10, "t": 40})
    return fig


def roofline_figure(points: pd.DataFrame, roofs: Any) -> Any:
    import plotly.graph_objects as go

    x = np.logspace(-2, 4, 200)
    roof = np.minimum(roofs.peak_flops, x * roofs.hbm_bytes_per_s)
    fig = go.Figure(go.Scatter(x=x, y=roof / 1e12, mode="lines", name=f"{roofs.chip} roof", line_color="#333"))
    if len(points):
        fig.add_trace(go.Scatter(
            x=points["intensity"], y=points["attained_flops_per_s"] / 1e12, mode="markers", name="ops",
            marker={"size": np.clip(np.sqrt(points["device_ns"] / points["device_ns"].max()) * 30, 5, 30),
                    "color": points["bound"].map({"compute": "#4e79a7", "memory": "#f28e2b"}).fillna("#999")},
            text=points["op"] + " " + points["input_shapes"].astype(str),
            hovertemplate="%{text}<br>%{x:.2f} FLOP/B, %{y:.2f} TFLOP/s<extra></extra>"))
    fig.update_layout(title="Roofline (modeled)", xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
                      yaxis={"type": "log", "title": "TFLOP/s"}, margin={"l": 10, "r": 10, "t": 40})
    return fig
