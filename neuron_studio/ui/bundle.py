"""The MIME bundle of a profile: the custom type for the JupyterLab extension, HTML, and text."""
from __future__ import annotations

import json
from typing import Any

from neuron_studio.ui.html import render_html
from neuron_studio.ui.text import render_text

__all__ = ["MIME_TYPE", "mime_bundle"]

MIME_TYPE = "application/vnd.neuron-studio.profile+json"


def mime_bundle(summary: dict[str, Any]) -> dict[str, Any]:
    # round-trip through JSON so the payload is exactly what a saved notebook will hold
    payload = json.loads(json.dumps(summary, allow_nan=False, default=str))
    return {MIME_TYPE: payload, "text/html": render_html(payload), "text/plain": render_text(payload)}
