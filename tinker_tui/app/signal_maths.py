"""What the signals and scenarios views show, computed from the run model: a step's funnel
(sampled → discarded by reason → trained), its histograms as text, the window's drift, the
groups' timeline, and the scenario board. Plain functions, no Textual, tested alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinker_tui.app.dashboard_rows import GroupRecord
from tinker_tui.app.view_maths import SPARK_BLOCKS, text_sparkline
from tinker_tui.engine.rollouts.distributions import dominant_component
from tinker_tui.engine.store import GroupSpan

#: Steps the window of the signals view spans.
WINDOW = 10
#: The pass rate between which a scenario is "high variance": its groups carry signal.
HIGH_VARIANCE = (0.2, 0.8)


# ---------------------------------------------------------------------- the funnel


@dataclass(frozen=True, slots=True)
class Funnel:
    """Where a step's groups went: each was taken by the step (trained, or counted with
    equal rewards) or dropped while its batch was collected."""

    step: int
    groups: int
    stale: int
    no_signal: int
    failed: int
    trained: int
    rollouts: int
    truncated: int
    #: Members that failed and were dropped from groups that trained with the rest.
    dropped_members: int


def step_funnel(groups: Sequence[GroupRecord], step: int) -> Funnel:
    """The funnel of `step` from the groups the model assigned to it."""
    reasons = [g.discarded for g in groups]
    trajectories = [t for g in groups for t in g.trajectories]
    return Funnel(
        step=step,
        groups=len(groups),
        stale=reasons.count("stale"),
        no_signal=reasons.count("zero_variance"),
        failed=reasons.count("error"),
        trained=reasons.count(None),
        rollouts=len(trajectories),
        truncated=sum(bool(t.truncated) for t in trajectories),
        dropped_members=sum(g.failed for g in groups),
    )


def funnel_lines(funnel: Funnel) -> list[tuple[str, int, str]]:
    """(label, count, style) rows, in the funnel's order."""
    return [
        ("sampled", funnel.groups, ""),
        ("  stale", -funnel.stale, "$warning" if funnel.stale else "dim"),
        ("  no signal", -funnel.no_signal, "$warning" if funnel.no_signal else "dim"),
        ("  failed", -funnel.failed, "$error" if funnel.failed else "dim"),
        ("trained", funnel.trained, "$success" if funnel.trained else ""),
    ]


# ---------------------------------------------------------------------- histograms


def histogram_line(hist: Mapping[str, Any]) -> str:
    """A histogram's bins as one line of blocks (a blank for an empty bin), scaled to its
    fullest bin."""
    counts = [int(c) for c in hist.get("counts", ())]
    most = max(counts, default=0)
    if most <= 0:
        return ""
    return "".join(
        " " if c == 0 else SPARK_BLOCKS[min(7, max(0, math.ceil(c / most * 8) - 1))] for c in counts
    )


def series_at(series: Mapping[str, list[tuple[int, float]]], key: str, step: int) -> float | None:
    """The value of `key` at `step`, if recorded."""
    for s, v in reversed(series.get(key, [])):
        if s == step:
            return v
        if s < step:
            return None
    return None


def window_values(
    series: Mapping[str, list[tuple[int, float]]], key: str, step: int, window: int = WINDOW
) -> list[float]:
    """The values of `key` over the `window` steps up to `step`."""
    return [v for s, v in series.get(key, []) if step - window < s <= step]


def window_mean(
    series: Mapping[str, list[tuple[int, float]]], key: str, step: int, window: int = WINDOW
) -> float | None:
    values = [v for v in window_values(series, key, step, window) if math.isfinite(v)]
    return sum(values) / len(values) if values else None


# ---------------------------------------------------------------------- timeline


