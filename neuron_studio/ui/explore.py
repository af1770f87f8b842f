"""`profile.explore()`: a live panel explorer (filters, run picker, op table, timeline, roofline).

Panel is loaded with `inline=True` so nothing is fetched from a CDN. The explorer only filters and lays
out what the Profile computed. The run picker lists and loads runs through the `RunSource` it is given
(the session's run store in a notebook), so the display layer does not reach up into the session.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Explorer", "RunSource", "NO_RUNS", "explore"]


@dataclass(frozen=True)
class RunSource:
    """Where the run picker finds runs: `list_runs()` -> run records, `load_run(run_id)` -> Profile."""

    list_runs: Callable[[], list[Any]]
    load_run: Callable[[Any], Any]


def _no_run(run_id: Any) -> Any:
    raise LookupError(f"run {run_id!r}: this explorer has no run store to load runs from")


NO_RUNS = RunSource(list_runs=list, load_run=_no_run)  # only the profile being explored


class Explorer:
    """Holds the widgets; `.view` is the panel layout (displayed in a notebook)."""

    def __init__(self, prof: Any, runs: RunSource = NO_RUNS) -> None:
        import panel as pn

        from neuron_studio.ui.figures import roofline_figure, timeline_figure

        pn.extension("tabulator", "plotly", inline=True)
        self.prof = prof
        self.runs = runs
        self.text = pn.widgets.TextInput(name="op contains", value="")
        engines = sorted(set(prof.ops["engine"]))
        self.engine = pn.widgets.MultiChoice(name="engines", options=engines, value=engines)
        self.by = pn.widgets.RadioButtonGroup(name="group by", options=["op", "module"], value="op")
        self.table = pn.widgets.Tabulator(self.table_frame(), pagination="local", page_size=20, disabled=True,
                                          sizing_mode="stretch_width")
        self.run_picker = pn.widgets.Select(name="run", options=self._runs(), value=prof.run_id)
        for w in (self.text, self.engine, self.by):
            w.param.watch(self._refresh, "value")
        self.run_picker.param.watch(self._pick_run, "value")
        self.timeline = pn.pane.Plotly(timeline_figure(prof.ops), sizing_mode="stretch_width")
        self.roofline = pn.pane.Plotly(roofline_figure(prof.roofline(), prof.roofs()), sizing_mode="stretch_width")
        self.view = pn.Column(
            pn.Row(self.run_picker, self.text, self.engine, self.by),
            pn.Tabs(("Op table", self.table), ("Timeline", self.timeline), ("Roofline", self.roofline)),
        )

    def _runs(self) -> dict[str, Any]:
        try:
            runs = self.runs.list_runs()
        except Exception:  # noqa: BLE001 - no store: only the current profile
            runs = []
        opts = {f"{r.id} {r.name or ''} ({r.mode}, {r.status})": r.id for r in runs}
        if self.prof.run_id not in opts.values():
            opts[f"current ({self.prof.trace.mode})"] = self.prof.run_id
        return opts

    def table_frame(self) -> Any:
        ops = self.prof.ops
        sel = ops[ops["engine"].isin(self.engine.value)] if hasattr(self, "engine") else ops
        if hasattr(self, "text") and self.text.value:
            sel = sel[sel["op"].str.contains(self.text.value, case=False, regex=False)]
        from neuron_studio.profiler.analysis.op_table import op_table

        return op_table(sel, by=self.by.value if hasattr(self, "by") else "op", steps=self.prof.steps)

    def _refresh(self, *_: Any) -> None:
        self.table.value = self.table_frame()

    def _pick_run(self, event: Any) -> None:
        if event.new is None or event.new == self.prof.run_id:
            return
        from neuron_studio.ui.figures import roofline_figure, timeline_figure

        self.prof = self.runs.load_run(event.new)
        engines = sorted(set(self.prof.ops["engine"]))
        self.engine.options = engines
        self.engine.value = engines
        self._refresh()
        self.timeline.object = timeline_figure(self.prof.ops)
        self.roofline.object = roofline_figure(self.prof.roofline(), self.prof.roofs())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.view._repr_mimebundle_(include, exclude)


def explore(prof: Any, runs: RunSource = NO_RUNS) -> Explorer:
    return Explorer(prof, runs)
