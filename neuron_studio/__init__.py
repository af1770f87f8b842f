"""Neuron Studio: a notebook-first developer environment for PyTorch on AWS Trainium.

`import neuron_studio` makes the `neuron` device available: the real TorchNeuron backend when it is
installed and a device is present, otherwise the built-in emulated device (CPU execution, modeled timing).
"""
from __future__ import annotations

from neuron_studio import device
from neuron_studio.device import info

__all__ = ["device", "info", "last", "profile", "step", "load_ipython_extension", "unload_ipython_extension"]
__version__ = "0.1.0"


def last():  # noqa: ANN201 - a neuron_studio.profiler.profile.Profile
    """The Profile of the last `%%neuron` cell in this process."""
    from neuron_studio.session import last as _last

    return _last()


def profile(fn=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
    """`with neuron_studio.profile(mode=..., chip=...) as run:` or `neuron_studio.profile(fn, steps=5)`."""
    from neuron_studio.profiler.capture import profile as _profile

    return _profile(fn, **kwargs)


def step() -> None:
    """Mark the end of a training step for `neuron-studio run` (no-op otherwise)."""
    from neuron_studio._activate import step as _step

    _step()


def load_ipython_extension(ipython) -> None:  # noqa: ANN001 - IPython's shell
    """`%load_ext neuron_studio`: register the magics (imported lazily, as pyinstrument does)."""
    from neuron_studio.magics import register_magics

    register_notebook_display()
    register_magics(ipython)


def unload_ipython_extension(ipython) -> None:  # noqa: ANN001
    pass


def register_notebook_display() -> None:
    """Render every Profile with `neuron_studio.ui` (loaded on first display, with the session's run store).

    The profiler knows no renderer: its display methods call whatever is registered here, so the import
    points from the display layer to the profiler. Run by `import neuron_studio` and `%load_ext`.
    """
    from neuron_studio.profiler.display import register_display

    register_display(_notebook_display)


def _notebook_display():  # noqa: ANN202 - a neuron_studio.profiler.display.ProfileDisplay
    from neuron_studio.session import list_session_runs, load_session_run
    from neuron_studio.ui.display import profile_display

    return profile_display(list_runs=list_session_runs, load_run=load_session_run)


device.register()
register_notebook_display()
