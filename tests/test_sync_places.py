"""Host syncs are grouped per place once, in the analysis (`Profile.sync_places`, the summary's `sync_places`), and
every view shows that list: one row per place (source line, op, reason) with its count and host time per step,
the same whether 1 or 3 steps were profiled. A summary stored before version 2 (one row per occurrence) reads
as the same places."""
from __future__ import annotations

import dataclasses
import html
import re

import pytest
import torch

from neuron_studio.profiler.capture import profile
from neuron_studio.profiler.profile import Profile
from neuron_studio.profiler.profile_summary import current_summary, sync_places_block
from neuron_studio.ui.html import render_html
from neuron_studio.ui.text import render_text
from tests.models.host_syncs import PLACES, two_sync_places

#: The two profiles compared: the same step profiled this many times.
STEPS = (1, 3)
#: A modeled time per step may differ by this much per op in it (whole ns per op, varying between steps).
NS_PER_OP = 3.0
HOSTILE = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def summaries() -> tuple[dict, dict]:
    return two_sync_places(STEPS[0]).to_summary(), two_sync_places(STEPS[1]).to_summary()


def _rows(s: dict) -> list[tuple]:
    return [(p["op"], p["reason"], p["source"], p["modules"], p["count"]) for p in s["sync_places"]["places"]]


def _issues_pane(page: str) -> str:
    """The Fallbacks & syncs tab's pane of a rendered profile (up to the next tab's pane)."""
    start = page.index("<b>Sync points</b>")
    return page[start:page.index("<b>Recompiles</b>", start)]


