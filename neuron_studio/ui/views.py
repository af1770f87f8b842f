"""Small display objects returned by the line magics (device, compare, porting check)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuron_studio.ui.formatting import fmt_ns
from neuron_studio.ui.templating import render_template

__all__ = ["DeviceView", "CompareView", "CheckView"]


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
        return render_template("views/device.html", text=repr(self))


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
        return render_template("views/compare.html", d=d, run_a=self.run_a, run_b=self.run_b,
                               ops=list(d.ops.head(25).itertuples(index=False)),
                               engines=list(d.engines.itertuples(index=False)))


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
        return render_template("views/check.html", r=self.report, icons=_ICON)
