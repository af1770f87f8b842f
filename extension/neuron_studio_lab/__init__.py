"""Neuron Studio for JupyterLab: server routes reading the run store, plus the prebuilt lab extension."""
from __future__ import annotations

try:
    from ._version import __version__
except ImportError:  # pragma: no cover - running from a source tree that was never built
    import warnings

    warnings.warn("Importing 'neuron_studio_lab' outside a proper installation.", stacklevel=2)
    __version__ = "dev"

from .routes import setup_route_handlers

__all__ = ["__version__", "setup_route_handlers"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "neuron-studio-lab"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "neuron_studio_lab"}]


def _load_jupyter_server_extension(server_app) -> None:  # noqa: ANN001 - jupyter_server.ServerApp
    """Register the API handlers (called by Jupyter Server)."""
    setup_route_handlers(server_app.web_app)
    server_app.log.info("Registered neuron_studio_lab server extension")
