"""Groups the trainer dropped instead of training on, by reason, and the discard rate."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from app.run_model import DISCARD_REASONS, RunModel
from app.widgets.updates import update_static

REASON_LABELS = {"stale": "stale", "zero_variance": "zero variance", "error": "error"}
REASON_STYLES = {"stale": "$warning", "zero_variance": "$secondary", "error": "$error"}


def discarded_content(model: RunModel, bar_width: int, height: int = 4) -> Content:
    """The pane's text: one line per reason with a bar, the overall rate, and (when there
    is room for a fifth line) the tokens thrown away."""
    counts = model.discarded
    most = max(counts.values(), default=0)
    lines: list[Content] = []
    for reason in DISCARD_REASONS:
        count = counts.get(reason, 0)
        label = REASON_LABELS[reason]
        style = REASON_STYLES[reason] if count else "$text-muted"
        bar = ""
        if bar_width > 0 and most:
            bar = "█" * max(1 if count else 0, round(bar_width * count / most))
        lines.append(
            Content.assemble(
                (f"{label:<14}", "$text-muted" if not count else ""),
                (f"{count:>5}", f"bold {style}"),
                " ",
                (bar, style),
            )
        )
    total = model.discarded_total
    groups = max(model.groups_sampled, total)
    rate_style = "bold $error" if model.discard_rate >= 0.5 else "bold"
    lines.append(
        Content.assemble(
            ("rate", "$text-muted"),
            f"{'':<10}",
            (f"{model.discard_rate:>5.1%}", rate_style),
            (f" of {groups:,} groups", "$text-muted"),
        )
    )
    if height >= 5:
        lines.append(
            Content.assemble(
                ("tokens", "$text-muted"),
                f"{model.discarded_tokens:>13,}",
                (" discarded", "$text-muted"),
            )
        )
    return Content("\n").join(lines)


class DiscardedPanel(Static):
    """Counts of discarded groups: stale, zero variance, error."""

    def on_mount(self) -> None:
        self.border_title = "Discarded"

    def update_from_model(self, model: RunModel, now: float) -> None:
        width = self.content_region.width or self.size.width
        bar_width = max(0, width - 21)
        update_static(self, discarded_content(model, bar_width, self.content_region.height))
        self.border_subtitle = f"{model.discarded_total:,} groups"
