"""NeuronCore performance model: per-op engine, FLOPs, bytes and modeled duration; launch/fusion grouping for
eager, adaptive-eager and compile modes; per-run MFU/MBU, engine utilization, H100 comparison and cost.

Facade only: the work lives in config (assumptions), columns (input), ops (per-op facts), schedule
(grouping + timeline), run_summary (per-run figures) and run (`model_run`).
"""
from __future__ import annotations

from neuron_studio.profiler.model.columns import (
    ColumnsError, OpColumns, as_columns, columns_from_mapping, events_to_columns,
)
from neuron_studio.profiler.model.config import MODES, ConfigError, ModelConfig
from neuron_studio.profiler.model.ops import ENGINES, classify_engine
from neuron_studio.profiler.model.run import FusionGroup, FusionGroups, ModeledRun, model_run
from neuron_studio.profiler.model.run_summary import RunSummary

__all__ = [
    "model_run", "ModeledRun", "RunSummary", "FusionGroup", "FusionGroups", "ModelConfig", "ConfigError",
    "OpColumns", "ColumnsError", "events_to_columns", "columns_from_mapping", "as_columns", "classify_engine",
    "ENGINES", "MODES",
]
