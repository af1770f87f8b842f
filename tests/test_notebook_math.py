"""Dollar amounts in studio HTML are text, not TeX (issue 14 item 6): JupyterLab runs MathJax 3 over every HTML
output, and "$0.0005 on trn2 vs $0.0002" between two `$` would be typeset as italic math. MathJax skips any
element with class `mathjax_ignore` (MathJax 2 / classic Notebook: `tex2jax_ignore`); its finder joins text
across inline tags, so this test does the same over what it would see."""
from __future__ import annotations

import re
from html.parser import HTMLParser

from neuron_studio.profiler.analysis.porting_report import CheckItem, PortingReport
from neuron_studio.ui.html import render_html
from neuron_studio.ui.templating import css
from neuron_studio.ui.views import CheckView

_SKIPPED_TAGS = {"script", "noscript", "style", "textarea", "pre", "code"}   # MathJax 3's skipHtmlTags
_VOID = {"br", "img", "input", "hr", "meta", "link", "wbr"}


class _MathJaxText(HTMLParser):
    """The text MathJax 3 would search for `$...$`: outside ignored classes and skipped tags."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []       # per open element: is it (or an ancestor) ignored?
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        ignored = (bool(self.stack) and self.stack[-1]) or tag in _SKIPPED_TAGS or bool(
            {"mathjax_ignore", "tex2jax_ignore"} & set(classes))
        self.stack.append(ignored)

    def handle_endtag(self, tag: str) -> None:
        if tag not in _VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not (self.stack and self.stack[-1]):
            self.text.append(data)


def _typeset_spans(html_text: str) -> list[str]:
    p = _MathJaxText()
    p.feed(html_text)
    return re.findall(r"\$[^$]+\$", "".join(p.text))


def _report() -> PortingReport:
    items = [CheckItem("info", "cost", "modeled cost per 1,000 steps: $0.0005 on trn2 vs $0.0002 on H100 (x2.50)"),
             CheckItem("error", "fallbacks", "2 op executions fall back to CPU", "replace them",
                       ["aten::nonzero x2: no lowering", "aten::unique x1: data-dependent shape"])]
    return PortingReport(3, "trn2", "eager", items, 0.01, 0.0005, 0.0002)


def test_check_view_dollars_are_not_typeset() -> None:
    out = CheckView(_report())._repr_html_()
    assert "$0.0005 on trn2 vs $0.0002" in out
    assert _typeset_spans(out) == []
    assert _typeset_spans(out.replace("mathjax_ignore", "").replace("tex2jax_ignore", ""))   # the test can fail


def test_profile_view_cost_figures_are_not_typeset() -> None:
    s = {"run_id": 1, "mode": "eager", "chip": "trn2", "backend": "emulated", "modeled": True, "engines": [],
         "cost": {"chip": "trn2", "per_1000_steps_usd": 0.0005, "h100_per_1000_steps_usd": 0.0002,
                  "per_1m_steps_usd": 0.5, "h100_per_1m_steps_usd": 0.2}}
    out = render_html(s)
    assert "$0.500" in out and "$0.200" in out and _typeset_spans(out) == []    # per 1M steps, 3 digits


def test_table_cells_stay_left_aligned_with_their_bullets_in_jupyterlab() -> None:
    """JupyterLab's `:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td {text-align: right}` has specificity
    (0,2,1); the studio's left-alignment of cells and lists must match or beat it (it comes later in the page)."""
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", css()))

    def specificity(selector: str) -> tuple[int, int]:
        return selector.count("."), len(re.findall(r"(?:^|[\s>+~])[a-z]+", selector))

    left = [sel.strip() for sels, body in rules.items() if "text-align:left" in body for sel in sels.split(",")]
    td = [s for s in left if s.split()[-1] == "td"]
    assert td and all(specificity(s) >= (2, 1) for s in td), td
    assert any(s.endswith(" ul") or s.endswith(" li") for s in left)
    assert any("table-layout:auto" in body for body in rules.values())
