"""The timeline's box-label layout (src/viewer/labels.ts, compiled to lib/) on its own, in Chromium: a box cut
by the view's edge gets its label in its visible part, shortened to a prefix and an ellipsis only to that
width, never wider than it; checked with a fixed-width measure (exact expectations) and with the canvas's
real text measure (the fit holds for real fonts)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from conftest import CHROMIUM, HERE  # noqa: E402

if not Path(CHROMIUM).exists():  # pragma: no cover - environment without a browser
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)

LABELS_JS = HERE.parent / "lib" / "viewer" / "labels.js"
CHAR = 6  # px per character of the fixed-width measure
TARGET = "aten::special_op"


@pytest.fixture(scope="module")
def labels(page):  # noqa: ANN001, ANN201 - the page with window.labels = {fitLabel, layoutLabel}
    if not LABELS_JS.exists():
        pytest.skip(f"{LABELS_JS} not built (jlpm build:lib in extension/)")
    page.set_content("<html><body><canvas id='c'></canvas></body></html>")
    page.add_script_tag(type="module", content=LABELS_JS.read_text()
                        + "\nwindow.labels = { fitLabel, layoutLabel, ELLIPSIS };\n")
    page.wait_for_function("() => window.labels !== undefined")
    return page


def _fit(page, name: str, width: float) -> str:  # noqa: ANN001
    return page.evaluate("([n, w, c]) => labels.fitLabel(n, w, t => Array.from(t).length * c)", [name, width, CHAR])


def _layout(page, name: str, x: float, w: float, view: float, pad: float):  # noqa: ANN001, ANN202
    return page.evaluate("([n, x, w, v, p, c]) => labels.layoutLabel(n, x, w, v, p, t => Array.from(t).length * c)",
                         [name, x, w, view, pad, CHAR])


def test_fit_keeps_a_prefix_and_an_ellipsis_only_when_too_narrow(labels) -> None:  # noqa: ANN001
    assert _fit(labels, "aten::mm", 8 * CHAR) == "aten::mm"  # exactly fits: whole
    assert _fit(labels, "aten::mm", 8 * CHAR - 1) == "aten::…"  # 7 chars with the ellipsis fit, 8 do not
    assert _fit(labels, "aten::mm", 2 * CHAR) == "a…"
    assert _fit(labels, "aten::mm", 2 * CHAR - 1) == ""  # not even one character and the ellipsis
    assert _fit(labels, "aten::mm", 0) == "" and _fit(labels, "aten::mm", -5) == "" and _fit(labels, "", 100) == ""
    assert _fit(labels, "ab cd", 4 * CHAR) == "ab…"  # no space left before the ellipsis
    surrogates = _fit(labels, "\U0001d538\U0001d539\U0001d53a\U0001d53b", 3 * CHAR)  # never half a code point
    assert surrogates == "\U0001d538\U0001d539…"


def test_layout_puts_the_label_in_the_visible_part_of_a_cut_box(labels) -> None:  # noqa: ANN001
    pad, view = 4, 800
    # cut by the left edge, 60 px visible: the label starts at the edge, prefix to 52 px (8 chars with the ellipsis)
    assert _layout(labels, TARGET, -100, 160, view, pad) == {"text": "aten::s…", "x": pad}
    # the old layout's middle ellipsis ("ate…l_"-like) or a start off-screen cannot come back
    left = _layout(labels, TARGET, -40, 400, view, pad)
    assert left == {"text": TARGET, "x": pad}
    # cut by the right edge, 40 px visible: starts in the box, ends inside the view
    right = _layout(labels, TARGET, view - 40, 200, view, pad)
    assert right == {"text": "aten…", "x": view - 40 + pad}
    assert right["x"] + len(right["text"]) * CHAR <= view - pad
    # wider than the view on both sides: at the left edge, whole
    assert _layout(labels, TARGET, -500, 2000, view, pad) == {"text": TARGET, "x": pad}
    # inside the view: at its own start, padded
    assert _layout(labels, TARGET, 100, 200, view, pad) == {"text": TARGET, "x": 100 + pad}
    # too little of it visible for one character: no label
    assert _layout(labels, TARGET, -190, 200, view, pad) is None
    assert _layout(labels, TARGET, view - 12, 200, view, pad) is None


def test_layout_fits_the_real_font_measure(labels) -> None:  # noqa: ANN001
    """With the canvas's own measureText, every label is the name or its prefix with an ellipsis and fits the
    visible part of its box (box positions across both edges, widths from nothing to wider than the view)."""
    bad = labels.evaluate("""([names, view, pad]) => {
        const ctx = document.getElementById('c').getContext('2d');
        ctx.font = '10px sans-serif';
        const measure = t => ctx.measureText(t).width;
        const bad = [];
        for (const name of names) {
          for (let x = -900; x <= view + 50; x += 37) {
            for (const w of [3, 20, 45, 90, 180, 400, 1000, 2400]) {
              if (x + w <= 0 || x >= view) continue;
              const l = labels.layoutLabel(name, x, w, view, pad, measure);
              const lo = Math.max(x, 0), hi = Math.min(x + w, view);
              if (!l) { if (hi - lo - 2 * pad >= measure(name)) bad.push(['missing', name, x, w]); continue; }
              const prefix = l.text === name || (l.text.endsWith(labels.ELLIPSIS) && name.startsWith(l.text.slice(0, -1)));
              const inside = l.x >= lo + pad - 1e-9 && l.x + measure(l.text) <= hi - pad + 1e-9;
              const whole = hi - lo - 2 * pad >= measure(name) ? l.text === name : true;
              if (!prefix || !inside || !whole) bad.push([name, x, w, l.text, l.x]);
            }
          }
        }
        return bad;
    }""", [[TARGET, "aten::mm", "<img src=x onerror=alert(1)>", "a", "W" * 60], 800, 4])
    assert bad == []
