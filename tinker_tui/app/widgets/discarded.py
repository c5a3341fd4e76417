"""Health and discarded groups: in words, whether the run is learning, has converged, has
lost its learning signal or is failing; counts by reason; and how far behind the trainer
the trained groups were (staleness histogram, in flight vs queued).

Groups whose rewards were all equal carry no gradient. At the best reward seen they mean
the policy converged (shown as such, in a calm colour); below it, that the learning signal
is gone ("no signal"). Only the second is a problem, so only it counts as discarded.
"""

from __future__ import annotations

import textwrap

from textual.content import Content
from textual.widgets import Static

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import bar, staleness_rows, versions_are_bounds
from tinker_tui.app.widgets.updates import set_subtitle, update_static
from tinker_tui.engine.metrics import metric_keys as keys

#: The rows: label, the model's count, the style of a positive count.
ROWS = (
    ("stale", "stale", "$warning"),
    ("no signal", "no_signal", "$warning"),
    ("converged", "converged", "$success"),
    ("error", "error", "$error"),
)

HEALTH_STYLES = {
    "none": "$text-muted",
    "learning": "$text-success",
    "converged": "bold $text-success",
    "no_signal": "bold $text-warning",
    "error": "bold $text-error",
}


def reason_counts(state: DashboardState) -> dict[str, int]:
    return {
        "stale": state.discarded.get("stale", 0),
        "no_signal": state.no_signal_groups,
        "converged": state.converged_groups,
        "error": state.discarded.get("error", 0),
    }


def health_lines(state: DashboardState, width: int, room: int = 2) -> list[Content]:
    kind, words = state.health()
    lines = textwrap.wrap(words, max(10, width)) or [""]
    if len(lines) > room:
        lines = lines[:room]
        lines[-1] = lines[-1][: max(0, width - 1)] + "…"
    return [Content.styled(line, HEALTH_STYLES.get(kind, "")) for line in lines]


def reason_lines(state: DashboardState, bar_width: int) -> list[Content]:
    counts = reason_counts(state)
    most = max(counts.values(), default=0)
    lines = []
    for label, key, style in ROWS:
        count = counts[key]
        lines.append(
            Content.assemble(
                (f"{label:<11}", "$text-muted" if not count else ""),
                (f"{count:>6}", f"bold {style}" if count else "$text-muted"),
                " ",
                (bar(count, most, bar_width), style),
            )
        )
    return lines


def staleness_lines(state: DashboardState, width: int, room: int) -> list[Content]:
    """The histogram of versions behind, in flight vs queued, in at most `room` lines."""
    if room <= 0:
        return []
    measured = state.throughput
    # In-flight sampling: a group's version is a lower bound, so its staleness an upper one.
    at_most = "≤" if versions_are_bounds(state.config) else ""
    if measured is None:
        mean = state.last_metrics.get(keys.STALENESS_MEAN)
        if mean is None:
            return [Content.styled("staleness: no steps yet", "$text-muted")]
        worst = state.last_metrics.get(keys.STALENESS_MAX, mean)
        return [
            Content.assemble(
                ("staleness", "$text-muted"), f"  mean {at_most}{mean:.2f}  max {at_most}{worst:g}"
            )
        ]
    rows = staleness_rows(measured.staleness_in_flight, measured.staleness_queued)
    if not rows:
        return [Content.styled("staleness: no group trained lately", "$text-muted")]
    if room < 2:  # no room for the histogram: versions behind × groups, on one line
        counts = "  ".join(f"{at_most}{behind}×{a + b}" for behind, a, b in rows)
        return [Content.assemble(("versions behind ", "$text-muted"), counts)]
    column = min(26, max(4, (width - 10) // 2))
    most = max(max(a, b) for _, a, b in rows)
    lines = [
        Content.assemble(
            (f"{'≤ behind' if at_most else 'behind'}", "$text-muted"),
            "  ",
            (f"{'in flight':<{column}}", "$text-accent"),
            ("queued", "$text-primary"),
        )
    ]
    for behind, in_flight, queued in rows[: room - 1]:
        left = f"{bar(in_flight, most, column - 5)} {in_flight}"
        right = f"{bar(queued, most, column - 5)} {queued}"
        lines.append(
            Content.assemble(
                f"{at_most + str(behind):>{8 if at_most else 6}}",
                "  ",
                (f"{left:<{column}}", "$accent"),
                (right, "$primary"),
            )
        )
    return lines


def discarded_content(state: DashboardState, width: int, height: int = 7) -> Content:
    """The pane's text for an inner area of `width` × `height`. A collapse gets a line more
    where the staleness line would be: the best checkpoint it names is what a rollback uses."""
    room = 2 if height >= 7 else 1
    if state.health()[0] == "collapsed" and height >= 7:
        room += 1
    lines = health_lines(state, width, room=room)
    lines += reason_lines(state, min(30, max(0, width - 19)))
    lines += staleness_lines(state, width, height - len(lines))
    return Content("\n").join(lines[: max(1, height)])


def discarded_subtitle(state: DashboardState) -> str:
    """`0.0% of 12,000 groups discarded`, and the rollouts that failed, when any did."""
    groups = max(state.groups_sampled, state.discarded_total)
    text = f"{state.discard_rate:.1%} of {groups:,} groups discarded"
    if state.rollouts_failed:
        text += f" · {state.rollouts_failed:,} of {state.rollouts_ended:,} rollouts failed"
    return text


class DiscardedPanel(Static, can_focus=True):
    """Health words, dropped and converged groups, and the staleness of trained ones."""

    ALLOW_MAXIMIZE = True

    def on_mount(self) -> None:
        self.border_title = "Health & discards"

    def update_from_state(self, state: DashboardState, now: float) -> None:
        width = self.content_region.width or self.size.width
        height = self.content_region.height or 7
        update_static(self, discarded_content(state, width, height))
        set_subtitle(self, discarded_subtitle(state))
