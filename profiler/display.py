"""How a `Profile` reaches the screen without the profiler importing the display layer.

The render stage sits above the profiler (device -> capture -> model -> analyze -> render), so `Profile`'s
display methods (`_repr_mimebundle_`, `__repr__`, `explore()`, the figure methods) call functions that the
display layer registers here, the way IPython's formatter registry keeps `DataFrame` free of notebook code.
`import neuron_studio` registers a loader for `neuron_studio.ui`; the ui modules load on first display.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["ProfileDisplay", "DisplayLayerMissing", "register_display", "display_layer"]


class DisplayLayerMissing(RuntimeError):
    """A Profile display method was called but no display layer is registered."""


@dataclass(frozen=True)
class ProfileDisplay:
    """The display layer's functions for a Profile (each takes what the Profile computed)."""

    mime_bundle: Callable[[dict[str, Any]], dict[str, Any]]  # summary -> {mime type: payload}
    text: Callable[[dict[str, Any]], str]  # summary -> plain-text report
    explore: Callable[[Any], Any]  # Profile -> live explorer
    timeline_figure: Callable[[Any], Any]  # ops frame -> figure
    roofline_figure: Callable[[Any, Any], Any]  # roofline frame, roofs -> figure


class _DisplayRegistry:
    """The one display layer of this process: a loader, called once on first use."""

    def __init__(self) -> None:
        self.loader: Callable[[], ProfileDisplay] | None = None
        self.loaded: ProfileDisplay | None = None

    def get(self, what: str) -> ProfileDisplay:
        if self.loaded is None:
            if self.loader is None:
                raise DisplayLayerMissing(
                    f"Profile.{what} needs a display layer, and none is registered: `import neuron_studio` "
                    "registers the notebook display (neuron_studio.ui), or call "
                    "neuron_studio.profiler.display.register_display(...) with your own."
                )
            self.loaded = self.loader()
        return self.loaded


_REGISTRY = _DisplayRegistry()


def register_display(loader: Callable[[], ProfileDisplay]) -> None:
    """Make `loader()` (called on first display) the display layer for every Profile; replaces any before."""
    _REGISTRY.loader, _REGISTRY.loaded = loader, None


def display_layer(what: str) -> ProfileDisplay:
    """The registered display layer; `what` names the calling method in the error when there is none."""
    return _REGISTRY.get(what)


def registered() -> bool:
    """Whether a display layer is registered (so `repr` can fall back instead of raising)."""
    return _REGISTRY.loader is not None
