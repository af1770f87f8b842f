"""The notebook display layer for a Profile: the ui's renderers bundled for the profiler's display registry.

`neuron_studio` registers `profile_display` (with the run store as the explorer's run source) so that the
dependency points from the display layer to the profiler, never back.
"""
from __future__ import annotations

from typing import Any, Callable

from neuron_studio.profiler.display import ProfileDisplay
from neuron_studio.ui.bundle import mime_bundle
from neuron_studio.ui.explore import Explorer, RunSource
from neuron_studio.ui.figures import roofline_figure, timeline_figure
from neuron_studio.ui.text import render_text

__all__ = ["profile_display"]


def profile_display(list_runs: Callable[[], list[Any]], load_run: Callable[[Any], Any]) -> ProfileDisplay:
    """The ui's renderers; the explorer's run picker lists and loads runs through `list_runs`/`load_run`."""
    runs = RunSource(list_runs=list_runs, load_run=load_run)
    return ProfileDisplay(
        mime_bundle=mime_bundle,
        text=render_text,
        explore=lambda prof: Explorer(prof, runs),
        timeline_figure=timeline_figure,
        roofline_figure=roofline_figure,
    )
