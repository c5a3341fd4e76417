"""Stale and discarded groups: counts by reason, the discard rate, and how far behind the
trainer the trained groups were (staleness histogram, in flight vs queued)."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static
from tinker_tui.app.run_model import RunModel, bar, staleness_rows
from tinker_tui.app.widgets.updates import set_subtitle, update_static
from tinker_tui.engine import metric_keys as keys
from tinker_tui.engine.events import DISCARD_REASONS

REASON_LABELS = {"stale": "stale", "zero_variance": "zero variance", "error": "error"}
REASON_STYLES = {"stale": "$warning", "zero_variance": "$secondary", "error": "$error"}


def reason_lines(model: RunModel, bar_width: int) -> list[Content]:
    counts = model.discarded
    most = max(counts.values(), default=0)
    lines = []
    for reason in DISCARD_REASONS:
        count = counts.get(reason, 0)
        style = REASON_STYLES[reason] if count else "$text-muted"
        lines.append(Content.assemble(
            (f"{REASON_LABELS[reason]:<14}", "$text-muted" if not count else ""),
            (f"{count:>5}", f"bold {style}"),
            " ",
            (bar(count, most, bar_width), style),
        ))
    return lines


def staleness_lines(model: RunModel, width: int, room: int) -> list[Content]:
    """The histogram of versions behind, in flight vs queued, in at most `room` lines."""
    if room <= 0:
        return []
    measured = model.throughput
    if measured is None:
        mean = model.last_metrics.get(keys.STALENESS_MEAN)
        if mean is None:
            return [Content.styled("staleness: no steps yet", "$text-muted")]
        worst = model.last_metrics.get(keys.STALENESS_MAX, mean)
        return [Content.assemble(("staleness", "$text-muted"),
                                 f"  mean {mean:.2f}  max {worst:g}")]
    rows = staleness_rows(measured.staleness_in_flight, measured.staleness_queued)
    if not rows:
        return [Content.styled("staleness: nothing trained in the window", "$text-muted")]
    column = min(26, max(4, (width - 10) // 2))
    most = max(max(a, b) for _, a, b in rows)
    lines = [Content.assemble(("behind", "$text-muted"), "  ",
                              (f"{'in flight':<{column}}", "$text-accent"),
                              ("queued", "$text-primary"))]
    for behind, in_flight, queued in rows[: room - 1]:
        left = f"{bar(in_flight, most, column - 5)} {in_flight}"
        right = f"{bar(queued, most, column - 5)} {queued}"
        lines.append(Content.assemble(f"{behind:>6}", "  ",
                                      (f"{left:<{column}}", "$accent"),
                                      (right, "$primary")))
    return lines


def discarded_content(model: RunModel, width: int, height: int = 6) -> Content:
    """The pane's text for an inner area of `width` × `height`."""
    lines = reason_lines(model, min(30, max(0, width - 21)))
    lines += staleness_lines(model, width, height - len(lines))
    return Content("\n").join(lines[: max(1, height)])


class DiscardedPanel(Static, can_focus=True):
    """Stale, zero-variance and failed groups, and the staleness of trained ones."""

    ALLOW_MAXIMIZE = True

    def on_mount(self) -> None:
        self.border_title = "Stale & discarded"

    def update_from_model(self, model: RunModel, now: float) -> None:
        width = self.content_region.width or self.size.width
        height = self.content_region.height or 6
        update_static(self, discarded_content(model, width, height))
        groups = max(model.groups_sampled, model.discarded_total)
        set_subtitle(self, f"{model.discard_rate:.1%} of {groups:,} groups")
