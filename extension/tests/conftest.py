"""Fixtures every server test shares: a Jupyter server (pytest-jupyter's `jp_fetch`, which each module loads with
`pytest_plugins`) with the extension enabled and authentication required, and no run-store override from the
environment."""
from __future__ import annotations

import pytest


@pytest.fixture
def jp_server_config():  # noqa: ANN201 - pytest-jupyter's server settings
    return {"ServerApp": {"jpserver_extensions": {"neuron_studio_lab": True},
                          "allow_unauthenticated_access": False}}


@pytest.fixture(autouse=True)
def _no_store_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs live next to the notebook unless a test sets NEURON_STUDIO_STORE itself."""
    monkeypatch.delenv("NEURON_STUDIO_STORE", raising=False)
