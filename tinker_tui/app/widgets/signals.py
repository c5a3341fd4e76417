"""The signals view's panes: a step's distributions (histograms, lengths, truncation,
reward components), its funnel (sampled → discarded by reason → trained), and the groups'
timeline (sampling, waiting, training) coloured by policy version."""

from __future__ import annotations

import math
from collections.abc import Sequence

from textual.content import Content
from textual.widgets import Static

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.signal_maths import (
    WINDOW,
    dominance_note,
    funnel_lines,
    histogram_line,
    series_at,
    step_funnel,
    timeline,
    window_mean,
    window_values,
)
from tinker_tui.app.widgets.updates import set_subtitle, update_static
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.distributions import components_of
from tinker_tui.engine.store import GroupSpan

MUTED = "$text-muted"


def _pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:g}"


def distribution_lines(state: DashboardState, step: int, width: int) -> list[Content]:
    """What the distributions pane shows of `step` (and the window up to it)."""
    series = state.series
    metrics = {key: v for key in series if (v := series_at(series, key, step)) is not None}
    hists = state.histograms.get(step, {})
    lines: list[Content] = []
    for name in ("reward", "advantage"):
        hist = hists.get(name)
        if not hist:
            lines.append(Content.assemble((f"{name:<9}", MUTED), ("no histogram", MUTED)))
            continue
        blocks = histogram_line(hist)
        lines.append(
            Content.assemble(
                (f"{name:<10}", MUTED),
                (f"{blocks:<10}", "$primary"),
                f" {float(hist['lo']):.3g}…{float(hist['hi']):.3g}",
                (f"  n={sum(hist['counts'])}", MUTED),
            )
        )
    zero = metrics.get(keys.ZERO_VARIANCE_FRAC)
    trunc = metrics.get(keys.TRUNCATED_FRAC)
    lines.append(
        Content.assemble(
            ("no signal ", MUTED),
            (_pct(zero), "$warning" if zero else ""),
            ("  truncated ", MUTED),
            (_pct(trunc), "$error" if trunc else ""),
        )
    )
    lines.append(
        Content.assemble(
            ("length    ", MUTED),
            f"mean {_num(_round(metrics.get(keys.RESPONSE_LEN_MEAN)))} ",
            f"p50 {_num(metrics.get(keys.RESPONSE_LEN_P50))} ",
            f"p90 {_num(metrics.get(keys.RESPONSE_LEN_P90))} ",
            f"max {_num(metrics.get(keys.RESPONSE_LEN_MAX))}",
        )
    )
    lengths = window_values(series, keys.RESPONSE_LEN_P50, step)
    drift = f"p50 {lengths[0]:g}→{lengths[-1]:g}" if len(lengths) > 1 else "p50 –"
    lines.append(
        Content.assemble(
            (f"last {WINDOW:<5}", MUTED),
            f"no signal {_pct(window_mean(series, keys.ZERO_VARIANCE_FRAC, step))} ",
            f"trunc {_pct(window_mean(series, keys.TRUNCATED_FRAC, step))} ",
            drift,
        )
    )
    components = components_of(metrics)
    if components:
        note = dominance_note(metrics)
        parts = [f"{name} {mean:.2f}±{std:.2f}" for name, (mean, std) in components.items()]
        lines.append(Content.assemble(("parts     ", MUTED), "  ".join(parts)))
        if note:
            lines.append(Content.styled(f"⚠ {note}", "$warning"))
    return [line.truncate(width, ellipsis=True) for line in lines]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class DistributionsPanel(Static, can_focus=True):
    """A step's histograms, zero-variance share, lengths, truncation and reward parts."""

    ALLOW_MAXIMIZE = True

    def on_mount(self) -> None:
        self.border_title = "Distributions"

    def show(self, state: DashboardState, step: int) -> None:
        width = self.content_region.width or 40
        lines = (
            distribution_lines(state, step, width)
            if step > 0
            else [Content.styled("No step trained yet.", MUTED)]
        )
        update_static(self, Content("\n").join(lines))
        set_subtitle(self, f"step {step}" if step > 0 else "")


class FunnelPanel(Static, can_focus=True):
    """Where the step's groups went."""

    ALLOW_MAXIMIZE = True

    def on_mount(self) -> None:
        self.border_title = "Funnel"

    def show(self, state: DashboardState, step: int) -> None:
        width = self.content_region.width or 30
        funnel = step_funnel(state.groups.of(step), step)
        most = max(funnel.groups, 1)
        bar_width = max(0, width - 17)
        lines = []
        for label, count, style in funnel_lines(funnel):
            cells = round(bar_width * abs(count) / most) if count else 0
            lines.append(
                Content.assemble(
                    (f"{label:<11}", MUTED if label.startswith(" ") else ""),
                    (f"{abs(count):>4} ", style),
                    ("█" * cells, style or "$primary"),
                )
            )
        lines.append(
            Content.assemble(
                ("rollouts   ", MUTED),
                f"{funnel.rollouts:>4} ",
                (f"{funnel.truncated} truncated", "$error" if funnel.truncated else MUTED),
                (f", {funnel.dropped_members} failed" if funnel.dropped_members else "", MUTED),
            )
        )
        update_static(
            self, Content("\n").join(line.truncate(width, ellipsis=True) for line in lines)
        )
        set_subtitle(self, f"step {step}" if step > 0 else "")


LABEL_WIDTH = 11


def timeline_content(spans: Sequence[GroupSpan], width: int, height: int) -> Content:
    """The last groups that fit `height`, one line each, over the pane's `width`."""
    if not spans:
        return Content.styled("No groups in the store yet.", MUTED)
    shown = list(spans)[-max(1, height - 1) :]
    cells = max(4, width - LABEL_WIDTH - 10)
    rows, t0, t1 = timeline(shown, cells)
    lines = []
    for row in rows:
        line = [" "] * cells
        styles = [""] * cells
        for start, end, glyph, style in row.segments:
            for c in range(max(0, start), min(cells - 1, end) + 1):
                line[c], styles[c] = glyph, style
        parts: list[tuple[str, str] | str] = [(f"{row.label:<{LABEL_WIDTH}}", MUTED)]
        parts += [(ch, st) for ch, st in zip(line, styles, strict=True)]
        parts.append((f" {row.end}", MUTED))
        lines.append(Content.assemble(*parts).truncate(width, ellipsis=True))
    span = t1 - t0
    legend = Content.assemble(
        (f"{'':<{LABEL_WIDTH}}", MUTED),
        (f"━ sampling  ┄ waiting  █ trained  ○ no signal  ✗ dropped · {span:.1f} s", MUTED),
    )
    return Content("\n").join([*lines, legend.truncate(width, ellipsis=True)])


class TimelinePanel(Static, can_focus=True):
    """The groups' life cycles from the store, coloured by policy version."""

    ALLOW_MAXIMIZE = True

    def on_mount(self) -> None:
        self.border_title = "Timeline"

    def show(self, spans: Sequence[GroupSpan] | None, note: str = "") -> None:
        width = self.content_region.width or 60
        height = self.content_region.height or 8
        if spans is None:
            content = Content.styled(note or "reading the store…", MUTED)
        else:
            content = timeline_content(spans, width, height)
        update_static(self, content)
        set_subtitle(
            self,
            ""
            if not spans
            else f"last {min(len(spans), height - 1)} groups · colour: policy version",
        )
