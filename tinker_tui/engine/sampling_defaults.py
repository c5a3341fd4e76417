"""The sampling defaults of a run: what a request to the policy server gets when it leaves
temperature or max_tokens out.

An evaluation pins them instead (`pin_temperature`, `cap_max_tokens`): its protocol holds
for every request, whatever the task asks.

Its own module because two sides share one instance: the pipeline changes the temperature
when the live knob is set, and the policy server reads it for the next request.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingDefaults:
    """Defaults for requests that leave them out; mutable so a live knob change applies to
    the next request."""

    temperature: float = 1.0
    max_tokens: int = 64
    #: An evaluation's protocol (`tinker-tui eval`): `temperature` for every request, the
    #: task's own included, and `max_tokens` as a cap on each request's.
    pin_temperature: bool = False
    cap_max_tokens: bool = False

    def temperature_for(self, asked: float | None) -> float:
        """The temperature a request samples at: its own, unless it left it out or it is
        pinned."""
        return self.temperature if asked is None or self.pin_temperature else asked

    def max_tokens_for(self, asked: int | None) -> int:
        """The max_tokens a request samples with: its own (capped, under an evaluation's
        protocol), else the default."""
        if not asked:
            return self.max_tokens
        return min(asked, self.max_tokens) if self.cap_max_tokens else asked
