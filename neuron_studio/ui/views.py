"""Small display objects returned by the line magics (device, compare, porting check)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuron_studio.ui.html import CSS, escape, fmt_ns

__all__ = ["DeviceView", "CompareView", "CheckView"]


def _wrap(body: str) -> str:
    return f"<div class='nstu'><style>{CSS}</style>{body}</div>"


@dataclass
class DeviceView:
    info: Any
    memory: dict[str, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        text = self.info.describe()
        if self.memory:
            text += (f"\n  memory:         {self.memory['allocated'] / 2**20:.1f} MiB allocated, "
                     f"{self.memory['peak'] / 2**20:.1f} MiB peak (tracked by the emulator)")
        return text

    def _repr_html_(self) -> str:
        return _wrap("<pre>" + escape(repr(self)) + "</pre>")


@dataclass
class CompareView:
    diff: Any
    run_a: int | None
    run_b: int | None

    def __repr__(self) -> str:
        d = self.diff
        lines = [f"run {self.run_b} vs run {self.run_a}: step time {fmt_ns(d.step_time_before_ns)} -> "
                 f"{fmt_ns(d.step_time_after_ns)} ({d.step_time_change_pct:+.1f}%)"]
        for r in d.ops.head(10).itertuples(index=False):
            lines.append(f"  {r.key:<40} {fmt_ns(r.before_ns):>10} -> {fmt_ns(r.after_ns):>10}  {r.status}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        d = self.diff
        rows = "".join(
            f"<tr><td>{escape(r.key)}</td><td class='n'>{fmt_ns(r.before_ns)}</td><td class='n'>{fmt_ns(r.after_ns)}</td>"
            f"<td class='n'>{fmt_ns(r.delta_ns)}</td><td>{escape(r.status)}</td></tr>"
            for r in d.ops.head(25).itertuples(index=False))
        eng = "".join(
            f"<tr><td>{escape(r.engine)}</td><td class='n'>{fmt_ns(r.before_ns)}</td><td class='n'>{fmt_ns(r.after_ns)}</td>"
            f"<td class='n'>{fmt_ns(r.delta_ns)}</td><td></td></tr>" for r in d.engines.itertuples(index=False))
        head = "<tr><th>op</th><th>before</th><th>after</th><th>delta</th><th></th></tr>"
        return _wrap(
            f"<div class='tt'>Run {escape(self.run_b)} vs run {escape(self.run_a)} (per step, modeled)</div>"
            f"<p>step time {fmt_ns(d.step_time_before_ns)} → {fmt_ns(d.step_time_after_ns)} "
            f"(<b>{d.step_time_change_pct:+.1f}%</b>)</p>"
            f"<table>{head}{rows}</table><b>Engines</b><table>{head.replace('op', 'engine', 1)}{eng}</table>")


_ICON = {"error": "✗", "warning": "!", "info": "i", "ok": "✓"}


@dataclass
class CheckView:
    report: Any

    def __repr__(self) -> str:
        r = self.report
        lines = [f"Porting check (run {r.run_id}, {r.mode} on {r.chip}; figures modeled)"]
        for it in r.items:
            lines.append(f" [{_ICON.get(it.severity, '?')}] {it.topic}: {it.message}")
            for d in it.details[:8]:
                lines.append(f"       - {d}")
            if it.fix:
                lines.append(f"       fix: {it.fix}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        r = self.report
        rows = []
        for it in r.items:
            det = "".join(f"<li>{escape(d)}</li>" for d in it.details[:8])
            rows.append(f"<tr><td>{_ICON.get(it.severity, '?')} {escape(it.severity)}</td><td>{escape(it.topic)}</td>"
                        f"<td>{escape(it.message)}{f'<ul>{det}</ul>' if det else ''}"
                        f"{f'<div class=muted>fix: {escape(it.fix)}</div>' if it.fix else ''}</td></tr>")
        return _wrap(f"<div class='tt'>Porting check · run {escape(r.run_id)} · {escape(r.mode)} on {escape(r.chip)} "
                     f"<span class='tag mod'>modeled</span></div><table>{''.join(rows)}</table>")
