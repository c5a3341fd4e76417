"""Throughput: rollouts/s and tokens/s (big digits and sparklines), trainer and sampler
idle time, and the pipeline's verdict on what holds it back. Before the first step it tells
the start-up; while paused it says so at once (the engine's rates trail by their window);
once finished it shows the run's average rates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Digits, Label, Sparkline

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.run_summary import stuck_text
from tinker_tui.app.view_maths import (
    PART_SEPARATOR,
    cost_parts,
    fit_parts,
    format_rate,
    idle_percent,
    split_rate,
)
from tinker_tui.app.widgets.updates import set_subtitle, update_digits, update_static
from tinker_tui.engine.events import StalledRollout
from tinker_tui.engine.metrics.list_prices import priced_as

__all__ = ["ThroughputPanel", "fit_verdict", "format_rate", "idle_text", "verdict_text"]


def idle_text(state: DashboardState) -> str:
    measured = state.throughput
    if measured is None:
        return "idle  trainer -  sampler -"
    return (
        f"idle  trainer {idle_percent(measured.trainer_busy)}%  "
        f"sampler {idle_percent(measured.sampler_busy)}%"
    )


def stuck_short(stalled: Sequence[StalledRollout]) -> str:
    """The oldest stuck rollout, short: its age and the line it waits at."""
    oldest = stalled[0]
    more = f" (+{len(stalled) - 1})" if len(stalled) > 1 else ""
    where = (
        f" at {Path(oldest.file).name}:{oldest.line} {oldest.code}"
        if oldest.file
        else f" (scenario {oldest.scenario_id})"
    )
    return f"⚠ stuck {oldest.age:.0f}s{more}{where}"


def verdict_text(state: DashboardState) -> str:
    """What holds the pipeline back, or why nothing flows: starting, paused, stopping."""
    measured = state.throughput
    if state.state == "paused":
        flying = (
            f"; {measured.in_flight} in flight finishing" if measured and measured.in_flight else ""
        )
        return f"⏸ paused: no new rollouts start{flying}"
    if state.state == "stopping":
        return "■ stopping: finishing the current step"
    if state.state == "finished":
        return f"■ finished: {state.status}" if state.status else "■ finished"
    if measured is not None and measured.stalled:  # before the start-up's words: it hides it
        return stuck_short(measured.stalled)
    phase = state.phase_text()
    if phase is not None:
        return f"▶ {phase}"
    if measured is None:
        return "▶ measuring…"
    return f"▶ {measured.verdict}" if measured.verdict else "▶ -"


def fit_verdict(verdict: str, width: int, lines: int = 1) -> str:
    """The verdict in `lines` lines of `width` cells: whole, else without its last clauses
    (`; 4 in flight finishing`), else its headline (what holds the pipeline back, before
    the advice) with the key that shows the rest, else the headline alone."""
    room = width * lines - (lines - 1) * WRAP_WASTE  # words wrap before the last cell
    if len(verdict) <= room:
        return verdict
    clauses = verdict.split("; ")
    while len(clauses) > 1:
        clauses.pop()
        if len("; ".join(clauses)) <= room:
            return "; ".join(clauses)
    if ": " not in verdict:
        return verdict
    headline = verdict.split(": ", 1)[0]
    pointed = f"{headline} · enter: why"
    return pointed if len(pointed) <= room else headline


#: The cells a wrapped line may leave empty at its end (a word that did not fit).
WRAP_WASTE = 12


class ThroughputPanel(Vertical, can_focus=True):
    """How fast the pipeline samples, and which side of it is idle; `enter` shows its
    lines whole (the advice a narrow pane leaves out)."""

    ALLOW_MAXIMIZE = True
    BINDINGS = [Binding("enter", "show_whole", "Whole", show=False)]
    #: The pane's lines whole, for `enter`.
    _whole = ""

    def compose(self) -> ComposeResult:
        with Horizontal(id="rollouts-row", classes="rate-row"):
            yield Digits("0.0", id="rollouts-rate")
            with Vertical(classes="rate-side"):
                yield Label("rollouts/s", id="rollouts-unit", classes="rate-unit")
                yield Sparkline([], id="rollouts-history", classes="rate-history")
        with Horizontal(id="tokens-row", classes="rate-row"):
            yield Digits("0", id="tokens-digits")
            with Vertical(classes="rate-side"):
                yield Label("tokens/s", id="tokens-rate", classes="rate-unit")
                yield Sparkline([], id="tokens-history", classes="rate-history")
        yield Label("", id="idle")
        yield Label("", id="cost", classes="-empty")
        yield Label("", id="verdict")

    def on_mount(self) -> None:
        self.border_title = "Throughput"

    def update_from_state(self, state: DashboardState, now: float) -> None:
        measured = state.throughput
        finished = state.state == "finished"
        if measured is not None and not finished:
            set_subtitle(self, f"queue {measured.queue_depth} · in flight {measured.in_flight}")
        else:
            set_subtitle(self, f"{state.rollouts_sampled:,} rollouts")
        paused = state.state == "paused"
        self.set_class(paused, "-paused")
        # A finished run's last window is history: it shows the run's averages.
        rollout_rate, token_rate = (
            state.average_rates()
            if finished
            else (state.rollouts_per_s(now), state.tokens_per_s(now))
        )
        rollouts, r_unit = split_rate(rollout_rate)
        tokens, t_unit = split_rate(token_rate)
        update_digits(self.query_one("#rollouts-rate", Digits), rollouts)
        update_digits(self.query_one("#tokens-digits", Digits), tokens)
        note = " · paused" if paused else " · run average" if finished else ""
        # a row without room for digits (the smallest terminals) has its label carry them
        rollouts_label = (
            f"{rollouts}{r_unit} rollouts/s"
            if not self.query_one("#rollouts-rate", Digits).display
            else f"{r_unit} rollouts/s{note}".lstrip()
        )
        update_static(self.query_one("#rollouts-unit", Label), rollouts_label)
        # where the tokens row has no room for digits the label carries the number
        short = not self.query_one("#tokens-digits", Digits).display
        tokens_label = (
            f"{tokens}{t_unit} tokens/s" if short else f"{t_unit} tokens/s{note}".lstrip()
        )
        update_static(self.query_one("#tokens-rate", Label), tokens_label)
        for selector, history in (
            ("#rollouts-history", state.rollout_rate_history(now)),
            ("#tokens-history", state.token_rate_history(now)),
        ):
            sparkline = self.query_one(selector, Sparkline)
            sparkline.data = history
            sparkline.visible = bool(history)  # an empty sparkline draws full bars
        update_static(self.query_one("#idle", Label), idle_text(state))
        cost = self.query_one("#cost", Label)
        budget = state.config.get("max_cost_usd")
        parts = cost_parts(
            state.last_metrics,
            state.step,
            state.max_steps,
            float(budget) if isinstance(budget, int | float) else 0.0,
            priced_as(state.config),
        )
        text = PART_SEPARATOR.join(parts)  # the whole line, for the tooltip
        cost.set_class(not text, "-empty")
        width = self.content_size.width  # 0 before the first layout: all of it
        update_static(cost, fit_parts(parts, width) if width else text)
        if cost.tooltip != (text or None):
            cost.tooltip = text or None
        verdict = verdict_text(state)
        label = self.query_one("#verdict", Label)
        # two lines where the pane has a row to spare (the verdict wraps), else one
        spare = self.content_size.height - sum(
            child.outer_size.height
            for child in self.children
            if child is not label and child.display
        )
        update_static(
            label, fit_verdict(verdict, width, 2 if spare >= 2 else 1) if width else verdict
        )
        stalled = measured.stalled if measured is not None and not finished else ()
        tip = "\n".join(stuck_text(s) for s in stalled) or verdict  # whole, with the path
        label.set_class(bool(stalled), "-stuck")
        if label.tooltip != tip:
            label.tooltip = tip
        self._whole = "\n\n".join(line for line in (tip, idle_text(state), text) if line)

    def action_show_whole(self) -> None:
        from tinker_tui.app.screens.text_view import TextScreen

        self.app.push_screen(TextScreen("Throughput", self._whole))