#: Policy versions cycle through these theme colours on the timeline.
VERSION_STYLES = ("$primary", "$secondary", "$accent", "$success", "$warning", "$foreground")


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One group on the timeline: its label and its cells as (start, end, glyph, style)."""

    label: str
    segments: tuple[tuple[int, int, str, str], ...]
    end: str = ""


def version_style(version: int | None) -> str:
    return "dim" if version is None else VERSION_STYLES[version % len(VERSION_STYLES)]


def timeline(spans: Sequence[GroupSpan], width: int) -> tuple[list[TimelineRow], float, float]:
    """Rows of the groups' timeline over `width` cells, in the order they started: `━` while sampling (coloured by the
    version it started with), `┄` while waiting in the queue, `█` when a step took it
    (coloured by the trainer's version), `✗` where it was dropped. Returns the rows and
    the span of time they cover."""
    times = [t for s in spans for t in (s.started_at, s.sampled_at, s.finished_at) if t is not None]
    if not times or width < 4:
        return [], 0.0, 0.0
    t0, t1 = min(times), max(times)
    scale = (width - 1) / (t1 - t0) if t1 > t0 else 0.0

    def col(t: float | None, default: int) -> int:
        return default if t is None else int(round((t - t0) * scale))

    rows = []
    for span in sorted(
        spans, key=lambda s: (s.started_at if s.started_at is not None else math.inf, s.group_id)
    ):
        start = col(span.started_at, 0)
        sampled = col(span.sampled_at, start if span.finished_at else width - 1)
        done = col(span.finished_at, width - 1)
        style = version_style(span.policy_version)
        segments = [(start, max(start, sampled), "━", style)]
        if span.sampled_at is not None and done > sampled:
            segments.append((sampled + 1, done, "┄", style))
        end = ""
        if span.status == "trained":
            segments.append((done, done, "█", version_style(span.trainer_version)))
        elif span.status == "discarded":
            if span.reason == "zero_variance":
                segments.append((done, done, "○", "$warning"))
            else:
                segments.append((done, done, "✗", "$error"))
            end = {"zero_variance": "no signal", "error": "failed"}.get(span.reason, span.reason)
        elif span.status in ("unused", "requeued"):
            end = span.status
        version = "" if span.policy_version is None else f" v{span.policy_version}"
        rows.append(
            TimelineRow(label=f"g{span.group_id}{version}", segments=tuple(segments), end=end)
        )
    return rows, t0, t1


# ---------------------------------------------------------------------- scenario board


@dataclass(slots=True)
class ScenarioRow:
    """One scenario id across the run."""

    scenario_id: str
    #: Groups drawn of it (trained, dropped or waiting).
    drawn: int = 0
    rollouts: int = 0
    reward_sum: float = 0.0
    passed: int = 0
    #: Groups of it dropped with equal rewards, and failed.
    no_signal: int = 0
    failed: int = 0
    #: Its mean reward per step that took a group of it, in step order.
    by_step: dict[int, list[float]] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return self.reward_sum / self.rollouts if self.rollouts else math.nan

    @property
    def pass_rate(self) -> float:
        return self.passed / self.rollouts if self.rollouts else math.nan

    @property
    def trend(self) -> list[float]:
        return [sum(v) / len(v) for _, v in sorted(self.by_step.items())]

    @property
    def kind(self) -> str:
        """never solved, always solved, high variance, mostly solved or mostly failed."""
        return classify(self.pass_rate)

    def trend_text(self, width: int = 12) -> str:
        return text_sparkline(self.trend, width)


def classify(pass_rate: float) -> str:
    if math.isnan(pass_rate):
        return "no rollouts"
    if pass_rate <= 0.0:
        return "never solved"
    if pass_rate >= 1.0:
        return "always solved"
    low, high = HIGH_VARIANCE
    if low <= pass_rate <= high:
        return "high variance"
    return "mostly solved" if pass_rate > high else "mostly failed"


def pass_line(groups: Sequence[GroupRecord]) -> float | None:
    """The reward a rollout needs to count as solved: the best reward of the run's rollouts
    when it is positive (a binary task's 1, a graded task's best); None before any."""
    best = max(
        (t.reward for g in groups for t in g.trajectories if math.isfinite(t.reward)), default=None
    )
    return best if best is not None and best > 0 else None


def scenario_board(groups: Sequence[GroupRecord]) -> list[ScenarioRow]:
    """Every scenario id of the groups, in the order first drawn."""
    line = pass_line(groups)
    rows: dict[str, ScenarioRow] = {}
    for group in groups:
        row = rows.get(group.scenario_id)
        if row is None:
            row = rows[group.scenario_id] = ScenarioRow(group.scenario_id)
        row.drawn += 1
        if group.discarded == "zero_variance":
            row.no_signal += 1
        elif group.discarded == "error":
            row.failed += 1
        rewards = [t.reward for t in group.trajectories if math.isfinite(t.reward)]
        row.rollouts += len(rewards)
        row.reward_sum += sum(rewards)
        if line is not None:
            row.passed += sum(r >= line - 1e-9 for r in rewards)
        if rewards and group.step is not None:
            row.by_step.setdefault(group.step, []).extend(rewards)
    return list(rows.values())


#: The orders the board can be sorted in (`o` cycles them): name -> key, biggest first.
SORTS: dict[str, Any] = {
    "drawn": lambda r: (-r.drawn, r.scenario_id),
    "mean reward": lambda r: (-(r.mean if math.isfinite(r.mean) else -math.inf), r.scenario_id),
    "pass rate": lambda r: (-(r.pass_rate if math.isfinite(r.pass_rate) else -1), r.scenario_id),
    "no signal": lambda r: (-r.no_signal, r.scenario_id),
    "scenario": lambda r: (r.scenario_id,),
}


def sorted_board(rows: Sequence[ScenarioRow], order: str) -> list[ScenarioRow]:
    return sorted(rows, key=SORTS.get(order, SORTS["drawn"]))


def dominance_note(metrics: Mapping[str, float]) -> str:
    """The note that one reward component drives the advantages (empty when none does)."""
    name = dominant_component(metrics)
    return "" if name is None else f"{name} dominates the reward's spread"
