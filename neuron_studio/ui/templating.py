"""The Jinja2 environment of the HTML renderers: package templates, autoescaping on for every template.

Templates live in `neuron_studio/ui/templates/` (shipped as package data). Autoescaping is on for all of
them, whatever their extension, so a field from a trace, a cell or a stored summary cannot reach the page
as markup; only the package's own stylesheet is inserted verbatim.
"""
from __future__ import annotations

import functools
from importlib import resources
from typing import Any, Callable

from jinja2 import Environment, PackageLoader, Undefined, select_autoescape
from markupsafe import Markup

from neuron_studio.ui.formatting import (
    as_number, basename, fmt_bytes, fmt_change, fmt_count, fmt_kernel, fmt_ns, fmt_pct, fmt_sci, fmt_signed_pct,
    fmt_source, fmt_usd,
)

__all__ = ["render_template", "css", "ENGINE_COLORS"]

ENGINE_COLORS = {"tensor": "#4e79a7", "vector": "#59a14f", "scalar": "#f28e2b", "gpsimd": "#b07aa1",
                 "dma": "#9c755f", "host": "#e15759"}
_OTHER_ENGINE_COLOR = "#888"


def _bar_width(utilization: Any) -> str:
    u = as_number(utilization) or 0.0
    return f"{max(0.0, min(100.0, u * 100)):.1f}"


def _engine_color(engine: Any) -> str:
    return ENGINE_COLORS.get(engine, _OTHER_ENGINE_COLOR) if isinstance(engine, str) else _OTHER_ENGINE_COLOR


def _missing_as_none(fn: Callable[[Any], str]) -> Callable[[Any], str]:
    """A field the summary does not have reaches a filter as None, as `dict.get` would give it."""
    @functools.wraps(fn)
    def wrapped(value: Any) -> str:
        return fn(None if isinstance(value, Undefined) else value)
    return wrapped


def _yes_no(value: Any) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _finalize(value: Any) -> Any:
    """`None` prints as nothing (not "None")."""
    return "" if value is None else value


@functools.lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("neuron_studio.ui", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "svg", "xml"), default_for_string=True,
                                     default=True),
        undefined=Undefined, finalize=_finalize, keep_trailing_newline=False,
    )
    filters = dict(ns=fmt_ns, count=fmt_count, pct=fmt_pct, signed_pct=fmt_signed_pct, usd=fmt_usd, sci=fmt_sci,
                   bytes=fmt_bytes, kernel=fmt_kernel, change=fmt_change,
                   yesno=_yes_no,
                   source=fmt_source, basename=basename, bar_width=_bar_width, engine_color=_engine_color)
    env.filters.update({name: _missing_as_none(fn) for name, fn in filters.items()})
    env.globals["css"] = Markup(css())   # the package's own stylesheet: trusted, inserted as is
    return env


@functools.lru_cache(maxsize=1)
def css() -> str:
    """The stylesheet shared by every studio HTML output (scoped under `.nstu`)."""
    return resources.files("neuron_studio.ui").joinpath("templates", "style.css").read_text(encoding="utf-8")


def render_template(name: str, **context: Any) -> str:
    """Render package template `name` (e.g. "profile.html") with autoescaping."""
    return _environment().get_template(name).render(**context)