def _table_rows(pane: str) -> list[list[str]]:
    """Cells (as rendered, still escaped) of each body row of the pane's sync table."""
    body = pane[pane.index("<tbody>"):pane.index("</tbody>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body)]


def test_one_row_per_place_with_the_same_counts_at_one_and_three_steps(summaries: tuple[dict, dict]) -> None:
    one, three = summaries
    for s in summaries:
        block = s["sync_places"]
        assert s["version"] == 2 and "sync_points" not in s    # version 1's per-occurrence list is gone
        assert s["badges"]["sync_points"] == block["total"] == len(block["places"]) == 2
        assert (block["left_out"], block["left_out_count"], block["time_basis"]) == (0, 0.0, "modeled")
    assert _rows(one) == _rows(three)
    assert [(op, reason, count) for op, reason, _, _, count in _rows(one)] == PLACES
    item_line, print_line = (int(p["source"].rsplit(":", 1)[1]) for p in one["sync_places"]["places"])
    assert print_line == item_line + 1
    for a, b in zip(one["sync_places"]["places"], three["sync_places"]["places"]):
        assert a["time_ns"] > 0 and b["time_ns"] == pytest.approx(a["time_ns"], abs=NS_PER_OP * a["count"])


def test_the_place_times_are_the_breakdowns_sync_stalls(summaries: tuple[dict, dict]) -> None:
    """The modeled host time of the places is what the step breakdown calls sync stalls (one figure, two views)."""
    for s in summaries:
        stalls = next(p for p in s["breakdown"]["parts"] if p["key"] == "sync")
        total = sum(p["time_ns"] for p in s["sync_places"]["places"])
        assert stalls["ns"] == pytest.approx(total, abs=NS_PER_OP * 21)


def test_the_html_issues_tab_shows_one_row_per_place(summaries: tuple[dict, dict]) -> None:
    panes = [_issues_pane(render_html(s)) for s in summaries]
    assert panes[0] == panes[1]                    # the tab reads the same at 1 and 3 profiled steps
    rows = _table_rows(panes[0])
    assert [(r[0], r[1], r[4]) for r in rows] == [("aten::_local_scalar_dense", "item", "20"),
                                                  ("aten::_print", "print", "1")]
    assert all(r[2].startswith("host_syncs.py:") and r[3] == "top level" for r in rows)
    assert "host time/step (modeled)" in panes[0] and all(r[5].endswith("µs") for r in rows)
    assert "not listed" not in panes[0]


def test_the_html_issues_tab_escapes_a_place_and_says_what_it_left_out(summaries: tuple[dict, dict]) -> None:
    s = dict(summaries[0])
    place = {**s["sync_places"]["places"][0], "op": HOSTILE, "reason": HOSTILE, "source": HOSTILE,
             "modules": [HOSTILE, "top level"]}
    s["sync_places"] = {**s["sync_places"], "places": [place], "total": 4, "left_out": 3, "left_out_count": 2.5}
    pane = _issues_pane(render_html(s))
    assert "<script>" not in pane
    (row,) = _table_rows(pane)
    cells = [html.unescape(c) for c in row[:4]]      # shown as text (the source as its label: the file's name)
    assert (cells[0], cells[1], cells[3]) == (HOSTILE, HOSTILE, f"{HOSTILE}, top level") and "<" not in row[2]
    assert "3 more places not listed (2.5 syncs/step); the 1 costliest are shown." in html.unescape(pane)


def test_the_text_output_lists_the_same_places(summaries: tuple[dict, dict]) -> None:
    texts = [render_text(s) for s in summaries]
    block = [t[t.index("  sync points ("):].splitlines()[:3] for t in texts]
    assert block[0] == block[1]
    head, item, printed = block[0]
    assert head == "  sync points (2 places; host time/step modeled):"
    assert re.fullmatch(r"\s+20/step  aten::_local_scalar_dense \(item\)  host_syncs\.py:\d+  \[top level\]  "
                        r"\S+ µs/step", item), item
    assert re.fullmatch(r"\s+1/step  aten::_print \(print\)  host_syncs\.py:\d+  \[top level\]  \S+ µs/step",
                        printed), printed


def test_the_list_is_bounded_and_counts_what_it_left_out() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, device="neuron")

    def step() -> None:
        x[0].item()
        x[1].item()
        x[2].item()
        x[3].item()

    places = profile(step, steps=2, warmup=1, mode="eager", host_events=False).sync_places(as_captured=True)
    block = sync_places_block(places, top=3)
    assert (block["total"], len(block["places"]), block["left_out"], block["left_out_count"]) == (4, 3, 1, 1.0)
    assert len({p["source"] for p in block["places"]}) == 3
    text = render_text({"badges": {}, "sync_places": block}, top=2)
    assert "... 2 more places (Issues tab; prof.sync_places())" in text   # one listed past the top, one left out


def test_a_version_1_summary_reads_as_the_same_places(summaries: tuple[dict, dict]) -> None:
    """A run stored (or a notebook output saved) before version 2 listed every occurrence of every step; it reads
    as the current places, counted per step, with no time (version 1 kept none), and renders so."""
    s = summaries[1]
    occurrences = [{"op": p["op"], "reason": p["reason"], "source": p["source"], "module": p["modules"][0]}
                   for p in s["sync_places"]["places"] for _ in range(round(p["count"] * s["steps"]))]
    v1 = {k: v for k, v in s.items() if k != "sync_places"} | {"version": 1, "sync_points": occurrences}
    read = current_summary(v1)["sync_places"]
    assert read["time_basis"] is None and [p["time_ns"] for p in read["places"]] == [None, None]
    assert [(p["op"], p["reason"], p["source"], p["modules"], p["count"]) for p in read["places"]] == _rows(s)
    pane = _issues_pane(render_html(v1))
    assert [r[4] for r in _table_rows(pane)] == ["20", "1"] and "host time per step not determined" in pane
    assert current_summary(s) is s


def test_a_measured_profile_shows_the_calls_measured_host_time_labelled_measured() -> None:
    """On hardware (device time measured) a place's time is its calls' measured host time per step, and says so;
    on the emulator it is the model's stall (the emulator's own host time is not Trainium's)."""
    prof = two_sync_places(2)
    assert prof.sync_places().attrs["time_basis"] == "modeled"
    meta = {**prof.trace.meta, "backend": "real", "figures": {**prof.trace.meta.get("figures", {}),
                                                              "device_time": "measured"}}
    measured = Profile(dataclasses.replace(prof.trace, meta=meta), prof.device_run)
    places = measured.sync_places(as_captured=True)
    assert places.attrs["time_basis"] == "measured"
    ops = prof.trace.ops
    for r in places.itertuples(index=False):
        sel = ops[(ops["name"] == r.op) & (ops["source"] == r.source) & (ops["sync"] == r.reason)]
        assert r.time_ns == pytest.approx(float((sel["end_ns"] - sel["start_ns"]).sum()) / 2)
    block = measured.to_summary()["sync_places"]
    assert block["time_basis"] == "measured"
    assert sorted((p["op"], p["reason"], p["count"]) for p in block["places"]) == sorted(PLACES)   # by time: any order
