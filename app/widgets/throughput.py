"""Rollout throughput: rollouts/s in big digits, tokens/s, and a sparkline of the rate."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Digits, Label, Sparkline

from app.run_model import RunModel
from app.widgets.updates import update_digits, update_static


def format_rate(value: float) -> str:
    """Short human form: 12.3, 456, 7.8k, 1.2M."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1_000:.0f}k"
    if value >= 1_000:
        return f"{value / 1_000:.1f}k"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}"


class ThroughputPanel(Vertical):
    """How fast rollouts are being sampled."""

    def compose(self) -> ComposeResult:
        with Horizontal(id="throughput-figures"):
            yield Digits("0.0", id="rollouts-rate")
            with Vertical(id="throughput-units"):
                yield Label("rollouts/s", id="rollouts-unit")
                yield Label("0 tokens/s", id="tokens-rate")
                yield Label("", id="rollouts-total")
        yield Sparkline([], id="rate-history")

    def on_mount(self) -> None:
        self.border_title = "Throughput"

    def update_from_model(self, model: RunModel, now: float) -> None:
        self.border_subtitle = f"{model.rate_window:g}s window"
        update_digits(
            self.query_one("#rollouts-rate", Digits), format_rate(model.rollouts_per_s(now))
        )
        update_static(
            self.query_one("#tokens-rate", Label),
            f"{format_rate(model.tokens_per_s(now))} tokens/s",
        )
        update_static(
            self.query_one("#rollouts-total", Label),
            f"{model.rollouts_sampled:,} rollouts total",
        )
        self.query_one("#rate-history", Sparkline).data = model.rollout_rate_history(now)
